"""A FeS round as a fixed sequence of request/answer phases, for runtimes that exchange
exactly one message each way per step (FedML's cross-silo rounds).

Pseudo-label methods have two phases per round, `label` then `train`: the labeling event's
results decide who trains. Other methods have one, `train`. The number of phases is known
up front (FedML fixes its round count before the first message), so a round without a
labeling event still has its `label` phase, with no task in it. Everything a phase decides
comes from `RoundServer`: this class only sequences its calls.
"""

from __future__ import annotations

from typing import Any, Callable

from .server import RoundServer
from .tasks import ClientTask, ClientUpdate


def phases_per_round(uses_pseudo: bool) -> int:
    return 2 if uses_pseudo else 1


class PhaseSequence:
    """`start_round`: the first round to run (a resumed run's next one). `on_round_end(r)` is
    called when round r is recorded and before round r+1 is planned: the one moment the server
    holds exactly the state later rounds start from (the checkpoint's)."""

    def __init__(self, server: RoundServer, start_round: int = 0, on_round_end: Callable[[int], None] | None = None):
        self.server = server
        self.per_round = phases_per_round(server.job.method.uses_pseudo)
        self.total = server.num_rounds * self.per_round
        self.index = min(start_round, server.num_rounds) * self.per_round
        self.on_round_end = on_round_end
        self.tasks: list[ClientTask] = []
        self._start_phase()

    @property
    def round_idx(self) -> int:
        return self.index // self.per_round

    @property
    def name(self) -> str:
        if self.done:
            return "done"
        return "label" if self.per_round == 2 and self.index % 2 == 0 else "train"

    @property
    def done(self) -> bool:
        return self.index >= self.total

    def _start_phase(self) -> None:
        if self.done:
            self.tasks = []
        elif self.index % self.per_round == 0:  # a round starts: labeling plan (and the trainers' draw)
            label_tasks = self.server.plan_labeling(self.round_idx)
            self.tasks = label_tasks if self.per_round == 2 else self.server.plan(self.round_idx)
        else:
            self.tasks = self.server.plan(self.round_idx)

    def finish(self, results: list[ClientUpdate]) -> dict[str, Any] | None:
        """Close the current phase with the silos' results; the round's metrics row when a
        round ends. Then plan the next phase (`tasks`)."""
        row = None
        if self.name == "label":
            if self.tasks:
                self.server.finish_labeling(self.round_idx, results)
        else:
            row = self.server.finish_round(self.round_idx, results, planned=len(self.tasks))
            if self.on_round_end is not None:
                self.on_round_end(self.round_idx)
        self.index += 1
        self._start_phase()
        return row
