"""The fedml-fes command as a user runs it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, VENV_BIN, cli_here, small_config, write_config

CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]


def fes(*args, timeout=300, **kw):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kw)


def test_the_program_answers_help():
    out = fes("--help")
    assert out.returncode == 0 and "usage: fedml-fes" in out.stdout


@pytest.mark.parametrize("sub", [["demo"], ["run"], ["mpirun"]])
def test_help_on_every_subcommand(capsys, sub):
    out = cli_here(capsys, *sub, "--help")
    assert out.returncode == 0 and "usage: fedml-fes" in out.stdout


def test_console_script_installed():
    assert (VENV_BIN / "fedml-fes").exists()


@pytest.mark.parametrize(
    "setup, match",
    [
        (lambda p: None, "config file not found"),
        (lambda p: p.write_text("train_args:\n  comm_rounds: 3\n"), "unknown config key 'comm_rounds'"),
        (lambda p: p.write_text("model_args:\n  model: /nonexistent/model\n"), "model path not found"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(tmp_path, setup, match):
    cf = tmp_path / "c.yaml"
    setup(cf)
    out = fes("run", "--cf", str(cf), cwd=tmp_path)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedml-fes: error:") and match in lines[0], out.stderr
    assert not (tmp_path / "runs").exists()  # rejected before anything was created


def test_mpirun_rejects_np_below_two(tmp_path, tiny_model_dir, capsys):
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    out = cli_here(capsys, "mpirun", "-np", "1", "--cf", str(cf))
    assert out.returncode == 1 and "-np must be at least 2" in out.stderr
    assert not (tmp_path / "runs").exists()  # nothing created for a rejected launch


def _on_a_terminal(argv: list[str], cols: int = 120, timeout_s: float = 300) -> tuple[int, str]:
    """Run `argv` with stdin/stdout/stderr on a pseudo-terminal `cols` wide (a 0-column pty
    would make tqdm draw empty bars); returns the exit code and everything it wrote."""
    import fcntl
    import select
    import struct
    import termios
    import time

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out, deadline = bytearray(), time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out.extend(chunk)
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        proc.kill()
        os.close(master)


@pytest.mark.slow
@pytest.mark.parametrize("no_progress", [True, False])
def test_progress_bar_on_a_terminal_and_none_with_no_progress(tmp_path, tiny_model_dir, no_progress):
    """On a terminal a run shows its bar; with --no-progress only plain lines, no bar of ours
    and none of transformers' ("Loading weights", "Writing model shards"). Either way it prints
    its run directory, each round and the summary, and plots its curve."""
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    code, text = _on_a_terminal(
        [*CLI, "run", "--cf", str(cf), "--set", "train_args.comm_round=2"] + (["--no-progress"] if no_progress else [])
    )
    assert code == 0 and "round   1: test_acc=" in text, text[-2000:]
    bars = [m for m in ("%|", "round/s]", "s/round]", "Loading weights", "model shards") if m in text]
    assert (bars == []) == no_progress, (bars, text[-2000:])
    assert "run directory:" in text and '"status": "completed"' in text, text[-2000:]
    run_dir = Path(text.split("run directory:")[1].split()[0])
    assert (run_dir / "accuracy.png").stat().st_size > 5_000  # every run plots its curve


@pytest.mark.slow
def test_demo_compares_fes_with_the_baselines(tmp_path):
    """The README's main job, shortened: the real SmolLM2 (prepared once in the user's cache),
    real BBC News, in-process FedML runtime, FedCLS, FedFSL and FeS on one partition. Shortened
    with the demo's own options: one round, 10 test texts instead of 200, 8 gold labels instead
    of 64, texts cut at 32 tokens instead of 64. Measured on a 2-core float32 CPU beside two
    benchmark runs: 342 s (293 s CPU) with 20 texts and 16 gold labels, 198 s (160 s CPU) so; FeS's
    pacing trials score every gold label, so its part shrank most (117 s -> 29 s)."""
    # a hang guard, not a speed target: on a busy 2-core float32 machine the demo's three
    # SmolLM2 runs took over 1,400 s with 200 test texts and 64 gold labels
    args = ("--rounds", "1", "--set", "data_args.max_test_examples=10", "--set", "data_args.gold_labels=8")
    args += ("--set", "model_args.max_seq_length=32")
    out = fes("demo", *args, "--output-dir", str(tmp_path / "runs"), timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "--- FedCLS" in text and "--- FedFSL" in text and "--- FeS" in text
    assert "note: FedCLS learns from gold labels only" in text and "puts the 8 gold labels on client" in text
    assert "(offline:smollm2-135m)" in text
    assert "FeS vs FedFSL: " in text and "x less upload" in text and "20 clients, 8 gold labels skewed" in text
    table = [line.split() for line in text.splitlines() if re.match(r"(FedCLS|FedFSL|FeS) +[\d.]+ ", line)]
    assert [row[0] for row in table] == ["FedCLS", "FedFSL", "FeS"] and all(0 <= float(r[1]) <= 1 for r in table)
    demo_dir = next((tmp_path / "runs").glob("demo-*"))
    assert (demo_dir / "demo.png").stat().st_size > 10_000 and f"plot:  {demo_dir / 'demo.png'}" in text
    rows = (demo_dir / "demo.csv").read_text().splitlines()
    assert rows[0].startswith("method,accuracy,upload_bytes,tx2_hours,pseudo_labels") and len(rows) == 5
    upload = {r.split(",")[0]: int(r.split(",")[2]) for r in rows[1:]}
    # the untrained prompt model is the table's first row: FedFSL's own start, no upload
    zero = next(line.split() for line in text.splitlines() if line.startswith("Zero-shot "))
    start = json.loads((demo_dir / "fedfsl" / "summary.json").read_text())["initial"]["test_acc"]
    assert float(zero[1]) == pytest.approx(start, abs=5e-4) and upload["Zero-shot"] == 0
    assert upload["FeS"] * 100 < upload["FedFSL"]  # bias-only updates of the top third vs the whole model
    for method in ("fedcls", "fedfsl", "fes"):
        assert (demo_dir / method / "summary.json").is_file() and (demo_dir / method / "accuracy.png").is_file()


@pytest.mark.slow  # the real LM, prepared once in the user cache
def test_demo_dry_run_writes_nothing(tmp_path, capsys):
    out = cli_here(capsys, "demo", "--dry-run", "--output-dir", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "FedCLS, FedFSL, FeS on the same partition" in out.stdout and "gold labels: 64 on" in out.stdout
    assert "Topic:" in out.stdout  # the causal form of the news pattern
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("method", ["fedcls", "fes", "fes+head"])
def test_dry_run_checks_and_describes_without_a_run_dir(tmp_path, tiny_model_dir, method, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, _, head = method.partition("+")
    tuning = {"verbalizer_head": bool(head), "bias_learning_rate": 0.01}
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": name}, tuning_args=tuning)
    out = cli_here(capsys, "run", "--cf", str(write_config(tmp_path / "c.yaml", raw)), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "gold labels: 32 on 8 client(s)" in out.stdout and f"method: {name}, 3 rounds x 3 clients" in out.stdout
    assert "bytes each way" in out.stdout and ("prompt: " in out.stdout) == (name == "fes")
    # the class head steps at train_args.learning_rate, the biases at the bias rate
    assert ("the class head at lr 0.001;" in out.stdout) == bool(head) and ("lr 0.01\n" in out.stdout) == (
        name == "fes"
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "prompt, match",
    [
        ({"pattern_id": 9}, "pattern_id 9 does not exist"),
        ({"pattern": "{mask}: {text_a}", "verbalizer": {"business": "Business"}}, "does not cover classes"),
    ],
)
def test_a_bad_prompt_fails_before_loading_or_writing(tmp_path, tiny_model_dir, prompt, match, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": "prompt_only"}, prompt_args=prompt)
    out = cli_here(capsys, "run", "--cf", str(write_config(tmp_path / "c.yaml", raw)))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1 and match in lines[0], out.stderr
    assert not (tmp_path / "runs").exists()


def test_demo_uses_the_fidelity_benchmarks_shared_settings(tmp_path):
    """The demo claims run_configs/fidelity.yaml's shared settings: every key it sets matches,
    but for its fewer rounds, its test schedule and its thread count."""
    import yaml

    from fedml_fes_plugins.cli.demo import SHARED

    fidelity = yaml.safe_load((REPO / "run_configs" / "fidelity.yaml").read_text())
    allowed = {
        "train_args.comm_round",
        "train_args.frequency_of_the_test",
        "common_args.torch_threads",
        # shrunk alike for every method, so that full fine-tuning (FedFSL) fits in the demo's time
        "train_args.client_num_per_round",
        "pseudo_args.label_clients",
        "data_args.max_test_examples",
    }
    differ = [
        f"{sec}.{k}"
        for sec, keys in SHARED.items()
        for k, v in keys.items()
        if f"{sec}.{k}" not in allowed and sec != "cost_args" and fidelity.get(sec, {}).get(k) != v
    ]
    assert differ == []
    from fedml_fes.runtime.checkpoint import is_result_key

    left_out = [  # gradient checkpointing never changes results: the demo keeps the faster steps
        f"{sec}.{k}"
        for sec, keys in fidelity.items()
        for k in keys
        if sec not in ("cost_args",) and k not in SHARED.get(sec, {}) and is_result_key(sec, k)
    ]
    assert set(left_out) <= {
        "common_args.training_type",
        "common_args.output_dir",
        "model_args.mlm_from",
        "model_args.mlm_on_job_data",
        "train_args.method",
        "data_args.data_dir",
    }
    import argparse

    from fedml_fes.config import add_set_argument
    from fedml_fes_plugins.cli.demo import add_arguments, demo_configs, write_mlm_config

    p = argparse.ArgumentParser()
    add_arguments(p)
    add_set_argument(p, "x")
    opts = p.parse_args(["--cache-dir", str(tmp_path)])
    assert demo_configs(opts)["fes"].model.model == fidelity["model_args"]["model"]  # one real LM, no MLM build
    # a masked LM without its head (the MiniLM) builds one: the recipe on the demo's own data
    minilm = p.parse_args(["--cache-dir", str(tmp_path), "--set", "model_args.model=offline:all-MiniLM-L6-v2"])
    fes = demo_configs(minilm, write_mlm_config(minilm))["fes"]
    assert fes.model.mlm_on_job_data is True and fes.model.mlm_from
