"""Reading a run config: the YAML file (`read_sections`, `load_config`), `--set` overrides,
coercion of each value to its key's type (`config_from_dict`), and a run folder's saved
config.yaml (`load_run_config`)."""

from __future__ import annotations

import difflib
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..errors import FesError
from .paths import resolve_override_paths, resolve_paths
from .schema import FesConfig, section_fields, validate


def _coerce(value: Any, default: Any, where: str) -> Any:
    """Coerce a YAML scalar to the type of the field's default, or fail naming the key."""
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise FesError(f"config key '{where}' must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise FesError(f"config key '{where}' must be an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # YAML reads 1e-3 (no dot) as a string: accept numeric strings
            try:
                return float(value)
            except (TypeError, ValueError):
                raise FesError(f"config key '{where}' must be a number, got {value!r}") from None
        return float(value)
    if kind is dict:
        if not isinstance(value, dict):
            raise FesError(f"config key '{where}' must be a mapping, got {value!r}")
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                raise FesError(f"config key '{where}.{k}' must be a single value, got {v!r}")
        return {str(k): v for k, v in value.items()}
    if kind is str:
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise FesError(f"config key '{where}' must be a string, got {value!r}")
        return str(value)
    return value


def _unknown(name: str, known: list[str], what: str, where: str) -> FesError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known)}"
    return FesError(f"unknown {what} '{name}' in {where}{hint}")


def config_from_dict(raw: Mapping[str, Any], source: str = "<dict>") -> FesConfig:
    """Build and validate a config from the YAML's mapping of sections."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise FesError(f"{source}: expected a mapping of sections (common_args, data_args, ...)")
    cfg = FesConfig(source=source)
    given: set[str] = set()
    section_names = [f.name for f in section_fields()]
    for sec_name, sec_values in raw.items():
        if sec_name not in section_names:
            raise _unknown(str(sec_name), section_names, "config section", source)
        if sec_values is None:
            continue
        if not isinstance(sec_values, Mapping):
            raise FesError(f"config section '{sec_name}' in {source} must be a mapping of keys")
        section = getattr(cfg, sec_name)
        known = [f.name for f in fields(section)]
        for key, value in sec_values.items():
            if key not in known:
                raise _unknown(str(key), known, "config key", f"{source} section '{sec_name}'")
            where = f"{sec_name}.{key}"
            setattr(section, key, _coerce(value, getattr(section, key), where))
            given.add(where)
    validate(cfg, given)
    return cfg


def add_set_argument(parser: Any, help: str = "override a config key (repeatable)") -> None:
    """The `--set SECTION.KEY=VALUE` option every command shares; `parse_overrides` reads it."""
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help=help)


def parse_overrides(items: "list[str]") -> dict[str, Any]:
    """CLI `--set section.key=value` items as {'section.key': value}; values parse as YAML
    scalars (3 -> int, 1e-3 -> str, coerced later by the field's type)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise FesError(f"--set '{item}' must look like section.key=value")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise FesError(f"--set '{item}': the value is not a YAML scalar") from None
    return out


def read_sections(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The YAML's sections as plain dicts with `section.key` overrides applied: the one place a
    run config file is read (typing and validation: `config_from_dict`).

    Relative input paths (INPUT_PATH_KEYS, and NAME_OR_PATH_KEYS that look like paths) are
    made absolute: the file's own values against the file's folder, `overrides` (the command
    line's --set) against the current directory. common_args.output_dir and cache_dir are
    left as written: relative ones stay relative to the current directory."""
    p = Path(path)
    if not p.is_file():
        raise FesError(f"config file not found: {p} (pass --cf run_configs/<name>.yaml)")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        raise FesError(f"{p}:{at} is not valid YAML ({getattr(e, 'problem', e)})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FesError(f"cannot read config file {p}: {getattr(e, 'strerror', None) or e}") from None
    if raw is None or raw == {}:
        raise FesError(
            f"{p} is empty: a run config names its sections (common_args, data_args, model_args, "
            f"train_args, ...); see run_configs/*.yaml"
        )
    if not isinstance(raw, dict):
        raise FesError(f"{p}: expected a mapping of sections (common_args, data_args, ...)")
    raw = {k: dict(v or {}) if isinstance(v, dict) or v is None else v for k, v in raw.items()}
    resolve_paths(raw, os.path.dirname(os.path.abspath(p)))
    apply_overrides(raw, resolve_override_paths(overrides or {}), str(p))
    return raw


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any], source: str = "<dict>") -> None:
    """Set each 'section.key' of `overrides` in the raw sections, in place (types: config_from_dict;
    paths are taken as given: see `resolve_override_paths`)."""
    for dotted, value in overrides.items():
        sec, dot, key = str(dotted).partition(".")
        if not dot or not key:
            raise FesError(f"override '{dotted}' must look like section.key=value")
        section = raw.setdefault(sec, {})
        if not isinstance(section, dict):
            raise FesError(f"config section '{sec}' in {source} must be a mapping of keys")
        section[key] = value


def load_config(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> FesConfig:
    """Read, type and validate a run config; `overrides` maps 'section.key' to a value (CLI --set).

    Relative input paths in the file (data files and folders, model_args.mlm_from, host and
    ipconfig files, ...: INPUT_PATH_KEYS) resolve against the file's folder, those in
    `overrides` against the current directory; common_args.output_dir stays relative to the
    current directory. A config named by model_args.mlm_from resolves its own paths against
    its own folder when it is loaded."""
    return config_from_dict(read_sections(path, overrides), source=str(path))


RUN_CONFIG_FILE = "config.yaml"  # the config a run folder keeps, input paths absolute


def read_run_sections(run_dir: str | os.PathLike) -> dict[str, Any]:
    """A run folder's saved config.yaml as its raw sections; one error line when it is missing
    or not YAML (the resume check, reports and the benchmarks' skip-finished check read it here)."""
    path = Path(run_dir) / RUN_CONFIG_FILE
    if not path.is_file():
        raise FesError(f"{run_dir} is not a run directory (no {RUN_CONFIG_FILE})")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise FesError(f"{path} is not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise FesError(f"{path} holds {type(raw).__name__}, not config sections")
    return raw


def load_run_config(run_dir: str | os.PathLike, drop_unknown: bool = False) -> FesConfig:
    """A run folder's saved config, typed and validated. drop_unknown: keys this version no
    longer knows are dropped, so an older run stays readable for reports."""
    raw = read_run_sections(run_dir)
    if drop_unknown:
        default = FesConfig()
        known = {f.name: {g.name for g in fields(getattr(default, f.name))} for f in section_fields()}
        raw = {
            sec: {k: v for k, v in (values or {}).items() if k in known[sec]}
            for sec, values in raw.items()
            if sec in known and isinstance(values, dict)
        }
    return config_from_dict(raw, source=str(Path(run_dir) / RUN_CONFIG_FILE))
