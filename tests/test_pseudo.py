"""Pseudo-label selection, the per-client store, and pseudo-label rounds end to end."""

import csv
import json

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.pseudo.labeler import class_quotas, select_pseudo
from fedml_fes.pseudo.store import ClientStore, PseudoLabels
from fedml_fes.runtime.job import make_run_dir

from .conftest import small_config


def test_select_most_confident_with_threshold():
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.45, 0.55]])
    assert select_pseudo(probs, 2).tolist() == [0, 2]
    assert select_pseudo(probs, 10, threshold=0.7).tolist() == [0, 2]


def test_class_balance_quotas():
    assert class_quotas(5, np.array([1.0, 1.0])).sum() == 5
    probs = np.array([[0.99, 0.01], [0.98, 0.02], [0.97, 0.03], [0.4, 0.6]])
    kept = select_pseudo(probs, 2, balance="gold", gold_labels=[0, 1])
    assert sorted(kept.tolist()) == [0, 3]  # one per class although class 0 is more confident
    kept = select_pseudo(probs, 2, balance="predicted")
    assert kept.tolist() == [0, 1]


def test_store_roundtrip(tmp_path):
    store = ClientStore(tmp_path)
    assert len(store.load_pseudo(3)) == 0
    store.save_pseudo(3, PseudoLabels([5, 7], [1, 0], [], passes=1))
    assert store.load_pseudo(3) == PseudoLabels([5, 7], [1, 0], [], passes=1)


def _run(tmp_path, tiny_model_dir, method, pseudo_args=None):
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": method, "comm_round": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args=pseudo_args or {"label_clients": 3, "per_pass": 10},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    return run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None), run_dir


def test_fedfsl_pseudo_rounds_in_process(tmp_path, tiny_model_dir):
    summary, run_dir = _run(tmp_path, tiny_model_dir, "fedfsl")
    assert summary["status"] == "completed" and "test_acc" in summary["initial"]
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert int(rows[0]["pseudo_labeled"]) == 30 and int(rows[1]["pseudo_total"]) > 30
    assert 0.0 <= float(rows[0]["pseudo_acc"]) <= 1.0 and rows[0]["client_mean_acc"]
    stored = [json.loads(p.read_text()) for p in (run_dir / "clients").glob("*/pseudo_labels.json")]
    assert stored and all(len(s["example_ids"]) <= 20 for s in stored)
    # training clients may now include label-only clients (pseudo holders)
    assert len(rows[1]["clients"].split()) >= 1


def test_fedfsl_bias_sends_only_biases(tmp_path, tiny_model_dir):
    full, full_dir = _run(tmp_path / "full", tiny_model_dir, "fedfsl")
    bias, bias_dir = _run(tmp_path / "bias", tiny_model_dir, "fedfsl_bias")
    up = lambda d: int(next(csv.DictReader((d / "metrics.csv").open()))["bytes_up"])  # noqa: E731
    per_client = lambda d: up(d) / len(next(csv.DictReader((d / "metrics.csv").open()))["clients"].split())  # noqa: E731
    assert per_client(bias_dir) * 20 < per_client(full_dir)


@pytest.mark.parametrize("method", ["prompt_only", "pseudo_only"])
def test_ablations_run(tmp_path, tiny_model_dir, method):
    summary, run_dir = _run(tmp_path, tiny_model_dir, method)
    assert summary["status"] == "completed"
    has_pseudo = (run_dir / "clients").exists()
    assert has_pseudo == (method == "pseudo_only")


def test_soft_labels_and_threshold(tmp_path, tiny_model_dir):
    summary, run_dir = _run(
        tmp_path,
        tiny_model_dir,
        "fedfsl",
        pseudo_args={
            "label_clients": 2,
            "per_pass": 5,
            "soft_labels": True,
            "confidence_threshold": 0.0,
            "class_balance": "predicted",
        },
    )
    stored = [json.loads(p.read_text()) for p in (run_dir / "clients").glob("*/pseudo_labels.json")]
    assert all(len(s["probs"]) == len(s["labels"]) for s in stored)
