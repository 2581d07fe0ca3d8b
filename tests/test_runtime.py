"""In-process runtime driving FedML's trainer/aggregator plugins on a tiny model."""

import csv
import json

import pytest
import torch

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.report.metrics import RunRecorder
from fedml_fes.runtime.aggregator import FedAvgCore
from fedml_fes.runtime.job import build_job
from fedml_fes.runtime.rundir import make_run_dir
from fedml_fes.runtime.server import RoundServer
from fedml_fes.runtime.tasks import ClientUpdate

from .conftest import small_config


def _run(cfg):
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    run_dir = make_run_dir(cfg)
    return run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None), run_dir


def test_fedcls_in_process_writes_metrics_and_home_stays_clean(tmp_path, tiny_model_dir, clean_home):
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir))
    summary, run_dir = _run(cfg)
    assert summary["status"] == "completed" and summary["rounds_completed"] == 3
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(r["round"]) for r in rows] == [0, 1, 2]
    assert all(0.0 <= float(r["test_acc"]) <= 1.0 for r in rows)
    assert int(rows[0]["bytes_up"]) > 0
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["per_round"] == summary["per_round"]
    # the last test evaluation, class by class: a one-class model shows in the run's files
    test = saved["test"]
    n = len(test["classes"])
    assert len(test["confusion"]) == n and all(len(row) == n for row in test["confusion"])
    total = sum(map(sum, test["confusion"]))
    assert sum(test["confusion"][c][c] for c in range(n)) / total == pytest.approx(float(rows[-1]["test_acc"]))
    assert test["majority_rate"] == max(map(sum, test["confusion"])) / total
    assert "confusion" not in rows[-1] and "per_class_acc" not in rows[-1]
    # the untrained model's, the same way: which classes training moved
    start = saved["initial_test"]
    assert start["classes"] == test["classes"] and sum(map(sum, start["confusion"])) == total
    assert sum(start["confusion"][c][c] for c in range(n)) / total == pytest.approx(saved["initial"]["test_acc"])
    assert list(clean_home.iterdir()) == []  # fedml.init wrote nothing outside the run dir
    assert (run_dir / "fedml_home").is_dir()


def test_same_seed_same_accuracies(tmp_path, tiny_model_dir):
    a, _ = _run(config_from_dict(small_config(tmp_path / "a", tiny_model_dir)))
    b, _ = _run(config_from_dict(small_config(tmp_path / "b", tiny_model_dir)))
    assert a["per_round"] == b["per_round"]


def test_failed_round_keeps_finished_rows(tmp_path, tiny_model_dir, faults):
    faults(raise_in_round=1)
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir))
    with pytest.raises(FesError, match="injected fault in round 1"):
        _run(cfg)
    run_dir = next((tmp_path / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1
    assert "injected fault" in summary["error"]


def test_invalid_updates_are_rejected_not_averaged(tmp_path, tiny_model_dir):
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir))
    run_dir = make_run_dir(cfg)
    job = build_job(cfg, "both", run_dir)
    server = RoundServer(job, FedAvgCore(job), RunRecorder(run_dir, "test_acc"))
    good = server.global_params()
    bad = {k: v.clone() for k, v in good.items()}
    first = next(iter(bad))
    bad[first][...] = float("nan")
    from collections import OrderedDict

    before = good[first].clone()
    row = server.finish_round(0, [ClientUpdate(0, 1, good, 2.0), ClientUpdate(0, 2, OrderedDict(bad), 5.0)])
    assert row["updates_accepted"] == 1 and row["clients"] == [1]
    assert torch.equal(server.global_params()[first], before)
    assert "non-finite" in (run_dir / "events.log").read_text()


def test_round_server_rejects_a_huge_update_names_the_client_and_keeps_the_model_if_all_fail(tmp_path, tiny_model_dir):
    from collections import OrderedDict

    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir))
    run_dir = make_run_dir(cfg)
    job = build_job(cfg, "both", run_dir)
    server = RoundServer(job, FedAvgCore(job), RunRecorder(run_dir, "test_acc"))
    glob = server.global_params()

    def nudged(seed, scale=1e-3):
        g = torch.Generator().manual_seed(seed)
        return OrderedDict((k, v + scale * torch.randn(v.shape, generator=g)) for k, v in glob.items())

    huge = OrderedDict((k, torch.full_like(v, 1e30)) for k, v in glob.items())  # finite, far out of line
    row = server.finish_round(
        0,
        [
            ClientUpdate(0, 1, nudged(1), 2.0),
            ClientUpdate(0, 4, huge, 9.0),
            ClientUpdate(0, 5, nudged(5), 1.0),
            ClientUpdate(0, 6, nudged(6), 1.0),
        ],
    )
    assert row["clients"] == [1, 5, 6] and row["updates_accepted"] == 3
    events = (run_dir / "events.log").read_text()
    assert "round 0: rejected update from client 4 is out of" in events
    from fedml_fes.report.client_costs import read_client_costs

    flags = {r["client_id"]: r["accepted"] for r in read_client_costs(run_dir)}
    assert flags["4"] == "0" and flags["1"] == "1"  # its cost still counts, flagged rejected
    assert max(float(v.abs().max()) for v in server.global_params().values()) < 1e3
    before = server.global_params()
    with pytest.raises(FesError, match="round 1: no valid client update to aggregate"):
        server.finish_round(1, [ClientUpdate(1, 2, huge, 1.0)])
    assert all(torch.equal(before[k], v) for k, v in server.global_params().items())
    assert "round 1: rejected update from client 2 is out of bounds" in (run_dir / "events.log").read_text()


@pytest.mark.slow
def test_fedbert_mlm_builds_cache_and_second_run_reuses_it(tmp_path, tiny_model_dir):
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedbert_mlm", "comm_round": 2, "batch_size": 8, "learning_rate": 0.005},
        mlm_args={"local_steps": 3, "heldout_texts": 50},
    )
    first, _ = _run(config_from_dict(raw))
    assert first["status"] == "completed" and first["final"] is not None
    assert (tmp_path / "runs" / "cache" / "mlm").is_dir()
    second, _ = _run(config_from_dict(raw))
    assert second["status"] == "cached" and second["path"] == first["mlm_path"]
    from fedml_fes.models import build_masked_lm

    build_masked_lm(first["mlm_path"], 0)  # the cached build loads as a model path


def test_a_run_that_ends_below_its_start_says_so_once_and_records_it(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """A model that training made worse than the one it started from: summary.json records
    `below_start` and the warning, and `fedml-fes run` prints that warning as one line at the end.
    (Scores are scripted: 0.9 before round 0, 0.4 after, as skewed gold labels did on real data.)"""
    from fedml_fes.runtime import methods
    from fedml_fes.runtime.session import below_start_warning
    from fedml_fes_plugins.cli.main import main

    from .conftest import write_config

    real = methods.FewShot.evaluate
    calls = []

    def scripted(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        calls.append(1)
        return {**out, "test_acc": 0.9 if len(calls) == 1 else 0.4}

    monkeypatch.setattr(methods.FewShot, "evaluate", scripted)
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": "prompt_only", "comm_round": 2})
    cf, run_dir = write_config(tmp_path / "c.yaml", raw), tmp_path / "run"
    assert main(["run", "--cf", str(cf), "--run-dir", str(run_dir), "--no-progress"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert err == [
        "warning: the run ended below its own start: test_acc 0.4000 after training < 0.9000 before "
        "round 0 (summary.json initial); training made this model worse"
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["below_start"] is True and summary["warning"] == err[0].removeprefix("warning: ")
    assert below_start_warning({"test_acc": 0.5}, 0.5, "test_acc") is None  # level is not below
    assert below_start_warning({}, 0.1, "test_acc") is None  # no start recorded: nothing to say
