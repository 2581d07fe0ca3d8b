"""Checks and helpers for `cost_args` (one error line naming the key).

Device names are checked where profiles are loaded (the bench and the report), not when a
run config is read: a run only records device-independent work, and must start on machines
that carry no profile files.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import FesError
from .network import Network


def _as_list(value: Any, key: str) -> list:
    if isinstance(value, str):
        value = [x.strip() for x in value.split(",") if x.strip()]
    if not isinstance(value, list):
        raise FesError(f"cost_args.{key} must be a list, got {value!r}")
    return value


def validate_cost(c) -> None:
    c.devices = [str(d) for d in _as_list(c.devices, "devices")]
    if not c.devices or any(not d for d in c.devices):
        raise FesError("cost_args.devices must name at least one device profile")
    if not c.bandwidth_MBps > 0:
        raise FesError(f"cost_args.bandwidth_MBps must be > 0 MB/s, got {c.bandwidth_MBps:g}")
    if c.uplink_MBps < 0:
        raise FesError(f"cost_args.uplink_MBps must be > 0 MB/s (or 0: same as bandwidth_MBps), got {c.uplink_MBps:g}")
    if not (c.message_overhead_s >= 0 and math.isfinite(c.message_overhead_s)):
        raise FesError(f"cost_args.message_overhead_s must be >= 0 s and finite, got {c.message_overhead_s:g}")
    sweep = []
    for x in _as_list(c.bandwidth_sweep, "bandwidth_sweep"):
        try:
            v = float(x)
        except (TypeError, ValueError):
            raise FesError(f"cost_args.bandwidth_sweep entries must be numbers (MB/s), got {x!r}") from None
        if not (v > 0 and math.isfinite(v)):
            raise FesError(f"cost_args.bandwidth_sweep entries must be > 0 MB/s and finite, got {v:g}")
        sweep.append(v)
    c.bandwidth_sweep = sorted(set(sweep))
    if c.convergence_tail < 1:
        raise FesError(f"cost_args.convergence_tail must be >= 1, got {c.convergence_tail}")


def network_of(c, mbps: float | None = None) -> Network:
    """The configured network, or a symmetric one at `mbps` (the sweep) with the same up/down ratio."""
    down = c.bandwidth_MBps if mbps is None else mbps
    up = (c.uplink_MBps or c.bandwidth_MBps) * (down / c.bandwidth_MBps)
    return Network(down, up, c.message_overhead_s)
