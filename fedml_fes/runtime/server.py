"""Server side of a round, independent of the transport that carries it.

`RoundServer.plan(r)` says which clients do what; `finish_round(r, updates)` validates,
aggregates through the aggregator's FedML hooks, evaluates and records. The in-process
runtime calls these in a loop; the MPI and cross-silo managers call them from message
handlers. One round logic, several transports.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np
import torch

from ..data.readers import LabeledTexts
from ..errors import FesError
from ..report.metrics import RunRecorder
from ..tuning.params import fedavg, load_trainable, payload_bytes, trainable_state, validate_update
from .job import Job
from .tasks import ClientTask, ClientUpdate, task_seed


class AggregatorLike(Protocol):
    """The part of FedML's `ServerAggregator` interface the round logic uses."""

    def get_model_params(self) -> "OrderedDict[str, torch.Tensor]": ...

    def set_model_params(self, params: "OrderedDict[str, torch.Tensor]") -> None: ...

    def on_before_aggregation(self, raw: list) -> tuple[list, list[int]]: ...

    def aggregate(self, raw: list) -> "OrderedDict[str, torch.Tensor]": ...

    def on_after_aggregation(self, params: "OrderedDict[str, torch.Tensor]") -> "OrderedDict[str, torch.Tensor]": ...

    def test(self, test_data: LabeledTexts, device: torch.device, args: Any) -> dict[str, float]: ...


class FedAvgCore:
    """FedAvg on trainable tensors plus evaluation; FedML's aggregator plugin delegates here."""

    def __init__(self, job: Job):
        self.job = job

    def get_model_params(self):
        return trainable_state(self.job.model)

    def set_model_params(self, params):
        load_trainable(self.job.model, params)

    def on_before_aggregation(self, raw):
        return raw, list(range(len(raw)))

    def aggregate(self, raw):
        return fedavg(raw)

    def on_after_aggregation(self, params):
        return params

    def test(self, test_data, device, args):
        j = self.job
        return j.method.evaluate(j.model, j.tokenizer, test_data, j.cfg, device)


class RoundServer:
    def __init__(self, job: Job, aggregator: AggregatorLike, recorder: RunRecorder):
        self.job = job
        self.aggregator = aggregator
        self.recorder = recorder
        self.cfg = job.cfg
        self._eligible = job.method.eligible_clients(job.data)
        self._round_started = time.perf_counter()

    @property
    def num_rounds(self) -> int:
        return self.cfg.train.comm_round

    def sample_clients(self, round_idx: int) -> list[int]:
        """Seeded per round, among the clients the method can train (e.g. gold holders)."""
        k = min(self.cfg.train.client_num_per_round, len(self._eligible))
        rng = np.random.default_rng([self.cfg.common.random_seed, round_idx, 1])
        return sorted(int(c) for c in rng.choice(self._eligible, size=k, replace=False))

    def plan(self, round_idx: int) -> list[ClientTask]:
        self._round_started = time.perf_counter()
        seed = self.cfg.common.random_seed
        return [ClientTask(round_idx, c, self.job.method.task_kind, task_seed(seed, round_idx, c))
                for c in self.sample_clients(round_idx)]

    def global_params(self) -> "OrderedDict[str, torch.Tensor]":
        return self.aggregator.get_model_params()

    def finish_round(self, round_idx: int, updates: list[ClientUpdate], planned: int | None = None) -> dict[str, Any]:
        reference = self.global_params()
        accepted: list[ClientUpdate] = []
        for u in sorted(updates, key=lambda u: u.client_id):
            try:
                validate_update(u.params, reference, f"client {u.client_id}")
                if not (np.isfinite(u.weight) and u.weight > 0):
                    raise FesError(f"update from client {u.client_id} has weight {u.weight}")
                accepted.append(u)
            except FesError as e:
                self.recorder.log_event(f"round {round_idx}: rejected {e}")
        if not accepted:
            raise FesError(f"round {round_idx}: no valid client update to aggregate")
        raw, _ = self.aggregator.on_before_aggregation([(u.weight, u.params) for u in accepted])
        new = self.aggregator.on_after_aggregation(self.aggregator.aggregate(raw))
        self.aggregator.set_model_params(new)

        is_last = round_idx == self.num_rounds - 1
        scores: dict[str, float] = {}
        if is_last or (round_idx + 1) % self.cfg.train.frequency_of_the_test == 0:
            scores = self.aggregator.test(self.job.data.test, self.job.device, self.cfg.flat_args())
        down = payload_bytes(reference)
        row: dict[str, Any] = {
            "round": round_idx,
            "clients": [u.client_id for u in accepted],
            "updates_planned": planned if planned is not None else len(updates),
            "updates_accepted": len(accepted),
            "train_loss": float(np.mean([u.metrics.get("train_loss", np.nan) for u in accepted])),
            "client_compute_s_max": max(u.metrics.get("compute_s", 0.0) for u in accepted),
            "bytes_down": down * len(accepted),
            "bytes_up": sum(payload_bytes(u.params) for u in accepted),
            self.job.method.primary_metric: scores.get(self.job.method.primary_metric, float("nan")),
            "round_wall_s": time.perf_counter() - self._round_started,
        }
        row.update({k: v for k, v in scores.items() if k not in row})
        self.recorder.append(row)
        return row
