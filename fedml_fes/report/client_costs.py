"""`<run_dir>/client_costs.csv`: one row per client task, what the cost emulation is made from.

Written by the server as rounds finish (flushed at once, like metrics.csv), from what each
client measured (`cost_*` metrics of its update) and the payload bytes the server saw. The
columns are fixed, so runs of different methods read alike; device-independent, so any
device profile and bandwidth can be applied later (`fedml_fes.cost.accounting`).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping

COLUMNS = (
    "round",
    "phase",
    "client_id",
    "accepted",
    "examples",
    "compute_s",
    "cpu_s",
    "fwd_flops",
    "bwd_flops",
    "filter_flops",
    "encoder_calls",
    "update_bytes",
    "steps",
    "tokens",
    "bottom_tokens",
    "bytes_down",
    "bytes_up",
    "param_bytes",
    "trainable_bytes",
    "resident_param_bytes",
    "fill_peak_bytes",
    "activation_peak_bytes",
    "grad_bytes",
    "optimizer_bytes",
    "peak_train_bytes",
    "cuda_peak_bytes",
    "cache_bytes",
    "cache_hits",
    "cache_misses",
)
FILE = "client_costs.csv"


def cost_row(
    round_idx: int,
    phase: str,
    client_id: int,
    metrics: Mapping[str, float],
    bytes_down: int,
    bytes_up: int,
    accepted: bool = True,
) -> dict[str, Any]:
    """A row from an update's metrics (missing measurements stay empty)."""

    def m(key: str) -> Any:
        value = metrics.get(key)
        return "" if value is None else value

    row = {
        "round": round_idx,
        "phase": phase,
        "client_id": client_id,
        "accepted": int(accepted),
        "examples": m("train_examples") if phase == "train" else m("inferred"),
        "compute_s": m("compute_s"),
        "bytes_down": int(bytes_down),
        "bytes_up": int(bytes_up),
        "cache_hits": m("cache_hits"),
        "cache_misses": m("cache_misses"),
        "cache_bytes": m("cache_bytes"),
    }
    for col in COLUMNS:
        if col not in row:
            row[col] = m(f"cost_{col}")
    return row


class ClientCostLog:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / FILE
        self._started = False

    def continue_file(self) -> None:
        """A resumed run appends to the checkpointed file (cut back to the checkpoint's size, so
        a redone round is never counted twice) instead of starting it over."""
        self._started = self.path.is_file() and self.path.stat().st_size > 0

    def append(self, rows: list[Mapping[str, Any]]) -> None:
        if not rows:
            return
        new = not self._started
        with self.path.open("w" if new else "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(COLUMNS)
            for row in rows:
                w.writerow([_fmt(row.get(c, "")) for c in COLUMNS])
        self._started = True


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "" if v != v else (int(v) if v.is_integer() and abs(v) < 1e15 else repr(v))
    return v


def read_client_costs(run_dir: Path) -> list[dict[str, str]]:
    path = Path(run_dir) / FILE
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))
