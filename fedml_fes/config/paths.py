"""Input paths in a config: which keys name files or folders, and how a relative one is made
absolute (a file's values against its folder, `--set` values against the current directory)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

# Config keys that name input files or folders. A relative value read from a YAML file is
# taken from that file's folder, so a config works whatever the current directory; a relative
# value given on the command line (`--set section.key=value`) is taken from the current
# directory, as a shell user expects. Both are stored absolute (a run's config.yaml stays
# valid wherever it is read). Where a run *writes* (common_args.output_dir and cache_dir) is
# not resolved: `output_dir: runs` puts runs below the directory the command runs in, not
# inside run_configs/. Defaults (comm_args.mpi_host_file: mpi/mpi_host_file, ...) are not read
# from a file either: they mean the current directory (runtime.rundir.make_run_dir stores them
# absolute against it in the run's config.yaml).
INPUT_PATH_KEYS: dict[str, tuple[str, ...]] = {
    "data_args": ("data_dir", "train_file", "test_file", "classes_file", "fednlp_data_file", "fednlp_partition_file"),
    "model_args": ("mlm_from",),
    "comm_args": ("mpi_host_file", "grpc_ipconfig_path", "tls_ca", "tls_cert", "tls_key"),
    "cost_args": ("device_dir",),
}
# Keys that hold a name or a local path: resolved only when the value looks like a path
# (`./x`, `../x`, `~/x`, or a file or folder of that name next to the config), so HF ids
# (`roberta-large`) and `offline:all-MiniLM-L6-v2` stay as they are.
NAME_OR_PATH_KEYS: dict[str, tuple[str, ...]] = {
    "model_args": ("model",),
    "filter_args": ("proxy_model",),
}
# Lists of profile names or .yaml/.yml paths: only the paths are resolved.
PROFILE_LIST_KEYS: dict[str, tuple[str, ...]] = {"cost_args": ("devices",)}


def _absolute(value: str, base: str) -> str:
    return os.path.abspath(os.path.join(base, os.path.expanduser(value)))


def _looks_local(value: str, base: str) -> bool:
    if value.startswith("offline:"):
        return False
    v = value.replace("\\", "/")
    return (
        v in (".", "..")
        or v.startswith(("./", "../", "~"))
        or os.path.isabs(value)
        or os.path.exists(os.path.join(base, value))
    )


def resolve_path_value(section: str, key: str, value: Any, base: str | os.PathLike) -> Any:
    """`value` of `section.key` with a relative input path made absolute against `base`;
    anything else (other keys, empty values, names such as HF model ids) unchanged."""
    base = os.path.abspath(base)
    if key in INPUT_PATH_KEYS.get(section, ()):
        return _absolute(value, base) if isinstance(value, str) and value else value
    if key in NAME_OR_PATH_KEYS.get(section, ()):
        return _absolute(value, base) if isinstance(value, str) and value and _looks_local(value, base) else value
    if key in PROFILE_LIST_KEYS.get(section, ()):
        items = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value
        if not isinstance(items, list):
            return value
        return [_absolute(x, base) if isinstance(x, str) and Path(x).suffix in (".yaml", ".yml") else x for x in items]
    return value


def resolve_paths(raw: dict[str, Any], base: str | os.PathLike) -> dict[str, Any]:
    """In place, for sections as a YAML file holds them: every relative input path made
    absolute against `base` (the file's folder). Returns `raw`."""
    for sec, values in raw.items():
        if isinstance(values, dict):
            for key in list(values):
                values[key] = resolve_path_value(str(sec), str(key), values[key], base)
    return raw


def resolve_override_paths(overrides: Mapping[str, Any], base: str | os.PathLike | None = None) -> dict[str, Any]:
    """'section.key' overrides with relative input paths made absolute against `base`
    (default: the current directory, for `--set` values)."""
    base = os.getcwd() if base is None else base
    out: dict[str, Any] = {}
    for dotted, value in overrides.items():
        sec, _, key = str(dotted).partition(".")
        out[dotted] = resolve_path_value(sec, key, value, base)
    return out
