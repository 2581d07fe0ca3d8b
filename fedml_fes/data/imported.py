"""A FedNLP partition file's clients, mapped onto the rows of the data file's splits.

FedNLP names examples by their h5 index; FeS by position in its train/test split. This
maps one to the other and checks what FedNLP's own loader would silently accept: indices
outside the train split, an index held by two clients, a client count that differs from
the config. A FeS export also stores which indices carry gold labels; they are reused
when the file's gold settings (seed, n, xi, gamma) equal the run's, so an export
re-imports to the identical federation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import FesConfig
from ..errors import FesError
from .fednlp_h5 import read_fednlp_partition
from .sources import Splits


@dataclass(frozen=True)
class Imported:
    parts: list[np.ndarray]  # per client: positions in the train split
    client_test: list[np.ndarray] | None  # per client: positions in the test split
    gold: list[np.ndarray] | None  # per client: gold positions, when the file's settings match
    name: str


def _same_gold_settings(attrs: dict | None, cfg: FesConfig) -> bool:
    """A FeS-exported file's gold ids are reused only when they were drawn like this run's."""
    d = cfg.data
    want = {
        "fes_seed": cfg.common.random_seed,
        "fes_gold_labels": d.gold_labels,
        "fes_gold_clients": d.gold_clients,
        "fes_gold_sparsity": d.gold_sparsity,
    }
    return bool(attrs) and all(k in attrs and float(attrs[k]) == float(v) for k, v in want.items())


def _to_positions(ids: np.ndarray, pos: dict[int, int], where: str) -> np.ndarray:
    unknown = [int(i) for i in ids if int(i) not in pos]
    if unknown:
        raise FesError(f"{where}: index {unknown[0]} is not in the data file's train split")
    return np.sort(np.array([pos[int(i)] for i in ids], dtype=np.int64))


def imported_partition(cfg: FesConfig, splits: Splits) -> Imported:
    """A FedNLP partition file's clients as positions in our train (and test) split."""
    d = cfg.data
    part = read_fednlp_partition(d.fednlp_partition_file, d.fednlp_partition_name)
    where = f"{d.fednlp_partition_file} partition '{part.name}'"
    if len(part.train) != d.client_num_in_total:
        raise FesError(
            f"{where} has {len(part.train)} clients but data_args.client_num_in_total is "
            f"{d.client_num_in_total}: set them equal"
        )
    if splits.train_ids is None:
        raise FesError("data_args.partition_method fednlp_h5 needs dataset fednlp_h5 (ids come from its data file)")
    pos = {int(i): n for n, i in enumerate(splits.train_ids)}
    owner = np.full(len(pos), -1, dtype=np.int64)
    parts = []
    for c, ids in enumerate(part.train):
        idx = _to_positions(ids, pos, f"{where} client {c} train")
        uniq, counts = np.unique(idx, return_counts=True)
        twice = np.concatenate([uniq[counts > 1], idx[owner[idx] >= 0]])
        if len(twice):
            raise FesError(f"{where} client {c}: train index {splits.train_ids[int(twice[0])]} is listed twice")
        owner[idx] = c
        parts.append(idx)
    test_pos = {int(i): n for n, i in enumerate(splits.test_ids or ())}
    client_test = None
    if test_pos and all(int(i) in test_pos for ids in part.test for i in ids):
        client_test = [np.sort(np.array([test_pos[int(i)] for i in ids], dtype=np.int64)) for ids in part.test]
    gold = None
    if part.gold is not None and _same_gold_settings(part.attrs, cfg):
        gold = [_to_positions(g, pos, f"{where} client {c} gold") for c, g in enumerate(part.gold)]
        if any(not np.isin(g, p).all() for g, p in zip(gold, parts)):
            raise FesError(f"{where}: a client's gold indices are not among its train indices")
    return Imported(parts, client_test, gold, part.name)
