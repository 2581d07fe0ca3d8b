"""Curriculum pacing <f, n, k>, picked and switched online by AUG-E (FeS, Algorithm 1).

A configuration runs a *labeling event* every f rounds on n clients; at each event every
participant's pseudo-label set grows to k% more of its own pool than at the previous global
event. The budget follows the global event count, not a client's own history: a client
first sampled at the fifth event labels 5 x k% of its pool, as the paper's curriculum says.

A configuration's value is

    AUG-E = eta * delta_acc / (C_infer(f, n) + theta * C_train(k)),
    C_infer(f, n) = l_i * n / f,   C_train(k) = l_t * k,

accuracy gained per unit of labeling and training cost (l_i, l_t: per-batch inference and
training latency of the device profile). Algorithm 1: every configuration of the initial
list is trialled for r rounds; the highest AUG-E becomes current and the top t are kept;
when the current configuration's AUG-E falls below s, only the top t are trialled again.

Trials are amortized on idle clients, as the paper suggests, instead of holding the main
training back: in each round a trial's group (n clients that neither label nor train for
the main model) labels with the round's global model under the trial's budget and trains on
those labels; the server averages the group's updates into a throw-away model and scores
its gain over the global model on validation data. A trial's delta_acc is the sum of its
r rounds' gains. This module is the bookkeeping only (no models): deterministic given the
validation accuracies it is fed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FesError


@dataclass(frozen=True)
class Pacing:
    f: int  # a labeling event every f rounds
    n: int  # on n clients
    k: float  # each participant holds k% more of its pool than at the previous event

    def __str__(self) -> str:
        return f"<f={self.f}, n={self.n}, k={self.k:g}%>"


def default_grid() -> list[Pacing]:
    """The initial list, built around the paper's examples <5,2,1> and <1,4,2>: f in {1, 5},
    n in {2, 4}, k in {1, 2, 4}% (12 configurations; the paper's list has 32 for 1000 clients)."""
    return [Pacing(f, n, k) for f in (1, 5) for n in (2, 4) for k in (1.0, 2.0, 4.0)]


def parse_grid(entries: list | None) -> list[Pacing]:
    """'f,n,k' strings (or [f, n, k] lists) from YAML; None: the default list."""
    if entries is None:
        return default_grid()
    if not entries:
        raise FesError("pacing_args.grid is an empty configuration list")
    out = []
    for e in entries:
        try:
            parts = [x.strip() for x in e.split(",")] if isinstance(e, str) else list(e)
            f, n, k = int(parts[0]), int(parts[1]), float(parts[2])
            if len(parts) != 3 or f < 1 or n < 1 or not 0 < k <= 100:
                raise ValueError
        except (ValueError, IndexError, TypeError, OverflowError):  # 5, [1, x], '1,2,nan', [inf, 2, 3]
            raise FesError(f"pacing_args.grid entry {e!r} must be 'f,n,k' with f, n >= 1 and 0 < k <= 100") from None
        out.append(Pacing(f, n, k))
    return out


def pacing_cost(p: Pacing, infer_latency: float, train_latency: float, theta: float = 1.0) -> float:
    """AUG-E's denominator: C_infer(f, n) + theta * C_train(k)."""
    return infer_latency * p.n / p.f + theta * train_latency * p.k


def aug_e(
    delta_acc: float, p: Pacing, infer_latency: float, train_latency: float, eta: float = 1.0, theta: float = 1.0
) -> float:
    return eta * delta_acc / pacing_cost(p, infer_latency, train_latency, theta)


def budget_target(pool_size: int, fraction: float) -> int:
    """Pseudo labels a participant holds at an event: `fraction` of its pool, at least one."""
    return min(pool_size, max(1, math.ceil(round(pool_size * fraction, 9))))


@dataclass
class Trial:
    """One configuration trialled on its own idle group, starting from the global model."""

    config: Pacing
    group: list[int]  # client ids: they label and train for the trial only
    start_round: int
    fraction: float  # budget fraction before the trial's first event (the main one's)
    gains: list[float] = field(default_factory=list)  # per round: val(trial model) - val(global)

    def labels_in(self, round_idx: int) -> bool:
        return (round_idx - self.start_round) % self.config.f == 0


class PacingConfigurator:
    """Algorithm 1 over a list of configurations, with trials on idle client groups."""

    def __init__(self, grid: list[Pacing], settings: Any):
        """`grid`: the configurations, first the current one (`parse_grid`). `settings`: pacing_args,
        a `fedml_fes.config.PacingConfig` (read by its keys, not imported: the config's checks
        import this module): trial_rounds (r), top (t), switch_threshold (s), infer_latency_s and
        train_latency_s (l_i, l_t), eta, theta and parallel_trials."""
        if not grid:
            raise FesError("pacing needs at least one configuration (pacing_args.grid is empty)")
        self.grid = grid
        self.r, self.t, self.s = settings.trial_rounds, settings.top, settings.switch_threshold
        self.l_i, self.l_t = settings.infer_latency_s, settings.train_latency_s
        self.eta, self.theta = settings.eta, settings.theta
        self.parallel = max(1, settings.parallel_trials)
        self.current = grid[0]
        self.ranked: list[Pacing] = []
        self.pending: list[Pacing] = list(grid)  # waiting for a trial in this phase
        self.running: list[Trial] = []
        self.scores: list[tuple[float, float, int, Pacing]] = []  # (AUG-E, cost, list position, config)
        self.phase = "initial"
        self.window_start_round: int | None = None
        self.window_start_acc: float | None = None

    def state_dict(self) -> dict:
        """Everything `start_trials` / `finish_trial_round` / `observe` read later, as plain data
        (lists, numbers, strings) for a run's checkpoint; the grid and constants come from the
        config and are rebuilt with the object."""

        def cfg(p: Pacing) -> list:
            return [p.f, p.n, p.k]

        return {
            "current": cfg(self.current),
            "ranked": [cfg(p) for p in self.ranked],
            "pending": [cfg(p) for p in self.pending],
            "running": [
                {
                    "config": cfg(t.config),
                    "group": list(t.group),
                    "start_round": t.start_round,
                    "fraction": t.fraction,
                    "gains": list(t.gains),
                }
                for t in self.running
            ],
            "scores": [[value, cost, pos, cfg(p)] for value, cost, pos, p in self.scores],
            "phase": self.phase,
            "window_start_round": self.window_start_round,
            "window_start_acc": self.window_start_acc,
        }

    def load_state_dict(self, state: dict) -> None:
        def cfg(x: list) -> Pacing:
            return Pacing(int(x[0]), int(x[1]), float(x[2]))

        self.current = cfg(state["current"])
        self.ranked = [cfg(x) for x in state["ranked"]]
        self.pending = [cfg(x) for x in state["pending"]]
        self.running = [
            Trial(
                cfg(t["config"]),
                [int(c) for c in t["group"]],
                int(t["start_round"]),
                float(t["fraction"]),
                [float(g) for g in t["gains"]],
            )
            for t in state["running"]
        ]
        self.scores = [(float(v), float(c), int(i), cfg(p)) for v, c, i, p in state["scores"]]
        self.phase = state["phase"]
        self.window_start_round = state["window_start_round"]
        self.window_start_acc = state["window_start_acc"]

    @property
    def trialing(self) -> bool:
        return bool(self.pending or self.running)

    def score(self, delta_acc: float, p: Pacing) -> float:
        return aug_e(delta_acc, p, self.l_i, self.l_t, self.eta, self.theta)

    def busy_clients(self) -> set[int]:
        return {c for t in self.running for c in t.group}

    def start_trials(self, round_idx: int, idle: list[int], fraction: float, rng: np.random.Generator) -> list[str]:
        """Start waiting trials on groups drawn from `idle` clients (as many as fit)."""
        free = [c for c in idle if c not in self.busy_clients()]
        events = []
        while self.pending and len(self.running) < self.parallel and len(free) >= self.pending[0].n:
            p = self.pending.pop(0)
            group = sorted(int(c) for c in rng.choice(free, size=p.n, replace=False))
            free = [c for c in free if c not in group]
            self.running.append(Trial(p, group, round_idx, fraction))
            events.append(f"pacing trial {p} on idle clients {group}")
        if self.pending and not self.running:  # nothing can ever start: too few idle clients
            events.append(
                f"pacing: no {self.pending[0].n} idle clients for {self.pending[0]}; "
                f"{len(self.pending)} configuration(s) not trialled"
            )
            self.pending = []
            events += self._close_phase()
        return events

    def finish_trial_round(self, round_idx: int, gains: dict[int, float]) -> list[str]:
        """Record each running trial's gain this round (by index into `running`); end due ones."""
        events = []
        for i, trial in enumerate(self.running):
            trial.gains.append(gains.get(i, 0.0))
        still = []
        for trial in self.running:
            if round_idx + 1 - trial.start_round < self.r:
                still.append(trial)
                continue
            delta = float(sum(trial.gains))
            value = self.score(delta, trial.config)
            cost = pacing_cost(trial.config, self.l_i, self.l_t, self.theta)
            self.scores.append((value, cost, self.grid.index(trial.config), trial.config))
            events.append(f"pacing trial {trial.config} done: delta_acc={delta:+.4f} AUG-E={value:.6g}")
        self.running = still
        if not self.trialing:
            events += self._close_phase()
        return events

    def _close_phase(self) -> list[str]:
        if not self.scores:
            return []
        # ties (e.g. no measurable gain anywhere: AUG-E 0) go to the cheaper configuration
        order = sorted(self.scores, key=lambda s: (-s[0], s[1], s[2]))
        self.ranked = [p for *_, p in order[: self.t]]
        before, self.current = self.current, self.ranked[0]
        self.scores = []
        self.window_start_round = self.window_start_acc = None
        what = "chose" if self.phase == "initial" else f"re-trial chose (was {before})"
        return [f"pacing {what} {self.current}; top {len(self.ranked)}: " + " ".join(str(p) for p in self.ranked)]

    def observe(self, round_idx: int, acc: float) -> list[str]:
        """The main model's validation accuracy after `round_idx`; every r rounds outside a
        trial phase, the current configuration's AUG-E decides whether to re-trial the top t."""
        if self.trialing:
            return []
        if self.window_start_acc is None:
            self.window_start_round, self.window_start_acc = round_idx + 1, acc
            return []
        if round_idx + 1 - self.window_start_round < self.r:
            return []
        delta = acc - self.window_start_acc
        value = self.score(delta, self.current)
        self.window_start_round, self.window_start_acc = round_idx + 1, acc
        if value < self.s and len(self.ranked) > 1:
            self.pending, self.phase = list(self.ranked), "re-trial"
            return [
                f"pacing: AUG-E of {self.current} = {value:.6g} < s={self.s:g}; re-trialling the top {len(self.ranked)}"
            ]
        return []
