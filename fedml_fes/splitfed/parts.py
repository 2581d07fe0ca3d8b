"""Cut an HF encoder model into the client's part and the server's body (FedBERT's split).

The client keeps the embeddings, optionally the bottom `client_layers` encoder layers, and the
task head (the MLM head, or pooler + classifier); the server keeps the remaining encoder
layers. A U-shaped split: the client sends the cut activations up, the server returns only
the rows of its output the head reads (the masked positions for MLM, the first token for
classification), the client returns their gradients, the server the gradients at the cut.

Both parts are deep copies of pieces of the one model, so their parameter names map back to
the model's (`merged_params`) and a merged model can be saved with `save_pretrained`. Works
for encoders exposing `embeddings` and `encoder.layer` (BERT, RoBERTa and relatives), as
`tuning/split.py` does; the body runs the model's own forward (its attention-mask code)
with a pass-through in place of the embeddings.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Iterator, Mapping

import torch
from torch import nn
from transformers import PreTrainedModel

from ..errors import FesError
from ..models import mlm_head


class _PassThrough(nn.Module):
    """Stands in for the embeddings on the server: the body's input is the client's activations."""

    def forward(
        self,
        input_ids=None,
        position_ids=None,
        token_type_ids=None,
        inputs_embeds=None,
        past_key_values_length: int = 0,
        **kwargs,
    ) -> torch.Tensor:
        return inputs_embeds


@contextlib.contextmanager
def _swapped(obj: nn.Module, **attrs) -> Iterator[None]:
    """Set module attributes for the duration of a block (a copy, a call), then put them back."""
    old = {k: getattr(obj, k) for k in attrs}
    for k, v in attrs.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(obj, k, v)


def _layers(model: PreTrainedModel) -> nn.ModuleList:
    base = model.base_model
    encoder = getattr(base, "encoder", None)
    if (
        not hasattr(base, "embeddings")
        or encoder is None
        or not isinstance(getattr(encoder, "layer", None), nn.ModuleList)
    ):
        raise FesError(
            f"{type(model).__name__} has no embeddings/encoder.layer: split learning supports "
            f"BERT/RoBERTa-style encoders"
        )
    return encoder.layer


class ClientPart(nn.Module):
    """Embeddings (+ bottom layers) and the task head: what a client holds and trains."""

    def __init__(self, model: PreTrainedModel, task: str):
        super().__init__()
        self.model = model  # the whole model object with only the client's layers left in it
        self.task = task
        if task == "mlm":
            self._head = mlm_head(model)
        elif task != "classification":
            raise FesError(f"split learning task must be mlm or classification, got '{task}'")

    @property
    def num_layers(self) -> int:
        return len(self.model.base_model.encoder.layer)

    def bottom(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, W, H) activations at the cut."""
        base = self.model.base_model
        if self.num_layers == 0:
            return base.embeddings(input_ids=input_ids)
        with _swapped(base, pooler=None):  # the pooler belongs to the head, after the body
            return base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def needed(self, input_ids: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
        """(B, W) bool: the body output rows the head reads (MLM: the targets; else: the first token)."""
        if self.task == "mlm":
            return targets.bool()
        needed = torch.zeros_like(input_ids, dtype=torch.bool)
        needed[:, 0] = True
        return needed

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        """Logits from the body output rows `needed` selected ((N, H) -> (N, V or C))."""
        if self.task == "mlm":
            return self._head(rows)
        m, pooler = self.model, getattr(self.model.base_model, "pooler", None)
        if pooler is not None and isinstance(getattr(m, "classifier", None), nn.Linear):  # BERT
            return m.classifier(m.dropout(pooler(rows[:, None, :])))
        if isinstance(getattr(m, "classifier", None), nn.Module):  # RoBERTa: the head reads features[:, 0]
            return m.classifier(rows[:, None, :])
        raise FesError(f"{type(m).__name__}: no classification head (pooler + classifier) to put on the client")


class ServerBody(nn.Module):
    """The encoder layers above the cut: what the server holds and trains."""

    def __init__(self, base: nn.Module):
        super().__init__()
        self.base = base  # the base model with a pass-through for embeddings and no pooler

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.base(inputs_embeds=hidden, attention_mask=attention_mask).last_hidden_state


def split_model(model: PreTrainedModel, task: str, client_layers: int = 0) -> tuple[ClientPart, ServerBody]:
    """Copies of `model`'s client part and server body; `model` itself is left as it was."""
    layers = _layers(model)
    if not 0 <= client_layers < len(layers):
        raise FesError(
            f"split_args.client_layers must be below the model's {len(layers)} encoder layers "
            f"(the server needs at least one), got {client_layers}"
        )
    base = model.base_model
    with (
        _swapped(base.encoder, layer=nn.ModuleList(list(layers)[client_layers:])),
        _swapped(base, embeddings=_PassThrough(), pooler=None),
    ):
        body = ServerBody(copy.deepcopy(base))
    with _swapped(base.encoder, layer=nn.ModuleList(list(layers)[:client_layers])):
        client = ClientPart(copy.deepcopy(model), task)
    return client, body


def params_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """Named parameters (a tied tensor once): what a part's weights are on the wire."""
    return {name: p.detach() for name, p in module.named_parameters()}


@torch.no_grad()
def load_params(module: nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy `tensors` into the module's parameters; names and shapes must match exactly."""
    own = dict(module.named_parameters())
    if set(own) != set(tensors):
        missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
        raise FesError(f"split model parameters do not match: missing {missing[:3]}, unexpected {extra[:3]}")
    for name, p in own.items():
        t = tensors[name]
        if t.shape != p.shape:
            raise FesError(f"split model parameter {name}: shape {tuple(t.shape)}, expected {tuple(p.shape)}")
        p.copy_(t)


def body_name_in_model(model: PreTrainedModel, name: str, client_layers: int) -> str:
    """The model's name for a `ServerBody` parameter (`base.encoder.layer.0.x` -> `bert.encoder.layer.K.x`)."""
    rest = name.removeprefix("base.")
    parts = rest.split(".")
    if parts[:2] == ["encoder", "layer"]:
        parts[2] = str(int(parts[2]) + client_layers)
    prefix = model.base_model_prefix
    return ".".join([prefix, *parts]) if prefix and hasattr(model, prefix) else ".".join(parts)


def merged_params(
    model: PreTrainedModel, client: ClientPart, body: ServerBody, client_layers: int
) -> dict[str, torch.Tensor]:
    """Client and body parameters under the whole model's names."""
    out = {name.removeprefix("model."): t for name, t in params_of(client).items()}
    out.update({body_name_in_model(model, name, client_layers): t for name, t in params_of(body).items()})
    return out


def load_merged(model: PreTrainedModel, client: ClientPart, body: ServerBody, client_layers: int) -> PreTrainedModel:
    """Write the parts' weights into `model` (the same architecture), e.g. to save it."""
    load_params(model, merged_params(model, client, body, client_layers))
    return model


class PartyRng:
    """One party's own torch random stream (dropout), whatever else runs in the process.

    In-process, client and server computations interleave in one process; under mpirun each
    runs in its own. Each party swaps its stream in around its own computation, so dropout
    draws, and with them results, are the same in both runtimes.
    """

    def __init__(self, seed: int):
        self.state = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        outer = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            yield
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(outer)
