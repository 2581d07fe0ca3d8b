"""Which classes training moved, and how that follows the gold labels' skew; `class_report`
makes the per-class record (accuracy, confusion matrix) every evaluation writes.

A run folder holds the few-shot set's class counts (`gold_classes.json`), the test split's
(`test_classes.json`) and, in `summary.json`, the confusion matrix of the untrained model
(`initial_test`) and of the last evaluation (`test`). From them, per class: its share of the
gold labels and of the test texts, the share of test texts the model predicts as it before
and after training, and its accuracy before and after. A model that learns the few-shot set's
class frequencies instead of its texts shows as predicted shares that move toward the gold
shares, and accuracy lost on the classes the gold labels under-represent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FesError


def class_report(pred: np.ndarray, labels: np.ndarray, num_classes: int) -> dict[str, Any]:
    """What the accuracy alone hides (a model that predicts one class): per-class accuracy, the
    confusion matrix (rows: true class, columns: predicted) and the majority-class rate."""
    labels = np.asarray(labels)
    confusion = np.zeros((num_classes, num_classes), dtype=int)
    np.add.at(confusion, (labels, np.asarray(pred)), 1)
    support = confusion.sum(1)
    per_class = [float(confusion[c, c] / support[c]) if support[c] else float("nan") for c in range(num_classes)]
    return {
        "per_class_acc": per_class,
        "confusion": confusion.tolist(),
        "majority_rate": float(support.max() / max(1, support.sum())),
    }


@dataclass(frozen=True)
class ClassShift:
    name: str
    gold_share: float  # of the run's gold labels
    test_share: float  # of its test texts
    predicted_before: float  # share of test texts predicted as this class, untrained model
    predicted_after: float  # the same after the last round
    acc_before: float
    acc_after: float

    @property
    def skew(self) -> float:
        """How much more of the gold labels than of the test texts this class holds."""
        return self.gold_share - self.test_share

    @property
    def moved(self) -> float:
        return self.predicted_after - self.predicted_before

    @property
    def excess(self) -> float:
        """How much more often the trained model predicts this class than the test texts hold it."""
        return self.predicted_after - self.test_share


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise FesError(f"{path}: cannot read ({e})") from None


def _shares(confusion: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(predicted share per class, accuracy per class) from a confusion matrix (rows: true)."""
    m = np.asarray(confusion, dtype=float)
    rows = m.sum(1)
    acc = np.divide(np.diag(m), rows, out=np.full(len(m), np.nan), where=rows > 0)
    return m.sum(0) / max(m.sum(), 1.0), acc


def class_shift(run_dir: str | Path) -> list[ClassShift]:
    """One row per class of a finished run made with the untrained model's confusion matrix
    (`summary.json` `initial_test`, written since 2026-11-27)."""
    run_dir = Path(run_dir)
    summary = _json(run_dir / "summary.json")
    before, after = summary.get("initial_test") or {}, summary.get("test") or {}
    if "confusion" not in before or "confusion" not in after:
        raise FesError(f"{run_dir}: summary.json has no initial_test and test confusion matrices (an older run?)")
    gold = _json(run_dir / "gold_classes.json")
    test = _json(run_dir / "test_classes.json")
    names = list(after["classes"])
    if gold["classes"] != names or test["classes"] != names:
        raise FesError(f"{run_dir}: gold, test and summary name different classes")
    g = np.asarray(gold["counts"], dtype=float)
    t = np.asarray(test["counts"], dtype=float)
    pb, ab = _shares(before["confusion"])
    pa, aa = _shares(after["confusion"])
    return [
        ClassShift(n, g[i] / max(g.sum(), 1.0), t[i] / max(t.sum(), 1.0), pb[i], pa[i], ab[i], aa[i])
        for i, n in enumerate(names)
    ]


def skew_correlation(rows: list[ClassShift], of: str = "excess") -> float:
    """Pearson correlation, over classes (of one or many runs), between a class's gold-label
    skew and `of`: `excess` (the trained model's predicted share minus the test share: near 1
    when it learned the few-shot set's class frequencies) or `moved` (how far training moved
    the predicted share, which also holds the untrained prompt's own biases being undone)."""
    x = np.asarray([r.skew for r in rows])
    y = np.asarray([getattr(r, of) for r in rows])
    if len(rows) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


@dataclass(frozen=True)
class ClassMix:
    """A finished run's classes as its last evaluation saw them, and its pseudo labels' mix."""

    names: list[str]
    test_share: np.ndarray
    predicted: np.ndarray  # share of test texts predicted as each class after the last round
    accuracy: np.ndarray
    pseudo_share: np.ndarray | None  # of the pseudo labels the clients held at the end; None: none


def class_mix(run_dir: str | Path) -> ClassMix:
    """Why self-training can lose accuracy with mostly right labels: the most confident
    predictions come from the classes the model already knows, so the pseudo labels' class mix
    (`clients/*/pseudo_labels.json`) can differ from the data's, and the model follows it."""
    run_dir = Path(run_dir)
    after = _json(run_dir / "summary.json").get("test") or {}
    if "confusion" not in after:
        raise FesError(f"{run_dir}: summary.json has no test confusion matrix")
    names = list(after["classes"])
    test = np.asarray(_json(run_dir / "test_classes.json")["counts"], dtype=float)
    predicted, accuracy = _shares(after["confusion"])
    counts = np.zeros(len(names))
    for path in sorted(run_dir.glob("clients/*/pseudo_labels.json")):
        counts += np.bincount(np.asarray(_json(path).get("labels", []), dtype=int), minlength=len(names))[: len(names)]
    pseudo = counts / counts.sum() if counts.sum() > 0 else None
    return ClassMix(names, test / max(test.sum(), 1.0), predicted, accuracy, pseudo)
