"""Time to accuracy over seeds, as the paper's Table 4 reports it: the emulated device hours and
the upload a method needs before its test accuracy first reaches a target (another method's
final mean accuracy), and the "x faster" ratios between methods: on the seeds' mean curves, and
paired seed by seed (the paper's single-run ratio: each seed's own FedFSL run sets the target).

Everything comes from the run folders through `run_plot.run_curve` (the cost model's
cumulative hours and upload per evaluated round), so a table never shows a number the run's
own figure would not. A run that never reaches the target counts as not reached (the paper's
X); means are over the seeds that reached it, with how many did.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from .run_plot import Curve, run_curve

DEVICES = {"jetson_tx2": "TX2", "rpi_4b": "RPi 4B"}  # run_configs/devices/


@dataclass(frozen=True)
class Reached:
    """Mean over the seeds that reached the target; `reached` of `seeds` did."""

    hours: dict[str, float | None]  # device -> emulated hours
    upload: float | None
    reached: int
    seeds: int


@functools.lru_cache(maxsize=512)
def _curve(run_dir: str, device: str, _stamp: int) -> Curve:
    """One run's curve, read and costed once per report (every target and table reuses it);
    `_stamp` (metrics.csv's mtime) keeps a rewritten run from being read stale."""
    return run_curve(run_dir, device)


def curves_of(run_dirs: list[Path], device: str) -> list[Curve]:
    return [_curve(str(rd), device, (Path(rd) / "metrics.csv").stat().st_mtime_ns) for rd in run_dirs]


def reach(run_dirs: list[Path], target: float, devices: tuple[str, ...] = tuple(DEVICES)) -> Reached:
    """Hours on each device and upload bytes until the first evaluated round at or above `target`."""
    by_device = {d: curves_of(run_dirs, d) for d in devices}
    hours: dict[str, list[float]] = {d: [] for d in devices}
    upload: list[float] = []
    reached = 0
    for i in range(len(run_dirs)):
        first = by_device[devices[0]][i]
        at = next((k for k, a in enumerate(first.accuracy) if a >= target - 1e-12), None)
        if at is None:
            continue
        reached += 1
        upload.append(first.bytes_up[at])
        for d in devices:
            c = by_device[d][i]
            if c.hours:
                hours[d].append(c.hours[at])
    return Reached(
        {d: statistics.mean(h) if h else None for d, h in hours.items()},
        statistics.mean(upload) if upload else None,
        reached,
        len(run_dirs),
    )


def mean_curve(run_dirs: list[Path], label: str, device: str = "jetson_tx2") -> Curve | None:
    """The seeds' curves averaged round by round (the evaluated rounds all of them share)."""
    curves = [c for c in curves_of(run_dirs, device) if c.rounds]
    if not curves:
        return None
    shared = sorted(set.intersection(*(set(c.rounds) for c in curves)))

    def mean_at(attr: str) -> list[float]:
        out = []
        for r in shared:
            values = [getattr(c, attr)[c.rounds.index(r)] for c in curves if getattr(c, attr)]
            out.append(statistics.mean(values) if values else float("nan"))
        return out

    return Curve(
        label,
        curves[0].metric,
        shared,
        mean_at("bytes_up"),
        mean_at("hours") if all(c.hours for c in curves) else [],
        mean_at("accuracy"),
    )


def hours_to(curve: Curve | None, target: float) -> float | None:
    """Hours until `curve`'s first evaluated round at or above `target` (None: it never gets there)."""
    if curve is None or not curve.hours:
        return None
    at = next((k for k, a in enumerate(curve.accuracy) if a >= target - 1e-12), None)
    return None if at is None else curve.hours[at]


def speedup(mine: float | None, other: float | None) -> float | None:
    """How many times sooner `mine` hours reach a target than `other` hours (None: either never does).
    Over seeds the report reads both off the seeds' mean curves (`mean_curve`, the figure's curve):
    a target set by one method's final mean accuracy is then reached by that method's own mean
    curve, where the seeds one by one may not all reach it."""
    if not mine or not other:
        return None
    return other / mine


def _seed(run_dir: Path) -> str:
    """A run folder's seed, from its name (`<method>-s<seed>`, as the fidelity harness names it)."""
    return Path(run_dir).name.rsplit("-", 1)[-1]


def paired_speedups(mine: list[Path], other: list[Path], device: str = "jetson_tx2") -> dict[str, float | None]:
    """Per seed that both methods ran: `other`'s hours to first reach its own final accuracy over
    `mine`'s hours to reach that accuracy in the same seed's run, as the paper's Table 4 compares
    single runs ("hours to FedFSL's accuracy"). None: `mine` never got there in that seed."""
    theirs = {_seed(rd): rd for rd in other}
    out: dict[str, float | None] = {}
    for rd in sorted(mine, key=_seed):
        s = _seed(rd)
        if s not in theirs:
            continue
        [base] = curves_of([theirs[s]], device)
        [mycurve] = curves_of([rd], device)
        if not base.accuracy or not base.hours or not mycurve.hours:
            continue
        goal = base.accuracy[-1]
        out[s] = speedup(hours_to(mycurve, goal), hours_to(base, goal))
    return out
