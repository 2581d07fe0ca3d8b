"""FedNLP h5 interop: export ours, import theirs, round-trip exactly, read both name spellings."""

import json

import h5py
import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data.federated import build_federated_data
from fedml_fes.data.fednlp_h5 import (
    partition_name,
    read_fednlp_data,
    read_fednlp_partition,
    write_fednlp_data,
    write_fednlp_partition,
)
from fedml_fes.data.sources import load_source
from fedml_fes.errors import FesError
from fedml_fes_plugins.cli.partition import export_fednlp


def fednlp_style_files(tmp_path, name="niid_label_clients=3_alpha=1.0"):
    """Files as FedNLP's own scripts write them (AGNews loader + niid_label partition)."""
    data, part = tmp_path / "agnews_data.h5", tmp_path / "agnews_partition.h5"
    texts = [f"news item {i}" for i in range(12)]
    labels = ["3", "4", "1", "2"] * 3  # FedNLP keeps AG News' class indices as label strings
    with h5py.File(data, "w") as f:
        attrs = {
            "index_list": list(range(12)),
            "train_index_list": list(range(9)),
            "test_index_list": list(range(9, 12)),
            "num_labels": 4,
            "task_type": "text_classification",
            "label_vocab": {"3": 0, "4": 1, "1": 2, "2": 3},
        }
        f["attributes"] = json.dumps(attrs)
        for i, (x, y) in enumerate(zip(texts, labels)):
            f["X/" + str(i)] = x
            f["Y/" + str(i)] = y
    with h5py.File(part, "w") as f:
        f[f"/{name}/n_clients"] = 3
        f[f"/{name}/alpha"] = 1.0
        for c, (tr, te) in enumerate([([0, 4, 8], [9]), ([1, 2, 5], [10]), ([3, 6, 7], [11])]):
            f[f"/{name}/partition_data/{c}/train/"] = tr
            f[f"/{name}/partition_data/{c}/test/"] = te
        f["/uniform/n_clients"] = 1
        f["/uniform/partition_data/0/train/"] = list(range(9))
        f["/uniform/partition_data/0/test/"] = [9, 10, 11]
    return data, part


def import_config(data, part, name, clients=3, **extra):
    return config_from_dict(
        {
            "data_args": {
                "dataset": "fednlp_h5",
                "fednlp_data_file": str(data),
                "fednlp_partition_file": str(part),
                "fednlp_partition_name": name,
                "partition_method": "fednlp_h5",
                "client_num_in_total": clients,
                "gold_labels": 3,
                **extra,
            }
        }
    )


@pytest.mark.parametrize(
    "spelling", ["niid_label_clients=3_alpha=1.0", "niid_label_clients=3_alpha=1", "niid_label_clients=3.0_alpha=1.00"]
)
def test_import_fednlp_files_in_either_spelling(tmp_path, spelling):
    data, part = fednlp_style_files(tmp_path)
    fed, oracle = build_federated_data(import_config(data, part, spelling))
    assert fed.classes == ("3", "4", "1", "2") and fed.partition == "niid_label_clients=3_alpha=1.0"
    held = [sorted(c.gold_example_ids + c.unlabeled.example_ids) for c in fed.clients]
    assert held == [[0, 4, 8], [1, 2, 5], [3, 6, 7]]  # h5 index i is train row i here
    assert fed.client_test == ((0,), (1,), (2,)) and len(fed.test) == 3
    assert oracle.labels_of([0, 1, 2, 3]) == [0, 1, 2, 3]


def test_file_written_with_alpha_1_found_by_alpha_1_0(tmp_path):
    data, part = fednlp_style_files(tmp_path, name="niid_label_clients=3_alpha=1")
    fed, _ = build_federated_data(import_config(data, part, "niid_label_clients=3_alpha=1.0"))
    assert fed.partition == "niid_label_clients=3_alpha=1"


def test_import_errors_name_file_and_key(tmp_path):
    data, part = fednlp_style_files(tmp_path)
    with pytest.raises(
        FesError,
        match=r"fednlp_partition_name 'niid_label_clients=3_alpha=0.5' is not in .*"
        r"\(it has: niid_label_clients=3_alpha=1.0, uniform\)",
    ):
        build_federated_data(import_config(data, part, "niid_label_clients=3_alpha=0.5"))
    with pytest.raises(FesError, match=r"has 3 clients but data_args.client_num_in_total is 4"):
        build_federated_data(import_config(data, part, "niid_label_clients=3_alpha=1.0", clients=4))
    with pytest.raises(FesError, match=r"fednlp_data_file: data file not found"):
        build_federated_data(import_config(tmp_path / "nope.h5", part, "uniform", clients=1))
    with h5py.File(part, "a") as f:
        f["/niid_label_clients=3_alpha=1.0/partition_data/2/train"][0] = 4  # client 0 holds 4 too
    with pytest.raises(FesError, match=r"client 2: train index 4 is listed twice"):
        build_federated_data(import_config(data, part, "niid_label_clients=3_alpha=1.0"))
    with h5py.File(part, "a") as f:
        f["/niid_label_clients=3_alpha=1.0/partition_data/2/train"][0] = 42
    with pytest.raises(FesError, match=r"client 2 train: index 42 is not in the data file's train split"):
        build_federated_data(import_config(data, part, "niid_label_clients=3_alpha=1.0"))
    with h5py.File(data, "a") as f:
        del f["Y/3"]
        f["Y/3"] = "5"
    with pytest.raises(FesError, match=r"agnews_data.h5: Y/3 label '5' is not in attributes.label_vocab"):
        read_fednlp_data(data)
    (tmp_path / "text.h5").write_text("not h5")
    with pytest.raises(FesError, match=r"text.h5: not a readable h5 file"):
        read_fednlp_data(tmp_path / "text.h5")


def test_file_without_train_test_lists_is_split_90_10(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["attributes"] = json.dumps({"index_list": list(range(10)), "label_vocab": {"a": 0, "b": 1}})
        for i in range(10):
            f[f"X/{i}"], f[f"Y/{i}"] = f"t{i}", "ab"[i % 2]
    data = read_fednlp_data(path)
    assert data.train_ids == tuple(range(9)) and data.test_ids == (9,)


def test_partition_names_follow_fednlp():
    assert partition_name("niid_label", 100, 1.0, 1.0) == "niid_label_clients=100_alpha=1.0"
    assert partition_name("niid_label", 100, 0.01, 1.0) == "niid_label_clients=100_alpha=0.01"
    assert partition_name("niid_quantity", 10, 1.0, 5.0) == "niid_quantity_clients=10_beta=5.0"
    assert partition_name("uniform", 10, 1.0, 1.0) == "uniform"


def test_export_then_import_round_trips_exactly(tmp_path):
    cfg = config_from_dict(
        {
            "data_args": {
                "client_num_in_total": 10,
                "max_train_examples": 300,
                "max_test_examples": 50,
                "gold_sparsity": 1.0,
            }
        }
    )
    splits = load_source(cfg)
    ours, our_oracle = build_federated_data(cfg)
    data_path, part_path = export_fednlp(cfg, ours, splits.train, tmp_path)
    back, oracle = build_federated_data(
        import_config(data_path, part_path, ours.partition, clients=10, gold_labels=64, gold_sparsity=1.0)
    )
    assert back.clients == ours.clients  # same texts, ids, gold labels, pools
    assert back.classes == ours.classes and back.test.texts == ours.test.texts
    assert np.array_equal(back.test.labels, ours.test.labels) and back.client_test == ours.client_test
    ids = list(range(300))
    assert oracle.labels_of(ids) == our_oracle.labels_of(ids)
    # another gold setting on the same FedNLP partition draws fresh gold labels from the seed
    other, _ = build_federated_data(import_config(data_path, part_path, ours.partition, clients=10, gold_labels=5))
    assert sum(c.num_gold for c in other.clients) == 5
    assert [len(c.gold_example_ids) + len(c.unlabeled) for c in other.clients] == [
        len(c.gold_example_ids) + len(c.unlabeled) for c in ours.clients
    ]


def test_export_keeps_other_partitions_and_pairs(tmp_path):
    from fedml_fes.data.readers import LabeledTexts

    train = LabeledTexts(("p1", "p2"), np.array([0, 1]), ("no", "yes"), ("h1", "h2"))
    test = LabeledTexts(("p3",), np.array([1]), ("no", "yes"), ("h3",))
    write_fednlp_data(tmp_path / "d.h5", train, test, "pairs")
    back = read_fednlp_data(tmp_path / "d.h5")
    assert back.train.texts_b == ("h1", "h2") and back.test.texts_b == ("h3",)
    part = tmp_path / "p.h5"
    write_fednlp_partition(part, "uniform", [np.array([0]), np.array([1])], [np.array([2]), np.array([])], {})
    write_fednlp_partition(
        part,
        "niid_label_clients=2_alpha=1.0",
        [np.array([1]), np.array([0])],
        [np.array([]), np.array([2])],
        {"alpha": 1.0},
    )
    with h5py.File(part, "r") as f:
        assert sorted(f.keys()) == ["niid_label_clients=2_alpha=1.0", "uniform"]
    assert [p.tolist() for p in read_fednlp_partition(part, "uniform").train] == [[0], [1]]


def test_failed_export_leaves_previous_file_and_no_temp(tmp_path):
    part = tmp_path / "p.h5"
    write_fednlp_partition(part, "uniform", [np.array([0])], [np.array([1])], {})
    before = part.read_bytes()
    with pytest.raises(FesError):
        write_fednlp_partition(part, "x", [np.array([0])], [], {})  # mismatched lists: fails before writing
    with pytest.raises(ValueError):  # client 1's indices are not numbers: fails halfway through
        write_fednlp_partition(part, "uniform", [np.array([5]), ["not-a-number"]], [[6], [7]], {})
    assert part.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["p.h5"]


def test_fedml_fednlp_code_reads_our_export(tmp_path):
    """FedML 0.9.6 ships FedNLP's BaseDataManager: its own readers open our files."""
    from fedml_fes_plugins.adapters.offline import import_fedml

    import_fedml()
    from fedml.data.fednlp.base.data_manager.base_data_manager import BaseDataManager

    cfg = config_from_dict(
        {"data_args": {"client_num_in_total": 5, "max_train_examples": 100, "max_test_examples": 20}}
    )
    splits = load_source(cfg)
    ours, oracle = build_federated_data(cfg)
    data_path, part_path = export_fednlp(cfg, ours, splits.train, tmp_path)
    attrs = BaseDataManager.load_attributes(str(data_path))
    assert BaseDataManager.load_num_clients(str(part_path), ours.partition) == 5
    with h5py.File(data_path, "r", swmr=True) as data_file, h5py.File(part_path, "r", swmr=True) as pf:
        # what FedNLP's TextClassificationDataManager does for one client
        ids = pf[ours.partition]["partition_data"]["3"]["train"][()]
        x = [data_file["X"][str(i)][()].decode("utf-8") for i in ids]
        y = [attrs["label_vocab"][data_file["Y"][str(i)][()].decode("utf-8")] for i in ids]
        test_ids = pf[ours.partition]["partition_data"]["3"]["test"][()]
        assert all(int(i) in attrs["test_index_list"] for i in test_ids)
    client = ours.clients[3]
    truth = dict(zip(client.gold_texts, client.gold_labels))
    truth.update(zip(client.unlabeled.texts, oracle.labels_of(list(client.unlabeled.example_ids))))
    assert sorted(x) == sorted(truth) and [truth[t] for t in x] == y  # labels decode through label_vocab
    assert set(attrs["label_vocab"]) == set(ours.classes) and attrs["task_type"] == "text_classification"


# texts FedNLP stores as they are: whitespace runs, tabs, newlines, edges, non-ASCII
AWKWARD = [
    "two  spaces",
    "\ttab\tinside",
    "line\nbreak\r\nwindows",
    "  leading and trailing  ",
    "non-ASCII: café, naïve, 東京, emoji 🙂",
    "mixed \t \n runs  \u00a0nbsp\u2009thin",
    "plain",
]


def _raw_x(path) -> dict[str, bytes]:
    with h5py.File(path, "r") as f:
        return {k: f["X"][k][()] for k in f["X"].keys()}


def test_fednlp_texts_survive_write_read_byte_equal(tmp_path):
    from fedml_fes.data.readers import LabeledTexts

    n = len(AWKWARD)
    train = LabeledTexts(tuple(AWKWARD), np.arange(n) % 2, ("a", "b"), tuple(reversed(AWKWARD)))
    test = LabeledTexts((" x  y ", "z\t"), np.array([0, 1]), ("a", "b"), ("\nq", "r  "))
    write_fednlp_data(tmp_path / "d.h5", train, test, "awkward")
    back = read_fednlp_data(tmp_path / "d.h5")
    assert back.train.texts == train.texts and back.train.texts_b == train.texts_b
    assert back.test.texts == test.texts and back.test.texts_b == test.texts_b
    assert [t.encode() for t in back.train.texts] == [t.encode() for t in AWKWARD]


def test_fednlp_import_then_export_is_byte_identical(tmp_path):
    """A FedNLP-written file read and written back holds the same X bytes (FedNLP layout)."""
    src = tmp_path / "theirs_data.h5"
    texts = AWKWARD + ["news item 7"]
    with h5py.File(src, "w") as f:  # as FedNLP's loaders write: str -> variable-length UTF-8
        n = len(texts)
        f["attributes"] = json.dumps(
            {
                "index_list": list(range(n)),
                "train_index_list": list(range(n - 2)),
                "test_index_list": [n - 2, n - 1],
                "num_labels": 2,
                "task_type": "text_classification",
                "label_vocab": {"x": 0, "y": 1},
            }
        )
        for i, t in enumerate(texts):
            f["X/" + str(i)] = t
            f["Y/" + str(i)] = "xy"[i % 2]
    first = read_fednlp_data(src)
    assert first.train.texts + first.test.texts == tuple(texts)  # nothing stripped or collapsed
    out = write_fednlp_data(tmp_path / "ours_data.h5", first.train, first.test, "roundtrip")
    assert _raw_x(out) == _raw_x(src)  # the same bytes per index
    again = read_fednlp_data(out)
    assert again.train.texts == first.train.texts and again.test.texts == first.test.texts
    assert [t.encode("utf-8") for t in again.train.texts + again.test.texts] == [t.encode("utf-8") for t in texts]
    assert np.array_equal(again.train.labels, first.train.labels) and again.train.classes == first.train.classes


def test_whitespace_only_text_is_still_an_error(tmp_path):
    data, _ = fednlp_style_files(tmp_path)
    with h5py.File(data, "a") as f:
        del f["X/2"]
        f["X/2"] = " \t\n"
    with pytest.raises(FesError, match=r"X/2 is empty text"):
        read_fednlp_data(data)
