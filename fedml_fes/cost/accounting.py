"""Per-round cost of a finished run on an emulated device and network, from its task records.

Each row of `client_costs.csv` is one client task (a labeling pass or local training) with
the FLOPs it ran, its encoder calls, and the bytes it downloaded and uploaded. For device
profile d and network (B_down, B_up):

    compute(task)  = FLOPs / R_d + calls x o_d + update bytes / M_d
    transfer(task) = bytes_down / B_down + bytes_up / B_up
    T_label(r)     = max over the round's labeling clients of [transfer + compute]
    T_train(r)     = max over the round's training clients of [transfer + compute]
    T(r)           = T_label(r) + T_train(r)

The two phases add because the protocol runs them one after the other (training clients
are drawn among those holding labels after the labeling pass); within a phase, clients
work in parallel, so the slowest sets the pace. Energy adds over every task of the round:

    E(r) = sum over tasks of [P_compute,d x compute(task) + P_radio,d x transfer(task)]

Rejected updates still cost their device time, energy and bytes, and count here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from .energy import task_energy_j
from .network import Network
from .profiles import DeviceProfile


@dataclass(frozen=True)
class TaskRecord:
    """The device-independent record of one client task (a row of client_costs.csv)."""

    round: int
    phase: str  # label | train
    client_id: int
    flops: float  # forward + backward + filtering proxy
    calls: float  # encoder calls (per-call overhead)
    bytes_down: float
    bytes_up: float
    measured_s: float  # compute (wall) time measured on the machine that ran it
    peak_train_bytes: float = 0.0
    cpu_s: float = 0.0  # CPU time of the process over the task (robust to other load on the machine)
    update_bytes: float = 0.0  # memory traffic of gradient writes and optimizer steps

    @staticmethod
    def from_row(row: Mapping[str, str]) -> "TaskRecord":
        def num(key: str) -> float:
            value = row.get(key, "")
            return float(value) if value not in ("", None) else 0.0

        return TaskRecord(
            int(num("round")),
            str(row.get("phase", "")),
            int(num("client_id")),
            num("fwd_flops") + num("bwd_flops") + num("filter_flops"),
            num("encoder_calls"),
            num("bytes_down"),
            num("bytes_up"),
            num("compute_s"),
            num("peak_train_bytes"),
            num("cpu_s"),
            num("update_bytes"),
        )


@dataclass(frozen=True)
class RoundCost:
    round: int
    label_s: float
    train_s: float
    compute_s: float  # device-seconds of compute, summed over tasks
    transfer_s: float  # device-seconds of transfers, summed over tasks
    energy_j: float
    bytes: float

    @property
    def time_s(self) -> float:
        return self.label_s + self.train_s


def task_seconds(task: TaskRecord, profile: DeviceProfile, network: Network) -> tuple[float, float]:
    """(compute, transfer) seconds of one task."""
    return (
        profile.compute_seconds(task.flops, task.calls, task.update_bytes),
        network.transfer_seconds(task.bytes_down, task.bytes_up),
    )


def round_costs(tasks: Iterable[TaskRecord], profile: DeviceProfile, network: Network) -> list[RoundCost]:
    by_round: dict[int, list[TaskRecord]] = {}
    for t in tasks:
        by_round.setdefault(t.round, []).append(t)
    out = []
    for r in sorted(by_round):
        phase_s = {"label": 0.0, "train": 0.0}
        compute = transfer = energy = moved = 0.0
        for t in by_round[r]:
            c, x = task_seconds(t, profile, network)
            key = "label" if t.phase == "label" else "train"
            phase_s[key] = max(phase_s[key], c + x)
            compute += c
            transfer += x
            energy += task_energy_j(profile, c, x)
            moved += t.bytes_down + t.bytes_up
        out.append(RoundCost(r, phase_s["label"], phase_s["train"], compute, transfer, energy, moved))
    return out


def cumulative_hours(costs: list[RoundCost]) -> list[float]:
    total, out = 0.0, []
    for c in costs:
        total += c.time_s
        out.append(total / 3600.0)
    return out


def first_round_reaching(accuracy: Mapping[int, float], target: float) -> int | None:
    """The first evaluated round whose accuracy is >= target; None: never (the paper's X)."""
    for r in sorted(accuracy):
        a = accuracy[r]
        if a is not None and not math.isnan(a) and a >= target - 1e-12:
            return r
    return None


@dataclass(frozen=True)
class UpTo:
    """Totals over rounds 0..round (inclusive)."""

    round: int
    hours: float
    bytes: float
    energy_j: float


def totals_up_to(costs: list[RoundCost], round_idx: int | None) -> UpTo | None:
    if round_idx is None:
        return None
    kept = [c for c in costs if c.round <= round_idx]
    return UpTo(
        round_idx, sum(c.time_s for c in kept) / 3600.0, sum(c.bytes for c in kept), sum(c.energy_j for c in kept)
    )
