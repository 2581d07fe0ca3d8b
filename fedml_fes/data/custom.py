"""A user's own labeled text: CSV, TSV or JSON lines, mapped to text_a/text_b/label by YAML.

    data_args:
      dataset: custom
      train_file: my/train.csv          # .csv / .tsv (header row) or .jsonl (one object a line)
      test_file: my/test.csv            # optional: else a seeded stratified test_fraction split
      text_columns: [title, body]       # joined with a space into text_a
      text_b_columns: []                # set for sentence pairs (text_b)
      label_column: label
      classes: [neg, pos]               # optional: label order; else the sorted train labels

The same mapping turns Hugging Face `datasets` rows into `LabeledTexts` (see `hf.py`).
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import FesError
from .readers import LabeledTexts

Record = tuple[int, dict[str, Any]]  # (row number as the user sees it, column -> value)


@dataclass(frozen=True)
class ColumnMapping:
    text_columns: tuple[str, ...]
    label_column: str
    text_b_columns: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()  # empty: inferred from the training labels

    @classmethod
    def from_config(cls, d: Any, default_text: tuple[str, ...] = (), default_label: str = "") -> "ColumnMapping":
        """From `DataConfig` (text_columns, text_b_columns, label_column, classes)."""
        return cls(tuple(d.text_columns) or default_text, d.label_column or default_label,
                   tuple(d.text_b_columns), tuple(str(c) for c in d.classes))

    def required(self) -> list[str]:
        return [*self.text_columns, *self.text_b_columns, self.label_column]


@dataclass(frozen=True)
class RawRows:
    """Validated text and label strings, before labels become class ids."""

    where: str
    rows: tuple[int, ...]
    texts: tuple[str, ...]
    texts_b: tuple[str, ...] | None
    labels: tuple[str, ...]


def label_text(value: Any) -> str:
    """Labels are matched as text: 1 and "1" are the same class; 1.0 stays "1.0"."""
    return "" if value is None else str(value).strip()


def _joined(record: dict[str, Any], columns: tuple[str, ...]) -> str:
    return " ".join(" ".join(str(record[c]).split()) for c in columns if record[c] is not None).strip()


def collect(records: Iterable[Record], mapping: ColumnMapping, where: str) -> RawRows:
    """Check every row has the mapped columns, non-empty texts and a label."""
    if not mapping.text_columns or not mapping.label_column:
        raise FesError("data_args.text_columns and data_args.label_column must name the columns to read")
    rows: list[int] = []
    texts: list[str] = []
    texts_b: list[str] = []
    labels: list[str] = []
    needed = mapping.required()
    for row_no, rec in records:
        missing = [c for c in needed if c not in rec]
        if missing:
            raise FesError(f"{where} row {row_no}: no column(s) {', '.join(repr(c) for c in missing)} "
                           f"(has {', '.join(repr(c) for c in list(rec)[:8])})")
        a = _joined(rec, mapping.text_columns)
        if not a:
            raise FesError(f"{where} row {row_no}: empty text in {', '.join(mapping.text_columns)}")
        if mapping.text_b_columns:
            b = _joined(rec, mapping.text_b_columns)
            if not b:
                raise FesError(f"{where} row {row_no}: empty text in {', '.join(mapping.text_b_columns)}")
            texts_b.append(b)
        label = label_text(rec[mapping.label_column])
        if not label:
            raise FesError(f"{where} row {row_no}: empty label in column '{mapping.label_column}'")
        rows.append(row_no)
        texts.append(a)
        labels.append(label)
    if not texts:
        raise FesError(f"{where} has no rows")
    return RawRows(where, tuple(rows), tuple(texts), tuple(texts_b) if mapping.text_b_columns else None,
                   tuple(labels))


def infer_classes(labels: Iterable[str]) -> tuple[str, ...]:
    """Sorted distinct labels: numerically when all are integers (so "10" follows "9")."""
    names = set(labels)
    try:
        return tuple(sorted(names, key=int))
    except ValueError:
        return tuple(sorted(names))


def to_labeled(raw: RawRows, classes: tuple[str, ...], key: str = "data_args.classes") -> LabeledTexts:
    """Class ids by position in `classes`; a label outside it names the file and row."""
    index = {c: i for i, c in enumerate(classes)}
    ids = np.empty(len(raw.labels), dtype=np.int64)
    for i, (row_no, label) in enumerate(zip(raw.rows, raw.labels)):
        if label not in index:
            shown = ", ".join(classes[:10]) + (", ..." if len(classes) > 10 else "")
            raise FesError(f"{raw.where} row {row_no}: label {label!r} is not in {key} ({shown})")
        ids[i] = index[label]
    return LabeledTexts(raw.texts, ids, classes, raw.texts_b)


def _csv_records(f, where: str, delimiter: str) -> Iterator[Record]:
    reader = csv.reader(f, delimiter=delimiter)
    header = next(reader, None)
    if not header:
        raise FesError(f"{where} is empty (expected a header row naming the columns)")
    header = [h.strip() for h in header]
    for row_no, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise FesError(f"{where} row {row_no}: expected {len(header)} columns like the header, got {len(row)}")
        yield row_no, dict(zip(header, row))


def _jsonl_records(f, where: str) -> Iterator[Record]:
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


def read_rows(path: str | Path, mapping: ColumnMapping, key: str) -> RawRows:
    """Read one user file by its suffix: .csv, .tsv, .jsonl / .json (JSON lines)."""
    p = Path(path)
    if not str(path):
        raise FesError(f"data_args.{key} must name your data file (.csv, .tsv or .jsonl)")
    if not p.is_file():
        raise FesError(f"data_args.{key}: file not found: {p}")
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl", ".json"):
        raise FesError(f"data_args.{key}: {p} must end in .csv, .tsv or .jsonl")
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:
            records = (_jsonl_records(f, str(p)) if suffix in (".jsonl", ".json")
                       else _csv_records(f, str(p), "\t" if suffix == ".tsv" else ","))
            return collect(records, mapping, str(p))
    except UnicodeDecodeError as e:
        raise FesError(f"{p}: not UTF-8 text ({e.reason})") from None
    except csv.Error as e:
        raise FesError(f"{p}: malformed CSV ({e})") from None


def read_custom(train_file: str, test_file: str, mapping: ColumnMapping) -> tuple[LabeledTexts, LabeledTexts | None]:
    """(train, test or None): classes come from the mapping or the training labels."""
    train_raw = read_rows(train_file, mapping, "train_file")
    classes = mapping.classes or infer_classes(train_raw.labels)
    key = "data_args.classes" if mapping.classes else f"the classes found in {train_file}"
    train = to_labeled(train_raw, classes, key)
    test = to_labeled(read_rows(test_file, mapping, "test_file"), classes, key) if test_file else None
    return train, test
