"""Clean stops: SIGINT and SIGTERM end a run the way Ctrl-C does, and what a launcher started
ends with it.

Python turns SIGINT into KeyboardInterrupt but lets SIGTERM end the process at once, with no
summary.json. Inside `stop_on_signals()` both raise `Interrupted` (a KeyboardInterrupt, so every
runtime's handling of Ctrl-C applies) in the main thread: the run abandons the round in
progress, keeps the checkpoint of the last finished one, writes summary.json (status
`interrupted`) and the CLI exits with 128 + the signal number after one line on stderr. Later
signals are ignored while that happens, so a second Ctrl-C cannot cut the summary short.

A signal can land inside C++ code that turns the exception raised by the handler into another
one (torch.save, writing a checkpoint or a cache, raises RuntimeError "unexpected pos"), or
interrupt a system call there before Python's handler has run at all. So the C-level arrival
is recorded too (`signal.set_wakeup_fd`): `stop_requested()` tells a runtime, at once, that
the error it caught, or the phase it just finished, is a stop, not a failure. Exactly one
`Interrupted` is raised per stop: by the handler, or by the runtime that noticed the stop first
(the handler then stays quiet).

`end_process_tree` ends a child started in its own session (`start_new_session=True`) and
everything in that session: mpirun's `prterun` puts every rank in its own process group but
in its session, so a process-group kill alone would miss the ranks.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import threading
from typing import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised where the main thread was."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.signame = signal.Signals(signum).name
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        return f"interrupted by {self.signame}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _StopState:
    """What this process knows of stop signals (signals are per process, so is this)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, wakeup_fd: int | None = None) -> None:
        self.received: list[int] = []
        self.raised = False  # an Interrupted is on its way: the handler must not raise another
        self.wakeup_fd = wakeup_fd  # read end of the pipe Python's C-level handler writes to


_state = _StopState()


def stop_requested() -> Interrupted | None:
    """The stop signal received inside stop_on_signals, if any, as soon as it arrived (even when
    Python's handler has not run yet). A caller that raises the returned Interrupted owns the
    stop: the handler will not raise a second one."""
    if _state.wakeup_fd is not None:
        try:
            arrived = os.read(_state.wakeup_fd, 512)
        except (BlockingIOError, OSError):
            arrived = b""
        _state.received += [b for b in arrived if b in STOP_SIGNALS]
    if not _state.received:
        return None
    _state.raised = True
    return Interrupted(_state.received[0])


def interrupt_reason(e: BaseException) -> str:
    """What summary.json's `error` says: the signal's name, or Ctrl-C's for a plain KeyboardInterrupt."""
    return e.reason if isinstance(e, Interrupted) else "interrupted by SIGINT"


@contextlib.contextmanager
def stop_on_signals(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """SIGINT / SIGTERM raise `Interrupted` once; the previous handlers come back after. Outside
    the main thread (where Python cannot install handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signums}

    def handler(signum: int, _frame) -> None:
        for s in signums:
            signal.signal(s, signal.SIG_IGN)  # the stop is under way: let it write its summary
        _state.received.append(signum)
        if not _state.raised:
            _state.raised = True
            raise Interrupted(signum)

    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    _state.reset(read_end)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for s in signums:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(previous_wakeup)
        _state.reset()
        os.close(read_end)
        os.close(write_end)


def _load_prctl() -> Callable[[], None] | None:
    """A function for `preexec_fn` that asks Linux to send SIGTERM to the child when its parent
    dies, however it dies (SIGKILL included): prterun then ends its ranks. None elsewhere."""
    name = ctypes.util.find_library("c")
    if not name or not hasattr(os, "getsid"):
        return None
    try:
        prctl = ctypes.CDLL(name, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def die_with_parent() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    return die_with_parent


die_with_parent = _load_prctl()  # loaded once here: nothing is imported between fork and exec


def session_members(sid: int) -> list[int]:
    """Live processes in session `sid` (Linux /proc; elsewhere: none found)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for name in names:
        if name.isdigit() and int(name) != os.getpid():
            try:
                if os.getsid(int(name)) == sid:
                    found.append(int(name))
            except OSError:  # gone meanwhile, or not ours to ask about
                continue
    return found


def end_process_tree(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """End `proc` (started with start_new_session=True) and every process in its session:
    SIGTERM to `proc` first (prterun then ends its ranks, in about 0.5 s), SIGKILL to all that
    is left after `grace_s`. Returns within grace_s + about 1 s."""
    sid = proc.pid
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    left = session_members(sid)
    if proc.poll() is None:
        left.append(proc.pid)
    for pid in set(left):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)  # without /proc: at least the group
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
