"""A second view for pseudo labeling (`pseudo_args.labeler: agree`): the gold labels' class
prototypes in the Sentence-BERT proxy's space.

Co-training (Blum & Mitchell 1998) trusts a label that two independent views give. The prompt
model is one view. The other is a nearest-prototype classifier over the packaged Sentence-BERT
embeddings that FeS's filter already computes: a class's prototype is the mean embedding of its
gold texts. It shares no weights with the language model, so it does not share the model's
preference for some verbalizer words. A labeling pass keeps the prompt's prediction only where the
nearest prototype names the same class. A class that no gold label shows has no prototype, and
there the prompt's prediction stands alone.

What travels: each gold client sends its per-class embedding sums and counts once (C x D floats
and C counts, as tensors of an update, counted as upload). The server adds them up (`merge`) and
sends the prototypes with every later labeling task (counted as download). No text leaves a client.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np
import torch

SUMS = "gold_prototypes.sums"
COUNTS = "gold_prototypes.counts"


def class_sums(embeddings: np.ndarray, labels: Sequence[int], num_classes: int) -> "OrderedDict[str, torch.Tensor]":
    """One gold client's share: the sum of its gold texts' embeddings per class, and their counts."""
    emb = np.asarray(embeddings, dtype=np.float64).reshape(len(labels), -1)
    sums = np.zeros((num_classes, emb.shape[1]))
    np.add.at(sums, np.asarray(labels, dtype=np.int64), emb)
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)
    return OrderedDict([(SUMS, torch.tensor(sums, dtype=torch.float32)), (COUNTS, torch.tensor(counts))])


def is_share(params: "OrderedDict[str, torch.Tensor]") -> bool:
    return SUMS in params and COUNTS in params


def merge(shares: Sequence["OrderedDict[str, torch.Tensor]"]) -> list[list[float]] | None:
    """The prototypes (C lists of D floats, unit length) from every gold client's share; a class
    without a gold text gets an empty list. None when no share came."""
    if not shares:
        return None
    sums = sum(s[SUMS].double() for s in shares)
    counts = sum(s[COUNTS].double() for s in shares)
    out = []
    for row, n in zip(sums, counts):
        mean = (row / n) if n > 0 else None
        norm = float(mean.norm()) if mean is not None else 0.0
        out.append([round(float(x), 6) for x in mean / norm] if norm > 0 else [])
    return out


def prototype_bytes(prototypes: list[list[float]] | None) -> int:
    """What the prototypes weigh on the wire, as float32."""
    return 4 * sum(len(row) for row in prototypes or [])


def agreeing(probs: np.ndarray, embeddings: np.ndarray, prototypes: list[list[float]]) -> np.ndarray:
    """(N,) True where the nearest prototype (cosine) names the prompt's class, or where the
    prompt's class has no prototype; `embeddings` are unit-length (N x D)."""
    pred = probs.argmax(axis=1)
    has = np.array([len(row) > 0 for row in prototypes])
    if not has.any():
        return np.ones(len(pred), dtype=bool)
    dim = next(len(row) for row in prototypes if row)
    matrix = np.array([row if row else [0.0] * dim for row in prototypes], dtype=np.float32)
    scores = np.asarray(embeddings, dtype=np.float32) @ matrix.T
    scores[:, ~has] = -np.inf
    return (scores.argmax(axis=1) == pred) | ~has[pred]


class GoldPrototypes:
    """The server's side of `agree`: asks every gold client for its share once (in a round where
    none of them has another task, so each answers one task per phase), keeps the merged
    prototypes, and adds them to each labeling task's options. Before they arrive (a run that
    labels from round 0), a pass labels as `paper` does."""

    def __init__(self, active: bool, gold_clients: Sequence[int]):
        self.active, self.gold = active, sorted(int(c) for c in gold_clients)
        self.value: list[list[float]] | None = None

    def wanted(self, busy: set[int]) -> list[int]:
        """The gold clients to ask for their shares in this phase (none once the prototypes are known)."""
        return self.gold if self.active and self.value is None and not busy & set(self.gold) else []

    def options(self, options: dict) -> dict:
        return {**options, "prototypes": self.value} if self.value is not None else options

    @property
    def bytes_down(self) -> int:
        return prototype_bytes(self.value)

    def absorb(self, results: list) -> list:
        """Merge the shares among a phase's results (ClientUpdate); the other results, in order."""
        shares = [r.params for r in results if is_share(r.params)]
        if shares:
            self.value = merge(shares)
        return [r for r in results if not is_share(r.params)]
