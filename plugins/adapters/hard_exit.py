"""End a process at once without leaving its libraries' temporary folders behind.

Some fedml-fes processes end with `os._exit`:
- a silo whose server is gone;
- a rank that aborts the MPI job;
- a stopped run, whose interpreter teardown can crash inside torch;
- an emulated device or cross-device server after a failure;
- a fidelity benchmark worker (multiprocessing ends its spawned processes so).

`os._exit` skips the exit handlers, and with them the removal of the temporary folders that
imported modules hold for the life of the process. wandb 0.13.2, which FedML imports, makes four
at import time:
- `wandb/data_types.py:79`
- `wandb/sdk/data_types/_private.py:3`
- `wandb/sdk/wandb_artifacts.py:70`
- `wandb/sdk/internal/file_pusher.py:24`

Each of those processes left these four folders in the temporary directory.

`leave` removes every module-level `tempfile.TemporaryDirectory` first, as the exit handlers
would have. Then it flushes the output and ends the process. `abort_mpi` does the same before
MPI_Abort, and `leave_stopped` is the way out of a run stopped by a signal, whose teardown can
crash. A process ended by a signal (mpirun ending the other ranks after an abort, SIGKILL)
still leaves them.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from typing import NoReturn


def remove_module_temp_folders() -> int:
    """Remove the folders of the `tempfile.TemporaryDirectory` objects that loaded modules hold
    as globals; returns how many. A module's namespace is read without its own attribute hooks,
    so a lazily loaded module is not loaded by this, and no global's attribute hooks run."""
    removed = 0
    for module in list(sys.modules.values()):
        try:
            names = object.__getattribute__(module, "__dict__")
        except (AttributeError, TypeError):
            continue
        for value in list(names.values()):
            # type(), not isinstance(): isinstance reads `__class__`, which some globals answer
            # with a warning (torch.distributed.reduce_op)
            if issubclass(type(value), tempfile.TemporaryDirectory):
                try:
                    value.cleanup()  # a second cleanup, or the exit handler's after it, is a no-op
                    removed += 1
                except OSError:
                    pass
    return removed


def abort_mpi(comm, code: int = 1) -> None:
    """`comm.Abort(code)` after removing the modules' temporary folders: MPI_Abort ends this
    process without its exit handlers (and mpirun ends the other ranks with signals)."""
    _tidy()
    comm.Abort(code)


def leave_stopped(code: int) -> NoReturn:
    """End a stopped run's process at once (`fedml-fes run`, the fidelity harness). Everything is
    on disk (summary.json, checkpoint, metrics.csv: each written and closed) and the line is
    printed; the interpreter's teardown after a stop that landed inside a torch operation can
    crash (SIGSEGV at exit, about one stop in twenty here; the fidelity harness too, one thread,
    stopped in BBC News round 1), which would turn the exit code into a signal's."""
    logging.shutdown()
    leave(code)


def leave(code: int) -> NoReturn:
    """`os._exit(code)` after removing the modules' temporary folders and flushing the output."""
    _tidy()
    os._exit(code)


def _tidy() -> None:
    """What the skipped exit handlers would have done that matters here."""
    try:
        remove_module_temp_folders()
    except Exception:  # never let the cleanup keep a process from ending
        pass
    sys.stdout.flush()
    sys.stderr.flush()
