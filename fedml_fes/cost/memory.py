"""Peak training memory, measured rather than guessed.

What is measured, per training step (one forward + backward of one batch):

- activations: the bytes of every tensor autograd saves for backward during the forward
  pass (via `torch.autograd.graph.saved_tensors_hooks`), each storage counted once and
  parameters excluded. They are all alive when backward starts, so their sum is the
  step's activation peak;
- parameters: the parameters a training step reads (`ParameterReads`: every parameter an
  op takes during the step's forward, each storage once; a parameter the step only indexes,
  such as the verbalizer rows of a tied vocabulary matrix, counts the rows read). A model
  without a frozen bottom reads all of itself;
- gradients: one tensor per trainable parameter;
- optimizer state: AdamW's exp_avg and exp_avg_sq, two tensors per trainable parameter.

peak training memory = parameters read + gradients + optimizer state + max activations
over steps. With a frozen bottom whose activation cache is filled before the first step
(no_grad, one example at a time), the embeddings and bottom layers are needed only in that
fill phase, never at the same time as the training step: the peak is then the larger of
the two phases (fill phase = the parameters it reads). If a bottom pass runs once training
has started, both sets are counted together. Not counted: allocator fragmentation,
transient workspaces inside one kernel, the Python process, the input batch, the cache
itself (kept in the client's folder, read a batch at a time). On CUDA,
`torch.cuda.max_memory_allocated` is recorded too.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

ADAM_STATE_TENSORS = 2  # exp_avg, exp_avg_sq per trainable parameter (torch.optim.AdamW)


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


class ParameterReads(TorchFunctionMode):
    """Which parameter storages the ops inside a window read, and how many of their bytes.

    `phase` names the book that reads go to (None: not recording). Indexing a parameter
    (`weight[ids]`) counts the bytes of the rows it returns; any other op counts the whole
    storage. Outputs are returned unchanged: recording never alters the computation.
    """

    def __init__(self) -> None:
        super().__init__()
        self.phase: str | None = None
        self.books: dict[str, dict[int, int]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.phase is not None:
            book = self.books.setdefault(self.phase, {})
            indexed = func is torch.Tensor.__getitem__ and isinstance(out, torch.Tensor)
            for a in tree_leaves((args, kwargs)):
                if isinstance(a, nn.Parameter):
                    ptr, nbytes = _storage(a)
                    read = min(out.nbytes, nbytes) if indexed else nbytes
                    book[ptr] = max(book.get(ptr, 0), read)
        return out

    def bytes(self, *phases: str) -> int:
        """Bytes resident for these phases together (a storage read in several counts once, at its largest)."""
        merged: dict[int, int] = {}
        for phase in phases:
            for ptr, n in self.books.get(phase, {}).items():
                merged[ptr] = max(merged.get(ptr, 0), n)
        return sum(merged.values())
