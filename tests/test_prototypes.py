"""The `agree` labeler: the gold labels' class prototypes as co-training's second view."""

import csv
import json
from collections import OrderedDict

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.pseudo.prototypes import COUNTS, SUMS, GoldPrototypes, agreeing, class_sums, merge, prototype_bytes
from fedml_fes.runtime.rundir import make_run_dir

from .conftest import small_config


def _unit(rows) -> np.ndarray:
    a = np.asarray(rows, dtype=np.float64)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_shares_from_two_gold_clients_merge_into_unit_class_means():
    a = class_sums(np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), [0, 0, 1], 3)
    b = class_sums(np.array([[0.0, 4.0]]), [1], 3)
    assert a[COUNTS].tolist() == [2, 1, 0] and a[SUMS].tolist() == [[4.0, 0.0], [0.0, 2.0], [0.0, 0.0]]
    protos = merge([a, b])
    assert protos == [[1.0, 0.0], [0.0, 1.0], []]  # class 2: no gold text, no prototype
    assert merge([]) is None and prototype_bytes(protos) == 16 and prototype_bytes(None) == 0


def test_a_prediction_is_kept_where_the_nearest_prototype_agrees_or_its_class_has_none():
    protos = [[1.0, 0.0], [0.0, 1.0], []]
    emb = _unit([[1.0, 0.1], [1.0, 0.1], [0.1, 1.0], [0.1, 1.0]])
    probs = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    assert agreeing(probs, emb, protos).tolist() == [True, False, True, True]
    assert agreeing(probs, emb, [[], [], []]).all()  # no gold label at all: the prompt alone


def test_the_server_asks_every_gold_client_once_when_none_is_busy_and_sends_the_prototypes():
    gp = GoldPrototypes(True, [5, 2])
    assert gp.wanted({2, 7}) == [] and gp.wanted({7}) == [2, 5]
    assert gp.options({"fraction": 0.1}) == {"fraction": 0.1} and gp.bytes_down == 0

    class Update:
        def __init__(self, params):
            self.params = params

    share = Update(class_sums(np.array([[2.0, 0.0]]), [1], 2))
    label = Update(OrderedDict())
    assert gp.absorb([label, share]) == [label]
    assert gp.value == [[], [1.0, 0.0]] and gp.wanted(set()) == []
    assert gp.options({"trial": 0}) == {"trial": 0, "prototypes": [[], [1.0, 0.0]]} and gp.bytes_down == 8
    assert GoldPrototypes(False, [1]).wanted(set()) == []  # another labeler: never asked


def test_fedfsl_with_the_agree_labeler_keeps_only_labels_the_gold_prototypes_give(tmp_path, tiny_model_dir):
    """In process: round 0's labeling phase asks the gold clients for their class sums (counted as
    upload, their embedding as on-device compute); every later pass receives the prototypes
    (counted as download) and keeps only predictions whose nearest prototype agrees; the
    checkpoint holds them (what a resumed run's passes read)."""
    from fedml_fes.runtime.checkpoint import load_checkpoint
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 3},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args={"label_clients": 3, "per_pass_fraction": 0.5, "labeler": "agree", "start_round": 1},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    summary = run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed"
    from fedml_fes.data.federated import build_federated_data

    data = build_federated_data(cfg)[0]
    gold = sorted(c.client_id for c in data.clients if c.num_gold)
    costs = list(csv.DictReader((run_dir / "client_costs.csv").open()))
    shares = [r for r in costs if r["round"] == "0" and r["phase"] == "label"]
    num_classes = len(data.classes)
    protos = load_checkpoint(run_dir)["server"]["prototypes"]
    dim = len(next(row for row in protos if row))
    assert sorted(int(r["client_id"]) for r in shares) == gold
    assert all(int(r["bytes_up"]) == num_classes * dim * 4 + num_classes * 8 for r in shares)
    assert all(float(r["filter_flops"]) > 0 for r in shares)
    assert sum(1 for row in protos if row) == len({lab for c in data.clients for lab in c.gold_labels})
    passes = [r for r in costs if r["phase"] == "label" and r["round"] != "0"]
    model_bytes = int(shares[0]["bytes_down"])
    assert passes and all(int(r["bytes_down"]) == model_bytes + prototype_bytes(protos) for r in passes)
    pools = {c.client_id: c.unlabeled for c in data.clients}
    checked = 0
    for path in (run_dir / "clients").glob("*/pseudo_labels.json"):
        stored = json.loads(path.read_text())
        emb = np.load(path.parent / "proxy_embeddings.npy")
        index = {int(e): i for i, e in enumerate(pools[int(path.parent.name)].example_ids)}
        rows = emb[[index[e] for e in stored["example_ids"]]]
        probs = np.eye(num_classes)[stored["labels"]]
        assert agreeing(probs, rows, protos).all()
        checked += len(stored["labels"])
    assert checked > 0


def test_the_agree_labeler_is_a_known_option():
    assert config_from_dict({"pseudo_args": {"labeler": "agree"}}).pseudo.labeler == "agree"
    with pytest.raises(FesError, match="pseudo_args.labeler must be one of .*, classwise, agree, got 'knn'"):
        config_from_dict({"pseudo_args": {"labeler": "knn"}})
