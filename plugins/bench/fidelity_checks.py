"""The fidelity report's statistics and its done-checks: per (dataset, method) means over seeds
(Cell), seed-by-seed paired differences, checks (a)-(g), and whether every run used the one
shared config (shared_config_check).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any

from fedml_fes_plugins.bench.fidelity_rows import variant_of
from fedml_fes_plugins.bench.fidelity_spec import VARYING_KEYS, label_of
from fedml_fes_plugins.bench.paths import in_checkout as _in_checkout

CHECKED = ("fedcls", "prompt_only", "pseudo_only", "fedfsl", "fes")  # check (b) needs each of these
ACC_SLACK = 0.01  # (a): FeS >= FedFSL - 0.01
PSEUDO_GAIN = 0.01  # (e): FedFSL >= Prompt-only + 0.01
TRAFFIC_RATIO = 1000.0  # (d): FeS uploads <= FedFSL's / 1000


@dataclass(frozen=True)
class Cell:
    """One (dataset, method) over seeds."""

    per_seed: dict  # seed -> accuracy
    mean: float
    std: float
    bytes_up: float
    pseudo_labels: float
    hours: float
    precision: float = float("nan")  # pseudo labels right, mean over seeds


@dataclass(frozen=True)
class Check:
    key: str
    claim: str
    met: bool
    details: list  # one line per dataset (or the reason it is not met)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.mean(xs) if xs else float("nan")


def summarize(rows: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Cell]], dict[str, float]]:
    """(dataset -> method -> Cell, dataset -> majority-class rate (mean over its runs' test sets))."""
    cells: dict[str, dict[str, Cell]] = {}
    majority: dict[str, float] = {}
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    for d in datasets:
        mine = [r for r in rows if r["dataset"] == d]
        majority[d] = _mean([r["majority_rate"] for r in mine])
        cells[d] = {}
        for m in dict.fromkeys(map(variant_of, mine)):
            rs = [r for r in mine if variant_of(r) == m]
            accs = [r["accuracy"] for r in rs]
            cells[d][m] = Cell(
                {r["seed"]: r["accuracy"] for r in rs},
                _mean(accs),
                statistics.stdev(accs) if len(accs) > 1 else 0.0,
                _mean([float(r["bytes_up"]) for r in rs]),
                _mean([float(r["pseudo_labels"]) for r in rs]),
                _mean([r["emulated_hours"] for r in rs]),
                _mean([r.get("pseudo_precision", float("nan")) for r in rs]),
            )
    return cells, majority


def _need(cells: dict[str, Cell], dataset: str, methods: tuple[str, ...]) -> str | None:
    missing = [label_of(m) for m in methods if m not in cells]
    return f"{dataset}: no completed run of {', '.join(missing)}" if missing else None


def _fes_vs_fedfsl(cells, datasets, judge) -> tuple[bool, list[str]]:
    """Per dataset, `judge(fes cell, fedfsl cell) -> (met, text, note)`; a dataset lacking either fails."""
    lines, ok = [], bool(datasets)
    for d in datasets:
        miss = _need(cells[d], d, ("fes", "fedfsl"))
        if miss:
            lines.append(miss)
            ok = False
            continue
        good, text, note = judge(cells[d]["fes"], cells[d]["fedfsl"])
        ok &= good
        lines.append(f"{d}: {text} ({note + '; ' if note else ''}{'met' if good else 'NOT met'})")
    return ok, lines or ["no runs"]


def paired_difference(a: Cell, b: Cell) -> str:
    """a - b seed by seed (same seed: same partition and gold labels), in points, with their
    mean and sample std: whether a gap in the means is larger than the seed-to-seed spread."""
    seeds = sorted(set(a.per_seed) & set(b.per_seed))
    diffs = [100 * (a.per_seed[s] - b.per_seed[s]) for s in seeds]
    if not diffs:
        return ""
    each = ", ".join(f"{d:+.1f}" for d in diffs)
    spread = f" ± {statistics.stdev(diffs):.1f}" if len(diffs) > 1 else ""
    return f"per seed {each} points, mean {statistics.mean(diffs):+.1f}{spread}"


def checks(rows: list[dict[str, Any]]) -> list[Check]:
    """The four done-checks, on the datasets that have runs (a dataset lacking a method fails)."""
    cells, majority = summarize(rows)
    datasets = list(cells)
    out = []

    def accuracy(fes, fsl):
        good = fes.mean >= fsl.mean - ACC_SLACK - 1e-12
        return (
            good,
            f"FeS {fes.mean:.4f} vs FedFSL {fsl.mean:.4f} - {ACC_SLACK} = {fsl.mean - ACC_SLACK:.4f}",
            paired_difference(fes, fsl),
        )

    ok, lines = _fes_vs_fedfsl(cells, datasets, accuracy)
    out.append(Check("a", f"on every dataset FeS mean accuracy >= FedFSL mean - {ACC_SLACK}", ok, lines))

    lines, ok = [], bool(datasets)  # (b)
    for d in datasets:
        miss = _need(cells[d], d, CHECKED)
        if miss:
            lines.append(miss)
            ok = False
        below = [f"{label_of(m)} {c.mean:.4f}" for m, c in cells[d].items() if not c.mean > majority[d]]
        ok &= not below
        lowest = min(cells[d].items(), key=lambda mc: mc[1].mean)
        lines.append(
            f"{d}: majority-class rate {majority[d]:.4f}; "
            + (
                f"at or below it: {', '.join(below)} (NOT met)"
                if below
                else f"lowest method {label_of(lowest[0])} {lowest[1].mean:.4f} (met)"
            )
        )
    out.append(
        Check("b", "on every dataset every method's mean accuracy > the majority-class rate", ok, lines or ["no runs"])
    )

    lines, count = [], 0  # (c)
    for d in datasets:
        miss = _need(cells[d], d, ("fedfsl", "prompt_only", "fedcls"))
        if miss:
            lines.append(miss)
            continue
        fsl, prm, cls = (cells[d][m].mean for m in ("fedfsl", "prompt_only", "fedcls"))
        good = fsl >= prm >= cls
        count += good
        lines.append(
            f"{d}: FedFSL {fsl:.4f} {'>=' if fsl >= prm else '<'} Prompt-only {prm:.4f} "
            f"{'>=' if prm >= cls else '<'} FedCLS {cls:.4f} ({'holds' if good else 'does not hold'})"
        )
    out.append(
        Check(
            "c",
            "FedFSL >= Prompt-only >= FedCLS by mean on at least two of the three datasets",
            count >= 2,
            [f"holds on {count} of {len(datasets)} datasets"] + lines,
        )
    )

    def traffic(fes, fsl):
        good = fes.bytes_up <= fsl.bytes_up / TRAFFIC_RATIO
        ratio = f"{fsl.bytes_up / fes.bytes_up:,.0f}x less" if fes.bytes_up > 0 else "FeS uploaded nothing"
        return (
            good,
            (
                f"FeS {fes.bytes_up:,.0f} B vs FedFSL {fsl.bytes_up:,.0f} B / {TRAFFIC_RATIO:,.0f} = "
                f"{fsl.bytes_up / TRAFFIC_RATIO:,.0f} B"
            ),
            ratio,
        )

    ok, lines = _fes_vs_fedfsl(cells, datasets, traffic)
    out.append(
        Check("d", f"FeS bytes_up <= FedFSL bytes_up / {TRAFFIC_RATIO:,.0f} (per dataset, means over seeds)", ok, lines)
    )
    for key, method, gain in (("e", "fedfsl", PSEUDO_GAIN), ("f", "fes", 0.0)):  # unlabeled data pays
        lines, count = [], 0
        for d in datasets:
            miss = _need(cells[d], d, (method, "prompt_only"))
            if miss:
                lines.append(miss)
                continue
            a, prm = cells[d][method], cells[d]["prompt_only"]
            good = a.mean >= prm.mean + gain - 1e-12
            count += good
            lines.append(
                f"{d}: {label_of(method)} {a.mean:.4f} vs Prompt-only {prm.mean:.4f}"
                + (f" + {gain}" if gain else "")
                + f" ({paired_difference(a, prm)}; {'holds' if good else 'does not hold'})"
            )
        claim = f"{label_of(method)} mean >= Prompt-only" + (f" + {gain}" if gain else "")
        out.append(Check(key, f"{claim} on at least two datasets", count >= 2, [f"holds on {count}"] + lines))
    lines, ok = [], False  # (g): only where the paper's labeling ran beside the shared config's
    for d in datasets:
        for m in ("fedfsl", "fes", "pseudo_only"):
            if m in cells[d] and f"{m}@paper" in cells[d]:
                mine, paper = cells[d][m].precision, cells[d][f"{m}@paper"].precision
                good = mine > paper
                ok = good if not lines else ok and good
                lines.append(f"{d} {label_of(m)}: {_pct(mine)}% vs {_pct(paper)}% ({'met' if good else 'NOT met'})")
    if lines:
        out.append(Check("g", "the shared labeler's pseudo labels are more often right than the paper's", ok, lines))
    return out


def shared_config_check(rows: list[dict[str, Any]]) -> list[str]:
    """Config keys that differ between runs beyond the per-run and per-dataset ones and those
    that never change results (empty: one shared config)."""
    from fedml_fes.runtime.checkpoint import is_result_key
    from fedml_fes.runtime.inert import inert_keys, is_inert

    def inert(cfg: dict) -> frozenset[str]:
        return inert_keys(cfg.get("train_args", {}).get("method", ""), cfg.get("model_args", {}).get("tuning", "full"))

    def flat(cfg: dict) -> dict[str, Any]:
        return {
            f"{s}.{k}": json.dumps(_in_checkout(v), sort_keys=True)
            for s, vals in cfg.items()
            if s != "cost_args"
            for k, v in vals.items()
            if f"{s}.{k}" not in VARYING_KEYS and is_result_key(s, k)
        }

    configs = [(flat(r["_config"]), inert(r["_config"])) for r in rows]
    differ: set[str] = set()
    for key in {k for f, _ in configs for k in f}:  # compared among the runs whose method reads it
        values = {f.get(key) for f, skip in configs if not is_inert(key, skip)}
        if len(values) > 1:
            differ.add(key)
    return sorted(differ)


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}"
