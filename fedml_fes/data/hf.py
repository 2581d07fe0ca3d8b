"""Hugging Face `datasets` by name, when a network (or a filled cache) exists.

`datasets` is imported lazily and is not a dependency of the project (its current release
needs pyarrow builds for NumPy 2, while FedML's stack pins NumPy 1). Offline, `datasets`
retries the Hub for about half a minute before failing; a quick name lookup of the Hub
host turns that into one immediate FesError line. With HF_HUB_OFFLINE=1 (or
HF_DATASETS_OFFLINE=1) only the cache is read and the lookup is skipped. Everything
`datasets` downloads goes under the run's cache directory, never ~/.cache.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import FesError
from .custom import ColumnMapping, RawRows, collect, infer_classes, to_labeled
from .readers import LabeledTexts

OFFLINE_FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _offline_mode() -> bool:
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in OFFLINE_FLAGS)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Does the Hub's host name resolve? (What fails at once on a machine with no network.)"""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(old)


def _import_datasets() -> Any:
    try:
        import datasets  # noqa: PLC0415 - optional, heavy: only for dataset: hf
    except ImportError:
        raise FesError(
            "dataset hf needs the `datasets` package (pip install datasets, with a pyarrow "
            "that matches your numpy); or use a local layout such as dataset: custom"
        ) from None
    return datasets


def _label_names(split: Any, column: str) -> tuple[str, ...]:
    """Class names from a ClassLabel feature (int labels), else ()."""
    feature = (getattr(split, "features", None) or {}).get(column)
    names = getattr(feature, "names", None)
    return tuple(str(n) for n in names) if names else ()


def _records(split: Any, names: tuple[str, ...], mapping: ColumnMapping, where: str):
    for row_no, rec in enumerate(split, start=1):
        rec = dict(rec)
        value = rec.get(mapping.label_column)
        if names and isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(names):
                raise FesError(
                    f"{where} row {row_no}: label {value} has no class name "
                    f"(an unlabeled split? choose another data_args.hf_test_split)"
                )
            rec[mapping.label_column] = names[value]
        yield row_no, rec


def read_hf(
    name: str, config: str, splits: tuple[str, str], mapping: ColumnMapping, cache_dir: str | Path
) -> tuple[LabeledTexts, LabeledTexts | None]:
    """(train, test or None when no test split is named) from `datasets.load_dataset`."""
    if not name:
        raise FesError("data_args.hf_dataset must name a Hugging Face dataset (e.g. ag_news) or a local path")
    local = Path(name).exists()
    if not local and not _offline_mode() and not hub_reachable():
        raise FesError(
            f"data_args.hf_dataset '{name}': the Hugging Face Hub is unreachable from this machine "
            f"(offline?); use a local layout (dataset: custom / agnews / ...) or HF_HUB_OFFLINE=1 "
            f"with a filled cache"
        )
    datasets = _import_datasets()
    raws: list[RawRows | None] = []
    names: tuple[str, ...] = ()
    for split_name in splits:
        if not split_name:
            raws.append(None)
            continue
        where = f"hf:{name}{'/' + config if config else ''}[{split_name}]"
        try:
            split = datasets.load_dataset(name, config or None, split=split_name, cache_dir=str(cache_dir))
        except Exception as e:  # datasets raises many types (ConnectionError, FileNotFoundError, ValueError)
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise FesError(
                f"data_args.hf_dataset '{name}' split '{split_name}' could not be loaded ({type(e).__name__}: {first})"
            ) from None
        names = names or _label_names(split, mapping.label_column)
        raws.append(collect(_records(split, names, mapping, where), mapping, where))
    train_raw, test_raw = raws
    if train_raw is None:
        raise FesError("data_args.hf_train_split must name the training split (e.g. train)")
    classes = mapping.classes or names or infer_classes(train_raw.labels)
    key = "data_args.classes" if mapping.classes else f"the classes of {name}"
    train = to_labeled(train_raw, classes, key)
    test = to_labeled(test_raw, classes, key) if test_raw is not None else None
    return train, test
