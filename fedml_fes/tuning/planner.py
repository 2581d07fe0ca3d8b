"""Pick the co-planning depth offline: binary search over trainable depth, as FeS's simulator does.

Training fewer top layers is cheaper (less compute above the cached frozen bottom, smaller
payloads) but may cost accuracy. A probe trains a depth for a few proxy rounds and reports
(score, cost); the score is higher-is-better on held-out gold labels (their accuracy, or their
true classes' mean log-likelihood, which still moves once every one of them is right). The
planner probes the deepest plan first as the reference, then binary searches for the shallowest
depth whose score stays within `tolerance` of it, assuming the score does not fall as depth
grows (the search probes O(log L) depths, not all L).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import FesError


@dataclass(frozen=True)
class Probe:
    depth: int  # top layers trained (bias-only)
    score: float  # higher is better: validation accuracy or mean log-likelihood
    cost: float  # e.g. measured client compute seconds per round
    payload_bytes: int


@dataclass
class PlanSearch:
    chosen: Probe
    reference: Probe
    probes: list[Probe] = field(default_factory=list)

    def table(self) -> str:
        lines = ["| depth | score | cost/round | payload bytes |", "|---|---|---|---|"]
        for p in sorted(self.probes, key=lambda p: p.depth):
            mark = " (chosen)" if p.depth == self.chosen.depth else ""
            lines.append(f"| {p.depth}{mark} | {p.score:.4f} | {p.cost:.3f} | {p.payload_bytes} |")
        return "\n".join(lines)


def search_depth(max_depth: int, probe: Callable[[int], Probe], tolerance: float, min_depth: int = 1) -> PlanSearch:
    """Shallowest depth in [min_depth, max_depth] with score >= reference's - tolerance."""
    if not 1 <= min_depth <= max_depth:
        raise FesError(f"planner depth range [{min_depth}, {max_depth}] is empty: the model has too few layers")
    if tolerance < 0:
        raise FesError(f"planner tolerance must be >= 0, got {tolerance}")
    seen: dict[int, Probe] = {}

    def run(depth: int) -> Probe:
        if depth not in seen:
            seen[depth] = probe(depth)
        return seen[depth]

    reference = run(max_depth)
    lo, hi = min_depth, max_depth  # invariant: hi is acceptable
    while lo < hi:
        mid = (lo + hi) // 2
        if run(mid).score >= reference.score - tolerance:
            hi = mid
        else:
            lo = mid + 1
    return PlanSearch(chosen=run(hi), reference=reference, probes=list(seen.values()))
