"""FedNLP's h5 files: import its data and partition files, export ours in the same layout.

Layout (FedNLP `data/raw_data_loader/base` and `data_manager/base_data_manager.py`):

- data file: `attributes` = a JSON string with `index_list`, `train_index_list`,
  `test_index_list`, `label_vocab` ({label: id}), `num_labels`, `task_type`; then one scalar
  string dataset per example, `X/<index>` (text) and `Y/<index>` (label name).
  Files without train/test lists are split 90/10 over `index_list`, as FedNLP does.
- partition file: one group per partition, e.g. `niid_label_clients=100_alpha=1.0` or
  `uniform`, holding `n_clients`, `alpha` (or `beta`) and `partition_data/<client>/train` and
  `.../test`: arrays of data-file indices.

Texts are imported and exported exactly as stored (UTF-8, whitespace and all), so a FedNLP
file read and written back holds the same bytes; the other readers' whitespace clean-up does
not apply here.

FeS extensions that FedNLP ignores: `X_b/<index>` for the second text of pairs (NLI), and
per client `partition_data/<client>/gold` (indices carrying gold labels) plus the gold
settings as group attributes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FesError
from .atomic import atomic_path
from .readers import LabeledTexts

_NUMBER = re.compile(r"=(-?\d+(?:\.\d*)?(?:[eE]-?\d+)?)")


def _h5py() -> Any:
    import h5py  # noqa: PLC0415 - only FedNLP interop needs it

    return h5py


def _text(value: Any) -> str:
    """A stored string as it is: UTF-8 bytes decoded, no whitespace touched."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# FedNLP stores one scalar string dataset per example. h5py's high-level access costs
# ~90 us per item (path parsing, Dataset objects); the low-level calls below read and write
# the identical on-disk format 2-3x faster, which matters at 100k examples (30 s -> 10 s).


def _read_str(group: Any, key: str) -> str | None:
    """The scalar string `group/key`, or None when absent."""
    h5py = _h5py()
    try:
        d = h5py.h5d.open(group.id, key.encode())
    except KeyError:
        return None
    buf = np.empty((), dtype=d.dtype)
    d.read(h5py.h5s.ALL, h5py.h5s.ALL, buf)
    return _text(buf[()])


class _StrWriter:
    """Writes `group[key] = text` as h5py does (variable-length UTF-8 scalar), only faster."""

    def __init__(self) -> None:
        h5py = _h5py()
        self._h5py = h5py
        self._dtype = h5py.string_dtype("utf-8")
        self._type = h5py.h5t.py_create(self._dtype, logical=True)
        self._space = h5py.h5s.create(h5py.h5s.SCALAR)

    def __call__(self, group: Any, key: str, text: str) -> None:
        d = self._h5py.h5d.create(group.id, key.encode(), self._type, self._space)
        d.write(self._h5py.h5s.ALL, self._h5py.h5s.ALL, np.array(text, dtype=self._dtype))


def _open(path: str | Path, what: str, key: str):
    p = Path(path)
    if not str(path):
        raise FesError(f"data_args.{key} must name the FedNLP {what} (.h5)")
    if not p.is_file():
        raise FesError(f"data_args.{key}: {what} not found: {p}")
    try:
        return _h5py().File(p, "r")
    except OSError as e:
        raise FesError(f"{p}: not a readable h5 file ({e})") from None


@dataclass(frozen=True)
class FednlpData:
    """A FedNLP data file as FeS splits; `*_ids` are the h5 indices of each row."""

    train: LabeledTexts
    test: LabeledTexts
    train_ids: tuple[int, ...]
    test_ids: tuple[int, ...]


def _classes(vocab: Any, path: Path) -> tuple[str, ...]:
    if not isinstance(vocab, dict) or not vocab:
        raise FesError(f"{path}: attributes.label_vocab must be a non-empty mapping of label -> id")
    by_id = {int(v): str(k) for k, v in vocab.items()}
    if sorted(by_id) != list(range(len(vocab))):
        raise FesError(f"{path}: attributes.label_vocab ids must be 0..{len(vocab) - 1}, got {sorted(by_id)}")
    return tuple(by_id[i] for i in range(len(vocab)))


def _split(f: Any, ids: list[int], classes: tuple[str, ...], path: Path, which: str) -> LabeledTexts:
    index = {c: i for i, c in enumerate(classes)}
    if "X" not in f or "Y" not in f:
        raise FesError(f"{path}: no X/ and Y/ groups (not a FedNLP text classification data file)")
    gx, gy = f["X"], f["Y"]
    gb = f["X_b"] if "X_b" in f else None
    texts, texts_b, labels = [], [], np.empty(len(ids), dtype=np.int64)
    for n, i in enumerate(ids):
        key = str(i)
        x, y = _read_str(gx, key), _read_str(gy, key)
        if x is None or y is None:
            raise FesError(f"{path}: index {i} of {which} has no X/{key} or Y/{key}")
        # texts exactly as stored (FedNLP's bytes): nothing stripped or collapsed
        label = y if y in index else y.strip()
        if not x.strip():
            raise FesError(f"{path}: X/{key} is empty text")
        if label not in index:
            raise FesError(f"{path}: Y/{key} label {label!r} is not in attributes.label_vocab")
        texts.append(x)
        labels[n] = index[label]
        if gb is not None:
            b = _read_str(gb, key)
            if b is None:
                raise FesError(f"{path}: index {i} of {which} has no X_b/{key}")
            texts_b.append(b)
    return LabeledTexts(tuple(texts), labels, classes, tuple(texts_b) if gb is not None else None)


def read_fednlp_data(path: str | Path) -> FednlpData:
    """Train and test splits of a FedNLP text-classification data file."""
    with _open(path, "data file", "fednlp_data_file") as f:
        p = Path(path)
        if "attributes" not in f:
            raise FesError(f"{p}: no 'attributes' dataset (not a FedNLP data file)")
        try:
            attrs = json.loads(f["attributes"][()])
        except (TypeError, ValueError) as e:
            raise FesError(f"{p}: 'attributes' is not a JSON string ({e})") from None
        task = attrs.get("task_type", "text_classification")
        if task != "text_classification":
            raise FesError(f"{p}: task_type '{task}' is not text_classification")
        classes = _classes(attrs.get("label_vocab"), p)
        if "train_index_list" in attrs and "test_index_list" in attrs:
            train_ids, test_ids = list(attrs["train_index_list"]), list(attrs["test_index_list"])
        elif "index_list" in attrs:
            every = list(attrs["index_list"])
            cut = int(len(every) * 0.9)
            train_ids, test_ids = every[:cut], every[cut:]
        else:
            raise FesError(f"{p}: attributes has neither train_index_list/test_index_list nor index_list")
        train_ids, test_ids = [int(i) for i in train_ids], [int(i) for i in test_ids]
        if not train_ids or not test_ids:
            raise FesError(f"{p}: empty train or test index list")
        return FednlpData(
            _split(f, train_ids, classes, p, "train_index_list"),
            _split(f, test_ids, classes, p, "test_index_list"),
            tuple(train_ids),
            tuple(test_ids),
        )


def write_fednlp_data(path: str | Path, train: LabeledTexts, test: LabeledTexts, dataset: str) -> Path:
    """Our splits as a FedNLP data file: train rows get indices 0..n-1, test rows n..n+m-1."""
    if train.classes != test.classes:
        raise FesError("train and test splits have different class lists")
    n, m = len(train), len(test)
    attrs = {
        "index_list": list(range(n + m)),
        "train_index_list": list(range(n)),
        "test_index_list": list(range(n, n + m)),
        "label_vocab": {c: i for i, c in enumerate(train.classes)},
        "num_labels": len(train.classes),
        "task_type": "text_classification",
        "fes_dataset": dataset,
    }
    h5py = _h5py()
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f["attributes"] = json.dumps(attrs)
        gx, gy = f.create_group("X"), f.create_group("Y")
        gb = f.create_group("X_b") if train.is_pair else None
        put = _StrWriter()
        for offset, split in ((0, train), (n, test)):
            for i, (text, label) in enumerate(zip(split.texts, split.labels)):
                put(gx, str(offset + i), text)
                put(gy, str(offset + i), split.classes[int(label)])
                if gb is not None:
                    put(gb, str(offset + i), split.texts_b[i])
    return Path(path)


def partition_name(method: str, clients: int, alpha: float, beta: float) -> str:
    """FedNLP's group name for a partition (alpha/beta with one decimal, as its scripts write)."""

    def num(x: float) -> str:
        return f"{x:.1f}" if float(f"{x:.1f}") == x else repr(float(x))

    if method == "niid_label":
        return f"niid_label_clients={clients}_alpha={num(alpha)}"
    if method == "niid_quantity":
        return f"niid_quantity_clients={clients}_beta={num(beta)}"
    return method


def _canonical(name: str) -> str:
    """`clients=100.0_alpha=1` and `clients=100_alpha=1.0` name the same partition."""
    return _NUMBER.sub(lambda m: "=" + repr(float(m.group(1))), name.strip("/"))


@dataclass(frozen=True)
class FednlpPartition:
    name: str  # as stored in the file
    train: tuple[np.ndarray, ...]  # per client: data-file indices
    test: tuple[np.ndarray, ...]
    gold: tuple[np.ndarray, ...] | None = None  # FeS exports only: indices with gold labels
    attrs: dict[str, Any] | None = None  # FeS exports only: the gold settings that drew `gold`


def resolve_name(names: list[str], wanted: str, path: Path) -> str:
    if wanted in names:
        return wanted
    hits = [n for n in names if _canonical(n) == _canonical(wanted)]
    if len(hits) == 1:
        return hits[0]
    shown = ", ".join(sorted(names)[:12]) or "none"
    raise FesError(f"data_args.fednlp_partition_name '{wanted}' is not in {path} (it has: {shown})")


def read_fednlp_partition(path: str | Path, name: str) -> FednlpPartition:
    with _open(path, "partition file", "fednlp_partition_file") as f:
        p = Path(path)
        if not name:
            raise FesError(
                f"data_args.fednlp_partition_name must name a partition in {p} "
                f"(it has: {', '.join(sorted(f.keys())) or 'none'})"
            )
        key = resolve_name(list(f.keys()), name, p)
        g = f[key]
        if "n_clients" not in g or "partition_data" not in g:
            raise FesError(f"{p}: partition '{key}' lacks n_clients or partition_data")
        n = int(g["n_clients"][()])
        data = g["partition_data"]
        if sorted(data.keys(), key=lambda k: int(k) if k.isdigit() else -1) != [str(i) for i in range(n)]:
            raise FesError(
                f"{p}: partition '{key}' has n_clients={n} but client groups "
                f"{', '.join(list(data.keys())[:5])}{', ...' if len(data) > 5 else ''}"
            )
        train, test, gold = [], [], []
        for c in range(n):
            client = data[str(c)]
            if "train" not in client:
                raise FesError(f"{p}: partition '{key}' client {c} has no train indices")
            train.append(np.asarray(client["train"][()], dtype=np.int64).reshape(-1))
            test.append(
                np.asarray(client["test"][()], dtype=np.int64).reshape(-1)
                if "test" in client
                else np.zeros(0, dtype=np.int64)
            )
            if "gold" in client:
                gold.append(np.asarray(client["gold"][()], dtype=np.int64).reshape(-1))
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in g.attrs.items()}
        return FednlpPartition(key, tuple(train), tuple(test), tuple(gold) if len(gold) == n else None, attrs)


def write_fednlp_partition(
    path: str | Path,
    name: str,
    train: list[np.ndarray],
    test: list[np.ndarray],
    params: dict[str, float],
    gold: list[np.ndarray] | None = None,
    attrs: dict[str, Any] | None = None,
) -> Path:
    """Add (or replace) partition `name` in a FedNLP partition file, keeping other groups."""
    if len(train) != len(test):
        raise FesError("train and test partitions must have one entry per client")
    h5py = _h5py()
    with atomic_path(path, copy_existing=True) as tmp:
        mode = "a" if tmp.stat().st_size else "w"
        with h5py.File(tmp, mode) as f:
            if name in f:
                del f[name]
            g = f.create_group(name)
            g["n_clients"] = len(train)
            for k, v in params.items():
                g[k] = v
            for k, v in (attrs or {}).items():
                g.attrs[k] = v
            data = g.create_group("partition_data")
            for c, (tr, te) in enumerate(zip(train, test)):
                client = data.create_group(str(c))
                client["train"] = np.asarray(tr, dtype=np.int64)
                client["test"] = np.asarray(te, dtype=np.int64)
                if gold is not None:
                    client["gold"] = np.asarray(gold[c], dtype=np.int64)
    return Path(path)
