"""Runs record per-client cost rows (client_costs.csv) without changing what they compute."""

import csv
from collections import OrderedDict

from fedml_fes.config import config_from_dict
from fedml_fes.report.client_costs import COLUMNS
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


def _rows(run_dir):
    with (run_dir / "client_costs.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_fes_run_writes_one_cost_row_per_client_task(tmp_path, tiny_model_dir):
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fes", "comm_round": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        tuning_args={"full_layers": 0, "bias_layers": 1},
        pacing_args={"mode": "static", "n": 2, "k": 20},
        filter_args={"knn": 3},
    )
    summary, run_dir = _run(config_from_dict(raw))
    assert summary["status"] == "completed"
    rows = _rows(run_dir)
    assert list(rows[0]) == list(COLUMNS)
    metrics = list(csv.DictReader((run_dir / "metrics.csv").open()))
    for m in metrics:  # as many rows as clients that labeled and trained in the round
        r = int(m["round"])
        assert len([x for x in rows if int(x["round"]) == r and x["phase"] == "train"]) == len(m["clients"].split())
        assert len([x for x in rows if int(x["round"]) == r and x["phase"] == "label"]) == len(
            m["label_clients"].split()
        )
    label = [x for x in rows if x["phase"] == "label"]
    train = [x for x in rows if x["phase"] == "train"]
    assert all(float(x["fwd_flops"]) > 0 and float(x["bwd_flops"] or 0) == 0 for x in label)
    assert all(float(x["bwd_flops"]) > 0 and float(x["peak_train_bytes"]) > 0 for x in train)
    # the proxy embeds each client's pool once: the first pass pays for it, later ones do not
    first = {}
    for x in label:
        first.setdefault(x["client_id"], x)
    assert all(float(x["filter_flops"]) > 0 for x in first.values())
    assert all(not x["filter_flops"] for x in label if x is not first[x["client_id"]])
    # bytes: the trainable tensors only, as metrics.csv counts them
    for m in metrics:
        r = [x for x in train if int(x["round"]) == int(m["round"])]
        assert sum(int(x["bytes_up"]) for x in r) == int(m["bytes_up"])
        assert sum(int(x["bytes_down"]) for x in r) == int(m["bytes_down"])


def test_rejected_update_still_costs_and_is_marked(tmp_path, tiny_model_dir):
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir))
    run_dir = make_run_dir(cfg)
    job = build_job(cfg, "both", run_dir)
    server = RoundServer(job, FedAvgCore(job), RunRecorder(run_dir, "test_acc"))
    good = server.global_params()
    bad = OrderedDict((k, v.clone().fill_(float("nan"))) for k, v in good.items())
    server.finish_round(
        0, [ClientUpdate(0, 1, good, 2.0, {"compute_s": 0.5, "cost_fwd_flops": 10.0}), ClientUpdate(0, 2, bad, 5.0)]
    )
    rows = _rows(run_dir)
    assert [(x["client_id"], x["accepted"]) for x in rows] == [("1", "1"), ("2", "0")]
    assert rows[0]["fwd_flops"] == "10" and rows[1]["fwd_flops"] == ""
    assert int(rows[1]["bytes_up"]) == int(rows[0]["bytes_up"]) > 0
