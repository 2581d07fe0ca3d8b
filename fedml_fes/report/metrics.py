"""Per-run records: metrics.csv (one row per round, flushed at once) and summary.json.

Rows are written as they happen, so an interrupted or failed run keeps every finished round.
Reports and plots are made from these files only.
"""
from __future__ import annotations

import csv
import json
import math
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
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        return summary


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x))


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return " ".join(str(x) for x in v)
    return v
