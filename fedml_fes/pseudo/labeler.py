"""Which predictions a client keeps as pseudo labels after a labeling pass.

Every pass relabels the client's whole pool with the current global model (labels from
earlier passes are replaced), then keeps the `target` most confident predictions, optionally
above a confidence threshold and under per-class quotas. Quotas come from the client's gold
labels or from the predicted distribution, never from hidden truth (the client has none).

Before selection a pass may correct the model's label bias (`pseudo_args.labeler`): a small LM
prefers some verbalizer words whatever the text says, and self-training on its most confident
answers repeats that preference. `contextual` divides each prediction by the model's answer to
content-free inputs (Zhao et al., "Calibrate Before Use", ICML 2021): a bias of the model, not
of the client's data, so it holds on a skewed pool. `aligned` divides by the pool's own mean
prediction (ReMixMatch's distribution alignment to a uniform prior): it also removes the
client's true skew, which a non-IID pool has. `ensemble` corrects nothing here: the pass
averages the model's predictions under every built-in pattern of the dataset (PET's ensemble,
Schick & Schuetze 2021; `runtime/methods.py`), so one cue phrase's preference for some words
weighs as one view among several. `flexmatch` corrects nothing either: it changes which
predictions are kept (FlexMatch's per-class thresholds, `flexible_thresholds`). `classwise`
changes what a pick is: each class gets an equal share of the budget, filled with the pool's
texts that have the highest probability of that class, labeled as it (`select_classwise`). A
class the model never answers (TREC-6 seed 13: DESC, 0 of 64 test texts predicted after 10
rounds) is still ranked by its own probability, so it gets labels the argmax never gives it.
`agree` keeps only predictions that a second, independent view gives too: the nearest class
prototype of the gold labels in the Sentence-BERT proxy's space (co-training; `prototypes.py`).
"""

from __future__ import annotations

import numpy as np

LABELERS = ("paper", "contextual", "aligned", "ensemble", "flexmatch", "classwise", "agree")
# FlexMatch's (Zhang et al., NeurIPS 2021) fixed threshold tau, which its class thresholds scale
FLEX_TAU = 0.95
# Zhao et al.'s content-free inputs: the pattern filled with no content
CONTENT_FREE = ("N/A", "", "[MASK]")


def correct_bias(probs: np.ndarray, labeler: str, reference: np.ndarray | None = None) -> np.ndarray:
    """`probs` (N x C) with the label bias divided out, renormalised; `reference` is the model's
    mean distribution on CONTENT_FREE inputs (labeler `contextual`). `paper` and `ensemble`
    (its views are averaged before this), `flexmatch`, `classwise` and `agree` (they change the
    selection): unchanged."""
    if labeler in ("paper", "ensemble", "flexmatch", "classwise", "agree") or len(probs) == 0:
        return probs
    if labeler == "contextual":
        if reference is None:
            raise ValueError("labeler 'contextual' needs the content-free reference distribution")
        prior = np.asarray(reference, dtype=np.float64).reshape(-1)
    elif labeler == "aligned":
        prior = probs.mean(axis=0, dtype=np.float64)
    else:
        raise ValueError(f"unknown labeler '{labeler}' (known: {', '.join(LABELERS)})")
    scaled = probs / np.clip(prior, 1e-12, None)
    return (scaled / scaled.sum(axis=1, keepdims=True)).astype(probs.dtype)


def class_quotas(target: int, shares: np.ndarray) -> np.ndarray:
    """Split `target` over classes in proportion to `shares` (largest remainders)."""
    shares = shares / shares.sum() if shares.sum() > 0 else np.full(len(shares), 1 / len(shares))
    raw = shares * target
    quotas = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - quotas))[: target - quotas.sum()]:
        quotas[i] += 1
    return quotas


def flexible_thresholds(probs: np.ndarray, tau: float = FLEX_TAU) -> np.ndarray:
    """FlexMatch's class thresholds (C,) from one pool's predictions (N x C).

    A class's learning effect is how many texts of the pool the model predicts as it with
    confidence above `tau`; normalised by the best-learned class's count (or, early on, by the
    texts no class yet claims: FlexMatch's warm-up) and mapped through x / (2 - x), it scales
    `tau` down for the classes the model has not learned, so that they get pseudo labels too
    instead of the few classes it already answers with confidence."""
    n, num_classes = probs.shape
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    sigma = np.bincount(pred[conf > tau], minlength=num_classes).astype(np.float64)
    beta = sigma / max(sigma.max(), n - sigma.sum(), 1.0)
    return tau * beta / (2.0 - beta)


def select_pseudo(
    probs: np.ndarray,
    target: int,
    threshold: float = 0.0,
    balance: str = "none",
    gold_labels: list[int] | None = None,
    class_thresholds: np.ndarray | None = None,
) -> np.ndarray:
    """Indices (into the pool) of predictions to keep, most confident first.

    With `class_thresholds` (labeler `flexmatch`) a prediction must reach its class's threshold,
    and the budget goes to the predictions furthest above theirs: FlexMatch keeps every
    prediction above its class's threshold, FedFSL's budget keeps `target` of them."""
    n, num_classes = probs.shape
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    ok = conf >= threshold
    if class_thresholds is None:
        order = np.argsort(-conf, kind="stable")
    else:
        margin = conf - class_thresholds[pred]
        ok &= margin >= 0
        order = np.argsort(-margin, kind="stable")
    order = order[ok[order]]
    target = min(target, len(order))
    if balance == "none" or target == 0:
        return order[:target]
    if balance == "gold" and gold_labels:
        shares = np.bincount(np.asarray(gold_labels), minlength=num_classes).astype(float)
    else:  # "predicted", or "gold" on a client without gold labels
        shares = np.bincount(pred[order], minlength=num_classes).astype(float)
    quotas = class_quotas(target, shares)
    kept = [i for c in range(num_classes) for i in order[pred[order] == c][: quotas[c]]]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(len(order))
    return np.asarray(sorted(kept, key=lambda i: rank[i]), dtype=np.int64)


def select_classwise(probs: np.ndarray, target: int, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(indices into the pool, their labels): `target` picks split evenly over the classes (the
    remainder to the classes with the most probability mass in the pool), each class's share the
    texts with the highest probability of that class (at least `threshold`), each text picked
    once. Classes take turns, each taking its best remaining text, so one class cannot take the
    texts another ranks first before that class has had its turn. Most probable pick first."""
    n, num_classes = probs.shape
    target = min(target, n)
    if target == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    mass = probs.sum(axis=0)
    quotas = np.full(num_classes, target // num_classes)
    quotas[np.argsort(-mass, kind="stable")[: target - quotas.sum()]] += 1
    ranked = [
        [i for i in np.argsort(-probs[:, c], kind="stable") if probs[i, c] >= threshold] for c in range(num_classes)
    ]
    cursor = [0] * num_classes
    taken: dict[int, int] = {}
    while True:
        moved = False
        for c in range(num_classes):
            if quotas[c] == 0:
                continue
            while cursor[c] < len(ranked[c]) and ranked[c][cursor[c]] in taken:
                cursor[c] += 1
            if cursor[c] < len(ranked[c]):
                taken[int(ranked[c][cursor[c]])] = c
                quotas[c] -= 1
                moved = True
        if not moved:
            break
    keep = sorted(taken, key=lambda i: (-probs[i, taken[i]], i))
    return np.asarray(keep, dtype=np.int64), np.asarray([taken[i] for i in keep], dtype=np.int64)
