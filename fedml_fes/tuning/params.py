"""What travels: the trainable tensors only, as an OrderedDict, validated on arrival."""
from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from ..errors import FesError

Params = "OrderedDict[str, torch.Tensor]"


def trainable_state(model: nn.Module) -> "OrderedDict[str, torch.Tensor]":
    """Detached CPU copies of the parameters that require grad (tied weights appear once)."""
    return OrderedDict((n, p.detach().to("cpu", copy=True)) for n, p in model.named_parameters()
                       if p.requires_grad)


def load_trainable(model: nn.Module, state: "OrderedDict[str, torch.Tensor]") -> None:
    """Copy `state` into the model's parameters in place; unknown names are an error."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            if name not in params:
                raise FesError(f"payload tensor '{name}' does not exist in the model")
            params[name].copy_(value)


def payload_bytes(state: "OrderedDict[str, torch.Tensor]") -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def validate_update(update: "OrderedDict[str, torch.Tensor]",
                    reference: "OrderedDict[str, torch.Tensor]", sender: str) -> None:
    """Reject an update whose keys, shapes or dtypes differ from the global one, or non-finite."""
    if list(update.keys()) != list(reference.keys()):
        missing = set(reference) - set(update)
        extra = set(update) - set(reference)
        raise FesError(f"update from {sender} has wrong tensors (missing {sorted(missing)[:3]}, "
                       f"unexpected {sorted(extra)[:3]})")
    for name, ref in reference.items():
        t = update[name]
        if not isinstance(t, torch.Tensor) or t.shape != ref.shape or t.dtype != ref.dtype:
            got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
            raise FesError(f"update from {sender}: tensor '{name}' is {got}, expected "
                           f"{(tuple(ref.shape), ref.dtype)}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise FesError(f"update from {sender}: tensor '{name}' has non-finite values")


def fedavg(weighted: list[tuple[float, "OrderedDict[str, torch.Tensor]"]]) -> "OrderedDict[str, torch.Tensor]":
    """Weighted average in the given order (callers sort by client id: bitwise reproducible)."""
    if not weighted:
        raise FesError("no client updates to aggregate")
    total = float(sum(w for w, _ in weighted))
    if not math.isfinite(total) or total <= 0:
        raise FesError(f"aggregation weights must sum to a positive number, got {total}")
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, first in weighted[0][1].items():
        acc = torch.zeros_like(first, dtype=torch.float64)
        for w, state in weighted:
            acc.add_(state[name].to(torch.float64), alpha=w / total)
        out[name] = acc.to(first.dtype)
    return out
