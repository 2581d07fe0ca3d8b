"""Device profiles: how fast a device computes and how much power it draws, with sources.

A profile is a YAML file (run_configs/devices/<name>.yaml, or any path):

    name: jetson_tx2
    label: NVIDIA Jetson TX2
    throughput:                     # one of three forms
      flops_per_s: 9.7e11           #   a number, or
      reference_batch:              #   a published per-batch time turned into FLOP/s by our
        hidden: 1024                #   own FLOP count of that batch (cost.flops), after taking
        intermediate: 4096          #   out its optimizer update (memory_bandwidth_Bps), or
        layers: 24
        vocab: 50265
        batch_size: 4
        seq_len: 256
        tuning: full                # full | bias
        seconds: 2.0
      relative_to: jetson_tx2       #   another profile's throughput divided by `slowdown`
      slowdown: 15
    call_overhead_s: 0.0            # fixed cost per encoder call (kernel launches, Python)
    memory_bandwidth_Bps: 5.97e10   # gradient writes + AdamW steps are memory-bound
    compute_power_w: 15.0
    radio_power_w: 1.0
    memory_bytes: 8.0e9
    sources: {field: "where the number comes from"}

Emulated compute time of a task = FLOPs / flops_per_s + encoder calls x call_overhead_s
+ update bytes / memory_bandwidth_Bps (see `UPDATE_PASSES`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..errors import FesError
from .flops import EncoderShape, encoder_parameters, training_batch_flops

# Memory traffic of one training step per trainable byte, outside the matmuls: writing the
# gradient (1), AdamW reading parameter, gradient, exp_avg, exp_avg_sq (4) and writing
# parameter, exp_avg, exp_avg_sq (3). Memory-bound, so costed by bandwidth, not FLOPs.
# (here, not in memory.py, so that the time model and the reports import without torch)
UPDATE_PASSES = 8

DEVICE_DIR = Path("run_configs") / "devices"
REPO_DEVICE_DIR = Path(__file__).resolve().parents[2] / DEVICE_DIR


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    label: str
    flops_per_s: float
    compute_power_w: float
    radio_power_w: float
    call_overhead_s: float = 0.0
    memory_bandwidth_Bps: float = math.inf  # inf: optimizer updates cost no time
    memory_bytes: float = 0.0
    sources: dict = field(default_factory=dict)
    derivation: str = ""  # how flops_per_s was obtained, in words
    path: str = ""

    def compute_seconds(self, flops: float, calls: float = 0.0, update_bytes: float = 0.0) -> float:
        return flops / self.flops_per_s + calls * self.call_overhead_s + update_bytes / self.memory_bandwidth_Bps


def search_dirs(extra: str | os.PathLike | None = None) -> list[Path]:
    """Where profile names are looked up: an explicit folder, ./run_configs/devices, the repo's."""
    dirs = [Path(extra)] if extra else []
    for d in (DEVICE_DIR, REPO_DEVICE_DIR):
        if d.resolve() not in [x.resolve() for x in dirs]:
            dirs.append(d)
    return dirs


def known_profiles(extra: str | os.PathLike | None = None) -> list[str]:
    names: set[str] = set()
    for d in search_dirs(extra):
        if d.is_dir():
            names |= {p.stem for p in d.glob("*.yaml")}
    return sorted(names)


def profile_path(name: str, extra: str | os.PathLike | None = None) -> Path:
    """A profile file by name (or a path to a .yaml); unknown names are one error line."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise FesError(f"device profile file not found: {p}")
        return p
    for d in search_dirs(extra):
        candidate = d / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    raise FesError(
        f"unknown device profile '{name}' (known: {', '.join(known_profiles(extra)) or 'none'}; "
        f"searched {', '.join(str(d) for d in search_dirs(extra))})"
    )


def _number(raw: Mapping[str, Any], key: str, where: str, minimum: float = 0.0, strict: bool = True) -> float:
    value = raw.get(key)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise FesError(f"{where}: '{key}' must be a number, got {value!r}") from None
    if x < minimum or (strict and x == minimum):
        raise FesError(f"{where}: '{key}' must be {'>' if strict else '>='} {minimum:g}, got {x:g}")
    return x


def _throughput(
    raw: Mapping[str, Any], where: str, extra: str | None, seen: tuple[str, ...], bandwidth: float
) -> tuple[float, str]:
    if not isinstance(raw, Mapping):
        raise FesError(f"{where}: 'throughput' must be a mapping (flops_per_s, reference_batch or relative_to)")
    if "flops_per_s" in raw:
        return _number(raw, "flops_per_s", where), "given"
    if "reference_batch" in raw:
        ref = raw["reference_batch"]
        if not isinstance(ref, Mapping):
            raise FesError(f"{where}: 'reference_batch' must be a mapping")
        shape = EncoderShape(
            int(_number(ref, "hidden", where)),
            int(_number(ref, "intermediate", where)),
            int(_number(ref, "layers", where)),
        )
        tuning = str(ref.get("tuning", "full"))
        flops = training_batch_flops(
            shape, int(_number(ref, "batch_size", where)), int(_number(ref, "seq_len", where)), tuning
        ).total
        seconds = _number(ref, "seconds", where)
        everything, biases = encoder_parameters(shape, int(_number(ref, "vocab", where)))
        update_s = UPDATE_PASSES * 4 * (everything if tuning == "full" else biases) / bandwidth
        if update_s >= seconds:
            raise FesError(
                f"{where}: the reference batch's optimizer update alone ({update_s:.3g} s at "
                f"memory_bandwidth_Bps) exceeds its {seconds:g} s"
            )
        return flops / (seconds - update_s), (
            f"{flops:.3g} FLOP per training batch ({tuning}, batch {ref['batch_size']}, length {ref['seq_len']}, "
            f"{shape.layers} layers x {shape.hidden}) / ({seconds:g} s - {update_s:.3g} s optimizer update)"
        )
    if "relative_to" in raw:
        other = str(raw["relative_to"])
        if other in seen:
            raise FesError(f"{where}: device profiles refer to each other in a loop ({' -> '.join(seen + (other,))})")
        base = load_profile(other, extra, seen)
        slowdown = _number(raw, "slowdown", where)
        return base.flops_per_s / slowdown, f"{base.label} ({base.flops_per_s:.3g} FLOP/s) / {slowdown:g}"
    raise FesError(f"{where}: 'throughput' needs flops_per_s, reference_batch or relative_to")


def profile_from_dict(
    raw: Mapping[str, Any], where: str, extra: str | None = None, seen: tuple[str, ...] = ()
) -> DeviceProfile:
    if not isinstance(raw, Mapping):
        raise FesError(f"{where}: a device profile must be a mapping")
    known = {
        "name",
        "label",
        "throughput",
        "call_overhead_s",
        "memory_bandwidth_Bps",
        "compute_power_w",
        "radio_power_w",
        "memory_bytes",
        "sources",
        "notes",
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise FesError(f"{where}: unknown device profile key '{unknown[0]}' (known: {', '.join(sorted(known))})")
    name = str(raw.get("name") or Path(where).stem)
    bandwidth = _number(raw, "memory_bandwidth_Bps", where) if "memory_bandwidth_Bps" in raw else math.inf
    flops, how = _throughput(raw.get("throughput"), where, extra, seen + (name,), bandwidth)
    return DeviceProfile(
        name=name,
        label=str(raw.get("label", name)),
        flops_per_s=flops,
        compute_power_w=_number(raw, "compute_power_w", where),
        radio_power_w=_number(raw, "radio_power_w", where, strict=False),
        call_overhead_s=_number(
            {"call_overhead_s": raw.get("call_overhead_s", 0.0)}, "call_overhead_s", where, strict=False
        ),
        memory_bandwidth_Bps=bandwidth,
        memory_bytes=float(raw.get("memory_bytes", 0.0) or 0.0),
        sources=dict(raw.get("sources") or {}),
        derivation=how,
        path=where,
    )


def load_profile(name: str, extra: str | os.PathLike | None = None, seen: tuple[str, ...] = ()) -> DeviceProfile:
    path = profile_path(name, extra)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise FesError(f"{path}: not valid YAML ({getattr(e, 'problem', e)})") from None
    return profile_from_dict(raw, str(path), str(extra) if extra else None, seen)


def save_profile(raw: Mapping[str, Any], path: Path) -> Path:
    """Write a profile YAML (e.g. this host's, calibrated); checks that it loads."""
    profile_from_dict(raw, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(raw), sort_keys=False))
    return path
