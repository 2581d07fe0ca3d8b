import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data.federated import ClientData, UnlabeledPool, build_federated_data
from fedml_fes.data.partition import assign_gold_labels, dirichlet_label_partition, uniform_partition
from fedml_fes.data.readers import read_agnews, read_bbc_news
from fedml_fes.errors import FesError

from .conftest import SHARED_AGNEWS


def _write_agnews(d, rows, classes=("World", "Sports", "Business", "Sci/Tech")):
    d.mkdir(parents=True, exist_ok=True)
    (d / "classes.txt").write_text("\n".join(classes) + "\n")
    for split in ("train", "test"):
        (d / f"{split}.csv").write_text("".join(rows))


def test_agnews_reader_official_layout(tmp_path):
    rows = [
        '"3","Wall St. Bears Claw Back","Reuters - Short-sellers\\nare back."\n',
        '"1","Title","Body with ""quotes"""\n',
    ]
    _write_agnews(tmp_path / "ag", rows)
    data = read_agnews(tmp_path / "ag", "train")
    assert list(data.labels) == [2, 0]
    assert data.texts[0] == "Wall St. Bears Claw Back Reuters - Short-sellers\nare back."
    assert 'Body with "quotes"' in data.texts[1]
    assert data.classes[3] == "Sci/Tech"


@pytest.mark.parametrize(
    "row, match",
    [
        ('"5","t","d"\n', r"row 1: class index 5 outside 1..4"),
        ('"1","only title"\n', r"row 1: expected 3 columns"),
        ('"x","t","d"\n', r"row 1: class index 'x' is not an integer"),
        ('"2","",""\n', r"row 1: empty text"),
    ],
)
def test_agnews_reader_bad_rows(tmp_path, row, match):
    _write_agnews(tmp_path / "ag", [row])
    with pytest.raises(FesError, match=match):
        read_agnews(tmp_path / "ag", "train")


def test_agnews_missing_folder(tmp_path):
    with pytest.raises(FesError, match="AG News folder not found"):
        read_agnews(tmp_path / "missing", "train")


@pytest.mark.skipif(not SHARED_AGNEWS.is_dir(), reason="../shared/datasets/agnews is absent (not a dev checkout)")
def test_agnews_shared_copy_reads():
    train, test = read_agnews(SHARED_AGNEWS, "train"), read_agnews(SHARED_AGNEWS, "test")
    assert len(train) == 6400 and len(test) == 1200
    assert np.bincount(train.labels).tolist() == [1600] * 4


def test_bbc_reader_sorted_classes_and_deduplicated():
    data = read_bbc_news()
    assert data.classes == ("business", "entertainment", "politics", "sports", "tech")
    # 2,127 byte-exact unique files; 2 more differ only in whitespace and are dropped too
    assert len(data) == 2125 == len(set(data.texts))


def test_partitions_reproduce_from_seed():
    labels = np.repeat(np.arange(4), 50)
    a = dirichlet_label_partition(labels, 10, 1.0, np.random.default_rng(3))
    b = dirichlet_label_partition(labels, 10, 1.0, np.random.default_rng(3))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert sorted(np.concatenate(a).tolist()) == list(range(200))
    assert min(len(p) for p in a) > 0
    u = uniform_partition(200, 7, np.random.default_rng(0))
    assert sorted(np.concatenate(u).tolist()) == list(range(200))


def test_partition_rejects_more_clients_than_examples():
    with pytest.raises(FesError, match="clients but only"):
        uniform_partition(3, 5, np.random.default_rng(0))


def test_gold_labels_skewed_vs_uniform():
    parts = uniform_partition(5000, 50, np.random.default_rng(0))  # 100 each: room for all 64
    skewed = assign_gold_labels(parts, 64, 0, 0.001, np.random.default_rng(1))
    spread = assign_gold_labels(parts, 64, 0, 100.0, np.random.default_rng(1))
    for gold in (skewed, spread):
        assert sum(len(g) for g in gold) == 64
        assert all(set(g) <= set(p) for g, p in zip(gold, parts))
    assert max(len(g) for g in skewed) >= 60  # nearly all on one client
    assert sum(len(g) > 0 for g in skewed) <= 5
    assert sum(len(g) > 0 for g in spread) >= 25


def test_gold_labels_overflow_spills_and_too_many_fails():
    parts = [np.arange(0, 5), np.arange(5, 100)]
    gold = assign_gold_labels(parts, 50, 0, 0.001, np.random.default_rng(0))
    assert sum(len(g) for g in gold) == 50 and len(gold[0]) <= 5
    with pytest.raises(FesError, match="gold_labels=200"):
        assign_gold_labels(parts, 200, 0, 1.0, np.random.default_rng(0))


def test_federated_data_has_no_label_leak():
    cfg = config_from_dict({"data_args": {"client_num_in_total": 10}})
    data, oracle = build_federated_data(cfg)
    assert sum(c.num_gold for c in data.clients) == 64
    for client in data.clients:
        assert isinstance(client, ClientData) and isinstance(client.unlabeled, UnlabeledPool)
        # the pool carries text and ids (and second texts for pairs), nothing that holds a label
        assert set(vars(client.unlabeled)) == {"texts", "example_ids", "texts_b"}
    assert not any(isinstance(v, type(oracle)) for c in data.clients for v in vars(c).values())
    c = max(data.clients, key=lambda c: len(c.unlabeled))
    assert 0 <= oracle.accuracy(list(c.unlabeled.example_ids), [0] * len(c.unlabeled)) <= 1


def test_federated_data_is_deterministic():
    cfg = config_from_dict({"data_args": {"client_num_in_total": 10, "gold_sparsity": 1.0}})
    a, _ = build_federated_data(cfg)
    b, _ = build_federated_data(cfg)
    assert a.clients == b.clients and a.test.texts == b.test.texts
