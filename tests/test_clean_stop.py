"""Clean stops: SIGINT / SIGTERM end `fedml-fes run`, `fedml-fes mpirun` and `fedml-fes demo` with summary.json
(status interrupted), one line on stderr and a non-zero exit; nothing the mpirun launcher
started outlives it; a failed rank is named on stderr and in summary.json."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedml_fes.runtime.checkpoint import load_checkpoint

from .conftest import small_config, write_config

CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]


def _start(args: list[str]) -> subprocess.Popen:
    """The CLI in its own session: a test that fails still finds (and kills) all it started."""
    return subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _wait_for_rows(proc: subprocess.Popen, run_dir: Path, rows: int, timeout: float = 240) -> None:
    metrics = run_dir / "metrics.csv"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if metrics.is_file() and len(metrics.read_text().splitlines()) > rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {rows} rounds within {timeout}s")


def _wait_for_checkpoint(run_dir: Path, rounds: int, timeout: float = 120) -> None:
    """A round's metrics row is written just before its checkpoint; under CPU load a signal
    could land between the two (a loaded test run saw 2 rows and a round-0 checkpoint): wait for both."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if load_checkpoint(run_dir)["round"] + 1 >= rounds:
                return
        except Exception:  # not written yet, or being replaced
            pass
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of {rounds} rounds within {timeout}s")


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains `text` (this run's unique run directory)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                found.append(int(name))
    return found


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, err


def _assert_interrupted(code: int, err: str, run_dir: Path, signum: int, least: int = 2) -> dict:
    name = signal.Signals(signum).name
    lines = err.strip().splitlines()
    assert code == 128 + signum, (code, err)
    assert len(lines) == 1 and lines[0].startswith(f"fedml-fes: interrupted by {name}"), err
    assert f"--resume --run-dir {run_dir}" in lines[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["error"] == f"interrupted by {name}"
    # exactly what --resume continues after
    assert summary["rounds_completed"] == load_checkpoint(run_dir)["round"] + 1 >= least
    assert summary["per_round"] and len(summary["per_round"]) == summary["rounds_completed"]
    return summary


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)  # each a process of its own (~10 s); the fast lane keeps SIGTERM
def test_a_signal_stops_run_with_a_summary_and_one_line(tmp_path, tiny_model_dir, signum):
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 40}))
    run_dir = tmp_path / "run"
    proc = _start(["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"])
    _wait_for_rows(proc, run_dir, 2)
    _wait_for_checkpoint(run_dir, 2)
    proc.send_signal(signum)
    code, _out, err = _finish(proc, timeout=60)
    summary = _assert_interrupted(code, err, run_dir, signum)
    assert "Traceback" not in err
    assert summary["device"].startswith("CPU, 1 thread, ")  # what computed these rounds (the fidelity harness reads it)


def test_sigterm_stops_the_demo_with_a_summary_and_one_line(tmp_path, tiny_model_dir):
    """The demo stops as `run` does: the method in progress keeps its finished rounds and
    summary.json, and the one line says where (a SIGTERM once ended it with neither)."""
    model = f"model_args.model={tiny_model_dir}"
    args = ["demo", "--methods", "fedcls", "--rounds", "40", "--no-progress", "--set", model]
    proc = _start([*args, "--output-dir", str(tmp_path / "runs")])
    deadline = time.monotonic() + 120
    while not list((tmp_path / "runs").glob("demo-*/fedcls")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    run_dir = next((tmp_path / "runs").glob("demo-*/fedcls"))
    _wait_for_rows(proc, run_dir, 2)
    _wait_for_checkpoint(run_dir, 2)
    proc.send_signal(signal.SIGTERM)
    code, _out, err = _finish(proc, timeout=60)
    assert code == 128 + signal.SIGTERM and err.strip().splitlines() == [
        f"fedml-fes: interrupted by SIGTERM in FedCLS; finished rounds are kept in {run_dir}"
    ], (code, err)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] == load_checkpoint(run_dir)["round"] + 1


@pytest.mark.slow
def test_sigterm_to_the_mpirun_launcher_ends_everything_it_started(tmp_path, tiny_model_dir):
    """mpirun and every rank gone within 5 s of the signal; summary.json from the server's
    checkpoint; the launcher's one line and exit code (SIGINT takes the same path: `run`'s test)."""
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 60}))
    run_dir = tmp_path / "run"
    proc = _start(["mpirun", "-np", "2", "--cf", str(cf), "--run-dir", str(run_dir)])
    _wait_for_rows(proc, run_dir, 1)
    assert len(_processes_naming(str(run_dir))) >= 4  # the launcher, prterun, 2 ranks
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    while [p for p in _processes_naming(str(run_dir)) if p != proc.pid] and time.monotonic() - sent < 10:
        time.sleep(0.05)  # prterun and the ranks
    elapsed = time.monotonic() - sent
    left = [p for p in _processes_naming(str(run_dir)) if p != proc.pid]
    code, _out, err = _finish(proc, timeout=60)
    assert not left and elapsed < 5, (left, elapsed)
    _assert_interrupted(code, err, run_dir, signal.SIGTERM, least=1)
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_launcher_killed_outright_takes_mpirun_with_it(tmp_path, tiny_model_dir):
    """SIGKILL leaves the launcher no say: the kernel tells mpirun (its parent died), which
    ends its ranks, here while they are still starting."""
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 60}))
    run_dir = tmp_path / "run"
    proc = _start(["mpirun", "-np", "2", "--cf", str(cf), "--run-dir", str(run_dir)])
    deadline = time.monotonic() + 120
    while len(_processes_naming(str(run_dir))) < 4 and time.monotonic() < deadline:  # launcher, prterun, ranks
        time.sleep(0.05)
    assert len(_processes_naming(str(run_dir))) >= 4
    proc.send_signal(signal.SIGKILL)
    sent = time.monotonic()
    while _processes_naming(str(run_dir)) and time.monotonic() - sent < 10:
        time.sleep(0.05)
    left, elapsed = _processes_naming(str(run_dir)), time.monotonic() - sent
    _finish(proc, timeout=10)
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left and elapsed < 5, (left, elapsed)


def test_a_rank_killed_by_a_signal_is_named_from_mpiruns_banner():
    """A rank that dies without a word (the fault path with a word: test_resume's mpirun test)."""
    from fedml_fes_plugins.runtimes.launcher import rank_death

    banner = (
        "--------\nprterun noticed that process rank 2 with PID 30519 on node vm exited on\n"
        "signal 9 (Killed).\n--------\n"
    )
    assert rank_death(banner) == "rank 2 (pid 30519): exited on signal 9 (Killed)"
    assert rank_death("mpirun exited normally") is None


_WANDB_AT_IMPORT = (  # the four modules of wandb 0.13.2 (imported by FedML) that make a folder at import
    "import wandb.data_types, wandb.sdk.data_types._private, wandb.sdk.wandb_artifacts, wandb.sdk.internal.file_pusher"
)


@pytest.mark.parametrize("ending", ["os._exit(3)", "leave(3)"])
def test_a_hard_exit_removes_the_temporary_folders_its_modules_hold(tmp_path, ending):
    """Silos, aborting ranks, stopped runs and devices end with `os._exit`, which skips the exit
    handlers that remove wandb's temporary folders; `hard_exit.leave` removes them first."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = (
        f"import os, sys\n{_WANDB_AT_IMPORT}\n"
        "from fedml_fes_plugins.adapters.hard_exit import leave\n"
        f"print(len(os.listdir(sys.argv[1])), flush=True)\n{ending}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(temp)],
        env={**os.environ, "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert int(done.stdout.split()[0]) == 4  # wandb's four folders, made at import
    left = os.listdir(temp)
    assert (left == []) if ending.startswith("leave") else len(left) == 4, left


def test_removing_module_temp_folders_loads_no_lazily_loaded_module(tmp_path, monkeypatch):
    import importlib.util

    from fedml_fes_plugins.adapters.hard_exit import remove_module_temp_folders

    (tmp_path / "fes_lazy_probe.py").write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n")
    spec = importlib.util.spec_from_file_location("fes_lazy_probe", tmp_path / "fes_lazy_probe.py")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "fes_lazy_probe", module)
    remove_module_temp_folders()
    assert not (tmp_path / "fes_lazy_probe.ran").exists()
    module.pathlib  # noqa: B018 - the first attribute read runs it
    assert (tmp_path / "fes_lazy_probe.ran").exists()


def test_the_processes_tests_start_keep_their_temporary_folders_in_the_suites_own(tmp_path):
    """A process a test kills keeps its temporary folders (above); the processes tests start make
    them in one directory that tests/conftest.py removes when the session ends, not in /tmp."""
    suite_tmp = os.environ["FEDML_FES_TEST_TMPDIR"]
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    made = Path(child.stdout.strip())
    assert made.parent == Path(suite_tmp) and made.is_dir(), child.stderr
    assert Path(suite_tmp) not in tmp_path.parents  # pytest's own folders stay where they were
