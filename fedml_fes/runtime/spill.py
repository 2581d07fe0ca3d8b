"""Client updates parked on disk between a client's training and the round's aggregation, and
the round server's global tensors between their reads.

Why: the round server screens and averages a round's updates together (the median bound of
`tuning.params.screen_updates` needs every update's change first), so a runtime that trains
the round's clients one after another in one process used to hold every update until the
round ended. For FedFSL on SmolLM2-135M that is five full-model float32 updates, 2.7 GB, on top
of the model, its gradients and AdamW's state. Parked here, each update is a safetensors file
that the screen and FedAvg read one tensor at a time (memory-mapped, released after each
tensor), so the process holds no update at all: the same tensors, the same order, the same
average bit for bit. The global tensors (the server's reference, 0.54 GB more) wait the same
way while a client trains.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..tuning.params import payload_bytes
from .tasks import ClientUpdate

# smaller updates (bias-only, adapters, heads) stay in memory: parking them saves little
DEFAULT_MIN_BYTES = 16 * 2**20


class DiskTensors(Mapping):
    """Named tensors in a safetensors file, in their original order; each lookup reads one
    tensor, so nothing stays mapped once the caller drops it."""

    def __init__(self, path: Path, names: list[str], nbytes: int = 0, specs: dict | None = None):
        self.path = Path(path)
        self._names = list(names)
        self.nbytes = nbytes  # the tensors' size, known when parked: payload_bytes reads no file
        # name -> (shape, dtype), known when parked: the server's structure checks
        # (tuning.params.validate_update) read no file either
        self.specs = specs

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        with safe_open(str(self.path), framework="pt") as f:
            return f.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def park(params: Mapping[str, torch.Tensor], path: Path) -> DiskTensors:
    """`params` written to `path` (safetensors), read back one tensor at a time."""
    save_file({k: v.detach().contiguous() for k, v in params.items()}, str(path))
    specs = {k: (tuple(v.shape), v.dtype) for k, v in params.items()}
    return DiskTensors(path, list(params), payload_bytes(params), specs)


class GlobalSpill:
    """The round server's global tensors on disk between their reads (`RoundServer.park_global`),
    when they are at least `min_bytes`. The file before the newest stays until the next one is
    written: the round that replaced it may still read it as its reference."""

    def __init__(self, folder: Path, min_bytes: int = DEFAULT_MIN_BYTES):
        self.folder = Path(folder)
        self.min_bytes = min_bytes
        self._files: list[Path] = []
        self._count = 0
        shutil.rmtree(self.folder, ignore_errors=True)  # files a stopped run left behind

    def __call__(self, params: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        if payload_bytes(params) < self.min_bytes:
            return params
        self.folder.mkdir(parents=True, exist_ok=True)
        self._count += 1
        path = self.folder / f"global-{self._count}.safetensors"
        parked = park(params, path)
        self._files.append(path)
        while len(self._files) > 2:
            self._files.pop(0).unlink(missing_ok=True)
        return parked

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self._files.clear()


class UpdateSpill:
    """Parks updates of at least `min_bytes` in `folder` (`keep`) until `clear`."""

    def __init__(self, folder: Path, min_bytes: int = DEFAULT_MIN_BYTES):
        self.folder = Path(folder)
        self.min_bytes = min_bytes
        self._count = 0
        self.clear()  # files a stopped run left behind

    def keep(self, update: ClientUpdate) -> ClientUpdate:
        """The update, its tensors on disk when they are large; the in-memory ones are dropped
        once the caller lets go of `update`."""
        params = update.params
        if not isinstance(params, dict) or payload_bytes(params) < self.min_bytes:
            return update
        self.folder.mkdir(parents=True, exist_ok=True)
        self._count += 1
        path = self.folder / f"r{update.round_idx}-c{update.client_id}-{self._count}.safetensors"
        return dataclasses.replace(update, params=park(params, path))

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
