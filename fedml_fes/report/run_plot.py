"""One run's learning curve, read back from its files: accuracy per evaluated round against
rounds, cumulative upload bytes and cumulative emulated device hours.

Every finished run writes `accuracy.png` from these curves (`plot_run`), and the demo draws
several runs on one figure (`plot_runs`). Emulated hours use the project's cost model (the
same task records and device profile as the benchmark report), so a figure never shows a
number the tables would not.
"""

from __future__ import annotations

import atexit
import csv
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import FesError
from .runs import load_run

PLOT_FILE = "accuracy.png"
DEFAULT_DEVICE = "jetson_tx2"


@dataclass(frozen=True)
class Curve:
    """Per evaluated round: the round, cumulative upload bytes and emulated hours, accuracy."""

    method: str
    metric: str
    rounds: list[int]
    bytes_up: list[float]
    hours: list[float]  # empty when the run has no task records (e.g. an MLM build)
    accuracy: list[float]


def _cumulative_upload(run_dir: Path) -> dict[int, float]:
    path = run_dir / "metrics.csv"
    out: dict[int, float] = {}
    if not path.is_file():
        return out
    total = 0.0
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                total += float(row.get("bytes_up") or 0)
            except ValueError:
                pass
            out[int(row["round"])] = total
    return out


def _cumulative_hours(run, device: str) -> dict[int, float]:
    if not run.tasks:
        return {}
    from ..config import config_from_dict
    from ..cost.accounting import round_costs
    from ..cost.profiles import load_profile
    from ..cost.settings import network_of

    cost_cfg = config_from_dict(
        {"cost_args": dict(run.config.get("cost_args") or {})}, source=f"{run.run_dir}/config.yaml"
    ).cost
    profile = load_profile(device, cost_cfg.device_dir or None)
    total, out = 0.0, {}
    for c in round_costs(run.tasks, profile, network_of(cost_cfg)):
        total += c.time_s
        out[c.round] = total / 3600.0
    return out


def run_curve(run_dir: str | Path, device: str = DEFAULT_DEVICE) -> Curve:
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    upload, hours = _cumulative_upload(run_dir), _cumulative_hours(run, device)
    rounds = sorted(run.accuracy)
    return Curve(
        run.method,
        run.metric,
        rounds,
        [upload.get(r, math.nan) for r in rounds],
        [hours[r] for r in rounds] if hours else [],
        [run.accuracy[r] for r in rounds],
    )


def _matplotlib():
    """matplotlib (Agg) with its font cache in fedml-fes's own cache folder (beside the prepared
    models, `packaged_models.user_cache_dir`), built once per machine. A temporary folder per
    process, removed at exit, was left behind by every process that ended without running its
    exit handlers (mpirun's aborted ranks, a stopped run's `os._exit`); it stays the fallback
    where the cache folder cannot be written. An explicit MPLCONFIGDIR, or matplotlib already
    imported by the caller, wins."""
    if "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR"):
        os.environ["MPLCONFIGDIR"] = _config_folder()
    import matplotlib

    matplotlib.use("Agg")
    return matplotlib


def _config_folder() -> str:
    from ..packaged_models import user_cache_dir

    folder = user_cache_dir() / "matplotlib"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return str(folder)
    except OSError:
        pass
    temporary = tempfile.mkdtemp(prefix="fes-matplotlib-")
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
    return temporary


def _axes(n: int):
    """A figure of n panels, without pyplot: every run draws one (the server process, in
    every runtime), and pyplot's global figure registry and import buy nothing there."""
    _matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * n, 3.8))
    axes = fig.subplots(1, n)
    return fig, list(axes) if n > 1 else [axes]


def size_text(x: float) -> str:
    """Bytes in three significant digits of their unit: "207 kB", "1.5 GB" (figures and tables)."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"


def _plain_text_ticks(ax, bytes_axis: bool) -> None:
    """Log-axis labels as plain text ("12 MB", "0.05"), not mathtext ("10^7"): parsing mathtext
    for each label was half of a run's figure (about 0.5 s of CPU of 1 s). Which ticks get a
    label stays matplotlib's choice (its LogFormatter)."""
    from matplotlib.ticker import LogFormatter

    class Compact(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):  # the text of a tick LogFormatter labels
            return size_text(x) if bytes_axis else f"{x:.3g}"

    ax.xaxis.set_major_formatter(Compact(base=10))
    ax.xaxis.set_minor_formatter(Compact(base=10, labelOnlyBase=False))
    ax.tick_params(axis="x", which="both", labelsize=8)


def _save(fig, path: Path) -> Path:
    """Fixed margins rather than tight_layout, which measures every label first (the other
    half of a run's figure); the labels here are short and their sizes fixed."""
    fig.subplots_adjust(left=0.09, right=0.985, bottom=0.15, top=0.88, wspace=0.3)
    fig.savefig(path, dpi=110)
    return path


def _panel(ax, xs: Sequence[float], ys: Sequence[float], label: str, color: str | None, log_x: bool) -> bool:
    pts = [(x, y) for x, y in zip(xs, ys) if x == x and y == y and (x > 0 or not log_x)]
    if not pts:
        return False
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=1.6, color=color, label=label)
    return True


def plot_runs(
    curves: dict[str, Curve],
    path: str | Path,
    title: str,
    colors: dict[str, str] | None = None,
    device_label: str = "Jetson TX2",
) -> Path:
    """Accuracy against emulated device hours and against upload bytes (both log x), one line
    per run; a panel with nothing to draw says so instead of failing."""
    if not curves:
        raise FesError("no run to plot")
    fig, (ax_t, ax_b) = _axes(2)
    colors = colors or {}
    drawn_t = drawn_b = False
    for label, c in curves.items():
        color = colors.get(c.method)
        drawn_t |= _panel(ax_t, c.hours, c.accuracy, label, color, True)
        drawn_b |= _panel(ax_b, c.bytes_up, c.accuracy, label, color, True)
    metric = next(iter(curves.values())).metric
    for ax, drawn, xlabel, bytes_axis in (
        (ax_t, drawn_t, f"emulated time on {device_label} (hours, log)", False),
        (ax_b, drawn_b, "upload, all clients (bytes, log)", True),
    ):
        if drawn:
            ax.set_xscale("log")
            _plain_text_ticks(ax, bytes_axis)
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "nothing evaluated to plot", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(title, fontsize=10)
    return _save(fig, Path(path))


def plot_run(run_dir: str | Path) -> Path | None:
    """`<run_dir>/accuracy.png`: the run's metric per evaluated round, against rounds and
    against cumulative upload. None when no round was evaluated (nothing to draw)."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    if not run.accuracy:
        return None
    rounds = sorted(run.accuracy)
    accuracy = [run.accuracy[r] for r in rounds]
    upload = _cumulative_upload(run_dir)
    fig, (ax_r, ax_b) = _axes(2)
    _panel(ax_r, rounds, accuracy, run.method, None, False)
    ax_r.set_xlabel("round")
    if _panel(ax_b, [upload.get(r, math.nan) for r in rounds], accuracy, run.method, None, True):
        ax_b.set_xscale("log")
        _plain_text_ticks(ax_b, bytes_axis=True)
    ax_b.set_xlabel("upload so far, all clients (bytes, log)")
    for ax in (ax_r, ax_b):
        ax.set_ylabel(run.metric)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"{run.method} ({run_dir.name}): {run.status}", fontsize=10)
    return _save(fig, run_dir / PLOT_FILE)
