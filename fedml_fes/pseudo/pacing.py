"""Curriculum pacing <f, n, k>, picked and switched online by AUG-E (FeS, Algorithm 1).

A configuration labels every f rounds, on n clients, k% more of each client's pool per pass
(so a client's pseudo labels grow linearly with its passes). Its value is measured as

    AUG-E = eta * delta_acc / (C_infer(f, n) + theta * C_train(k)),
    C_infer(f, n) = l_i * n / f,   C_train(k) = l_t * k,

accuracy gained per unit of labeling and training cost (l_i, l_t: per-batch inference and
training latency of the device profile). The configurator tries each configuration of an
initial list for r rounds, keeps the best and the top t, and switches to the next of the
top t whenever the running configuration's AUG-E falls below s. Each decision is returned
as a line for the run's event log. Deterministic given the accuracies it observes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FesError


@dataclass(frozen=True)
class Pacing:
    f: int  # label every f rounds
    n: int  # on n clients
    k: float  # k% more of each client's pool per pass

    def __str__(self) -> str:
        return f"<f={self.f}, n={self.n}, k={self.k:g}%>"

    def labels_in(self, round_idx: int, since: int) -> bool:
        return (round_idx - since) % self.f == 0


def default_grid() -> list[Pacing]:
    """The 32 initial configurations: f in {1,2,4,8} x n in {1,2,5,10} x k in {5,10}%."""
    return [Pacing(f, n, k) for f in (1, 2, 4, 8) for n in (1, 2, 5, 10) for k in (5.0, 10.0)]


def parse_grid(entries: list | None) -> list[Pacing]:
    """'f,n,k' strings (or [f, n, k] lists) from YAML; None: the default grid."""
    if entries is None:
        return default_grid()
    if not entries:
        raise FesError("pacing_args.grid is an empty configuration list")
    out = []
    for e in entries:
        parts = [x.strip() for x in e.split(",")] if isinstance(e, str) else list(e)
        try:
            f, n, k = int(parts[0]), int(parts[1]), float(parts[2])
            if len(parts) != 3 or f < 1 or n < 1 or not 0 < k <= 100:
                raise ValueError
        except (ValueError, IndexError):
            raise FesError(f"pacing_args.grid entry {e!r} must be 'f,n,k' with f, n >= 1 and 0 < k <= 100") from None
        out.append(Pacing(f, n, k))
    return out


def aug_e(delta_acc: float, p: Pacing, infer_latency: float, train_latency: float, eta: float = 1.0,
          theta: float = 1.0) -> float:
    cost = infer_latency * p.n / p.f + theta * train_latency * p.k
    return eta * delta_acc / cost


class PacingConfigurator:
    """Algorithm 1: trial every configuration, then run the best, switching among the top t."""

    def __init__(self, grid: list[Pacing], trial_rounds: int, top: int, switch_threshold: float,
                 infer_latency: float, train_latency: float, eta: float = 1.0, theta: float = 1.0):
        if not grid:
            raise FesError("pacing needs at least one configuration (pacing_args.grid is empty)")
        self.grid, self.r, self.t, self.s = grid, trial_rounds, top, switch_threshold
        self.l_i, self.l_t, self.eta, self.theta = infer_latency, train_latency, eta, theta
        self.trial_scores: list[tuple[float, Pacing]] = []
        self.ranked: list[Pacing] = []
        self.current = grid[0]
        self.window_start_round = 0
        self.window_start_acc: float | None = None
        self._trial_idx = 0

    @property
    def trialing(self) -> bool:
        return not self.ranked

    def start(self, acc: float, first_round: int = 0) -> None:
        """The accuracy before `first_round` (the first labeling round): the first trial's baseline."""
        self.window_start_acc = acc
        self.window_start_round = first_round

    def score(self, delta_acc: float, p: Pacing) -> float:
        return aug_e(delta_acc, p, self.l_i, self.l_t, self.eta, self.theta)

    def observe(self, round_idx: int, acc: float) -> list[str]:
        """Feed the accuracy after `round_idx`; returns the decisions taken (log lines)."""
        if round_idx < self.window_start_round:  # warm-up rounds before pacing starts
            return []
        if self.window_start_acc is None:  # start() was not called: this round is the baseline
            self.window_start_acc = acc
            self.window_start_round = round_idx + 1
            return []
        if round_idx + 1 - self.window_start_round < self.r:
            return []
        delta = acc - self.window_start_acc
        value = self.score(delta, self.current)
        events: list[str] = []
        if self.trialing:
            self.trial_scores.append((value, self.current))
            events.append(f"pacing trial {self._trial_idx + 1}/{len(self.grid)} {self.current}: "
                          f"delta_acc={delta:+.4f} AUG-E={value:.6g}")
            self._trial_idx += 1
            if self._trial_idx < len(self.grid):
                self.current = self.grid[self._trial_idx]
            else:
                order = sorted(range(len(self.trial_scores)), key=lambda i: (-self.trial_scores[i][0], i))
                self.ranked = [self.trial_scores[i][1] for i in order[: self.t]]
                self.current = self.ranked[0]
                events.append(f"pacing chose {self.current}; top {len(self.ranked)}: "
                              + " ".join(str(p) for p in self.ranked))
        elif value < self.s and len(self.ranked) > 1:
            nxt = self.ranked[(self.ranked.index(self.current) + 1) % len(self.ranked)]
            events.append(f"pacing switch {self.current} -> {nxt}: AUG-E={value:.6g} < s={self.s:g}")
            self.current = nxt
        self.window_start_round = round_idx + 1
        self.window_start_acc = acc
        return events


def per_pass_count(pool_size: int, k_percent: float) -> int:
    """Labels added per pass: k% of the pool, at least one."""
    return max(1, math.ceil(pool_size * k_percent / 100.0))
