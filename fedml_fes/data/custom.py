"""A user's own labeled text: CSV, TSV or JSON lines, mapped to text_a/text_b/label by YAML.

    data_args:
      dataset: custom
      train_file: my/train.csv          # .csv / .tsv or .jsonl (one object a line)
      test_file: my/test.csv            # optional: else a seeded stratified test_fraction split
      text_columns: [title, body]       # joined with a space into text_a
      text_b_columns: []                # set for sentence pairs (text_b)
      label_column: label
      classes: [neg, pos]               # optional: label order; else the sorted train labels
      csv_header: true                  # false: no header row; columns are 0-based numbers
      delimiter: ""                     # empty: by suffix (.csv comma, .tsv tab)
      classes_file: ""                  # classes.txt: the label column holds class ids
      label_index_base: 1               # the id of classes.txt's first line (1 or 0)

Errors name the file and the row (a spreadsheet's count; the line too where quoted newlines
make them differ); an unterminated quote names the line where its field opened. The same
mapping turns Hugging Face `datasets` rows into `LabeledTexts` (see `hf.py`).
docs/CUSTOM_DATA.md describes the keys.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import FesError
from .readers import LabeledTexts, jsonl_objects

Position = int | str  # a row number, or "row (line L)" where quoted newlines make them differ
Record = tuple[Position, dict[str, Any]]  # (where the user finds the row, column -> value)


@dataclass(frozen=True)
class ColumnMapping:
    """Which columns hold what, and (CSV/TSV only) how the file is laid out.

    The layout rides along with the columns because it decides what a column *is*: a header
    name, or a 0-based number when the file has no header row."""

    text_columns: tuple[str, ...]
    label_column: str
    text_b_columns: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()  # empty: inferred from the training labels
    header: bool = True  # False: no header row; the columns are "0", "1", ...
    delimiter: str = ""  # empty: by suffix (.csv ",", .tsv tab)
    classes_file: str = ""  # classes.txt: labels are class ids into its lines
    label_index_base: int = 1  # the id of classes_file's first class

    @classmethod
    def from_config(cls, d: Any, default_text: tuple[str, ...] = (), default_label: str = "") -> "ColumnMapping":
        """From `DataConfig` (text_columns, text_b_columns, label_column, classes, and the CSV
        layout keys csv_header, delimiter, classes_file, label_index_base)."""
        return cls(
            tuple(d.text_columns) or default_text,
            d.label_column or default_label,
            tuple(d.text_b_columns),
            tuple(str(c) for c in d.classes),
            header=d.csv_header,
            delimiter=d.delimiter,
            classes_file=d.classes_file,
            label_index_base=d.label_index_base,
        )

    def required(self) -> list[str]:
        return [*self.text_columns, *self.text_b_columns, self.label_column]


@dataclass(frozen=True)
class RawRows:
    """Validated text and label strings, before labels become class ids."""

    where: str
    rows: tuple[Position, ...]
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
            raise FesError(
                f"{where} row {row_no}: no column(s) {', '.join(repr(c) for c in missing)} "
                f"(has {', '.join(repr(c) for c in list(rec)[:8])})"
            )
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
    return RawRows(where, tuple(rows), tuple(texts), tuple(texts_b) if mapping.text_b_columns else None, tuple(labels))


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


@dataclass(frozen=True)
class ClassIds:
    """A classes.txt: the data's label ids name its lines, counting from `base`.

    The official AG News / Yelp / Yahoo releases ship labels as 1..C and the names in
    classes.txt; mapping ids to names keeps class names (and so verbalizer keys) readable."""

    path: str
    names: tuple[str, ...]
    base: int = 1

    def name_of(self, label: str, where: str) -> str:
        """The class name for one label id; anything else is one line naming `where` and the value."""
        lo, hi = self.base, self.base + len(self.names) - 1
        try:
            i = int(label) - self.base
        except ValueError:
            raise FesError(
                f"{where}: label {label!r} is not a class id {lo}..{hi} of data_args.classes_file "
                f"{self.path} (a column of class names needs no classes_file; "
                f"data_args.classes orders them)"
            ) from None
        if not 0 <= i < len(self.names):
            raise FesError(
                f"{where}: class id {label!r} is outside {lo}..{hi}, the {len(self.names)} classes of "
                f"{self.path} (data_args.label_index_base: {self.base})"
            )
        return self.names[i]


def read_classes_file(path: str | Path, base: int = 1) -> ClassIds:
    """One class name per line, in id order; trailing blank lines are ignored, but a blank line
    between names is an error, since skipping it would shift every later id."""
    p = Path(path)
    if not p.is_file():
        raise FesError(f"data_args.classes_file: file not found: {p}")
    try:
        lines = [x.strip() for x in p.read_text(encoding="utf-8-sig").splitlines()]
    except UnicodeDecodeError as e:
        raise FesError(f"{p}: not UTF-8 text ({e.reason})") from None
    while lines and not lines[-1]:
        lines.pop()
    seen: dict[str, int] = {}
    for line_no, name in enumerate(lines, start=1):
        if not name:
            raise FesError(f"{p} line {line_no}: empty class name (one name per line, in id order)")
        if name in seen:
            raise FesError(f"{p} line {line_no}: class {name!r} repeats line {seen[name]}")
        seen[name] = line_no
    if not lines:
        raise FesError(f"{p} has no class names (one per line, in id order)")
    return ClassIds(str(p), tuple(lines), base)


def name_labels(raw: RawRows, ids: ClassIds) -> RawRows:
    """The rows with each label id replaced by its classes.txt name."""
    return dataclasses.replace(
        raw, labels=tuple(ids.name_of(label, f"{raw.where} row {pos}") for pos, label in zip(raw.rows, raw.labels))
    )


def _position(row_no: int, line: int) -> Position:
    """Rows as a spreadsheet counts them; the line too where quoted newlines make them differ."""
    return row_no if row_no == line else f"{row_no} (line {line})"


def _tapped(f: Iterable[str], lines: list[str]) -> Iterator[str]:
    """The file's lines, each also appended to `lines` (the current record's text, for errors)."""
    for line in f:
        lines.append(line)
        yield line


def _open_quote(lines: list[str], delimiter: str) -> tuple[int, bool]:
    """(index into `lines` of the line where the last quoted field opened or -1, whether it is
    still open at the end): the csv module reports only where it gave up, not where the
    culprit quote was."""
    opened, in_quote, field_start = -1, False, True
    for i, line in enumerate(lines):
        j = 0
        while j < len(line):
            ch = line[j]
            if in_quote:
                if ch == '"':
                    if line[j + 1 : j + 2] == '"':
                        j += 1  # a doubled quote is a literal one
                    else:
                        in_quote = False
            elif ch == '"' and field_start:
                in_quote, opened = True, i
            field_start = not in_quote and ch in (delimiter, "\n", "\r")
            j += 1
    return opened, in_quote


def _csv_error(where: str, start: int, lines: list[str], delimiter: str, e: csv.Error) -> FesError:
    """A csv.Error as one line naming the line where the bad record (or its open quote) starts."""
    opened, still_open = _open_quote(lines, delimiter)
    quote_line = start + max(opened, 0)
    end = start + max(len(lines) - 1, 0)
    if still_open:
        return FesError(
            f"{where} line {quote_line}: unterminated quote: the quoted field opening on this line "
            f"never closes (read on to line {end}: {e}); close it, and write a literal quote "
            f'inside quotes twice ("")'
        )
    if opened >= 0 and end > quote_line:
        return FesError(
            f"{where} line {quote_line}: a quoted field opens on this line and runs on to line {end}, "
            f"where the CSV breaks ({e}): is its closing quote missing on line {quote_line}?"
        )
    return FesError(
        f'{where} line {end}: malformed CSV ({e}); a literal quote inside a quoted field is written twice ("")'
    )


def _csv_rows(f: Iterable[str], where: str, delimiter: str) -> Iterator[tuple[int, int, list[str]]]:
    """(row number, line the row starts on, fields) for each record, in strict mode so that an
    unterminated quote is an error rather than a field that silently swallows the rest of the
    file."""
    lines: list[str] = []
    reader = csv.reader(_tapped(f, lines), delimiter=delimiter, strict=True)
    row_no = 0
    while True:
        start = reader.line_num + 1
        lines.clear()
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise _csv_error(where, start, lines, delimiter, e) from None
        row_no += 1
        yield row_no, start, row


def _csv_records(f: Iterable[str], where: str, delimiter: str, header: bool = True) -> Iterator[Record]:
    """Records keyed by the header's names, or by "0", "1", ... when the file has no header."""
    rows = _csv_rows(f, where, delimiter)
    names: list[str] | None = None
    like = "the header"
    if header:
        first = next(rows, None)
        if first is None or not first[2]:
            raise FesError(
                f"{where} is empty (expected a header row naming the columns; "
                f"data_args.csv_header: false reads a file without one)"
            )
        names = [h.strip() for h in first[2]]
    for row_no, line, row in rows:
        if not row:
            continue
        if names is None:
            names, like = [str(i) for i in range(len(row))], f"row {_position(row_no, line)}"
        if len(row) != len(names):
            raise FesError(
                f"{where} row {_position(row_no, line)}: expected {len(names)} columns like {like}, got {len(row)}"
            )
        yield _position(row_no, line), dict(zip(names, row))


def _delimiter(mapping: ColumnMapping, suffix: str) -> str:
    return mapping.delimiter or ("\t" if suffix == ".tsv" else ",")


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
    jsonl = suffix in (".jsonl", ".json")
    if jsonl and not mapping.header:
        raise FesError(
            f"data_args.csv_header: false is for .csv/.tsv files; {p} is JSON lines, whose objects name their columns"
        )
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:
            records = (
                jsonl_objects(f, str(p))
                if jsonl
                else _csv_records(f, str(p), _delimiter(mapping, suffix), mapping.header)
            )
            return collect(records, mapping, str(p))
    except UnicodeDecodeError as e:
        raise FesError(f"{p}: not UTF-8 text ({e.reason})") from None


def read_custom(train_file: str, test_file: str, mapping: ColumnMapping) -> tuple[LabeledTexts, LabeledTexts | None]:
    """(train, test or None): classes come from classes_file, the mapping or the training labels."""
    ids = read_classes_file(mapping.classes_file, mapping.label_index_base) if mapping.classes_file else None

    def read(path: str, key: str) -> RawRows:
        raw = read_rows(path, mapping, key)
        return name_labels(raw, ids) if ids else raw

    train_raw = read(train_file, "train_file")
    if ids:
        classes, key = ids.names, f"data_args.classes_file {ids.path}"
    elif mapping.classes:
        classes, key = mapping.classes, "data_args.classes"
    else:
        classes, key = infer_classes(train_raw.labels), f"the classes found in {train_file}"
    train = to_labeled(train_raw, classes, key)
    test = to_labeled(read(test_file, "test_file"), classes, key) if test_file else None
    return train, test
