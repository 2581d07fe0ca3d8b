"""FedML data loader plugin: FeS's federated data as FedML's 8-element dataset list.

`FedMLRunner(args, device, dataset, model, trainer, aggregator)` and FedML's simulators
unpack `dataset` as

    [train_data_num, test_data_num, train_data_global, test_data_global,
     train_data_local_num_dict, train_data_local_dict, test_data_local_dict, class_num]

Here every local entry carries its client id: `train_data_local_dict[c]` is client c's
`ClientData` (gold pairs + an unlabeled pool without labels), which is what the FeS trainer
plugin trains on, and `test_data_local_dict[c]` is a `LocalTestData` (FedNLP-style
per-client test set). `train_data_global` pools the gold examples only (what a centralized
baseline could train on): FedML hands the list to every process, so nothing in it may hold
the labels of unlabeled data; those stay in the `LabelOracle`, which this loader never
returns. Counts in `train_data_local_num_dict` are the examples a client holds (gold +
unlabeled).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fedml_fes.config import FesConfig, config_from_dict
from fedml_fes.data.federated import FederatedData, build_federated_data
from fedml_fes.data.readers import LabeledTexts

# Sections a data loader needs from FedML's flattened args (seed, cache dir, data keys).
_SECTIONS = ("common_args", "data_args")


@dataclass(frozen=True)
class LocalTestData:
    """One client's share of the test set, tagged with the client's id."""

    client_id: int
    data: LabeledTexts

    def __len__(self) -> int:
        return len(self.data)


def config_from_args(args: Any) -> FesConfig:
    """A `FesConfig` from itself, from `args.fes_config`, or from FedML's flattened namespace."""
    if isinstance(args, FesConfig):
        return args
    if isinstance(getattr(args, "fes_config", None), FesConfig):
        return args.fes_config
    flat = vars(args)
    proto = FesConfig()
    raw = {name: {f.name: flat[f.name] for f in fields(getattr(proto, name)) if f.name in flat} for name in _SECTIONS}
    return config_from_dict(raw, source="FedML args")


def gold_pool(data: FederatedData) -> LabeledTexts:
    """Every client's gold examples pooled (no unlabeled example, so no hidden label)."""
    texts = tuple(t for c in data.clients for t in c.gold_texts)
    labels = np.asarray([y for c in data.clients for y in c.gold_labels], dtype=np.int64)
    texts_b = tuple(t for c in data.clients for t in (c.gold_texts_b or ())) if data.test.is_pair else None
    return LabeledTexts(texts, labels, data.classes, texts_b)


def dataset_list(data: FederatedData) -> list[Any]:
    """FedML's 8-element dataset list for already built federated data."""
    local_num = {c.client_id: c.num_gold + len(c.unlabeled) for c in data.clients}
    train_local = {c.client_id: c for c in data.clients}
    shards = data.client_test or tuple(() for _ in data.clients)
    test_local = {
        c.client_id: LocalTestData(c.client_id, data.test.subset(np.asarray(ix, dtype=np.int64)))
        for c, ix in zip(data.clients, shards)
    }
    return [
        sum(local_num.values()),
        len(data.test),
        gold_pool(data),
        data.test,
        local_num,
        train_local,
        test_local,
        len(data.classes),
    ]


def load(args: Any) -> tuple[list[Any], int]:
    """Like `fedml.data.load(args)`: (dataset list, class_num), built from the config and seed."""
    data, _oracle = build_federated_data(config_from_args(args))  # the oracle stays out
    dataset = dataset_list(data)
    return dataset, dataset[-1]
