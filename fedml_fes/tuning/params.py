"""What travels: the trainable tensors only, as an OrderedDict, validated on arrival."""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict
from collections.abc import Mapping

import torch
from torch import nn

from ..errors import FesError

Params = "OrderedDict[str, torch.Tensor]"


def trainable_state(model: nn.Module) -> "OrderedDict[str, torch.Tensor]":
    """Detached CPU copies of the parameters that require grad (tied weights appear once)."""
    return OrderedDict((n, p.detach().to("cpu", copy=True)) for n, p in model.named_parameters() if p.requires_grad)


def load_trainable(model: nn.Module, state: "OrderedDict[str, torch.Tensor]") -> None:
    """Copy `state` into the model's parameters in place; unknown names are an error."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            if name not in params:
                raise FesError(f"payload tensor '{name}' does not exist in the model")
            params[name].copy_(value)


def payload_bytes(state: "OrderedDict[str, torch.Tensor]") -> int:
    """Bytes of the tensors; a parked mapping (runtime.spill.DiskTensors) says its size without
    reading its file (the round server asks twice a round)."""
    known = getattr(state, "nbytes", None)
    if isinstance(known, int):
        return known
    return sum(t.numel() * t.element_size() for t in state.values())


def validate_update(
    update: "OrderedDict[str, torch.Tensor]",
    reference: "OrderedDict[str, torch.Tensor]",
    sender: str,
    finite: bool = True,
) -> None:
    """Reject an update whose keys, shapes or dtypes differ from the global one, or non-finite
    (`finite=False`: the caller checks that itself, as `change_norm` with a sender does)."""
    if list(update.keys()) != list(reference.keys()):
        missing = set(reference) - set(update)
        extra = set(update) - set(reference)
        raise FesError(
            f"update from {sender} has wrong tensors (missing {sorted(missing)[:3]}, unexpected {sorted(extra)[:3]})"
        )
    # tensors parked on disk (runtime.spill.DiskTensors) carry their shapes and dtypes: the
    # structure checks read no file (four reads of each update a round became two)
    known = getattr(update, "specs", None) if not finite else None
    for name, expected in _specs(reference).items():
        if known is not None:
            if known[name] != expected:
                raise FesError(f"update from {sender}: tensor '{name}' is {known[name]}, expected {expected}")
            continue
        t = update[name]
        if not isinstance(t, torch.Tensor) or (tuple(t.shape), t.dtype) != expected:
            got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
            raise FesError(f"update from {sender}: tensor '{name}' is {got}, expected {expected}")
        if finite and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise FesError(f"update from {sender}: tensor '{name}' has non-finite values")


def _specs(tensors: "Mapping[str, torch.Tensor]") -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """name -> (shape, dtype); from the parked file's record when `tensors` are on disk."""
    known = getattr(tensors, "specs", None)
    if known is not None:
        return known
    return {k: (tuple(v.shape), v.dtype) for k, v in tensors.items()}


def fedavg(weighted: list[tuple[float, "OrderedDict[str, torch.Tensor]"]]) -> "OrderedDict[str, torch.Tensor]":
    """Weighted average in the given order (callers sort by client id: bitwise reproducible).

    Accumulates in the tensors' own precision, float32 at least (float16/bfloat16 are summed in
    float32), as FedML's FedAvg does: the weights sum to one, so a float32 sum of a few dozen
    updates is within float32 rounding of the exact mean. Summing in float64 instead cost 0.6-0.7 s
    per round for four 90.9 MB MiniLM updates on one core (against 0.12 s), a large part of the
    MPI runtime's time outside training (docs/BENCHMARK.md, runtime overhead)."""
    if not weighted:
        raise FesError("no client updates to aggregate")
    total = float(sum(w for w, _ in weighted))
    if not math.isfinite(total) or total <= 0:
        raise FesError(f"aggregation weights must sum to a positive number, got {total}")
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, first in weighted[0][1].items():
        acc = torch.zeros_like(first, dtype=torch.promote_types(first.dtype, torch.float32))
        for w, state in weighted:
            acc.add_(state[name], alpha=w / total)
        out[name] = acc.to(first.dtype)
    return out


# Robust aggregation (train_args.robust_norm_factor). An update's *change* is its L2 distance
# to the current global tensors, over every trainable tensor. Two bounds, both documented:
#   absolute: a change that is non-finite or over ABSOLUTE_NORM_FACTOR x max(1, the global's
#     norm) is rejected whatever the round (a finite 1e30 everywhere is no training step);
#   relative (opt-in): with at least MIN_UPDATES_FOR_MEDIAN valid updates, a change over
#     norm_factor x the median change of those updates is rejected (0: off; a median of 0,
#     every client sending the global back, disables it for that aggregation).
ABSOLUTE_NORM_FACTOR = 1e6
MIN_UPDATES_FOR_MEDIAN = 3


def l2_norm(state: "OrderedDict[str, torch.Tensor]") -> float:
    """L2 norm over all floating tensors: each tensor's in (at least) float32, the squares
    summed in Python's float64 (no float64 copy of the model; float64 again where a float32
    norm overflows)."""
    total = 0.0
    for t in state.values():
        if t.is_floating_point():
            wide = torch.float32 if t.element_size() <= 4 else t.dtype
            norm = float(torch.linalg.vector_norm(t.detach().to("cpu", wide)))
            if not math.isfinite(norm):
                norm = float(torch.linalg.vector_norm(t.detach().to("cpu", torch.float64)))
            total += norm * norm
    return math.sqrt(total)


def _tensor_change(t: torch.Tensor, ref: torch.Tensor) -> float:
    """L2 norm of t - ref: one pass in (at least) float32, no float64 copies of the model's
    tensors; again in float64 only when that overflows (values over ~1e19 square past float32's
    range), so a non-finite result means a non-finite element."""
    wide = torch.float32 if t.element_size() <= 4 else t.dtype
    norm = float(torch.linalg.vector_norm(t.detach().to("cpu", wide) - ref.detach().to("cpu", wide)))
    if not math.isfinite(norm):
        norm = float(
            torch.linalg.vector_norm(t.detach().to("cpu", torch.float64) - ref.detach().to("cpu", torch.float64))
        )
    return norm


def change_norm(
    update: "OrderedDict[str, torch.Tensor]", reference: "OrderedDict[str, torch.Tensor]", sender: str | None = None
) -> float:
    """L2 norm of update - reference over the floating tensors (inf when it overflows). With a
    `sender`, a tensor holding NaN or inf is rejected here, naming it (the finite-value check
    of `validate_update`, at no extra pass over a finite tensor)."""
    total = 0.0
    for name, ref in reference.items():
        t = update[name]
        if t.is_floating_point():
            norm = _tensor_change(t, ref)
            if not math.isfinite(norm) and sender is not None and not bool(torch.isfinite(t).all()):
                raise FesError(f"update from {sender}: tensor '{name}' has non-finite values")
            total += norm * norm
    return math.sqrt(total)


def screen_updates(
    raw: list,
    reference: "OrderedDict[str, torch.Tensor]",
    senders: "list[str] | None" = None,
    norm_factor: float = 0.0,
) -> tuple[list[int], list[tuple[int, str]]]:
    """Which of `raw`'s (weight, tensors) entries may be averaged into `reference` (the current
    global tensors): the indices kept, in order, and (index, one-line reason) per rejection.

    Every entry is validated as `validate_update` does (tensor names, shapes, dtypes, finite
    values) with a finite positive weight, then held to the absolute and relative bounds on its
    change (see ABSOLUTE_NORM_FACTOR above). `senders` names each entry in the reasons
    (default: 'entry <i>')."""
    names = (
        list(senders) if senders is not None and len(senders) == len(raw) else [f"entry {i}" for i in range(len(raw))]
    )
    kept: list[int] = []
    rejected: list[tuple[int, str]] = []
    norms: dict[int, float] = {}
    bound = ABSOLUTE_NORM_FACTOR * max(1.0, l2_norm(reference))
    for i, entry in enumerate(raw):
        try:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
                raise FesError(f"update from {names[i]} is not a (weight, tensors) pair")
            weight, params = entry
            if not isinstance(params, Mapping):  # a dict, or tensors parked on disk (runtime.spill)
                raise FesError(f"update from {names[i]} carries {type(params).__name__}, not named tensors")
            validate_update(params, reference, names[i], finite=False)  # change_norm checks the values
            if (
                isinstance(weight, bool)
                or not isinstance(weight, (int, float))
                or not (math.isfinite(weight) and weight > 0)
            ):
                raise FesError(f"update from {names[i]} has weight {weight!r}")
            norm = change_norm(params, reference, names[i])
            if not math.isfinite(norm) or norm > bound:
                raise FesError(
                    f"update from {names[i]} is out of bounds: its change has L2 norm {norm:.3g}, over "
                    f"{ABSOLUTE_NORM_FACTOR:g} x the global model's norm ({bound:.3g})"
                )
            norms[i] = norm
            kept.append(i)
        except FesError as e:
            rejected.append((i, str(e)))
    if norm_factor and len(kept) >= MIN_UPDATES_FOR_MEDIAN:
        median = statistics.median(norms[i] for i in kept)
        if median > 0:
            for i in [i for i in kept if norms[i] > norm_factor * median]:
                kept.remove(i)
                rejected.append(
                    (
                        i,
                        f"update from {names[i]} is out of line: its change has L2 norm {norms[i]:.3g}, "
                        f"over {norm_factor:g} x the median of this aggregation's {len(norms)} "
                        f"updates ({median:.3g}; train_args.robust_norm_factor)",
                    )
                )
    rejected.sort()
    return kept, rejected
