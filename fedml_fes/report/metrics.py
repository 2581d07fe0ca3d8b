"""Per-run records: metrics.csv (one row per round, flushed at once) and summary.json.

Rows are written as they happen, so an interrupted or failed run keeps every finished round.
Reports and plots are made from these files only.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path
from typing import Any


class RunRecorder:
    def __init__(self, run_dir: Path, primary_metric: str):
        self.run_dir = Path(run_dir)
        self.primary_metric = primary_metric
        self.rows: list[dict[str, Any]] = []
        self._columns: list[str] | None = None
        self._started = time.time()
        self.events: list[str] = []

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.csv"

    def append(self, row: dict[str, Any]) -> None:
        if self._columns is None:
            self._columns = list(row)
            with self.metrics_path.open("w", newline="") as f:
                csv.writer(f).writerow(self._columns)
        with self.metrics_path.open("a", newline="") as f:
            csv.writer(f).writerow([_fmt(row.get(c, "")) for c in self._columns])
        self.rows.append(row)

    def state_dict(self) -> dict[str, Any]:
        """Rows, columns, events and the wall time so far, for a run's checkpoint (the files
        themselves stay as written; `runtime/checkpoint.py` cuts them back on resume)."""
        return {
            "rows": [_plain(r) for r in self.rows],
            "columns": self._columns,
            "events": list(self.events),
            "wall_s": time.time() - self._started,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a checkpointed run: later rows append to its metrics.csv under its header."""
        self.rows = [dict(r) for r in state["rows"]]
        self._columns = list(state["columns"]) if state["columns"] is not None else None
        self.events = list(state["events"])
        self._started = time.time() - float(state["wall_s"])

    def log_event(self, message: str) -> None:
        """Decisions and incidents (rejected updates, dropouts) kept for the summary."""
        self.events.append(message)
        with (self.run_dir / "events.log").open("a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    def finish(self, status: str, error: str | None = None, **extra: Any) -> dict[str, Any]:
        scored = [r for r in self.rows if _is_number(r.get(self.primary_metric))]
        summary = {
            "status": status,
            "error": error,
            "rounds_completed": len(self.rows),
            "primary_metric": self.primary_metric,
            "final": scored[-1][self.primary_metric] if scored else None,
            "best": max(r[self.primary_metric] for r in scored) if scored else None,
            "per_round": [r.get(self.primary_metric) for r in self.rows],
            "wall_s": round(time.time() - self._started, 3),
            "events": self.events,
            **extra,
        }
        path = self.run_dir / "summary.json"
        tmp = path.with_name(f".summary.json.tmp{os.getpid()}")  # never half a summary, whenever it stops
        tmp.write_text(json.dumps(summary, indent=2, default=str))
        os.replace(tmp, path)
        return summary


def _plain(value: Any) -> Any:
    """A row's values as plain Python (numpy scalars to numbers): checkpoints load with
    torch.load(weights_only=True)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x))


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return " ".join(str(x) for x in v)
    return v


def _shown(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def format_row(row: dict[str, Any], metric: str) -> str:
    """One metrics row as the progress line every runtime prints."""
    line = f"round {row['round']:>3}: {metric}={_shown(row.get(metric))}  train_loss={row['train_loss']:.4f}"
    if "pseudo_total" in row and "pseudo_acc" in row:
        line += f"  pseudo={row['pseudo_total']} (pass acc {_shown(row['pseudo_acc'])})"
    return line + f"  clients={row['clients']}  {row['round_wall_s']:.1f}s"


def device_fields(history: list[list]) -> dict[str, Any]:
    """summary.json's device keys from a run's device history, [[first round, device], ...] in
    round order (the checkpoint keeps it, so a run resumed on another machine says so): `device`,
    what computed its last rounds, and `device_history` where the rounds were not all computed
    on one device from round 0 (a run resumed elsewhere, or a checkpoint older than the history)."""
    if not history:
        return {}
    fields: dict[str, Any] = {"device": history[-1][1]}
    if len(history) > 1 or history[0][0] != 0:
        fields["device_history"] = [{"from_round": int(r), "device": d} for r, d in history]
    return fields


def summary_devices(summary: dict) -> list[str]:
    """Every device a run's rounds were computed on, from its summary.json (empty: not recorded)."""
    history = summary.get("device_history") or []
    named = [str(h["device"]) for h in history if isinstance(h, dict) and h.get("device")]
    if not named and summary.get("device"):
        named = [str(summary["device"])]
    return list(dict.fromkeys(named))
