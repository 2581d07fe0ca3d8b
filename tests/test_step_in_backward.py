"""AdamW stepped inside the backward pass: the same weights as one grouped AdamW, bit for bit,
and no gradient held by the model afterwards."""

import copy

import pytest
import torch
from torch import nn

from fedml_fes.prompt.classifier import StepInBackward


class TiedLM(nn.Module):
    """An embedding used twice (input and output, tied as SmolLM2's), a layer with a bias, and a
    parameter no loss reaches (it must stay untouched, as a grouped AdamW leaves it)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.mid = nn.Linear(16, 16)
        self.unused = nn.Parameter(torch.ones(3))

    def forward(self, ids):
        h = torch.tanh(self.mid(self.emb(ids)))
        return h @ self.emb.weight.T


def _batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 50, (4, 6), generator=g), torch.randint(0, 50, (4, 6), generator=g)) for _ in range(5)]


def _loss(model, ids, y):
    return nn.functional.cross_entropy(model(ids).reshape(-1, 50), y.reshape(-1))


def _train_both_and_compare(grouped, opt, hooked, steps) -> None:
    """Five batches: `grouped` with a plain optimizer, `hooked` stepping in its backward pass;
    the two end with the same weights bit for bit."""
    for ids, y in _batches():
        opt.zero_grad(set_to_none=True)
        _loss(grouped, ids, y).backward()
        opt.step()
        _loss(hooked, ids, y).backward()
    steps.close()
    for (name, a), b in zip(grouped.named_parameters(), hooked.parameters()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("chunk", [1 << 20, 64], ids=["whole", "row-blocks"])
@pytest.mark.parametrize("fused", [False, True])
def test_steps_in_backward_equal_a_grouped_adamw_bit_for_bit(fused, chunk):
    """Unfused against torch's grouped AdamW; fused (train_args.fused_optimizer) against the
    grouped fused kernel: each equals its own kind bit for bit, whether a large tensor (the
    800-weight embedding, over `chunk`) steps whole or in blocks of rows."""
    torch.manual_seed(0)
    grouped = TiedLM()
    hooked = copy.deepcopy(grouped)
    opt = torch.optim.AdamW(
        [p for p in grouped.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01, fused=fused or None
    )
    steps = StepInBackward([p for p in hooked.parameters() if p.requires_grad], 1e-2, 0.01, fused, chunk)
    _train_both_and_compare(grouped, opt, hooked, steps)
    assert not torch.equal(grouped.emb.weight, TiedLM().emb.weight)  # it trained
    assert all(p.grad is None for p in hooked.parameters())  # freed as each step ran


def test_closed_steps_leave_later_backward_passes_alone():
    model = TiedLM()
    steps = StepInBackward(list(model.parameters()), 1e-2, 0.0)
    steps.close()
    before = copy.deepcopy(model.state_dict())
    ids, y = _batches()[0]
    _loss(model, ids, y).backward()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.mid.weight.grad is not None  # a plain backward again: gradients, no step


def test_a_parameter_with_its_own_rate_steps_as_a_grouped_adamw_with_that_rate():
    """own_lr: a class head steps at the full-tuning rate beside biases at the bias rate."""
    grouped = TiedLM()
    hooked, start = copy.deepcopy(grouped), copy.deepcopy(grouped)
    rest = [p for n, p in grouped.named_parameters() if n != "mid.weight"]
    opt = torch.optim.AdamW(
        [{"params": rest}, {"params": [grouped.mid.weight], "lr": 1e-4}], lr=1e-2, weight_decay=0.01
    )
    steps = StepInBackward(list(hooked.parameters()), 1e-2, 0.01, own_lr={hooked.mid.weight: 1e-4})
    _train_both_and_compare(grouped, opt, hooked, steps)
    moved = {n: (p - dict(start.named_parameters())[n]).abs().max().item() for n, p in hooked.named_parameters()}
    assert moved["mid.weight"] <= 5 * 1e-4 < 5 * 1e-3 <= moved["emb.weight"]  # five steps of at most ~lr each


def test_fused_steps_match_the_loop_up_to_float_rounding():
    """train_args.fused_optimizer changes how AdamW computes, not what: after five steps the
    weights agree with the per-tensor loop's to float rounding, and they moved far more than that."""
    torch.manual_seed(0)
    start = TiedLM()
    models = {fused: copy.deepcopy(start) for fused in (False, True)}
    for fused, model in models.items():
        steps = StepInBackward([p for p in model.parameters() if p.requires_grad], 1e-2, 0.01, fused)
        for ids, y in _batches():
            _loss(model, ids, y).backward()
        steps.close()
    for (name, a), b in zip(models[False].named_parameters(), models[True].parameters()):
        assert torch.allclose(a, b, rtol=0, atol=1e-5), name
    assert (models[True].emb.weight - start.emb.weight).abs().max() > 1e-3
