"""What a partition looks like: per-client counts (gold, unlabeled, per class), a CSV, a heat map.

The counts use the true labels of unlabeled examples, read from the `LabelOracle`: this is
evaluator-side tooling, like scoring pseudo labels, and never runs inside a client. For
1,000 clients the text summary stays short (a few statistics plus the first rows and the
gold holders); the CSV has every row and the PNG shows every client.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.atomic import atomic_path
from ..data.federated import FederatedData, LabelOracle


@dataclass(frozen=True)
class PartitionCounts:
    classes: tuple[str, ...]
    total: np.ndarray  # [clients, classes]: examples a client holds, by true class
    gold: np.ndarray  # [clients, classes]: its gold-labeled examples, by class

    @property
    def sizes(self) -> np.ndarray:
        return self.total.sum(axis=1)

    @property
    def gold_sizes(self) -> np.ndarray:
        return self.gold.sum(axis=1)


def count_partition(data: FederatedData, oracle: LabelOracle) -> PartitionCounts:
    k, c = data.num_clients, len(data.classes)
    total, gold = np.zeros((k, c), dtype=np.int64), np.zeros((k, c), dtype=np.int64)
    for row, client in enumerate(data.clients):
        gold[row] = np.bincount(np.asarray(client.gold_labels, dtype=np.int64), minlength=c)
        hidden = np.asarray(oracle.labels_of(list(client.unlabeled.example_ids)), dtype=np.int64)
        total[row] = gold[row] + np.bincount(hidden, minlength=c)
    return PartitionCounts(data.classes, total, gold)


def skew_stats(counts: PartitionCounts) -> dict[str, float]:
    """Label skew as numbers: dominant-class share and total-variation distance from the mix."""
    sizes = counts.sizes.astype(float)
    share = counts.total / np.maximum(sizes[:, None], 1)
    mix = counts.total.sum(axis=0) / max(counts.total.sum(), 1)
    return {
        "dominant_share": float(share.max(axis=1).mean()),
        "global_dominant_share": float(mix.max()),
        "tv_distance": float(0.5 * np.abs(share - mix).sum(axis=1).mean()),
        "size_cv": float(sizes.std() / max(sizes.mean(), 1e-9)),
    }


def _cell(n: int, g: int) -> str:
    return f"{n}({g})" if g else str(n)


def summary_lines(data: FederatedData, counts: PartitionCounts, rows: int = 10) -> list[str]:
    """A compact text report: statistics, then the first clients and the gold holders."""
    sizes, gsizes = counts.sizes, counts.gold_sizes
    stats = skew_stats(counts)
    holders = np.flatnonzero(gsizes)
    lines = [
        f"{data.dataset}: {int(sizes.sum())} train examples over {data.num_clients} clients "
        f"({data.partition}), {len(data.test)} test, {len(counts.classes)} classes",
        f"client sizes: min {int(sizes.min())} / median {int(np.median(sizes))} / max {int(sizes.max())} "
        f"(coefficient of variation {stats['size_cv']:.2f})",
        f"label skew: mean dominant-class share {stats['dominant_share']:.2f} (pooled data "
        f"{stats['global_dominant_share']:.2f}); mean distance from the pooled label mix "
        f"{stats['tv_distance']:.2f} (0 = iid, 1 = disjoint)",
        f"gold labels: {int(gsizes.sum())} on {len(holders)} client(s)"
        + (f"; most on client {int(np.argmax(gsizes))} ({int(gsizes.max())})" if len(holders) else "")
        + f"; by class {', '.join(f'{c}={int(n)}' for c, n in zip(counts.classes, counts.gold.sum(axis=0)))}",
    ]
    lines += [f"note: {n}" for n in data.notes]
    names = [c[:14] for c in counts.classes]
    width = max(8, *(len(n) for n in names))
    header = f"{'client':>6} {'total':>6} {'gold':>5} {'unlab':>6}  " + " ".join(f"{n:>{width}}" for n in names)
    lines += ["per client: examples by true class, gold count in parentheses", header]
    shown = list(range(data.num_clients)) if data.num_clients <= 2 * rows else list(range(rows))
    extra = [int(i) for i in holders if i not in shown][:rows]
    for i in shown + extra:
        if extra and i == extra[0]:
            lines.append(f"{'...':>6} (gold holders beyond the first {rows} rows)")
        cells = " ".join(f"{_cell(int(n), int(g)):>{width}}" for n, g in zip(counts.total[i], counts.gold[i]))
        lines.append(f"{i:>6} {int(sizes[i]):>6} {int(gsizes[i]):>5} {int(sizes[i] - gsizes[i]):>6}  {cells}")
    if len(shown) + len(extra) < data.num_clients:
        lines.append(f"... {data.num_clients - len(shown) - len(extra)} more clients in the CSV")
    return lines


def write_csv(counts: PartitionCounts, path: str | Path) -> Path:
    with atomic_path(path) as tmp:
        with tmp.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                ["client_id", "total", "gold", "unlabeled", *counts.classes, *(f"gold:{c}" for c in counts.classes)]
            )
            for i, (tot, gold) in enumerate(zip(counts.total, counts.gold)):
                w.writerow(
                    [i, int(tot.sum()), int(gold.sum()), int(tot.sum() - gold.sum()), *map(int, tot), *map(int, gold)]
                )
    return Path(path)


def write_heatmap(counts: PartitionCounts, path: str | Path, title: str) -> Path:
    """Class share per client (heat map) above client sizes and gold labels per client."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = counts.total.shape[0]
    share = counts.total / np.maximum(counts.sizes[:, None], 1)
    fig, axes = plt.subplots(
        3,
        1,
        figsize=(12, 2.2 + 0.28 * len(counts.classes) + 3.2),
        sharex=True,
        gridspec_kw={"height_ratios": [max(2, 0.35 * len(counts.classes)), 1, 1]},
        constrained_layout=True,
    )
    heat, size_ax, gold_ax = axes
    im = heat.imshow(
        share.T,
        aspect="auto",
        cmap="viridis",
        vmin=0,
        vmax=1,
        interpolation="nearest",
        extent=(-0.5, k - 0.5, len(counts.classes) - 0.5, -0.5),
    )
    heat.set_yticks(range(len(counts.classes)), labels=[c[:24] for c in counts.classes])
    heat.set_title(title)
    fig.colorbar(im, ax=heat, label="share of client's examples", pad=0.01)
    x = np.arange(k)
    size_ax.bar(x, counts.sizes, width=1.0, color="tab:blue", linewidth=0)
    size_ax.set_ylabel("examples")
    gold_ax.bar(x, counts.gold_sizes, width=1.0, color="tab:red", linewidth=0)
    holders = np.flatnonzero(counts.gold_sizes)  # dots keep one-client bars visible among 1,000
    gold_ax.plot(holders, counts.gold_sizes[holders], "o", color="tab:red", markersize=4)
    gold_ax.set_ylabel("gold labels")
    gold_ax.set_xlabel("client id")
    gold_ax.set_xlim(-0.5, k - 0.5)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return Path(path)
