"""Checkpoint and resume: a run killed with SIGKILL and resumed ends exactly as an uninterrupted one.

The killed runs are real `fedml-fes run` processes that SIGKILL themselves at a chosen point
(a wrapper script patches one function before calling the CLI; the product has no switch):
in a training phase after the round's labeling phase rewrote pseudo labels (client folders
newer than the checkpoint), and while a round's checkpoint is being saved (metrics.csv holds a
row the checkpoint does not). Every metrics.csv column but the wall-clock ones must equal the
uninterrupted run's, and client_costs.csv must count every task once.
"""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.runtime.checkpoint import CHECKPOINT_FILE, SNAPSHOT_DIR, load_checkpoint
from fedml_fes.runtime.rundir import make_run_dir

from .conftest import cli_here, small_config, write_config

CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]
TIME_COLUMNS = {"round_wall_s", "client_compute_s_max", "label_compute_s_max"}
# client_costs.csv: what a task measured on this host (time, memory peaks vary run to run)
COST_TIME_COLUMNS = {
    "compute_s",
    "cpu_s",
    "peak_train_bytes",
    "activation_peak_bytes",
    "fill_peak_bytes",
    "cuda_peak_bytes",
}

# A sitecustomize for the processes a test starts (PYTHONPATH): with FES_TEST_KILL="train:R" a
# process SIGKILLs itself in a training task of round R (its labeling phase is done), with
# "raise:R" that task raises instead; with "save:R" once round R is recorded, halfway through
# saving its checkpoint (part of the client snapshot linked, no checkpoint.pt). The product has
# no such switch.
KILLER = """
import os, signal
_where, _, _round = os.environ.get("FES_TEST_KILL", ":").partition(":")
if _where in ("train", "raise"):
    from fedml_fes.runtime import client
    _run = client.LocalTrainer.run
    def _run_or_die(self, task, data):
        if task.round_idx == int(_round) and task.kind != "label":
            if _where == "raise":
                raise RuntimeError(f"test fault on client {task.client_id}")
            os.kill(os.getpid(), signal.SIGKILL)
        return _run(self, task, data)
    client.LocalTrainer.run = _run_or_die
elif _where == "save":
    from fedml_fes.runtime import checkpoint, session
    _save = checkpoint.save_checkpoint
    def _save_or_die(run_dir, r, state):
        if r == int(_round):
            for rel, src in list(checkpoint._client_files(run_dir / "clients").items())[:3]:
                checkpoint._place(src, run_dir / checkpoint._snapshot_name(r) / rel)
            os.kill(os.getpid(), signal.SIGKILL)
        return _save(run_dir, r, state)
    session.save_checkpoint = _save_or_die
"""


@pytest.fixture
def kill_at(tmp_path):
    """env for a subprocess that SIGKILLs itself at `where:round` (see KILLER)."""
    folder = tmp_path / "killer"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(KILLER)

    def env(point: str) -> dict:
        path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path, "FES_TEST_KILL": point}

    return env


def _fes_config(tmp_path, model_dir, method, rounds, **sections):
    """A tiny job; for FeS: adaptive pacing with 2-round trials, so a kill lands mid-trial."""
    base = {
        "data_args": {"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        "tuning_args": {"full_layers": 0, "bias_layers": 1},
        "pacing_args": {"grid": ["1,3,20", "2,2,10"], "val_examples": 30, "trial_rounds": 2},
        "filter_args": {"knn": 5},
    }
    base.update(sections)
    return small_config(tmp_path, model_dir, train_args={"method": method, "comm_round": rounds}, **base)


def _rows(path: Path, drop: set[str]) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _uninterrupted(tmp_path, raw) -> Path:
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg, str(tmp_path / "whole"))
    assert run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)["status"] == "completed"
    return run_dir


def _computed_elsewhere(run_dir: Path, device: str) -> None:
    """The checkpoint says another machine computed its rounds (as one copied from it would)."""
    import torch

    state = load_checkpoint(run_dir)  # memory-mapped: written beside it, then renamed over it
    torch.save({**state, "devices": [[0, device]]}, run_dir / "edited.pt")
    os.replace(run_dir / "edited.pt", run_dir / CHECKPOINT_FILE)


def _cli(args: list[str], env: dict | None = None, timeout: float = 300):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _assert_same_run(whole: Path, resumed: Path) -> None:
    a, b = _rows(whole / "metrics.csv", TIME_COLUMNS), _rows(resumed / "metrics.csv", TIME_COLUMNS)
    assert len(a) == len(b) and a == b
    costs_a = _rows(whole / "client_costs.csv", COST_TIME_COLUMNS)
    costs_b = _rows(resumed / "client_costs.csv", COST_TIME_COLUMNS)
    assert costs_a == costs_b  # every task counted once, caches hit as in the uninterrupted run
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (whole, resumed))
    assert sb["status"] == "completed" and sb["rounds_completed"] == sa["rounds_completed"]
    assert [sb[k] for k in ("final", "best", "per_round", "test")] == [
        sa[k] for k in ("final", "best", "per_round", "test")
    ]

    def labels(d: Path) -> dict:
        return {p.relative_to(d): p.read_bytes() for p in (d / "clients").rglob("pseudo_labels*.json")}

    assert labels(whole) == labels(resumed)  # the clients' own state too


@pytest.mark.slow
def test_fes_killed_at_two_rounds_resumes_to_the_same_metrics(tmp_path, tiny_model_dir, kill_at, capsys):
    """FeS (adaptive pacing, trials, filtering, bias-only): SIGKILL in round 1's training (after
    its labeling pass, mid-trial) and again while round 3's checkpoint is saved."""
    raw = _fes_config(tmp_path, tiny_model_dir, "fes", rounds=5)
    whole = _uninterrupted(tmp_path, raw)
    cf, run_dir = write_config(tmp_path / "c.yaml", raw), tmp_path / "killed"
    common = ["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"]

    out = _cli(common, kill_at("train:1"))
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    assert load_checkpoint(run_dir)["round"] == 0 and len(_rows(run_dir / "metrics.csv", set())) == 1
    assert not (run_dir / "summary.json").exists()

    out = _cli(common + ["--resume"], kill_at("save:3"))
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    assert "resuming after round 0 of 5" in out.stdout
    assert load_checkpoint(run_dir)["round"] == 2
    assert len(_rows(run_dir / "metrics.csv", set())) == 4  # round 3 recorded, not checkpointed: redone

    out = cli_here(capsys, *common + ["--resume"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "resuming after round 2 of 5" in out.stdout and '"status": "completed"' in out.stdout
    _assert_same_run(whole, run_dir)
    events = (run_dir / "events.log").read_text()
    assert events.count("resumed from round 1") == 1 and events.count("resumed from round 3") == 1
    assert [p.name for p in (run_dir / SNAPSHOT_DIR).iterdir()] == ["round-00004"]  # older snapshots pruned

    out = cli_here(capsys, *common + ["--resume"])  # a completed run: said so, nothing changes
    assert out.returncode == 0 and "already completed all 5 rounds" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    _assert_same_run(whole, run_dir)


@pytest.mark.slow
def test_fedcls_killed_from_outside_resumes_to_the_same_metrics(tmp_path, tiny_model_dir, capsys):
    """A method without pseudo labels; SIGKILL sent by another process at whatever point the
    run has reached once metrics.csv has two rows."""
    raw = small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 5})
    whole = _uninterrupted(tmp_path, raw)
    cf, run_dir = write_config(tmp_path / "c.yaml", raw), tmp_path / "killed"
    common = ["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"]
    proc = subprocess.Popen([*CLI, *common], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    metrics = run_dir / "metrics.csv"
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 3:  # header + 2 rows
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL, "the run ended before it could be killed"
    done = load_checkpoint(run_dir)["round"]
    assert 0 <= done < 4

    # continued from the run folder's own config.yaml (every section, split_args at its defaults),
    # on "another machine": the summary names both devices and from which round each computed
    _computed_elsewhere(run_dir, "NVIDIA H200, bfloat16")
    own = ["run", "--cf", str(run_dir / "config.yaml"), "--run-dir", str(run_dir), "--no-progress"]
    out = cli_here(capsys, *own + ["--resume"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"resuming after round {done} of 5" in out.stdout
    _assert_same_run(whole, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    here = summary["device"]
    assert here.startswith("CPU, 1 thread, ") and summary["device_history"] == [
        {"from_round": 0, "device": "NVIDIA H200, bfloat16"},
        {"from_round": done + 1, "device": here},
    ]


def test_resume_refuses_what_it_cannot_continue(tmp_path, tiny_model_dir, capsys):
    """One line each, nothing written: no --run-dir, no checkpoint, another config."""
    raw = small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 2})
    cf = write_config(tmp_path / "c.yaml", raw)
    empty = tmp_path / "empty"
    empty.mkdir()

    def refused(args, match):
        out = cli_here(capsys, *["run", "--cf", str(cf), *args])
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 1 and len(lines) == 1 and match in lines[0], out.stderr
        assert lines[0].startswith("fedml-fes: error:")

    refused(["--resume"], "--resume needs --run-dir")
    refused(["--resume", "--run-dir", str(tmp_path / "nowhere")], "does not exist")
    assert not (tmp_path / "nowhere").exists()
    refused(["--resume", "--run-dir", str(empty)], "holds no checkpoint.pt")
    assert list(empty.iterdir()) == []

    run_dir = tmp_path / "run"
    out = cli_here(capsys, *["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"])
    assert out.returncode == 0, out.stderr[-2000:]
    (run_dir / "summary.json").unlink()  # as if killed after its last round's checkpoint
    before = (run_dir / "config.yaml").read_text()
    refused(
        ["--resume", "--run-dir", str(run_dir), "--set", "train_args.learning_rate=0.01"],
        "train_args.learning_rate (0.001 there, 0.01 here)",
    )
    assert (run_dir / "config.yaml").read_text() == before
    # a launcher closing a run whose server could not (killed): the checkpoint's rounds and device
    from fedml_fes.runtime.session import summary_from_checkpoint

    closed = summary_from_checkpoint(run_dir, "test_acc", "fedml_mpi", "failed", "rank 0 was killed")
    assert closed["rounds_completed"] == 2 and closed["device"].startswith("CPU, 1 thread, ")
    assert "device_history" not in closed
    (run_dir / "summary.json").unlink()
    # a key that changes no result (the log level) is no difference; a checkpoint of the last
    # round without a summary: the run is closed, no round runs again, and every round was
    # computed where the checkpoint says (copied here from another machine)
    _computed_elsewhere(run_dir, "NVIDIA H200, bfloat16")
    out = cli_here(
        capsys,
        *["run", "--cf", str(cf), "--run-dir", str(run_dir), "--resume", "--no-progress"],
        *["--set", "tracking_args.log_level=ERROR"],
    )
    assert out.returncode == 0 and '"rounds_completed": 2' in out.stdout, out.stderr[-2000:]
    assert "resuming after round 1 of 2" in out.stdout and not re.search(r"round +\d+: ", out.stdout)
    assert len(_rows(run_dir / "metrics.csv", set())) == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["device"] == "NVIDIA H200, bfloat16" and "device_history" not in summary
    # the run is complete now: a fresh run may reuse its folder
    out = cli_here(capsys, *["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"])
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_fresh_run_refuses_a_folder_holding_an_unfinished_run(tmp_path, tiny_model_dir, capsys):
    """Re-running the same command without --resume after a kill would overwrite the rounds
    done; it is one line that says how to continue or start over, and the folder is untouched."""
    raw = small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 2})
    cf = write_config(tmp_path / "c.yaml", raw)
    run_dir = tmp_path / "run"
    assert cli_here(capsys, *["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"]).returncode == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
    for command in (["run", "--no-progress"], ["mpirun", "-np", "3"]):
        out = cli_here(capsys, *[*command, "--cf", str(cf), "--run-dir", str(run_dir)])
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
        assert lines[0] == (
            f"fedml-fes: error: run directory {run_dir} holds an unfinished run (rounds 0-1 of 2 "
            f"done): pass --resume to continue it, or another --run-dir (or remove the folder) "
            f"to start over"
        )
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before


def test_a_fresh_run_removes_an_earlier_runs_checkpoint_and_client_state(tmp_path, tiny_model_dir):
    """A new run into a folder that held a run never leaves that run's checkpoint to --resume,
    nor its clients' pseudo labels to a labeling pass (which reads a client's previous labels)."""
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 1}))
    run_dir = make_run_dir(cfg, str(tmp_path / "run"))
    (run_dir / CHECKPOINT_FILE).write_text("an earlier run's")
    (run_dir / SNAPSHOT_DIR / "round-00007").mkdir(parents=True)
    stale = run_dir / "clients" / "3" / "pseudo_labels.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"example_ids": [0, 1], "labels": [1, 1], "probs": [[0, 1], [0, 1]], "passes": 7}))
    run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)  # FedCLS: no labeling pass writes labels
    assert load_checkpoint(run_dir)["round"] == 0
    assert [p.name for p in (run_dir / SNAPSHOT_DIR).iterdir()] == ["round-00000"]
    assert not stale.exists()


@pytest.mark.slow
def test_mpirun_names_a_failed_rank_and_resumes_to_the_same_metrics(tmp_path, tiny_model_dir, kill_at, capsys):
    """FedFSL (two phases per round) under `fedml-fes mpirun`: a worker rank's training task
    raises in round 1; the run fails naming the rank and the client it played (stderr and
    summary.json, with the checkpointed round), and `--resume` with another -np ends with the
    uninterrupted in-process run's metrics (the runtimes agree bit for bit)."""
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 3},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args={"label_clients": 3, "per_pass": 10},
    )
    whole = _uninterrupted(tmp_path, raw)
    cf, run_dir = write_config(tmp_path / "c.yaml", raw), tmp_path / "failed"
    common = ["mpirun", "--cf", str(cf), "--run-dir", str(run_dir)]
    out = _cli(common + ["-np", "3"], kill_at("raise:1"))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
    m = re.fullmatch(
        r"fedml-fes: error: (rank [12] \(client (\d+)\): failed in round 1 \(train phase\): "
        r"RuntimeError: test fault on client (\d+))",
        lines[0],
    )
    assert m and m.group(2) == m.group(3), lines[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["error"], summary["rounds_completed"]) == ("failed", m.group(1), 1)
    assert load_checkpoint(run_dir)["round"] == 0

    out = cli_here(capsys, *common + ["-np", "2", "--resume"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "resuming after round 0 of 3" in out.stdout
    _assert_same_run(whole, run_dir)


def test_a_checkpoint_from_before_a_config_key_existed_still_resumes():
    """A key added since the checkpoint was saved counts as its default, not as a change."""
    from fedml_fes.config import FesConfig
    from fedml_fes.runtime.checkpoint import config_differences, result_config

    current = result_config(FesConfig())
    older = {name: dict(values) for name, values in current.items() if name != "adapter_args"}
    older["tuning_args"].pop("bias_epochs")
    assert config_differences(older, current) == []
    changed = {name: dict(values) for name, values in current.items()}
    changed["adapter_args"]["width"] = 64
    assert config_differences(older, changed) == ["adapter_args.width (None there, 64 here)"]


@pytest.mark.parametrize(
    "error, free, words",
    [
        (
            RuntimeError("[enforce fail at inline_container.cc:671] . unexpected pos 44608 vs 44520"),
            10**6,
            "disk is full",
        ),
        (OSError(28, "No space left on device"), 10**10, "the disk is full (10,000 MB free)"),
        (RuntimeError("some other trouble"), 10**10, "RuntimeError: some other trouble"),
    ],
)
def test_a_checkpoint_that_cannot_be_written_is_one_line_and_keeps_the_one_before(
    tmp_path, monkeypatch, error, free, words
):
    """A full disk inside torch.save surfaces as "unexpected pos N vs M" (seen in a fidelity run
    when the disk filled up): the run's error line says what happened, the half-written file is
    gone and the previous round's checkpoint is still the one a resume reads."""
    import shutil
    from collections import namedtuple

    import torch

    from fedml_fes.errors import FesError
    from fedml_fes.runtime import checkpoint

    run_dir = tmp_path / "run"
    (run_dir / "clients" / "1").mkdir(parents=True)
    (run_dir / "clients" / "1" / "pseudo_labels.json").write_text("{}")
    checkpoint.save_checkpoint(run_dir, 0, {"num_rounds": 3})

    def failing_save(obj, f):
        f.write(b"partial")
        raise error

    monkeypatch.setattr(torch, "save", failing_save)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**12, 10**12 - free, free))
    with pytest.raises(FesError) as e:
        checkpoint.save_checkpoint(run_dir, 1, {"num_rounds": 3})
    assert str(e.value).startswith(f"cannot save round 1's checkpoint in {run_dir}: ") and words in str(e.value)
    assert str(e.value).endswith("; the previous checkpoint is kept") and "\n" not in str(e.value)
    assert [p.name for p in run_dir.glob(".checkpoint*")] == []  # no half-written file left
    monkeypatch.undo()
    assert load_checkpoint(run_dir)["round"] == 0
