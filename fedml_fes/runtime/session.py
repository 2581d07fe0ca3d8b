"""The server's whole-run bookkeeping, shared by every transport.

Opens the recorder, checks the method's cache, saves a checkpoint after every round
(`runtime/checkpoint.py`) or continues from one (`resume=True`), and closes the run as
completed, failed or interrupted, always writing summary.json (rows already in metrics.csv
are never lost).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..errors import FesError
from ..precision import describe_device
from ..report.metrics import RunRecorder, device_fields
from .aggregator import AggregatorLike
from .checkpoint import (
    CHECKPOINT_FILE,
    clear_earlier_run,
    config_differences,
    config_mismatch,
    load_checkpoint,
    restore_files,
    result_config,
    save_checkpoint,
)
from .job import Job
from .phases import PhaseSequence
from .server import CLASS_DETAILS, RoundServer

log = logging.getLogger(__name__)


class ServerSession:
    """`resume`: continue the run in `run_dir` from its checkpoint (the config must match the
    checkpointed run's in every key that changes results); else a fresh run, and the checkpoint
    and client folders an earlier run left in the folder are removed, so that it can never be
    resumed with this run's files nor its pseudo labels read as this run's."""

    def __init__(self, job: Job, aggregator: AggregatorLike, run_dir: Path, runtime: str, resume: bool = False):
        self.job = job
        self.run_dir = Path(run_dir)
        self.runtime = runtime
        self.recorder = RunRecorder(self.run_dir, job.method.primary_metric)
        self.server = RoundServer(job, aggregator, self.recorder)
        self.checkpointed: int | None = None  # the last round checkpoint.pt holds
        self.closed = False  # summary.json written: completed, failed or interrupted
        # [[first round, device], ...]: what computed which rounds, kept in the checkpoint
        self.devices: list[list] = [[0, self._device()]]
        if resume:
            self._resume()
        else:
            clear_earlier_run(self.run_dir)

    @property
    def next_round(self) -> int:
        return 0 if self.checkpointed is None else self.checkpointed + 1

    def phases(self) -> PhaseSequence:
        """The run's phases from the next round on, checkpointed after every round."""
        return PhaseSequence(self.server, start_round=self.next_round, on_round_end=self.save_checkpoint)

    def save_checkpoint(self, round_idx: int) -> None:
        save_checkpoint(
            self.run_dir,
            round_idx,
            {
                "server": self.server.state_dict(),
                "recorder": self.recorder.state_dict(),
                "config": result_config(self.job.cfg),
                "num_rounds": self.server.num_rounds,
                "primary_metric": self.job.method.primary_metric,
                "classes": list(self.job.data.classes),
                "runtime": self.runtime,
                "devices": self.devices,
            },
        )
        self.checkpointed = round_idx

    def _resume(self) -> None:
        state = load_checkpoint(self.run_dir)
        diffs = config_differences(state["config"], result_config(self.job.cfg))
        if diffs:
            raise config_mismatch(self.run_dir, diffs, f"the checkpointed run's ({CHECKPOINT_FILE})")
        restore_files(self.run_dir, state)
        self.server.load_state_dict(state["server"])
        self.recorder.load_state_dict(state["recorder"])
        self.server.cost_log.continue_file()
        self.checkpointed = int(state["round"])
        self.devices = resumed_devices(
            state.get("devices") or [], self.next_round, self.server.num_rounds, self._device()
        )
        self.recorder.log_event(
            f"resumed from round {self.next_round} (rounds 0-{self.checkpointed} restored from {CHECKPOINT_FILE})"
        )

    def interrupt(self, reason: str) -> dict[str, Any]:
        """Stop now (a signal): the round in progress is abandoned. A round already recorded but
        stopped while its checkpoint was being saved is saved first, so summary.json's
        rounds_completed is exactly what `--resume` continues after."""
        rows = self.recorder.rows
        if rows and (self.checkpointed is None or rows[-1]["round"] > self.checkpointed):
            self.save_checkpoint(int(rows[-1]["round"]))
        return self.fail(reason, status="interrupted")

    def complete(self) -> dict[str, Any]:
        extra = self.job.method.save_result(
            self.job.model,
            self.job.tokenizer,
            self.job.cfg,
            {"final": self._final(), "rounds_completed": len(self.recorder.rows)},
        )
        initial = self._initial()
        warning = below_start_warning(initial, self._final(), self.job.method.primary_metric)
        summary = self.recorder.finish(
            "completed",
            runtime=self.runtime,
            run_dir=str(self.run_dir),
            initial=initial,
            test=self._test(),
            initial_test=self._test(self.server.initial),
            **device_fields(self.devices),
            below_start=warning is not None,
            **({"warning": warning} if warning else {}),
            **extra,
        )
        self.closed = True
        self._plot()
        return summary

    def fail(self, error: str, status: str = "failed") -> dict[str, Any]:
        summary = self.recorder.finish(
            status,
            error=error,
            runtime=self.runtime,
            run_dir=str(self.run_dir),
            initial=self._initial(),
            test=self._test(),
            **device_fields(self.devices),
        )
        self.closed = True
        self._plot()
        return summary

    def _device(self) -> str:
        return describe_device(self.job.device, self.job.cfg.common.precision)

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

    def _test(self, scores: dict[str, Any] | None = None) -> dict[str, Any]:
        """The last test evaluation's (or `scores`') per-class accuracy, confusion matrix (rows:
        true class) and majority-class rate, with the class names: one-class predictions show
        here, and beside the untrained model's (`initial_test`), which classes training moved."""
        details = self.server.last_test if scores is None else {k: scores[k] for k in CLASS_DETAILS if k in scores}
        return {"classes": list(self.job.data.classes), **details} if details else {}

    def _final(self):
        key = self.job.method.primary_metric
        scored = [r[key] for r in self.recorder.rows if r.get(key) == r.get(key)]
        return scored[-1] if scored else None


def resumed_devices(earlier: list[list], next_round: int, num_rounds: int, device: str) -> list[list]:
    """A resumed run's device history: the checkpoint's (none in one older than the history),
    and this device from `next_round` on where it differs from the last one's and rounds remain."""
    history = [list(h) for h in earlier]
    if next_round < num_rounds and (not history or history[-1][1] != device):
        history.append([next_round, device])
    return history


def below_start_warning(initial: dict[str, Any], final: float | None, metric: str) -> str | None:
    """One line when training ended below the model it started from (the untrained prompt model
    is a baseline of its own: skewed gold labels can pull a good prior down); else None."""
    start = initial.get(metric)
    if not isinstance(final, (int, float)) or not isinstance(start, (int, float)) or final >= start:
        return None
    return (
        f"the run ended below its own start: {metric} {final:.4f} after training < {start:.4f} before "
        f"round 0 (summary.json initial); training made this model worse"
    )


def summary_from_checkpoint(
    run_dir: Path, primary_metric: str, runtime: str, status: str, error: str, since: float | None = None
) -> dict[str, Any]:
    """summary.json where no live session can write it: a run stopped before its session
    existed, or an mpirun whose server rank was killed. It holds the rounds and scores of the
    run's checkpoint (what `--resume` continues after), taken only if the checkpoint was written
    at or after `since` (a launch's start; None: any), else none."""
    import os

    run_dir = Path(run_dir)
    recorder = RunRecorder(run_dir, primary_metric)
    extra: dict[str, Any] = {}
    path = run_dir / CHECKPOINT_FILE
    if path.is_file() and (since is None or os.path.getmtime(path) >= since):
        try:
            state = load_checkpoint(run_dir)
        except FesError as e:
            log.warning("%s", e)
        else:
            recorder.load_state_dict(state["recorder"])
            server = state["server"]
            extra["initial"] = {k: v for k, v in server["initial"].items() if k not in CLASS_DETAILS}
            extra["test"] = {"classes": state["classes"], **server["last_test"]} if server["last_test"] else {}
            extra.update(device_fields(state.get("devices") or []))  # what computed the checkpointed rounds
    return recorder.finish(status, error=error, runtime=runtime, run_dir=str(run_dir), **extra)
