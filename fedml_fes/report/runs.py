"""A finished (or interrupted) run, read back from its files only.

config.yaml, metrics.csv, summary.json and client_costs.csv are all a report needs: the
accuracy per round, the status, and the device-independent task records that any device
profile and bandwidth can be applied to.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import read_run_sections
from ..cost.accounting import TaskRecord
from .client_costs import read_client_costs


def _float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


@dataclass
class RunData:
    name: str
    run_dir: Path
    status: str
    config: dict
    metric: str
    accuracy: dict[int, float]  # evaluated rounds only
    tasks: list[TaskRecord] = field(default_factory=list)
    rounds_completed: int = 0

    @property
    def method(self) -> str:
        return str(self.config.get("train_args", {}).get("method", ""))

    @property
    def seed(self) -> int:
        return int(self.config.get("common_args", {}).get("random_seed", 0))

    def convergence_accuracy(self, tail: int) -> float | None:
        """Mean of the last `tail` evaluated accuracies: where the run has settled."""
        values = [self.accuracy[r] for r in sorted(self.accuracy)][-tail:]
        return sum(values) / len(values) if values else None

    def final_accuracy(self) -> float | None:
        return self.accuracy[max(self.accuracy)] if self.accuracy else None

    def peak_train_bytes(self) -> float:
        return max((t.peak_train_bytes for t in self.tasks), default=0.0)

    def rows_of_costs(self) -> list[dict[str, str]]:
        return read_client_costs(self.run_dir)


def load_run(run_dir: Path) -> RunData:
    run_dir = Path(run_dir)
    metrics_path, summary_path = run_dir / "metrics.csv", run_dir / "summary.json"
    config = read_run_sections(run_dir)
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    metric = summary.get("primary_metric", "test_acc")
    accuracy: dict[int, float] = {}
    rows = 0
    if metrics_path.is_file():
        with metrics_path.open(newline="") as f:
            for row in csv.DictReader(f):
                rows += 1
                a = _float(row.get(metric))
                if not math.isnan(a):
                    accuracy[int(row["round"])] = a
    tasks = [TaskRecord.from_row(r) for r in read_client_costs(run_dir)]
    return RunData(run_dir.name, run_dir, summary.get("status", "incomplete"), config, metric, accuracy, tasks, rows)
