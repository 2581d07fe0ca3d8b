"""The fidelity report's time-to-accuracy part (the paper's Table 4) and its figures: per
dataset, each method's emulated TX2 and Raspberry Pi 4B hours and upload to reach FedFSL's
final mean accuracy and Prompt-only's, the "x faster" ratios as the paper prints them, and one
figure of accuracy against emulated hours (means over seeds). Read from the run folders only
(fedml_fes/report/time_to_target.py); runs evaluated only after their last round reach a
target at that round or never.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable

from fedml_fes.report.run_plot import size_text
from fedml_fes.report.time_to_target import DEVICES, Reached, hours_to, mean_curve, paired_speedups, reach, speedup

TARGETS = ("fedfsl", "prompt_only")  # whose final mean accuracy is the target
COMPARED = ("fedfsl", "fedfsl_bias", "fedcls")  # "x faster than" these, as the paper's Table 4
PAIRED = ("fedfsl", "fedfsl_bias")  # seed by seed, each seed's own run of it sets the target


def _runs(rows: list[dict[str, Any]], dataset: str, variant_of: Callable) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for r in rows:
        folder = Path(r.get("_run_dir") or "")
        if r["dataset"] == dataset and r["method"] != "zero_shot" and (folder / "metrics.csv").is_file():
            out.setdefault(variant_of(r), []).append(folder)
    return out


def _hours(x: float | None) -> str:
    return "X" if x is None else f"{x:.3g}"


def _ratio(x: float | None) -> str:
    """As the paper prints them: 8.2x, 46x, 3000x (no exponent)."""
    if x is None or math.isnan(x):
        return "-"
    return f"{x:.0f}x" if x >= 100 else f"{x:.3g}x"


def _bytes(x: float | None) -> str:
    return "X" if x is None else size_text(x)


def time_tables(rows: list[dict[str, Any]], label_of: Callable, variant_of: Callable) -> list[str]:
    """The markdown lines of the time-to-accuracy section, one table per dataset."""
    lines = [
        "## Time to accuracy (the paper's Table 4)",
        "",
        "Emulated hours (Jetson TX2, Raspberry Pi 4B; the cost model, 1 MB/s) and upload until a run's "
        "test accuracy first reaches the target: FedFSL's final mean accuracy, then Prompt-only's. Means "
        "over the seeds that reached it (X: none did; k/n: how many of the seeds did). "
        "x faster: the other method's TX2 hours over this one's to the first target, both read off the seeds' mean "
        "curve (accuracy and hours averaged round by round, the figure's curve) at its first evaluated round at or "
        "above it (X: this method's mean curve never reaches it; -: the other's does not, or it has no runs). "
        "Seed by seed: the paper's single-run ratio, once per seed: that seed's FedFSL (FedFSL-BIAS) run's TX2 "
        "hours to its own final accuracy over this method's hours to the same accuracy in the same seed "
        "(X: never reached).",
        "",
    ]
    tables: list[str] = []
    for d in dict.fromkeys(r["dataset"] for r in rows):
        runs = _runs(rows, d, variant_of)
        finals = {
            t: statistics.mean(r["accuracy"] for r in rows if r["dataset"] == d and variant_of(r) == t)
            for t in TARGETS
            if t in runs
        }
        if not finals:
            continue
        reached = {(v, t): reach(dirs, goal) for t, goal in finals.items() for v, dirs in runs.items()}
        means = {v: mean_curve(dirs, v) for v, dirs in runs.items()}
        first = next(iter(finals))
        head = "| method |"
        rule = "|---|"
        for t, goal in finals.items():
            head += f" TX2 h to {label_of(t)}'s {100 * goal:.1f}% | RPi h | upload | seeds |"
            rule += "---|---|---|---|"
        head += " x faster than " + " / ".join(label_of(m) for m in COMPARED) + " |"
        head += "".join(f" x faster than {label_of(m)}, seed by seed |" for m in PAIRED)
        rule += "---|" * (1 + len(PAIRED))
        tables += [f"### {d}", "", head, rule]
        for v in runs:
            line = f"| {label_of(v)} |"
            for t in finals:
                x: Reached = reached[(v, t)]
                line += (
                    f" {_hours(x.hours['jetson_tx2'])} | {_hours(x.hours['rpi_4b'])} | {_bytes(x.upload)} |"
                    f" {x.reached}/{x.seeds} |"
                )
            mine = hours_to(means[v], finals[first])
            ratios = [
                "X" if mine is None else _ratio(speedup(mine, hours_to(means.get(m), finals[first]))) for m in COMPARED
            ]
            line += " " + " / ".join(ratios) + " |"
            for m in PAIRED:
                paired = paired_speedups(runs[v], runs[m]) if m in runs and v != m else {}
                line += (
                    " " + (", ".join(f"{s} {'X' if r is None else _ratio(r)}" for s, r in paired.items()) or "-") + " |"
                )
            tables.append(line)
        tables.append("")
    return lines + tables if tables else []  # nothing to time: no run folder, or no target's runs


def write_figures(
    rows: list[dict[str, Any]], folder: Path, label_of: Callable, variant_of: Callable, prefix: str = "fidelity"
) -> list[Path]:
    """`<prefix>_<dataset>.png` per dataset: accuracy against emulated TX2 hours and upload, means over seeds."""
    from fedml_fes.report.run_plot import plot_runs

    written = []
    for d in dict.fromkeys(r["dataset"] for r in rows):
        curves = {}
        for v, dirs in _runs(rows, d, variant_of).items():
            c = mean_curve(dirs, v)
            if c is not None and len(c.rounds) > 1:
                curves[label_of(v)] = c
        if curves:
            written.append(
                plot_runs(
                    curves,
                    Path(folder) / f"{prefix}_{d}.png",
                    f"{d}: test accuracy against emulated time and upload (means over seeds)",
                    device_label=DEVICES["jetson_tx2"],
                )
            )
    return written
