"""The benchmark's PNG figures (matplotlib, no display needed).

Each function takes plain numbers (already computed by `bench_analysis`) and a path, so a
figure never recomputes costs and always shows what the tables show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {
    "fedcls": "#7f7f7f",
    "prompt_only": "#bcbd22",
    "pseudo_only": "#8c564b",
    "fedfsl": "#1f77b4",
    "fedfsl_bias": "#ff7f0e",
    "fes": "#d62728",
    "fes_no_cp": "#9467bd",
    "fes_no_rf": "#2ca02c",
    "fes_no_dc": "#e377c2",
    "full_label": "#17becf",
}


def _color(method: str) -> str:
    return COLORS.get(method, "#333333")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _line_style(method: str) -> str:
    return "-" if not method.startswith("fes_") else "--"


def _finish_lines(
    fig, ax, drawn: bool, log_y: bool, empty: str, xlabel: str, ylabel: str, title: str, path: Path
) -> Path:
    """Log axes, labels, legend and save for the per-method line plots. A log axis needs a
    positive value: with no line drawn, the plot says `empty` instead of failing."""
    if drawn:
        ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def accuracy_vs_hours(
    curves: dict[str, tuple[list[float], list[float]]],
    labels: dict[str, str],
    targets: dict[str, float],
    title: str,
    path: Path,
) -> Path:
    """Accuracy per evaluated round against cumulative emulated hours (log x), one line per method."""
    fig, ax = plt.subplots(figsize=(9, 4.6))
    drawn = False
    for method, (hours, acc) in curves.items():
        pts = [(h, a) for h, a in zip(hours, acc) if h and h > 0 and a is not None]
        if pts:
            drawn = True
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                ms=3,
                lw=1.6,
                color=_color(method),
                label=labels[method],
                ls=_line_style(method),
            )
    for (name, acc), style in zip(targets.items(), (":", "-.", "--")):
        ax.axhline(acc, color="#555555", lw=0.9, ls=style, label=f"target: {name}")
    return _finish_lines(
        fig,
        ax,
        drawn,
        False,
        "no evaluated round to plot",
        "emulated time (hours, log scale)",
        "test accuracy",
        title,
        path,
    )


def resource_bars(
    methods: Sequence[str],
    labels: dict[str, str],
    traffic_target: dict[str, float | None],
    traffic_total: dict[str, float],
    energy_target: dict[str, float | None],
    energy_total: dict[str, float],
    device_label: str,
    path: Path,
) -> Path:
    """Traffic (MB) and energy (kJ) per method: to the target accuracy and for the whole run (log y)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    x = range(len(methods))
    for ax, to_target, total, unit, scale, name in (
        (axes[0], traffic_target, traffic_total, "MB", 1e6, "traffic (down + up)"),
        (axes[1], energy_target, energy_total, "kJ", 1e3, f"energy on {device_label}"),
    ):
        w = 0.38
        tt = [(to_target.get(m) or 0) / scale for m in methods]
        tot = [(total.get(m) or 0) / scale for m in methods]
        ax.bar([i - w / 2 for i in x], tt, w, label="to FedFSL's accuracy", color=[_color(m) for m in methods])
        ax.bar(
            [i + w / 2 for i in x], tot, w, label="whole run", color=[_color(m) for m in methods], alpha=0.4, hatch="//"
        )
        if any(v > 0 for v in tt + tot):
            ax.set_yscale("log")
        for i, m in enumerate(methods):
            if to_target.get(m) is None:  # never reached the target: the paper's X at the foot of the bar
                ax.text(
                    i - w / 2,
                    0.02,
                    "X",
                    transform=ax.get_xaxis_transform(),
                    ha="center",
                    va="bottom",
                    color="black",
                    fontsize=10,
                    fontweight="bold",
                )
        ax.set_xticks(list(x))
        ax.set_xticklabels([labels[m] for m in methods], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3, axis="y", which="both")
        ax.legend(fontsize=7)
    return _save(fig, path)


def bandwidth_sweep(
    sweep: Sequence[float], hours: dict[str, list[float | None]], labels: dict[str, str], title: str, path: Path
) -> Path:
    """Hours to the target accuracy against bandwidth (log-log); a gap where never reached."""
    fig, ax = plt.subplots(figsize=(8.8, 4.4))
    drawn = False
    for method, ys in hours.items():
        pts = [(b, y) for b, y in zip(sweep, ys) if y]
        drawn = drawn or bool(pts)
        missing = len(pts) < len(ys)
        name = labels[method] + (" (not reached at some bandwidths)" if pts and missing else "")
        if pts:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                ms=4,
                color=_color(method),
                label=name,
                ls=_line_style(method),
            )
        else:  # never reached: listed, nothing drawn (the paper's X)
            ax.plot([], [], color=_color(method), label=f"{labels[method]}: not reached (X)")
    return _finish_lines(
        fig,
        ax,
        drawn,
        True,
        "no method reached the target at any bandwidth",
        "bandwidth (MB/s, both directions)",
        "hours to FedFSL's accuracy",
        title,
        path,
    )


def memory_bars(methods: Sequence[str], labels: dict[str, str], parts: dict[str, dict[str, float]], path: Path) -> Path:
    """Peak training memory per method, stacked: parameters the step reads, gradients, optimizer state,
    activations; a black tick marks the frozen-bottom fill phase where a method has one."""
    fig, ax = plt.subplots(figsize=(10, 4.2))
    keys = (
        ("resident_param", "parameters read by the step"),
        ("grad", "gradients"),
        ("optimizer", "AdamW state"),
        ("activation_peak", "saved activations"),
    )
    bottoms = [0.0] * len(methods)
    for (key, name), color in zip(keys, ("#4c72b0", "#dd8452", "#55a868", "#c44e52")):
        vals = [parts.get(m, {}).get(key, 0.0) / 1e6 for m in methods]
        ax.bar(range(len(methods)), vals, 0.6, bottom=bottoms, label=name, color=color)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    fills = [(i, parts.get(m, {}).get("fill_peak", 0.0) / 1e6) for i, m in enumerate(methods)]
    fills = [(i, v) for i, v in fills if v > 0]
    if fills:
        ax.scatter(
            [i for i, _ in fills],
            [v for _, v in fills],
            marker="_",
            s=900,
            color="black",
            zorder=3,
            label="fill phase: embeddings + frozen bottom (no grad)",
        )
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels([labels[m] for m in methods], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("MB")
    ax.set_title("peak training memory (measured)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), markerscale=0.4)  # beside the bars
    return _save(fig, path)


def compute_model_scatter(
    points: Sequence[tuple[str, float, float]], calibration: Sequence[tuple[float, float]], title: str, path: Path
) -> Path:
    """Predicted vs measured compute seconds on this host (log-log), per client task and calibration batch."""
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    for phase, color in (("train", "#1f77b4"), ("label", "#ff7f0e")):
        sel = [(p, m) for ph, p, m in points if ph == phase]
        if sel:
            ax.scatter(
                [m for _, m in sel],
                [p for p, _ in sel],
                s=10,
                alpha=0.6,
                color=color,
                label=f"{phase} tasks of the runs",
            )
    if calibration:
        ax.scatter(
            [m for _, m in calibration],
            [p for p, _ in calibration],
            s=24,
            marker="x",
            color="black",
            label="calibration batches",
        )
    values = [v for _, p, m in points for v in (p, m)] + [v for pair in calibration for v in pair]
    if values:
        lo, hi = max(min(values), 1e-4), max(values)
        ax.plot([lo, hi], [lo, hi], color="#555555", lw=0.8, ls="--", label="exact")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured on this host (CPU s)")
    ax.set_ylabel("compute model (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(fig, path)
