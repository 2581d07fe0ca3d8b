"""No label leaks: nothing a client can reach holds the labels of its unlabeled examples."""

import gc
import json
import pickle
import types

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data.federated import ClientData, LabelOracle, UnlabeledPool, build_federated_data
from fedml_fes_plugins.adapters.data_loader import dataset_list

_LEAVES = (str, bytes, int, float, bool, type(None))
_STOP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def reachable(root) -> list:
    """Every object reachable from `root` through references (classes and modules excluded)."""
    seen, out, stack = set(), [], [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _STOP):
            continue
        seen.add(id(obj))
        out.append(obj)
        if not isinstance(obj, _LEAVES):
            stack.extend(gc.get_referents(obj))
    return out


def assert_no_leak(root, oracle: LabelOracle, clients) -> None:
    objs = reachable(root)
    assert not any(isinstance(o, LabelOracle) for o in objs)
    hidden = {}
    for c in clients:
        labels = oracle.labels_of(list(c.unlabeled.example_ids))
        if len(labels) >= 5 and len(set(labels)) > 1:  # a sequence that could not match by chance
            hidden[len(labels)] = hidden.get(len(labels), []) + [labels]
    for o in objs:
        if isinstance(o, (tuple, list, np.ndarray)) and len(o) in hidden:
            seq = [int(v) for v in o] if all(isinstance(v, (int, np.integer)) for v in o) else None
            assert seq is None or seq not in hidden[len(o)], "a client can reach unlabeled examples' labels"


def _pairs_config(tmp_path):
    rows = [{"p": f"premise {i}", "h": f"hypothesis {i}", "y": ["yes", "no", "maybe"][i % 3]} for i in range(120)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "data_args": {
            "dataset": "custom",
            "train_file": str(tmp_path / "pairs.jsonl"),
            "text_columns": ["p"],
            "text_b_columns": ["h"],
            "label_column": "y",
            "client_num_in_total": 6,
            "gold_labels": 12,
            "gold_sparsity": 100,
        }
    }


@pytest.mark.parametrize("which", ["bbc", "pairs", "quantity"])
def test_clients_cannot_reach_hidden_labels(tmp_path, which):
    raw = {
        "bbc": {"data_args": {"client_num_in_total": 10}},
        "quantity": {
            "data_args": {"client_num_in_total": 10, "partition_method": "niid_quantity", "partition_beta": 0.5}
        },
        "pairs": None,
    }[which] or _pairs_config(tmp_path)
    data, oracle = build_federated_data(config_from_dict(raw))
    for client in data.clients:
        assert isinstance(client, ClientData) and isinstance(client.unlabeled, UnlabeledPool)
        assert set(vars(client.unlabeled)) == {"texts", "example_ids", "texts_b"}
        assert_no_leak(client, oracle, data.clients)
        assert b"LabelOracle" not in pickle.dumps(client)  # what a client process would receive
    assert_no_leak(data, oracle, data.clients)  # not even the whole federation holds them
    assert not hasattr(oracle, "__dict__") or set(vars(oracle)) == {"_labels"}


def test_fedml_dataset_list_carries_no_hidden_labels():
    data, oracle = build_federated_data(config_from_dict({"data_args": {"client_num_in_total": 10}}))
    dataset = dataset_list(data)
    assert_no_leak(dataset, oracle, data.clients)
    assert len(dataset[2]) == sum(c.num_gold for c in data.clients)  # train_data_global: gold only
