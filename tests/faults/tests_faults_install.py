"""The fault patches `sitecustomize` installs (see its docstring); in-process tests call
`install` directly. Each patch is applied when its module is first imported, so processes
that never import it (the moto S3 server, a bare interpreter) start as fast as ever."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import time
from typing import Any, Callable

KEYS = {"raise_in_round", "raise_on_client", "stall_in_round", "stall_on_rank", "stall_s"}
_UNDO: list[Callable[[], None]] = []  # what `uninstall` reverts (in-process tests)


class InjectedFault(RuntimeError):
    """Raised on purpose to test failure handling."""


def install(spec: dict[str, Any]) -> None:
    unknown = set(spec) - KEYS
    if unknown:
        raise ValueError(f"FES_TEST_FAULTS: unknown keys {sorted(unknown)}")
    if "raise_in_round" in spec:
        _when_imported(
            "fedml_fes.runtime.client",
            lambda mod: _raise_in(mod, int(spec["raise_in_round"]), int(spec.get("raise_on_client", -1))),
        )
    if "stall_in_round" in spec:
        _when_imported(
            "fedml_fes_plugins.cross_silo.client",
            lambda mod: _stall_in(
                mod, int(spec["stall_in_round"]), int(spec.get("stall_on_rank", -1)), float(spec.get("stall_s", 3600))
            ),
        )


def uninstall() -> None:
    while _UNDO:
        _UNDO.pop()()


def _replace(owner: Any, name: str, new: Any) -> None:
    old = getattr(owner, name)
    setattr(owner, name, new)
    _UNDO.append(lambda: setattr(owner, name, old))


def _raise_in(mod, round_idx: int, client: int) -> None:
    run = mod.LocalTrainer.run

    def faulty(self, task, data):
        if task.round_idx == round_idx and client in (-1, task.client_id):
            raise InjectedFault(f"injected fault in round {task.round_idx} on client {task.client_id}")
        return run(self, task, data)

    _replace(mod.LocalTrainer, "run", faulty)


def _stall_in(mod, round_idx: int, rank: int, seconds: float) -> None:
    play = mod.SiloClient._play

    def stalling(self, tasks, params):
        r = tasks[0].round_idx if tasks else -1
        if not getattr(self, "_stalled", False) and r >= round_idx and rank in (-1, self.rank):
            self._stalled = True
            self.emit(f"silo {self.rank}: stalling in round {r} for {seconds:g}s (FES_TEST_FAULTS)")
            sys.stdout.flush()
            time.sleep(seconds)
        return play(self, tasks, params)

    _replace(mod.SiloClient, "_play", stalling)


def _when_imported(name: str, patch: Callable[[Any], None]) -> None:
    if name in sys.modules:
        patch(sys.modules[name])
        return
    finder = _PatchOnImport(name, patch)
    sys.meta_path.insert(0, finder)
    _UNDO.append(lambda: finder in sys.meta_path and sys.meta_path.remove(finder))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # find the real spec with the other finders
        spec = importlib.util.find_spec(fullname)
        exec_module, patch = spec.loader.exec_module, self.patch

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec
