"""The federated few-shot world: per-client gold and unlabeled data, a test set, an oracle.

A client sees `ClientData`: its few gold (text, label) pairs and an `UnlabeledPool` that
holds texts and example ids only. The labels of unlabeled examples live in the
`LabelOracle`, which only the evaluator holds (to score pseudo labels), never a client.
Pair tasks (NLI) add the second segments, `gold_texts_b` and `UnlabeledPool.texts_b`; both
are None for single-text tasks, so code written for single texts is unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..config import FesConfig
from .fednlp_h5 import partition_name
from .imported import imported_partition
from .partition import assign_gold_labels, partition_clients, split_evenly
from .readers import LabeledTexts, stratified_split
from .sources import Splits, load_source


@dataclass(frozen=True)
class UnlabeledPool:
    """A client's unlabeled text: texts and their global example ids, no labels."""

    texts: tuple[str, ...]
    example_ids: tuple[int, ...]
    texts_b: tuple[str, ...] | None = None  # second segments of pairs; None for single texts

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class ClientData:
    client_id: int
    gold_texts: tuple[str, ...]
    gold_labels: tuple[int, ...]
    unlabeled: UnlabeledPool
    gold_texts_b: tuple[str, ...] | None = None  # second segments of gold pairs; None for single texts
    gold_example_ids: tuple[int, ...] = ()  # global ids of the gold examples (the client's own)

    @property
    def num_gold(self) -> int:
        return len(self.gold_texts)

    @property
    def is_pair(self) -> bool:
        return self.gold_texts_b is not None or self.unlabeled.texts_b is not None

    def all_texts(self) -> tuple[str, ...]:
        """Everything the client holds as text (what self-supervised MLM may train on)."""
        texts = self.gold_texts + self.unlabeled.texts
        return texts + (self.gold_texts_b or ()) + (self.unlabeled.texts_b or ())


class LabelOracle:
    """Evaluator-side hidden truth for unlabeled examples (scores pseudo labels)."""

    def __init__(self, labels_by_example_id: dict[int, int]):
        self._labels = dict(labels_by_example_id)

    def labels_of(self, example_ids: list[int]) -> list[int]:
        return [self._labels[e] for e in example_ids]

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
    # FedNLP's name for the partition (e.g. niid_label_clients=100_alpha=1.0): reports, export
    partition: str = ""
    # Per client, positions in `test` of its local test set (FedNLP-style per-client scores)
    client_test: tuple[tuple[int, ...], ...] = ()
    notes: tuple[str, ...] = ()  # how the partition came about, when not obvious
    # gold labels held out of training (`hold_out_validation`): what a configurator scores on
    validation: LabeledTexts | None = None

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def gold_clients(self) -> list[int]:
        return [c.client_id for c in self.clients if c.num_gold > 0]

    def pooled_gold(self) -> LabeledTexts | None:
        """Every client's gold labels as one set, client by client in order (None: no gold label)."""
        clients = [c for c in self.clients if c.num_gold]
        if not clients:
            return None
        pair = any(c.gold_texts_b is not None for c in clients)
        return LabeledTexts(
            tuple(t for c in clients for t in c.gold_texts),
            np.asarray([y for c in clients for y in c.gold_labels], dtype=np.int64),
            self.classes,
            tuple(t for c in clients for t in (c.gold_texts_b or ("",) * c.num_gold)) if pair else None,
        )


# Per-client test sets draw from their own stream, so adding them changed no partition.
_CLIENT_TEST_STREAM = 0x7E57
# The validation hold-out draws from its own stream too: the partition and gold labels stay as they were.
_VALIDATION_STREAM = 0x7A11


def load_splits(cfg: FesConfig) -> tuple[LabeledTexts, LabeledTexts]:
    """(train, test) for the configured dataset (see `sources.py` for how splits are made)."""
    splits = load_source(cfg)
    return splits.train, splits.test


def federate(cfg: FesConfig, splits: Splits) -> tuple[FederatedData, LabelOracle]:
    """Partition the training split over clients and mark the gold examples, from the seed."""
    train, test = splits.train, splits.test
    d = cfg.data
    seed = cfg.common.random_seed
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    gold = None
    if d.partition_method == "fednlp_h5":
        imported = imported_partition(cfg, splits)
        parts, client_test, gold, name = imported.parts, imported.client_test, imported.gold, imported.name
        notes.append(
            f"clients read from {d.fednlp_partition_file} ({name})"
            + ("; gold labels as stored there" if gold is not None else "")
        )
    else:
        parts = partition_clients(
            d.partition_method, train.labels, d.client_num_in_total, d.partition_alpha, d.partition_beta, rng
        )
        client_test, name = (
            None,
            partition_name(d.partition_method, d.client_num_in_total, d.partition_alpha, d.partition_beta),
        )
    if gold is None:
        gold = assign_gold_labels(parts, d.gold_labels, d.gold_clients, d.gold_sparsity, rng)
    if client_test is None:
        if d.partition_method == "fednlp_h5":
            notes.append(
                "its per-client test indices are not all in the test split: per-client test sets "
                "are a seeded even split instead"
            )
        client_test = split_evenly(len(test), len(parts), np.random.default_rng([seed, _CLIENT_TEST_STREAM]))
    pick_b = (lambda ix: tuple(train.texts_b[i] for i in ix)) if train.texts_b is not None else (lambda ix: None)
    clients = []
    for cid, (idx, gidx) in enumerate(zip(parts, gold)):
        unl = np.setdiff1d(idx, gidx)
        clients.append(
            ClientData(
                client_id=cid,
                gold_texts=tuple(train.texts[i] for i in gidx),
                gold_labels=tuple(int(train.labels[i]) for i in gidx),
                unlabeled=UnlabeledPool(tuple(train.texts[i] for i in unl), tuple(int(i) for i in unl), pick_b(unl)),
                gold_texts_b=pick_b(gidx),
                gold_example_ids=tuple(int(i) for i in gidx),
            )
        )
    oracle = LabelOracle(dict(enumerate(train.labels.tolist())))
    data = FederatedData(
        d.dataset,
        train.classes,
        tuple(clients),
        test,
        name,
        tuple(tuple(int(i) for i in t) for t in client_test),
        tuple(notes),
    )
    return data, oracle


def build_federated_data(cfg: FesConfig) -> tuple[FederatedData, LabelOracle]:
    """Read the configured dataset, partition it and mark the gold examples, from the seed."""
    return federate(cfg, load_source(cfg))


def hold_out_validation(data: FederatedData, fraction: float, seed: int) -> FederatedData:
    """Take `fraction` of the gold labels (per class, seeded) out of their clients' training
    data into `data.validation`, for a server that decides on validation accuracy (AUG-E's
    delta_acc, AutoFedNLP's trials). Scored on the labels it trains on, such a server sees
    nothing: a few rounds fit them (accuracy 1.0), every configuration gains 0 and the
    cheapest one wins. In a deployment each gold client keeps these labels aside and reports
    the global model's accuracy on them. At least one gold label stays for training; with
    too few to split, nothing is held out and the server scores on the training labels."""
    gold = data.pooled_gold()
    if fraction <= 0 or gold is None:
        return data
    owner = [(c.client_id, j) for c in data.clients for j in range(c.num_gold)]  # pooled_gold's order
    _, picked = stratified_split(gold, fraction, [seed, _VALIDATION_STREAM])
    picked = picked[: len(gold) - 1]
    if not len(picked):
        return replace(
            data,
            notes=data.notes
            + (
                f"{len(gold)} gold label(s): too few to hold {fraction:.0%} out "
                f"for validation; the server scores on the training labels",
            ),
        )
    held = {owner[i] for i in picked}
    kept = []
    for c in data.clients:
        keep = [j for j in range(c.num_gold) if (c.client_id, j) not in held]
        kept.append(
            c
            if len(keep) == c.num_gold
            else replace(
                c,
                gold_texts=tuple(c.gold_texts[j] for j in keep),
                gold_labels=tuple(c.gold_labels[j] for j in keep),
                gold_texts_b=None if c.gold_texts_b is None else tuple(c.gold_texts_b[j] for j in keep),
                gold_example_ids=tuple(c.gold_example_ids[j] for j in keep) if c.gold_example_ids else (),
            )
        )
    note = f"{len(picked)} of {len(gold)} gold labels held out of training as the validation set"
    return replace(data, clients=tuple(kept), validation=gold.subset(picked), notes=data.notes + (note,))
