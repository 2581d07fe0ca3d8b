"""`fedml-fes bench`: presets, resumable runs, the report from run files, bad input."""

import json
import math
from pathlib import Path

import pytest
import yaml

from fedml_fes.cost.accounting import TaskRecord
from fedml_fes.cost.network import Network
from fedml_fes.cost.profiles import load_profile
from fedml_fes.errors import FesError
from fedml_fes.report.bench_analysis import BenchData
from fedml_fes.report.bench_report import ReportSpec, write_report
from fedml_fes.report.runs import RunData

from .conftest import small_config

REPO = Path(__file__).resolve().parents[1]


# ---- presets and bench configs ----------------------------------------------------------------


@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_presets_parse(preset):
    from fedml_fes_plugins.bench.config import load_bench, preset_path

    plan = load_bench(preset_path(preset), bench_overrides={"full_label": False})
    assert {"fedcls", "fedfsl", "fedfsl_bias", "fes", "fes_no_cp", "fes_no_rf", "fes_no_dc"} <= set(plan.args.methods)
    assert plan.args.targets[:2] == ["fedfsl", "fedfsl_bias"]
    for d in plan.base.cost.devices:
        load_profile(d)
    if preset == "paper":
        assert plan.base.model.model == "roberta-large" and plan.base.model.max_seq_length == 256


def _bench_yaml(tmp_path, tiny_model_dir, **bench):
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"comm_round": 2, "client_num_per_round": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "max_train_examples": 160, "max_test_examples": 40},
        pseudo_args={"label_clients": 2, "per_pass": 8},
        tuning_args={"full_layers": 0, "bias_layers": 1},
        filter_args={"knn": 3},
        pacing_args={"mode": "adaptive", "grid": ["1,2,20"], "val_examples": 20},
        cost_args={"devices": ["jetson_tx2", "rpi_4b"], "convergence_tail": 1},
    )
    raw["bench_args"] = {
        "title": "tiny",
        "methods": ["fedfsl", "fes"],
        "seeds": [0],
        "full_label": True,
        "targets": ["fedfsl"],
        "calibrate_host": False,
        **bench,
    }
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_bad_bench_configs_are_one_line_errors(tmp_path, tiny_model_dir):
    from fedml_fes_plugins.bench.config import load_bench

    with pytest.raises(
        FesError, match="unknown config key 'method' in .* section 'bench_args'; did you mean 'methods'"
    ):
        load_bench(_bench_yaml(tmp_path, tiny_model_dir, method=["fes"]))
    with pytest.raises(FesError, match="bench_args method 'fes_plus' is not a few-shot method"):
        load_bench(_bench_yaml(tmp_path, tiny_model_dir, methods=["fes_plus"]))
    with pytest.raises(FesError, match="unknown bench preset 'huge'"):
        from fedml_fes_plugins.bench.config import preset_path

        preset_path("huge")
    with pytest.raises(FesError, match="bench config not found"):
        load_bench(tmp_path / "nope.yaml")


def test_full_label_reference_labels_every_training_example(tmp_path, tiny_model_dir):
    from fedml_fes_plugins.bench.config import load_bench, run_config

    plan = load_bench(_bench_yaml(tmp_path, tiny_model_dir))
    cfg = run_config(plan, "full_label", 0)
    assert cfg.train.method == "fedcls" and cfg.data.gold_labels == 160 and cfg.data.gold_sparsity == 100
    assert run_config(plan, "fes", 0).data.gold_labels == 16


@pytest.mark.slow
def test_bench_runs_resumes_and_reports(tmp_path, tiny_model_dir):
    from fedml_fes_plugins.bench.config import load_bench
    from fedml_fes_plugins.bench.runner import build_report, run_bench

    plan = load_bench(_bench_yaml(tmp_path, tiny_model_dir))
    out = tmp_path / "bench"
    lines = []
    report = run_bench(plan, out, progress=False, echo=lines.append)
    assert any("3 to do" in line for line in lines)
    for name in ("fedfsl-s0", "fes-s0", "full_label-s0"):
        run = out / "runs" / name
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert (run / "metrics.csv").is_file() and (run / "client_costs.csv").is_file()
    text = report.read_text()
    for needle in (
        "FeS against the paper's best figures",
        "Table 4",
        "Hours to FedFSL's convergence accuracy",
        "Traffic, energy and peak memory",
        "Device profiles",
        "Model: ",
        "seeds: 0",
        "device profile: NVIDIA Jetson TX2",
    ):
        assert needle in text, needle
    # the untrained prompt model is a row of Table 4: FedFSL's own start, seed 0
    start = json.loads((out / "runs" / "fedfsl-s0" / "summary.json").read_text())["initial"]["test_acc"]
    assert f"| Zero-shot (untrained prompt model) | {100 * start:.1f} | {100 * start:.1f} |" in text
    for png in (
        "accuracy_vs_hours_jetson_tx2.png",
        "accuracy_vs_hours_rpi_4b.png",
        "traffic_energy.png",
        "bandwidth_sweep.png",
        "memory.png",
    ):
        assert (report.parent / png).stat().st_size > 1000
    for table in ("methods.csv", "time_to_accuracy.csv", "bandwidth_sweep.csv", "headline.csv"):
        assert (report.parent / table).read_text().count("\n") >= 2

    # resumable: nothing runs again; an interrupted run is set aside (not deleted) and redone
    lines.clear()
    run_bench(plan, out, progress=False, echo=lines.append)
    assert any("3 already complete, 0 to do" in line for line in lines)
    summary = out / "runs" / "fes-s0" / "summary.json"
    s = json.loads(summary.read_text())
    summary.write_text(json.dumps({**s, "status": "interrupted"}))
    lines.clear()
    run_bench(plan, out, progress=False, echo=lines.append)
    assert any("1 to do" in line for line in lines)
    assert any("previous attempt was interrupted" in line for line in lines)
    assert len(list((out / "runs" / ".partial").iterdir())) == 1
    assert json.loads(summary.read_text())["status"] == "completed"

    # another device and bandwidth re-cost the finished runs; bad ones are one line
    from fedml_fes_plugins.bench.runner import devices_for

    path = build_report(plan, out, devices_for(plan, out, ["rpi_4b"]), bandwidth=10.0, echo=lambda _l: None)
    assert "10 MB/s" in path.read_text() and "Raspberry Pi 4B" in path.read_text()
    with pytest.raises(FesError, match="unknown device profile 'pixel'"):
        devices_for(plan, out, ["pixel"])
    with pytest.raises(FesError, match="bandwidth must be > 0"):
        build_report(plan, out, devices_for(plan, out, ["rpi_4b"]), bandwidth=0.0, echo=lambda _l: None)

    # a changed run config is not silently mixed with old runs
    from fedml_fes_plugins.bench.config import load_bench as reload

    changed = reload(_bench_yaml(tmp_path, tiny_model_dir), {"train_args.learning_rate": 0.01})
    with pytest.raises(FesError, match="different config .*train_args.learning_rate"):
        run_bench(changed, out, progress=False, echo=lambda _l: None)


# ---- the report on synthetic runs: targets never reached, missing runs ----------------------


def _fake_run(tmp_path, method, accs, flops=1e12, up=1e6):
    tasks = [TaskRecord(r, "train", 0, flops, 1, up, up, 1.0, peak_train_bytes=1e8) for r in range(len(accs))]
    run_dir = tmp_path / f"{method}-s0"
    run_dir.mkdir()
    return RunData(
        run_dir.name,
        run_dir,
        "completed",
        {"train_args": {"method": method}, "common_args": {"random_seed": 0}},
        "test_acc",
        dict(enumerate(accs)),
        tasks,
        len(accs),
    )


def test_report_marks_targets_never_reached(tmp_path):
    runs = {
        ("fedfsl", 0): _fake_run(tmp_path, "fedfsl", [0.5, 0.7, 0.8, 0.8], flops=4e12, up=1e8),
        ("fedfsl_bias", 0): _fake_run(tmp_path, "fedfsl_bias", [0.4, 0.5, 0.6, 0.6]),
        ("fes", 0): _fake_run(tmp_path, "fes", [0.6, 0.8, 0.85, 0.85], flops=1e10, up=1e3),
        ("full_label", 0): _fake_run(tmp_path, "full_label", [0.9, 0.9, 0.9, 0.9]),
    }
    data = BenchData(runs, tail=2)
    spec = ReportSpec(
        "t",
        ["fedcls", "fedfsl", "fedfsl_bias", "fes"],
        ["fedfsl", "fedfsl_bias"],
        [load_profile("jetson_tx2")],
        Network(1.0, 1.0),
        [0.1, 1.0],
        {"model": "m", "seeds": [0]},
    )
    text = write_report(spec, data, tmp_path / "report").read_text()
    assert "Missing (no completed run yet): FedCLS" in text
    assert "| FedFSL-BIAS | not reached | X |" in text  # never reaches FedFSL's 80%
    fes = data.reach("fes", "fedfsl", spec.devices[0], spec.network)
    ref = data.reach("fedfsl", "fedfsl", spec.devices[0], spec.network)
    assert fes.reached == 1 and ref.hours / fes.hours > 46
    headline = {r["claim"]: r for r in __import__("csv").DictReader((tmp_path / "report" / "headline.csv").open())}
    assert headline["time to FedFSL's accuracy, FedFSL-BIAS / FeS"]["met"] == "True"  # it never gets there
    assert math.isclose(data.accuracy_stats("fes")["relative"], 0.85 / 0.9)


def test_report_without_the_target_runs_still_writes_every_figure(tmp_path):
    """A bench of only some methods (e.g. `--methods fes fes_no_cp`): no target is ever reached."""
    runs = {("fes", 0): _fake_run(tmp_path, "fes", [0.6, 0.7, 0.7, 0.7], flops=1e10, up=1e3)}
    spec = ReportSpec(
        "t",
        ["fes"],
        ["fedfsl"],
        [load_profile("jetson_tx2")],
        Network(1.0, 1.0),
        [0.1, 1.0],
        {"model": "m", "seeds": [0]},
    )
    report = write_report(spec, BenchData(runs, tail=2), tmp_path / "report")
    assert (tmp_path / "report" / "bandwidth_sweep.png").stat().st_size > 0
    assert (tmp_path / "report" / "traffic_energy.png").stat().st_size > 0
    assert "FedFSL" in report.read_text()
    from fedml_fes.report.bench_plots import accuracy_vs_hours  # no positive time at all: no log-axis failure

    assert accuracy_vs_hours({"fes": ([0.0], [0.5])}, {"fes": "FeS"}, {}, "t", tmp_path / "a.png").stat().st_size > 0


def test_cli_bench_errors_are_one_line(tmp_path, capsys):
    from fedml_fes_plugins.cli.main import main

    assert main(["bench", "--preset", "smoke", "--report-only", "--out", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedml-fes: error: no completed run") and "\n" not in err
    assert main(["bench", "--preset", "smoke", "--report-only", "--device", "pixel", "--out", str(tmp_path)]) == 1
    assert "unknown device profile 'pixel'" in capsys.readouterr().err
    assert main(["bench", "--preset", "smoke", "--bandwidth", "0", "--out", str(tmp_path)]) == 1
    assert "--bandwidth must be > 0 MB/s" in capsys.readouterr().err
    assert main(["bench", "--preset", "smoke", "--methods", "fes_plus", "--out", str(tmp_path)]) == 1
    assert "'fes_plus' is not a few-shot method" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, capsys):
    """`fedml-fes bench --preset smoke` on the real MiniLM: this host calibrated on the model, the
    target (FedFSL) and FeS trained, the report written. Its other methods run on the tiny model
    in tests/test_fes.py and tests/test_pseudo.py; every run of the full preset
    is checked by test_bench_dry_run_checks_every_run_and_writes_nothing."""
    from fedml_fes_plugins.cli.main import main

    assert (
        main(
            [
                "bench",
                "--preset",
                "smoke",
                "--out",
                str(tmp_path / "smoke"),
                "--no-progress",
                "--methods",
                "fedfsl",
                "fes",
                "--no-full-label",
                "--set",
                "train_args.comm_round=2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "FeS against the paper's best figures" in out and "full report:" in out
    assert (tmp_path / "smoke" / "report" / "compute_model.png").is_file()


def test_resume_check_ignores_keys_added_since_a_run_at_their_default(tmp_path):
    import yaml

    from fedml_fes.config import FesConfig
    from fedml_fes_plugins.bench.runner import _config_changes

    saved = FesConfig().to_dict()
    del saved["mlm_args"]["mask_probability"]  # as if the key did not exist when the run was made
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert _config_changes(tmp_path, FesConfig()) == []
    changed = FesConfig()
    changed.mlm_args.mask_probability = 0.3
    changed.train_args.comm_round = 99
    assert _config_changes(tmp_path, changed) == ["train_args.comm_round", "mlm_args.mask_probability"]


def test_keys_that_never_change_results_keep_finished_and_checkpointed_runs(tmp_path):
    """train_args.gradient_checkpointing changes what a step holds, not the weights: a finished
    run is not redone, a stopped one resumes, and the fidelity report still sees one config."""
    import yaml

    from fedml_fes.config import FesConfig
    from fedml_fes.runtime.checkpoint import config_differences, result_config
    from fedml_fes_plugins.bench.fidelity_checks import shared_config_check
    from fedml_fes_plugins.bench.runner import _config_changes

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(FesConfig().to_dict()))
    on = FesConfig()
    on.train_args.gradient_checkpointing = True
    assert _config_changes(tmp_path, on) == []
    assert config_differences(result_config(FesConfig()), result_config(on)) == []
    rows = [{"_config": FesConfig().to_dict()}, {"_config": on.to_dict()}]
    assert shared_config_check(rows) == []
    on.train_args.fused_optimizer = True  # the same update computed differently: a result key
    assert _config_changes(tmp_path, on) == ["train_args.fused_optimizer"]


def test_resume_check_ignores_sections_the_method_never_reads(tmp_path):
    """A full-tuning method never reads tuning_args: changing the bias-only lr keeps its
    finished runs; FeS (layer plan) and FedFSL-BIAS (biases only) read it."""
    import yaml

    from fedml_fes.config import FesConfig
    from fedml_fes_plugins.bench.runner import _config_changes

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(FesConfig().to_dict()))
    for method, changed in (
        ("fedfsl", []),
        ("fedcls", []),
        ("fes", ["tuning_args.bias_learning_rate"]),
        ("fedfsl_bias", ["tuning_args.bias_learning_rate"]),
    ):
        cfg = FesConfig()
        cfg.tuning_args.bias_learning_rate = 0.01
        cfg.train_args.method = method
        assert _config_changes(tmp_path, cfg) == ["train_args.method"] * (method != "fedcls") + changed, method
    for method, changed in (("fedcls", []), ("prompt_only", []), ("fedfsl", ["pseudo_args.soft_labels"])):
        cfg = FesConfig()  # pseudo labels' settings: only the methods that pseudo-label read them
        cfg.pseudo.soft_labels = not cfg.pseudo.soft_labels
        cfg.train_args.method = method
        assert _config_changes(tmp_path, cfg) == ["train_args.method"] * (method != "fedcls") + changed, method


def test_fes_evidence_and_the_bench_report_judge_against_one_set_of_paper_bars():
    import importlib
    import sys
    from pathlib import Path

    from fedml_fes.report import bench_report
    from fedml_fes.report.paper_bars import PAPER_BARS

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        evidence = importlib.import_module("fes_evidence")
    finally:
        sys.path.pop(0)
    assert bench_report.PAPER_TARGETS is PAPER_BARS
    r = {
        "fedfsl": {"upload": 3000.0, "peak_mem": 4.5, "convergence": 0.8, "inferred": 100},
        "fes": {"upload": 1.0, "peak_mem": 1.0, "convergence": 0.8, "inferred": 5},
        "fes_no_rf": {"upload": 1.0, "peak_mem": 1.0, "convergence": 0.8, "inferred": 100},
    }
    rows = {name: (target, ok) for name, target, _value, ok in evidence.bars(r)}
    assert rows["traffic per client and round, FedFSL / FeS"] == (">= 3000x", True)
    assert rows["peak training memory, FedFSL / FeS"] == (">= 4.5x", True)
    assert rows["unlabeled data skipped by filtering (vs FeS without it)"] == (">= 95%", True)


@pytest.mark.slow
def test_bench_dry_run_checks_every_run_and_writes_nothing(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedml_fes_plugins.cli.main",
            "bench",
            "--preset",
            "smoke",
            "--out",
            str(tmp_path / "b"),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("dry run: every run checked") and any(" fes s0: fes, " in x for x in lines)
    assert not (tmp_path / "b").exists()
