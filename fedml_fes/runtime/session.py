"""The server's whole-run bookkeeping, shared by every transport.

Opens the recorder, checks the method's cache, and closes the run as completed, failed or
interrupted, always writing summary.json (rows already in metrics.csv are never lost).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..report.metrics import RunRecorder
from .job import Job
from .server import CLASS_DETAILS, AggregatorLike, RoundServer

log = logging.getLogger(__name__)


class ServerSession:
    def __init__(self, job: Job, aggregator: AggregatorLike, run_dir: Path, runtime: str):
        self.job = job
        self.run_dir = Path(run_dir)
        self.runtime = runtime
        self.recorder = RunRecorder(self.run_dir, job.method.primary_metric)
        self.server = RoundServer(job, aggregator, self.recorder)

    def complete(self) -> dict[str, Any]:
        extra = self.job.method.save_result(self.job.model, self.job.tokenizer, self.job.cfg,
                                            {"final": self._final(), "rounds_completed": len(self.recorder.rows)})
        summary = self.recorder.finish("completed", runtime=self.runtime, run_dir=str(self.run_dir),
                                       initial=self._initial(), test=self._test(), **extra)
        self._plot()
        return summary

    def fail(self, error: str, status: str = "failed") -> dict[str, Any]:
        summary = self.recorder.finish(status, error=error, runtime=self.runtime, run_dir=str(self.run_dir),
                                       initial=self._initial(), test=self._test())
        self._plot()
        return summary

    def _plot(self) -> None:
        """accuracy.png beside summary.json; a figure that cannot be drawn never costs the run."""
        from ..report.run_plot import plot_run
        try:
            plot_run(self.run_dir)
        except Exception as e:  # matplotlib/backend trouble: the run's files are already written
            log.warning("no accuracy.png for %s: %s", self.run_dir, e)

    def _initial(self) -> dict[str, Any]:
        """Scores of the model before any round (zero-shot accuracy for prompt methods)."""
        return {k: v for k, v in self.server.initial.items() if k not in CLASS_DETAILS}

    def _test(self) -> dict[str, Any]:
        """The last test evaluation's per-class accuracy, confusion matrix (rows: true class) and
        majority-class rate, with the class names: one-class predictions show here."""
        details = self.server.last_test
        return {"classes": list(self.job.data.classes), **details} if details else {}

    def _final(self):
        key = self.job.method.primary_metric
        scored = [r[key] for r in self.recorder.rows if r.get(key) == r.get(key)]
        return scored[-1] if scored else None
