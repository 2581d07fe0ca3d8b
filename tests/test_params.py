from collections import OrderedDict

import pytest
import torch

from fedml_fes.errors import FesError
from fedml_fes.tuning.params import (
    fedavg,
    load_trainable,
    payload_bytes,
    screen_updates,
    trainable_state,
    validate_update,
)


def _state(v):
    return OrderedDict(w=torch.full((2, 2), float(v)), b=torch.full((2,), float(v)))


def test_fedavg_weighted_by_counts():
    out = fedavg([(1.0, _state(0)), (3.0, _state(4))])
    assert torch.allclose(out["w"], torch.full((2, 2), 3.0))
    assert out["w"].dtype == torch.float32


def test_fedavg_in_float32_is_the_exact_mean_to_float32_rounding_and_half_is_summed_in_float32():
    g = torch.Generator().manual_seed(0)
    states = [OrderedDict(w=torch.randn(1000, generator=g)) for _ in range(20)]
    weights = [float(i + 1) for i in range(20)]
    exact = sum(w * s["w"].double() for w, s in zip(weights, states)) / sum(weights)
    out = fedavg(list(zip(weights, states)))["w"]
    assert out.dtype == torch.float32 and torch.allclose(out.double(), exact, rtol=0, atol=1e-6)
    half = fedavg(
        [(1.0, OrderedDict(w=torch.full((4,), 1000.0, dtype=torch.float16)))]
        + [(1.0, OrderedDict(w=torch.full((4,), 0.25, dtype=torch.float16)))] * 3999
    )["w"]
    assert half.dtype == torch.float16 and torch.allclose(half.float(), torch.full((4,), 0.49975), atol=1e-3)


def test_fedavg_rejects_empty_and_zero_weights():
    with pytest.raises(FesError):
        fedavg([])
    with pytest.raises(FesError, match="positive"):
        fedavg([(0.0, _state(1))])


def test_validate_update_catches_keys_shapes_dtypes_nans():
    ref = _state(0)
    validate_update(_state(1), ref, "c1")
    bad_keys = OrderedDict(w=ref["w"])
    with pytest.raises(FesError, match="wrong tensors"):
        validate_update(bad_keys, ref, "c1")
    bad_shape = OrderedDict(w=torch.zeros(3), b=ref["b"])
    with pytest.raises(FesError, match="tensor 'w'"):
        validate_update(bad_shape, ref, "c1")
    nan = _state(1)
    nan["b"][0] = float("nan")
    with pytest.raises(FesError, match="non-finite"):
        validate_update(nan, ref, "c1")


def test_trainable_state_only_requires_grad_and_copies():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].weight.requires_grad_(False)
    state = trainable_state(model)
    assert list(state) == ["0.bias", "1.weight", "1.bias"]
    assert payload_bytes(state) == 4 * (2 + 2 + 1)
    state["1.bias"] += 5
    load_trainable(model, state)
    assert torch.equal(model[1].bias, state["1.bias"])
    with pytest.raises(FesError, match="does not exist"):
        load_trainable(model, OrderedDict(nope=torch.zeros(1)))


# ---- robust aggregation: the aggregator screens every update itself ------------------------


def _core(model: torch.nn.Module, norm_factor: float = 10.0):
    """A FedAvgCore over `model` (no data, no evaluation: aggregation only)."""
    from types import SimpleNamespace

    from fedml_fes.runtime.aggregator import FedAvgCore

    job = SimpleNamespace(model=model, cfg=SimpleNamespace(train=SimpleNamespace(robust_norm_factor=norm_factor)))
    return FedAvgCore(job)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))


def _nudged(state, scale: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    return OrderedDict((k, v + scale * torch.randn(v.shape, generator=g)) for k, v in state.items())


def test_a_huge_finite_update_among_normal_ones_is_rejected_and_named():
    model = _model()
    core = _core(model)
    glob = core.get_model_params()
    normal = [_nudged(glob, 0.01, s) for s in range(3)]
    huge = OrderedDict((k, torch.full_like(v, 1e30)) for k, v in glob.items())  # finite, every value 1e30
    raw = [(2.0, normal[0]), (1.0, huge), (3.0, normal[1]), (1.0, normal[2])]
    reasons = []
    new = core.aggregate(raw, senders=["client 0", "client 7", "client 2", "client 3"], on_reject=reasons.append)
    assert [i for i, _ in core.last_rejected] == [1]
    assert len(reasons) == 1 and reasons[0].startswith("update from client 7 ")
    expected = fedavg([raw[0], raw[2], raw[3]])  # the others, averaged exactly as before
    assert all(torch.equal(new[k], expected[k]) for k in expected)


def test_out_of_line_update_is_rejected_by_the_median_bound_and_0_turns_it_off():
    glob = _core(_model()).get_model_params()
    raw = [(1.0, _nudged(glob, 0.01, s)) for s in range(3)] + [(1.0, _nudged(glob, 5.0, 9))]
    kept, rejected = screen_updates(raw, glob, [f"client {i}" for i in range(4)], norm_factor=10.0)
    assert kept == [0, 1, 2] and rejected[0][0] == 3
    assert "client 3 is out of line" in rejected[0][1] and "robust_norm_factor" in rejected[0][1]
    assert screen_updates(raw, glob, None, norm_factor=0.0) == ([0, 1, 2, 3], [])  # 0: off
    # fewer than 3 updates: no median to compare with, only the absolute bound
    assert screen_updates(raw[2:], glob, None, norm_factor=10.0) == ([0, 1], [])


def test_the_median_screen_is_off_by_default_so_a_gold_clients_large_update_is_averaged():
    """Few-shot FL: the one client with gold labels moves the model many times more than the
    pseudo-label clients; the default config must not reject it as an outlier."""
    from fedml_fes.config import config_from_dict

    factor = config_from_dict({}).train.robust_norm_factor
    assert factor == 0
    model = _model()
    core = _core(model, norm_factor=factor)
    glob = core.get_model_params()
    raw = [(1.0, _nudged(glob, 0.001, s)) for s in range(4)] + [(8.0, _nudged(glob, 0.5, 9))]
    core.aggregate(raw, senders=[f"client {i}" for i in range(5)])
    assert core.last_rejected == []
    assert screen_updates(raw, glob)[0] == [0, 1, 2, 3, 4]  # the function's own default too


def test_calling_aggregate_directly_with_a_nan_update_rejects_it(caplog):
    model = _model()
    core = _core(model)
    glob = core.get_model_params()
    nan = _nudged(glob, 0.01, 1)
    next(iter(nan.values()))[0, 0] = float("nan")
    good = _nudged(glob, 0.01, 2)
    with caplog.at_level("WARNING", logger="fedml_fes.runtime.server"):
        new = core.aggregate([(1.0, good), (1.0, nan)])  # FedML's call: no senders, no sink
    assert [i for i, _ in core.last_rejected] == [1] and "non-finite" in core.last_rejected[0][1]
    assert "rejected update from entry 1" in caplog.text  # logged even without a round server
    assert all(torch.equal(new[k], fedavg([(1.0, good)])[k]) for k in glob)


@pytest.mark.parametrize("bad", ["nan", "huge", "shape", "weight"])
def test_every_update_rejected_leaves_the_global_model_unchanged(bad):
    model = _model()
    core = _core(model)
    glob = core.get_model_params()
    updates = []
    for s in range(2):
        u = _nudged(glob, 0.01, s)
        if bad == "nan":
            u[next(iter(u))][0, 0] = float("inf")
        elif bad == "huge":
            u = OrderedDict((k, torch.full_like(v, 1e30)) for k, v in u.items())
        elif bad == "shape":
            u[next(iter(u))] = torch.zeros(7)
        updates.append((float("nan") if bad == "weight" else 1.0, u))
    new = core.aggregate(updates, senders=["client 1", "client 2"], on_reject=lambda _r: None)
    assert len(core.last_rejected) == 2
    assert all(torch.equal(new[k], glob[k]) for k in glob)
    core.set_model_params(new)
    assert all(torch.equal(v, glob[k]) for k, v in core.get_model_params().items())


def test_normal_updates_are_averaged_bit_exactly_as_fedavg():
    core = _core(_model())
    glob = core.get_model_params()
    raw = [(float(w), _nudged(glob, 0.05, s)) for s, w in enumerate([3, 1, 4, 1, 5])]
    new = core.aggregate(raw, senders=[f"client {i}" for i in range(5)])
    assert core.last_rejected == []
    expected = fedavg(raw)
    assert list(new) == list(expected) and all(torch.equal(new[k], expected[k]) for k in expected)


def test_changes_are_measured_from_the_global_the_round_sent_not_the_shared_model():
    """In process the trainer shares the aggregator's model: after training it holds the last
    client's tensors, so the round server passes the global it sent as `reference`."""
    core = _core(_model())
    glob = core.get_model_params()
    raw = [(1.0, _nudged(glob, 0.01, s)) for s in range(3)] + [(1.0, _nudged(glob, 1.0, 9))]
    core.set_model_params(raw[3][1])  # the out-of-line client trained last, on the shared model
    core.aggregate(raw, reference=glob, on_reject=lambda _r: None)
    assert [i for i, _ in core.last_rejected] == [3]
    new = core.aggregate(raw[3:], reference=glob, on_reject=lambda _r: None)  # kept: one update, no median
    assert core.last_rejected == [] and all(torch.equal(new[k], raw[3][1][k]) for k in glob)
