"""The benchmark's numbers, computed from run files, device profiles and a network.

Convergence accuracy of a run = mean of its last `tail` evaluated accuracies. Targets are
the convergence accuracies of reference methods (FedFSL, FedFSL-BIAS) in the same seed
(same partition); time-to-accuracy = emulated hours until the first evaluated round at or
above the target (None: never reached, the paper's X), with traffic and energy summed over
the same rounds. Per method, numbers are means over the seeds that completed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ..cost.accounting import RoundCost, UpTo, cumulative_hours, first_round_reaching, round_costs, totals_up_to
from ..cost.network import Network
from ..cost.profiles import DeviceProfile
from .runs import RunData

LABELS = {
    "fedcls": "FedCLS",
    "prompt_only": "Prompt-only",
    "pseudo_only": "Pseudo-only",
    "fedfsl": "FedFSL",
    "fedfsl_bias": "FedFSL-BIAS",
    "fes": "FeS",
    "fes_no_cp": "FeS w/o co-planning",
    "fes_no_rf": "FeS w/o filtering",
    "fes_no_dc": "FeS w/o curriculum pacing",
    "full_label": "Full-label FedCLS",
}
FULL_LABEL = "full_label"
# methods whose model before round 0 is the untrained prompt model (the zero-shot baseline)
PROMPT_METHODS = frozenset({"prompt_only", "fedfsl", "fedfsl_bias", "fes", "fes_no_cp", "fes_no_rf", "fes_no_dc"})


def label(method: str) -> str:
    return LABELS.get(method, method)


def mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.mean(xs) if xs else None


@dataclass(frozen=True)
class Reach:
    """Mean over seeds of a time-to-accuracy; `reached` of `seeds` runs got there."""

    hours: float | None
    bytes: float | None
    energy_j: float | None
    reached: int
    seeds: int

    @property
    def complete(self) -> bool:
        return self.seeds > 0 and self.reached == self.seeds


@dataclass
class BenchData:
    """The runs of one benchmark: (method, seed) -> run, plus full-label references by seed."""

    runs: dict[tuple[str, int], RunData]
    tail: int = 3
    _costs: dict = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return sorted({m for m, _ in self.runs if m != FULL_LABEL})

    def seeds(self, method: str) -> list[int]:
        return sorted(s for m, s in self.runs if m == method)

    def run(self, method: str, seed: int) -> RunData | None:
        return self.runs.get((method, seed))

    def costs(self, run: RunData, device: DeviceProfile, network: Network) -> list[RoundCost]:
        key = (run.name, device.name, device.flops_per_s, network)
        if key not in self._costs:
            self._costs[key] = round_costs(run.tasks, device, network)
        return self._costs[key]

    def convergence(self, method: str, seed: int) -> float | None:
        r = self.run(method, seed)
        return r.convergence_accuracy(self.tail) if r is not None else None

    def target(self, target_method: str, seed: int) -> float | None:
        return self.convergence(target_method, seed)

    def reach(self, method: str, target_method: str, device: DeviceProfile, network: Network) -> Reach:
        """Mean hours, bytes and energy to reach the target method's convergence accuracy."""
        hours, moved, energy, reached, seeds = [], [], [], 0, 0
        for seed in self.seeds(method):
            goal = self.target(target_method, seed)
            if goal is None:
                continue
            seeds += 1
            run = self.run(method, seed)
            costs = self.costs(run, device, network)
            up_to: UpTo | None = totals_up_to(costs, first_round_reaching(run.accuracy, goal))
            if up_to is not None:
                reached += 1
                hours.append(up_to.hours)
                moved.append(up_to.bytes)
                energy.append(up_to.energy_j)
        return Reach(mean(hours), mean(moved), mean(energy), reached, seeds)

    def totals(self, method: str, device: DeviceProfile, network: Network) -> UpTo | None:
        """Mean over seeds of the whole run's hours, bytes and energy."""
        parts = []
        for seed in self.seeds(method):
            costs = self.costs(self.run(method, seed), device, network)
            if costs:
                parts.append(totals_up_to(costs, costs[-1].round))
        if not parts:
            return None
        return UpTo(
            -1, mean([p.hours for p in parts]), mean([p.bytes for p in parts]), mean([p.energy_j for p in parts])
        )

    def curve(self, method: str, device: DeviceProfile, network: Network) -> tuple[list[float], list[float]]:
        """(mean cumulative hours, mean accuracy) at each evaluated round, over seeds."""
        per_round: dict[int, tuple[list[float], list[float]]] = {}
        for seed in self.seeds(method):
            run = self.run(method, seed)
            costs = self.costs(run, device, network)
            hours = dict(zip([c.round for c in costs], cumulative_hours(costs)))
            for r, acc in run.accuracy.items():
                if r in hours:
                    per_round.setdefault(r, ([], []))
                    per_round[r][0].append(hours[r])
                    per_round[r][1].append(acc)
        rounds = sorted(per_round)
        return [mean(per_round[r][0]) for r in rounds], [mean(per_round[r][1]) for r in rounds]

    def memory(self, method: str) -> dict[str, float]:
        """Peak training memory over seeds and tasks, with its parts at that peak."""
        best: dict[str, float] = {}
        for seed in self.seeds(method):
            for row in self.run(method, seed).rows_of_costs():
                peak = float(row.get("peak_train_bytes") or 0)
                if peak > best.get("peak", -1):
                    best = {
                        "peak": peak,
                        **{
                            k: float(row.get(f"{k}_bytes") or 0)
                            for k in (
                                "param",
                                "grad",
                                "optimizer",
                                "activation_peak",
                                "cuda_peak",
                                "trainable",
                                "fill_peak",
                            )
                        },
                    }
                    # parameters the training step holds: those it reads (runs before the column: all)
                    resident = row.get("resident_param_bytes")
                    best["resident_param"] = float(resident) if resident not in (None, "") else best["param"]
        return best

    def zero_shot(self) -> float | None:
        """Mean over seeds of the untrained prompt model's accuracy on the test texts: each seed's
        first prompt run's own start (summary.json `initial`; a head classifier's start is a random
        head, not a baseline)."""
        import json

        starts: dict[int, float] = {}
        for (method, seed), run in sorted(self.runs.items()):
            if method not in PROMPT_METHODS or seed in starts:
                continue
            try:
                start = json.loads((run.run_dir / "summary.json").read_text()).get("initial", {}).get(run.metric)
            except (OSError, ValueError):
                continue
            if isinstance(start, (int, float)):
                starts[seed] = float(start)
        return mean(list(starts.values()))

    def accuracy_stats(self, method: str) -> dict[str, float | None]:
        conv = [self.convergence(method, s) for s in self.seeds(method)]
        final = [self.run(method, s).final_accuracy() for s in self.seeds(method)]
        rel = []
        for s in self.seeds(method):
            ref = self.convergence(FULL_LABEL, s)
            c = self.convergence(method, s)
            if ref and c is not None:
                rel.append(c / ref)
        conv_ok = [c for c in conv if c is not None]
        return {
            "convergence": mean(conv_ok),
            "std": statistics.stdev(conv_ok) if len(conv_ok) > 1 else 0.0,
            "final": mean([f for f in final if f is not None]),
            "relative": mean(rel),
            "rounds": mean([float(self.run(method, s).rounds_completed) for s in self.seeds(method)]),
        }


@dataclass(frozen=True)
class ModelCheck:
    """Compute model vs time measured on this host, for one phase of the runs' client tasks."""

    phase: str
    tasks: int
    median_abs_pct_error: float
    mean_abs_pct_error: float
    predicted_s: float
    measured_s: float

    @property
    def total_ratio(self) -> float:
        return self.predicted_s / self.measured_s if self.measured_s else float("nan")


def compute_model_check(
    data: BenchData, host: DeviceProfile, clock: str = "cpu"
) -> tuple[list[ModelCheck], list[tuple[str, float, float]]]:
    """Per phase error statistics, and (phase, predicted, measured) per task for a scatter plot.

    clock: "cpu" compares with the task's CPU time (what the host profile is calibrated on),
    "wall" with its wall time (includes waiting for other processes on a shared machine).
    """
    points = []
    for run in data.runs.values():
        for t in run.tasks:
            measured = t.cpu_s if clock == "cpu" else t.measured_s
            if measured > 0 and t.flops > 0:
                points.append((t.phase, host.compute_seconds(t.flops, t.calls, t.update_bytes), measured))
    out = []
    for phase in ("train", "label", "all"):
        sel = [(p, m) for ph, p, m in points if phase == "all" or ph == phase]
        if not sel:
            continue
        err = [abs(p - m) / m * 100 for p, m in sel]
        out.append(
            ModelCheck(
                phase,
                len(sel),
                statistics.median(err),
                statistics.mean(err),
                sum(p for p, _ in sel),
                sum(m for _, m in sel),
            )
        )
    return out, points
