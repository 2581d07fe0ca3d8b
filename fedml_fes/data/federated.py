"""The federated few-shot world: per-client gold and unlabeled data, a test set, an oracle.

A client sees `ClientData`: its few gold (text, label) pairs and an `UnlabeledPool` that
holds texts and example ids only. The labels of unlabeled examples live in the
`LabelOracle`, which only the evaluator holds (to score pseudo labels), never a client.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import FesConfig
from ..errors import FesError
from .partition import assign_gold_labels, dirichlet_label_partition, uniform_partition
from .readers import LabeledTexts, read_agnews, read_bbc_news, stratified_split, stratified_subsample


@dataclass(frozen=True)
class UnlabeledPool:
    """A client's unlabeled text: texts and their global example ids, no labels."""

    texts: tuple[str, ...]
    example_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class ClientData:
    client_id: int
    gold_texts: tuple[str, ...]
    gold_labels: tuple[int, ...]
    unlabeled: UnlabeledPool

    @property
    def num_gold(self) -> int:
        return len(self.gold_texts)

    def all_texts(self) -> tuple[str, ...]:
        """Everything the client holds as text (what self-supervised MLM may train on)."""
        return self.gold_texts + self.unlabeled.texts


class LabelOracle:
    """Evaluator-side hidden truth for unlabeled examples (scores pseudo labels)."""

    def __init__(self, labels_by_example_id: dict[int, int]):
        self._labels = dict(labels_by_example_id)

    def accuracy(self, example_ids: list[int], predicted: list[int]) -> float:
        if not example_ids:
            return float("nan")
        hits = sum(int(self._labels[e] == p) for e, p in zip(example_ids, predicted))
        return hits / len(example_ids)


@dataclass(frozen=True)
class FederatedData:
    dataset: str
    classes: tuple[str, ...]
    clients: tuple[ClientData, ...]
    test: LabeledTexts

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def gold_clients(self) -> list[int]:
        return [c.client_id for c in self.clients if c.num_gold > 0]


def load_splits(cfg: FesConfig) -> tuple[LabeledTexts, LabeledTexts]:
    """(train, test) for the configured dataset; BBC News gets a seeded stratified split."""
    d = cfg.data
    if d.dataset == "agnews":
        if not d.data_dir:
            raise FesError("data_args.data_dir must point at the AG News folder (train.csv, test.csv)")
        train, test = read_agnews(d.data_dir, "train"), read_agnews(d.data_dir, "test")
    elif d.dataset == "bbc_news":
        full = read_bbc_news()
        # the split is a property of the dataset, not of the run: fixed seed 0
        rest, picked = stratified_split(full, d.test_fraction, seed=0)
        train, test = full.subset(rest), full.subset(picked)
    else:  # validated in config; kept for readers added later
        raise FesError(f"unknown dataset '{d.dataset}'")
    seed = cfg.common.random_seed
    return (stratified_subsample(train, d.max_train_examples, seed),
            stratified_subsample(test, d.max_test_examples, seed))


def build_federated_data(cfg: FesConfig) -> tuple[FederatedData, LabelOracle]:
    """Partition the training split over clients and mark the gold examples, from the seed."""
    train, test = load_splits(cfg)
    d = cfg.data
    rng = np.random.default_rng(cfg.common.random_seed)
    if d.partition_method == "uniform":
        parts = uniform_partition(len(train), d.client_num_in_total, rng)
    else:
        parts = dirichlet_label_partition(train.labels, d.client_num_in_total, d.partition_alpha, rng)
    gold = assign_gold_labels(parts, d.gold_labels, d.gold_clients, d.gold_sparsity, rng)
    clients = []
    for cid, (idx, gidx) in enumerate(zip(parts, gold)):
        unl = np.setdiff1d(idx, gidx)
        clients.append(ClientData(
            client_id=cid,
            gold_texts=tuple(train.texts[i] for i in gidx),
            gold_labels=tuple(int(train.labels[i]) for i in gidx),
            unlabeled=UnlabeledPool(tuple(train.texts[i] for i in unl), tuple(int(i) for i in unl)),
        ))
    oracle = LabelOracle({int(i): int(train.labels[i]) for i in range(len(train))})
    return FederatedData(d.dataset, train.classes, tuple(clients), test), oracle


def default_agnews_dir() -> Path:
    """Where the offline AG News copy lives relative to a checkout (../shared/datasets/agnews)."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "agnews"
