"""Partitions: seeded and exact (pinned digests), quantity skew, bad input as one line."""

import hashlib

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data.federated import build_federated_data
from fedml_fes.data.partition import (
    dirichlet_label_partition,
    partition_clients,
    quantity_partition,
    split_evenly,
    uniform_partition,
)
from fedml_fes.errors import FesError

from .conftest import SHARED_AGNEWS

needs_agnews = pytest.mark.skipif(
    not SHARED_AGNEWS.is_dir(), reason="../shared/datasets/agnews is absent (not a dev checkout)"
)


def digest(raw: dict) -> str:
    """Hash of who holds which example and which carry gold labels (text included)."""
    data, _ = build_federated_data(config_from_dict(raw))
    h = hashlib.sha256()
    for c in data.clients:
        h.update(repr((c.client_id, c.unlabeled.example_ids, c.gold_labels, c.gold_texts)).encode())
    return h.hexdigest()[:16]


# Pinned from the code before the partition refactor: the refactor changed no partition.
BBC_DEMO = ({"data_args": {"client_num_in_total": 20}}, "dd1281021a9d9589")
BBC_UNIFORM = (
    {"data_args": {"client_num_in_total": 20, "partition_method": "uniform", "gold_sparsity": 100}},
    "fd1494fee5d93395",
)


@pytest.mark.parametrize("raw, expected", [BBC_DEMO, BBC_UNIFORM])
def test_bbc_partition_reproduces_exactly(raw, expected):
    assert digest(raw) == expected


@needs_agnews
@pytest.mark.parametrize("method, expected", [("niid_label", "f1046a482830a099"), ("uniform", "f0152aca5c8b4422")])
def test_agnews_paper_partition_reproduces_exactly(method, expected):
    raw = {
        "data_args": {
            "dataset": "agnews",
            "data_dir": str(SHARED_AGNEWS),
            "client_num_in_total": 100,
            "partition_method": method,
        }
    }
    assert digest(raw) == expected


@needs_agnews
def test_agnews_paper_settings_show_the_skew():
    cfg = config_from_dict(
        {
            "data_args": {
                "dataset": "agnews",
                "data_dir": str(SHARED_AGNEWS),
                "client_num_in_total": 100,
                "gold_labels": 64,
                "gold_sparsity": 0.001,
            }
        }
    )
    data, oracle = build_federated_data(cfg)
    assert data.num_clients == 100 and data.partition == "niid_label_clients=100_alpha=1.0"
    assert sum(c.num_gold + len(c.unlabeled) for c in data.clients) == 6400
    golds = sorted((c.num_gold for c in data.clients), reverse=True)
    assert sum(golds) == 64 and golds[0] >= 60  # skewed: (nearly) all on one client
    shares = [
        np.bincount(oracle.labels_of(list(c.unlabeled.example_ids)), minlength=4).max() / max(len(c.unlabeled), 1)
        for c in data.clients
    ]
    assert np.mean(shares) > 0.45  # alpha = 1: each client leans to one or two classes (iid ~ 0.25)


def test_other_seed_other_partition():
    a, b = digest(BBC_DEMO[0]), digest({"common_args": {"random_seed": 1}, **BBC_DEMO[0]})
    assert a != b


def test_quantity_skew_sizes_follow_beta():
    small = quantity_partition(10_000, 100, 0.3, np.random.default_rng(0))
    large = quantity_partition(10_000, 100, 100.0, np.random.default_rng(0))
    again = quantity_partition(10_000, 100, 0.3, np.random.default_rng(0))
    for parts in (small, large):
        assert sorted(np.concatenate(parts).tolist()) == list(range(10_000)) and min(map(len, parts)) >= 1
    assert all(np.array_equal(x, y) for x, y in zip(small, again))
    cv = lambda parts: np.std(list(map(len, parts))) / np.mean(list(map(len, parts)))  # noqa: E731
    assert cv(small) > 1.0 > 0.3 > cv(large)


def test_quantity_skew_keeps_labels_iid():
    labels = np.repeat(np.arange(4), 2500)
    parts = quantity_partition(len(labels), 10, 1.0, np.random.default_rng(2))
    big = max(parts, key=len)
    assert np.bincount(labels[big], minlength=4).min() / len(big) > 0.2


def test_niid_quantity_from_config():
    cfg = config_from_dict(
        {"data_args": {"client_num_in_total": 30, "partition_method": "niid_quantity", "partition_beta": 0.5}}
    )
    data, _ = build_federated_data(cfg)
    assert data.partition == "niid_quantity_clients=30_beta=0.5" and data.num_clients == 30
    assert min(c.num_gold + len(c.unlabeled) for c in data.clients) >= 1


def test_split_evenly_allows_more_clients_than_examples():
    parts = split_evenly(5, 8, np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(5)) and sum(len(p) == 0 for p in parts) == 3


def test_thousand_clients_on_a_hundred_thousand_examples_is_fast():
    import time

    labels = np.random.default_rng(0).integers(0, 3, 100_000)
    t = time.perf_counter()
    parts = dirichlet_label_partition(labels, 1000, 1.0, np.random.default_rng(0))
    assert time.perf_counter() - t < 5 and len(parts) == 1000 and sum(map(len, parts)) == 100_000


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: dirichlet_label_partition(np.zeros(10, int), 3, 0.0, np.random.default_rng(0)),
            "partition_alpha must be > 0",
        ),
        (lambda: quantity_partition(10, 3, -1.0, np.random.default_rng(0)), "partition_beta must be > 0"),
        (lambda: quantity_partition(3, 5, 1.0, np.random.default_rng(0)), "5 clients but only 3 examples"),
        (lambda: uniform_partition(3, 5, np.random.default_rng(0)), "5 clients but only 3 examples"),
        (
            lambda: partition_clients("lda", np.zeros(3, int), 1, 1.0, 1.0, np.random.default_rng(0)),
            "partition_method 'lda' cannot be drawn",
        ),
    ],
)
def test_partition_bad_arguments(call, match):
    with pytest.raises(FesError, match=match):
        call()


@pytest.mark.parametrize(
    "data_args, match",
    [
        ({"partition_alpha": 0}, "data_args.partition_alpha must be > 0, got 0.0"),
        ({"partition_method": "niid_quantity", "partition_beta": 0}, "data_args.partition_beta must be > 0, got 0.0"),
        ({"partition_method": "lda"}, "partition_method must be one of uniform, niid_label, niid_quantity, fednlp_h5"),
        ({"dataset": "imdb"}, "data_args.dataset 'imdb' is not one of"),
        ({"partition_method": "fednlp_h5"}, "partition_method fednlp_h5 needs dataset fednlp_h5"),
    ],
)
def test_config_rejects_bad_partition_settings(data_args, match):
    with pytest.raises(FesError, match=match):
        config_from_dict({"data_args": data_args})


@pytest.mark.parametrize(
    "data_args, match",
    [
        (
            {"client_num_in_total": 5000, "partition_method": "uniform"},
            r"5000 clients but only \d+ examples: lower data_args.client_num_in_total",
        ),
        (
            {"gold_labels": 5000, "client_num_in_total": 10},
            r"data_args.gold_labels=5000 but the clients hold only \d+ examples",
        ),
        (
            {"gold_labels": 300, "gold_clients": 1, "client_num_in_total": 10, "partition_method": "uniform"},
            r"data_args.gold_labels=300 but the 1 gold clients \(data_args.gold_clients\) hold only \d+ examples",
        ),
    ],
)
def test_impossible_requests_are_one_line(data_args, match):
    with pytest.raises(FesError, match=match) as e:
        build_federated_data(config_from_dict({"data_args": data_args}))
    assert "\n" not in str(e.value)
