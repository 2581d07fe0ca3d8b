"""The fedml-fes command as a user runs it."""
import subprocess
import sys

import pytest

from .conftest import VENV_BIN, small_config, write_config

CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]


def fes(*args, timeout=300, **kw):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.mark.parametrize("sub", [[], ["demo"], ["run"], ["mpirun"]])
def test_help_on_every_subcommand(sub):
    out = fes(*sub, "--help")
    assert out.returncode == 0 and "usage: fedml-fes" in out.stdout


def test_console_script_installed():
    assert (VENV_BIN / "fedml-fes").exists()


@pytest.mark.parametrize("setup, match", [
    (lambda p: None, "config file not found"),
    (lambda p: p.write_text("train_args:\n  comm_rounds: 3\n"), "unknown config key 'comm_rounds'"),
    (lambda p: p.write_text("model_args:\n  model: /nonexistent/model\n"), "model path not found"),
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, setup, match):
    cf = tmp_path / "c.yaml"
    setup(cf)
    out = fes("run", "--cf", str(cf), cwd=tmp_path)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedml-fes: error:") and match in lines[0], out.stderr
    assert not (tmp_path / "runs").exists()  # rejected before anything was created


def test_mpirun_rejects_np_below_two(tmp_path, tiny_model_dir):
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    out = fes("mpirun", "-np", "1", "--cf", str(cf))
    assert out.returncode == 1 and "-np must be at least 2" in out.stderr
    assert not (tmp_path / "runs").exists()  # nothing created for a rejected launch


def test_run_prints_rounds_and_run_dir(tmp_path, tiny_model_dir):
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    out = fes("run", "--cf", str(cf), "--set", "train_args.comm_round=2")
    assert out.returncode == 0, out.stderr
    assert "run directory:" in out.stdout and "round   1: test_acc=" in out.stdout
    assert '"status": "completed"' in out.stdout


@pytest.mark.slow
def test_demo_runs_on_the_offline_model(tmp_path):
    """The README's main job, shortened: real MiniLM, real BBC News, in-process FedML runtime."""
    out = fes("demo", "--rounds", "2", "--output-dir", str(tmp_path / "runs"), timeout=900)
    assert out.returncode == 0, out.stderr
    assert "round   0: test_acc=" in out.stdout and "round   1: test_acc=" in out.stdout
    assert '"status": "completed"' in out.stdout


@pytest.mark.parametrize("method", ["fedcls", "fes"])
def test_dry_run_checks_and_describes_without_a_run_dir(tmp_path, tiny_model_dir, method):
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir, train_args={"method": method}))
    out = fes("run", "--cf", str(cf), "--dry-run", cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "gold labels: 32 on 8 client(s)" in out.stdout and f"method: {method}, 3 rounds x 3 clients" in out.stdout
    assert "bytes each way" in out.stdout and ("prompt: " in out.stdout) == (method == "fes")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("prompt, match", [
    ({"pattern_id": 9}, "pattern_id 9 does not exist"),
    ({"pattern": "{mask}: {text_a}", "verbalizer": {"business": "Business"}}, "does not cover classes"),
])
def test_a_bad_prompt_fails_before_loading_or_writing(tmp_path, tiny_model_dir, prompt, match):
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": "prompt_only"}, prompt_args=prompt)
    out = fes("run", "--cf", str(write_config(tmp_path / "c.yaml", raw)), cwd=tmp_path, timeout=120)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1 and match in lines[0], out.stderr
    assert not (tmp_path / "runs").exists()
