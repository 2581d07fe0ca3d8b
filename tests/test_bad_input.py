"""Bad input is one line before anything is written.

Every case runs `fedml-fes run` in a subprocess, as a user would, and asserts: exit code 1,
exactly one stderr line starting with `fedml-fes: error:` that holds the expected fragment,
no traceback, and nothing created or changed on disk (no run directory). The cases fail
before a model is loaded: config typing and validation, where the run would write, and the
model's config.json (max_seq_length).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from .conftest import LOCK_HOLDER, hold_lock, small_config, write_config

CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def fes(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every path below `root` with its size and mtime: a bad run must change none."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p)] = (st.st_size if not stat.S_ISDIR(st.st_mode) else 0, st.st_mtime)
    return out


# ---- how each case makes its input -------------------------------------------------------
# A maker gets (tmp_path, model_dir) and returns the CLI arguments after `run`.

Maker = Callable[[Path, str], list]


def keys(**sections) -> Maker:
    """small_config with these section values replaced (values as YAML would give them)."""

    def make(tmp: Path, model: str) -> list:
        return ["--cf", str(write_config(tmp / "c.yaml", small_config(tmp, model, **sections)))]

    return make


def text(body: str) -> Maker:
    def make(tmp: Path, model: str) -> list:
        (tmp / "c.yaml").write_text(body)
        return ["--cf", str(tmp / "c.yaml")]

    return make


def output_dir(where: Callable[[Path], str]) -> Maker:
    def make(tmp: Path, model: str) -> list:
        return keys(common_args={"output_dir": where(tmp), "torch_threads": 1})(tmp, model)

    return make


def run_dir(where: Callable[[Path], str]) -> Maker:
    def make(tmp: Path, model: str) -> list:
        return keys()(tmp, model) + ["--run-dir", where(tmp)]

    return make


def a_file(tmp: Path) -> Path:
    f = tmp / "a_file"
    f.write_text("not a folder\n")
    return f


def read_only(tmp: Path) -> Path:
    d = tmp / "read_only"
    d.mkdir(exist_ok=True)
    d.chmod(0o555)
    return d


def csv_with_unterminated_quote(tmp: Path, model: str) -> list:
    (tmp / "data.csv").write_text('text,label\n"fine row",a\n"never closed,b\nx,a\n')
    return keys(
        data_args={
            "dataset": "custom",
            "train_file": str(tmp / "data.csv"),
            "text_columns": ["text"],
            "label_column": "label",
            "client_num_in_total": 2,
            "gold_labels": 2,
            "max_train_examples": 0,
        },
        train_args={"client_num_per_round": 2},
    )(tmp, model)


NOT_ROOT = pytest.mark.skipif(IS_ROOT, reason="root writes into read-only folders")
HAS_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")

CASES = [
    # the findings of a review of bad input
    ("empty YAML", text(""), "c.yaml is empty"),
    ("comments-only YAML", text("# nothing here\n"), "c.yaml is empty"),
    ("section not a mapping", text("common_args: 5\n"), "config section 'common_args'"),
    ("top level a list", text("- common_args\n"), "expected a mapping of sections"),
    ("output_dir under a regular file", output_dir(lambda t: str(a_file(t) / "runs")), "common_args.output_dir"),
    ("output_dir is a regular file", output_dir(lambda t: str(a_file(t))), "is a file, not a folder"),
    pytest.param(
        "output_dir in a read-only folder",
        output_dir(lambda t: str(read_only(t) / "runs")),
        "is not writable",
        marks=NOT_ROOT,
    ),
    ("--run-dir under a regular file", run_dir(lambda t: str(a_file(t) / "run")), "--run-dir"),
    ("--run-dir is a regular file", run_dir(lambda t: str(a_file(t))), "is a file, not a folder"),
    pytest.param(
        "--run-dir in a read-only folder",
        run_dir(lambda t: str(read_only(t) / "run")),
        "is not writable",
        marks=NOT_ROOT,
    ),
    pytest.param(
        "--run-dir where the kernel refuses folders",
        run_dir(lambda t: "/proc/self/fes-run"),
        "/proc/self/fes-run",
        marks=HAS_PROC,
    ),
    ("CSV with an unterminated quote", csv_with_unterminated_quote, "data.csv line 3: unterminated quote"),
    (
        "more clients per round than clients",
        keys(train_args={"client_num_per_round": 50}),
        "train_args.client_num_per_round is 50, more than the 8 clients",
    ),
    (
        "max_seq_length over the model's positions",
        keys(model_args={"max_seq_length": 100000}),
        "model_args.max_seq_length is 100000, more than the 128 positions",
    ),
    (
        "learning_rate .inf",
        keys(train_args={"learning_rate": float("inf")}),
        "'train_args.learning_rate' must be a finite number, got inf",
    ),
    # range and type sweep
    ("learning_rate .nan", keys(train_args={"learning_rate": float("nan")}), "train_args.learning_rate"),
    ("learning_rate 0", keys(train_args={"learning_rate": 0}), "train_args.learning_rate must be > 0, got 0.0"),
    ("learning_rate negative", keys(train_args={"learning_rate": -0.001}), "got -0.001"),
    (
        "learning_rate a list",
        keys(train_args={"learning_rate": [0.1, 0.2]}),
        "'train_args.learning_rate' must be a number, got [0.1, 0.2]",
    ),
    ("learning_rate a word", keys(train_args={"learning_rate": "fast"}), "must be a number, got 'fast'"),
    ("comm_round negative", keys(train_args={"comm_round": -3}), "train_args.comm_round must be >= 1, got -3"),
    ("comm_round 2.5", keys(train_args={"comm_round": 2.5}), "'train_args.comm_round' must be an integer, got 2.5"),
    ("comm_round a list", keys(train_args={"comm_round": [3]}), "must be an integer, got [3]"),
    ("epochs 0", keys(train_args={"epochs": 0}), "train_args.epochs must be >= 1, got 0"),
    ("batch_size 0", keys(train_args={"batch_size": 0}), "train_args.batch_size must be >= 1, got 0"),
    ("eval_batch_size 0", keys(train_args={"eval_batch_size": 0}), "train_args.eval_batch_size must be >= 1"),
    ("client_num_per_round 0", keys(train_args={"client_num_per_round": 0}), "client_num_per_round must be >= 1"),
    ("weight_decay negative", keys(train_args={"weight_decay": -0.1}), "train_args.weight_decay must be >= 0"),
    ("frequency_of_the_test 0", keys(train_args={"frequency_of_the_test": 0}), "frequency_of_the_test must be >= 1"),
    (
        "robust_norm_factor 0.5",
        keys(train_args={"robust_norm_factor": 0.5}),
        "train_args.robust_norm_factor must be 0 (off) or >= 1",
    ),
    (
        "robust_norm_factor .inf",
        keys(train_args={"robust_norm_factor": float("inf")}),
        "'train_args.robust_norm_factor' must be a finite number",
    ),
    ("client_num_in_total 0", keys(data_args={"client_num_in_total": 0}), "client_num_in_total must be >= 1, got 0"),
    ("random_seed negative", keys(common_args={"random_seed": -1}), "common_args.random_seed must be >= 0, got -1"),
    ("torch_threads negative", keys(common_args={"torch_threads": -2}), "common_args.torch_threads must be >= 0"),
    ("test_fraction 1.5", keys(data_args={"test_fraction": 1.5}), "data_args.test_fraction must be in (0, 1), got 1.5"),
    (
        "partition_alpha .nan",
        keys(data_args={"partition_alpha": float("nan")}),
        "'data_args.partition_alpha' must be a finite number",
    ),
    ("gold_sparsity 0", keys(data_args={"gold_sparsity": 0}), "data_args.gold_sparsity must be > 0"),
    ("gold_labels negative", keys(data_args={"gold_labels": -5}), "data_args.gold_labels must be >= 0, got -5"),
    ("gold_clients over the clients", keys(data_args={"gold_clients": 99}), "data_args.gold_clients must be between"),
    (
        "max_train_examples negative",
        keys(data_args={"max_train_examples": -1}),
        "data_args.max_train_examples must be >= 0",
    ),
    ("max_seq_length 4", keys(model_args={"max_seq_length": 4}), "model_args.max_seq_length must be >= 8, got 4"),
    ("mask_probability 0", keys(mlm_args={"mask_probability": 0}), "mlm_args.mask_probability must be in (0, 1)"),
    ("warmup_fraction 1", keys(mlm_args={"warmup_fraction": 1.0}), "mlm_args.warmup_fraction must be in [0, 1)"),
    ("mlm dropout 1.5", keys(mlm_args={"dropout": 1.5}), "mlm_args.dropout must be in [0, 1) or -1"),
    ("mlm lr_schedule unknown", keys(mlm_args={"lr_schedule": "steep"}), "mlm_args.lr_schedule must be one of"),
    (
        "confidence_threshold 1",
        keys(pseudo_args={"confidence_threshold": 1.0}),
        "pseudo_args.confidence_threshold must be in [0, 1), got 1.0",
    ),
    ("label_every 0", keys(pseudo_args={"label_every": 0}), "pseudo_args.label_every must be >= 1, got 0"),
    ("sample_weight 0", keys(pseudo_args={"sample_weight": 0}), "pseudo_args.sample_weight must be > 0, got 0"),
    (
        "candidate_fraction negative",
        keys(filter_args={"candidate_fraction": -0.1}),
        "filter_args.candidate_fraction must be in [0, 1]",
    ),
    ("knn 0", keys(filter_args={"knn": 0}), "filter_args.knn must be >= 1, got 0"),
    (
        "knn_pool_share 0",
        keys(filter_args={"knn_pool_share": 0}),
        "filter_args.knn_pool_share must be in (0, 1], got 0",
    ),
    ("pacing k 150", keys(pacing_args={"k": 150}), "k in (0, 100], got f 1, n 5, k 150.0"),
    ("pacing eta 0", keys(pacing_args={"eta": 0}), "pacing_args.eta must be > 0"),
    ("pacing val_examples negative", keys(pacing_args={"val_examples": -1}), "pacing_args.val_examples must be >= 0"),
    ("pacing val_holdout 1", keys(pacing_args={"val_holdout": 1}), "pacing_args.val_holdout must be in [0, 1), got 1"),
    (
        "pacing trial_baseline",
        keys(pacing_args={"trial_baseline": "test"}),
        "pacing_args.trial_baseline must be previous_model or round_model, got 'test'",
    ),
    ("round_timeout_s 0", keys(comm_args={"round_timeout_s": 0}), "comm_args.round_timeout_s must be > 0"),
    (
        "worker_timeout_s .inf",
        keys(comm_args={"worker_timeout_s": float("inf")}),
        "'comm_args.worker_timeout_s' must be a finite number",
    ),
    (
        "bandwidth_sweep with .inf",
        keys(cost_args={"bandwidth_sweep": [1.0, float("inf")]}),
        "cost_args.bandwidth_sweep entries must be > 0 MB/s and finite, got inf",
    ),
    ("gpu_id negative", keys(device_args={"gpu_id": -1}), "device_args.gpu_id must be >= 0"),
    ("using_gpu a word", keys(device_args={"using_gpu": "please"}), "'device_args.using_gpu' must be true or false"),
    ("log_level unknown", keys(tracking_args={"log_level": "LOUD"}), "tracking_args.log_level must be one of"),
    ("classes a number", keys(data_args={"classes": 5}), "data_args.classes must be a list of names"),
    ("verbalizer a list", keys(prompt_args={"verbalizer": ["a", "b"]}), "'prompt_args.verbalizer' must be a mapping"),
]


def _id(case) -> str:
    values = case.values if hasattr(case, "values") else case
    return values[0].replace(" ", "_")


@pytest.mark.parametrize("name, make, fragment", CASES, ids=[_id(c) for c in CASES])
def test_bad_input_is_one_line_exit_1_and_writes_nothing(tmp_path, tiny_model_dir, name, make, fragment):
    work = tmp_path / "work"
    work.mkdir()
    args = make(work, tiny_model_dir)
    before = _tree(tmp_path)
    try:
        out = fes("run", *args, cwd=work)
    finally:
        for p in work.rglob("read_only"):
            p.chmod(0o755)  # let pytest clean up
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1, out.stdout + out.stderr
    assert len(lines) == 1 and lines[0].startswith("fedml-fes: error:"), out.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in out.stderr + out.stdout
    assert _tree(tmp_path) == before  # no run directory, no cache, nothing touched
    assert not (work / "runs").exists()


@pytest.mark.parametrize(
    "make, fragment",
    [
        (text("train_args:\n  epochs: 0\n"), "train_args.epochs must be >= 1"),
        (csv_with_unterminated_quote, "data.csv line 3: unterminated quote"),
        (keys(model_args={"model": "./no/such/model"}), "model path not found"),
        (keys(model_args={"max_seq_length": 100000}), "model_args.max_seq_length is 100000, more than the 128"),
    ],
    ids=["config", "data", "model path", "max_seq_length"],
)
def test_bad_input_is_refused_before_torch_is_imported(tmp_path, tiny_model_dir, make, fragment):
    """A config, data or model-path error costs the user a fraction of a second: the command line,
    its parser (every subcommand's options, the fidelity suite's too), the config checks, the
    model's files and the data are read without torch or transformers (importing them took 3-10 s
    of every such case when the parser or the preview imported the runtime)."""
    args = make(tmp_path, tiny_model_dir)
    probe = (
        "import sys\n"
        "from fedml_fes_plugins.cli.main import main\n"
        "try:\n"
        f"    code = main(['run', *{args!r}])\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "print('exit', code)\n"
        "print('heavy', sorted(m for m in ('torch', 'transformers', 'fedml') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert fragment in out.stderr, out.stderr
    assert out.stdout.split("\n")[:2] == ["exit 1", "heavy []"], out.stdout


def test_at_least_30_cases():
    assert len(CASES) >= 30


# ---- one live run per run directory --------------------------------------------------------


def _hold_lock(run_dir: Path) -> subprocess.Popen:
    """A process holding `run_dir`'s lock as a live run's server does."""
    return hold_lock(run_dir)


def test_second_run_into_a_live_runs_dir_is_refused_and_a_dead_ones_lock_does_not_block(tmp_path, tiny_model_dir):
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    run = tmp_path / "shared-run"
    run.mkdir()
    (run / "metrics.csv").write_text("round,test_acc\n0,0.5\n")  # the live run's rows so far
    holder = _hold_lock(run)
    try:
        before = _tree(tmp_path)
        for extra in ([], ["--dry-run"]):
            out = fes("run", "--cf", str(cf), "--run-dir", str(run), *extra, cwd=tmp_path)
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 1 and len(lines) == 1, out.stderr
            assert lines[0].startswith(
                f"fedml-fes: error: run directory {run} is in use by another live run (pid {holder.pid} on "
            )
            assert "Traceback" not in out.stderr
        assert _tree(tmp_path) == before  # its metrics.csv and everything else untouched
    finally:
        holder.kill()
        holder.wait()
    # the holder is dead: its .lock file is still there, and blocks nothing
    assert (run / ".lock").is_file()
    from fedml_fes.runtime.rundir import check_not_locked, lock_run_dir, release_run_dir

    check_not_locked(run)
    lock_run_dir(run)
    try:
        assert f"pid {os.getpid()} " in (run / ".lock").read_text()
    finally:
        release_run_dir(run)


def test_a_run_holds_its_lock_while_live(tmp_path, tiny_model_dir):
    """make_run_dir(lock=True), as `fedml-fes run` calls it: a second lock in another process fails."""
    from fedml_fes.config import config_from_dict
    from fedml_fes.runtime.rundir import make_run_dir, release_run_dir

    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir))
    run = make_run_dir(cfg, str(tmp_path / "r"), lock=True)
    try:
        probe = subprocess.run(
            [sys.executable, "-c", LOCK_HOLDER, str(run)], capture_output=True, text=True, timeout=120
        )
        assert probe.returncode == 1 and "is in use by another live run" in probe.stderr
        assert make_run_dir(cfg, str(run), lock=True) == run  # the same process again: fine
    finally:
        release_run_dir(run)
    holder = _hold_lock(run)  # released: another process may take it now
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("flag", ["--run-dir", "common_args.output_dir"])
def test_read_only_folder_is_one_line_even_as_root(tmp_path, tiny_model_dir, monkeypatch, capsys, flag):
    """The read-only cases above need a non-root user; here the folder's permission check
    answers 'no' as it would for one (the same CLI code path, in-process)."""
    from fedml_fes.runtime import rundir
    from fedml_fes_plugins.cli.main import main

    ro = tmp_path / "read_only"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        rundir.os, "access", lambda p, mode, **kw: False if Path(p) == ro else real_access(p, mode, **kw)
    )
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    args = ["--run-dir", str(ro / "run")] if flag == "--run-dir" else ["--set", f"common_args.output_dir={ro / 'runs'}"]
    before = _tree(tmp_path)
    assert main(["run", "--cf", str(cf), *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"fedml-fes: error: {flag} {ro / ('run' if flag == '--run-dir' else 'runs')} cannot be created: "
        f"{ro} is not writable"
    ]
    assert _tree(tmp_path) == before


def test_the_fault_table_in_the_docs_names_every_case_and_only_tests_that_exist():
    """docs/FAULTS.md lists every bad-input case here, and every test it names exists."""
    import re

    repo = Path(__file__).resolve().parents[1]
    doc = (repo / "docs" / "FAULTS.md").read_text()
    for case in CASES:
        name = (case.values if hasattr(case, "values") else case)[0]
        assert f"| {name}" in doc, name
    named = set(re.findall(r"`(test_\w+)`", doc))
    defined = {
        m for f in (repo / "tests").glob("test_*.py") for m in re.findall(r"^def (test_\w+)", f.read_text(), re.M)
    }
    assert named and named <= defined, sorted(named - defined)


def test_a_process_main_ends_in_one_error_line_and_its_exit_status():
    """The cross-silo and cross-device process mains share `exit_status`: a FesError or an
    unexpected exception is one `error:` line and status 1, Ctrl-C is 130, and a main that
    does not name itself lets the unexpected exception through (its caller made it a FesError)."""
    from fedml_fes.errors import FesError, exit_status

    def fail(e: BaseException) -> Callable[[], int]:
        def run() -> int:
            raise e

        return run

    lines: list[str] = []
    assert exit_status(lambda: 0, lines.append) == 0 and lines == []
    assert exit_status(fail(FesError("bad  key\nhere")), lines.append) == 1
    assert exit_status(fail(KeyboardInterrupt()), lines.append) == 130
    assert exit_status(fail(ValueError("boom\ntwo")), lines.append, unexpected="device") == 1
    assert lines == ["error: bad key here", "error: interrupted", "error: device: ValueError: boom two"]
    with pytest.raises(ValueError):
        exit_status(fail(ValueError("x")), lines.append)
