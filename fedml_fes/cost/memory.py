"""Peak training memory, measured rather than guessed.

What is measured, per training step (one forward + backward of one batch):

- activations: the bytes of every tensor autograd saves for backward during the forward
  pass (via `torch.autograd.graph.saved_tensors_hooks`), each storage counted once and
  parameters excluded. They are all alive when backward starts, so their sum is the
  step's activation peak;
- parameters: every parameter of the model (the whole model is resident, frozen bottom
  included), each storage once;
- gradients: one tensor per trainable parameter;
- optimizer state: AdamW's exp_avg and exp_avg_sq, two tensors per trainable parameter.

peak training memory = parameters + gradients + optimizer state + max activations over
steps. Not counted: allocator fragmentation, transient workspaces inside one kernel, the
Python process, the input batch. On CUDA, `torch.cuda.max_memory_allocated` is recorded too.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

ADAM_STATE_TENSORS = 2  # exp_avg, exp_avg_sq per trainable parameter (torch.optim.AdamW)
# Memory traffic of one training step per trainable byte, outside the matmuls: writing the
# gradient (1), AdamW reading parameter, gradient, exp_avg, exp_avg_sq (4) and writing
# parameter, exp_avg, exp_avg_sq (3). Memory-bound, so costed by bandwidth, not FLOPs.
UPDATE_PASSES = 8


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def parameter_bytes(model: nn.Module) -> tuple[int, int, set[int]]:
    """(all parameter bytes, trainable parameter bytes, parameter storage pointers)."""
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        ptr, nbytes = _storage(p)
        if ptr in seen:
            continue
        seen.add(ptr)
        total += nbytes
        trainable += nbytes if p.requires_grad else 0
    return total, trainable, seen


class SavedTensorMeter:
    """Bytes of tensors saved for backward within one forward pass; keeps the max over passes."""

    def __init__(self, excluded_storages: set[int]):
        self.excluded = excluded_storages
        self._seen: set[int] = set()
        self._current = 0
        self.peak = 0

    def start_pass(self) -> None:
        self._seen.clear()
        self._current = 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        try:
            ptr, nbytes = _storage(t)
        except (RuntimeError, NotImplementedError):  # e.g. a tensor without storage
            return t
        if ptr not in self.excluded and ptr not in self._seen:
            self._seen.add(ptr)
            self._current += nbytes
            self.peak = max(self.peak, self._current)
        return t

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Pack returns the tensor itself: nothing about training changes, only bytes are read."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield
