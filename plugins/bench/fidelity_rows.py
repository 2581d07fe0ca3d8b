"""One fidelity run's CSV row, read from its folder alone: accuracy, the test set's majority-class
rate, pseudo labels and how many were right, upload bytes and the emulated TX2 hours (the bench
report's cost model); the zero-shot row from a prompt run's own start; every completed run
folder of a suite in report order (collect_rows).
"""

from __future__ import annotations

import csv
import functools
import json
import math
from pathlib import Path
from typing import Any, Callable

from fedml_fes.config import FesConfig, config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.report.metrics import summary_devices
from fedml_fes_plugins.bench.fidelity_spec import KNOWN, METHODS, ZERO_SHOT

DEVICE = "jetson_tx2"  # emulated time: the Jetson TX2 profile (run_configs/devices/jetson_tx2.yaml)


def _cached_in_run(run_dir: Path, name: str, compute: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
    """`compute()` once per run folder, kept there as `name` (a read-only copy of the runs: every time)."""
    path = Path(run_dir) / name
    if path.is_file():
        return json.loads(path.read_text())
    info = compute()
    if info is not None:
        try:
            path.write_text(json.dumps(info, indent=2))
        except OSError:
            pass
    return info


@functools.lru_cache(maxsize=64)
def _data_of(data_key: str) -> Any:
    """The federated data of a data section and seed, built once per report (every method of a seed
    shares it; `data_key` is their JSON)."""
    from fedml_fes.data.federated import build_federated_data

    raw = json.loads(data_key)
    return build_federated_data(config_from_dict(raw))[0]


def heldout_classes(run_dir: Path, cfg: FesConfig | None = None) -> dict[str, Any]:
    """Class counts of the run's test set (its config's data section and seed); cached in the run folder."""

    def compute() -> dict[str, Any]:
        from fedml_fes.data.sources import load_source

        test = load_source(cfg or _saved_config(run_dir)).test
        counts = test.class_counts()
        return {
            "classes": list(test.classes),
            "counts": counts,
            "size": int(sum(counts)),
            "majority_rate": max(counts) / sum(counts) if sum(counts) else float("nan"),
        }

    return _cached_in_run(run_dir, "test_classes.json", compute)


def gold_classes(run_dir: Path, cfg: FesConfig | None = None) -> dict[str, Any] | None:
    """Per-class counts of the run's gold labels: the seed's few-shot set, all of it (before FeS's
    validation hold-out), the same for every method of that seed. With skewed gold labels (gamma
    0.001: one or two clients hold them all) a class can have none, which no method trained on
    them can learn without a prior from the MLM. Cached in the run folder; None when the data
    cannot be read here."""

    def compute() -> dict[str, Any] | None:
        c = cfg or _saved_config(run_dir)
        key = json.dumps(
            {"data_args": c.to_dict()["data_args"], "common_args": {"random_seed": c.common.random_seed}},
            sort_keys=True,
        )
        try:
            gold = _data_of(key).pooled_gold()
        except FesError:
            return None
        return {"classes": list(gold.classes), "counts": gold.class_counts()} if gold is not None else None

    return _cached_in_run(run_dir, "gold_classes.json", compute)


def _saved_config(run_dir: Path) -> FesConfig:
    """A run's config.yaml; keys this version no longer knows are dropped (the report reads only data,
    method, seed and cost settings), so old runs stay reportable."""
    from fedml_fes.config import load_run_config

    return load_run_config(run_dir, drop_unknown=True)


def emulated_hours(run_dir: Path, cfg: FesConfig) -> float:
    """The whole run's emulated time on the TX2 profile: the bench report's cost model, unchanged."""
    from fedml_fes.cost.profiles import load_profile
    from fedml_fes.cost.settings import network_of
    from fedml_fes.report.bench_analysis import BenchData
    from fedml_fes.report.runs import load_run

    run = load_run(run_dir)
    if not run.tasks:
        return float("nan")
    totals = BenchData({(run.method, run.seed): run}).totals(
        run.method, load_profile(DEVICE, cfg.cost.device_dir or None), network_of(cfg.cost)
    )
    return totals.hours if totals is not None else float("nan")


def run_row(run_dir: Path) -> dict[str, Any] | None:
    """The CSV row of a completed run folder (None for any other)."""
    from fedml_fes_plugins.bench.runner import _status

    run_dir = Path(run_dir)
    if _status(run_dir) != "completed":
        return None
    cfg = _saved_config(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))

    def num(row: dict[str, str], key: str) -> float:
        try:
            return float(row.get(key) or 0)
        except ValueError:
            return 0.0

    metric = summary.get("primary_metric", "test_acc")
    accuracy = summary.get("final")
    if accuracy is None:  # the last evaluated round's accuracy
        scored = [r for r in rows if r.get(metric) not in (None, "")]
        accuracy = num(scored[-1], metric) if scored else float("nan")
    start = (summary.get("initial") or {}).get(metric)
    from fedml_fes.runtime.methods import get_method

    pseudo = getattr(get_method(cfg.train.method), "uses_pseudo", False)
    labeled = [(num(r, "pseudo_labeled"), num(r, "pseudo_acc")) for r in rows if r.get("pseudo_acc") not in (None, "")]
    weight = sum(n for n, _ in labeled)
    # the dataset is the run's folder, <out>/<dataset>/runs/<method>-s<seed>: a built-in's name or a
    # dataset file's stem (two files of custom data share data_args.dataset)
    return {
        "dataset": run_dir.parent.parent.name,
        "seed": cfg.common.random_seed,
        "method": cfg.train.method,
        "variant": run_dir.name.rsplit("-s", 1)[0],  # the run's name: a method or method@labeler
        "accuracy": float(accuracy),
        "majority_rate": float(heldout_classes(run_dir, cfg)["majority_rate"]),
        "pseudo_labels": int(num(rows[-1], "pseudo_total")) if rows else 0,
        "labeler": labeling_of(cfg.pseudo) if pseudo else "",
        # pseudo labels right (the evaluator's count against the hidden truth), over all passes
        "pseudo_precision": sum(n * a for n, a in labeled) / weight if weight else float("nan"),
        "start_accuracy": float(start) if isinstance(start, (int, float)) else float("nan"),
        "bytes_up": int(sum(num(r, "bytes_up") for r in rows)),
        "emulated_hours": emulated_hours(run_dir, cfg),
        "model": cfg.model.model,
        "device": " then ".join(summary_devices(summary)),  # a run resumed elsewhere names both
        "_config": cfg.to_dict(),
        "_run_dir": str(run_dir),
        "_gold": gold_classes(run_dir, cfg),
        # the run's own wall time (a resumed run: the part after resuming)
        "_wall_s": float(summary.get("wall_s") or 0.0),
    }


def labeling_of(p: Any) -> str:
    """The CSV's labeler column: `paper` for the paper's labeling, else what differs from it."""
    parts = [p.labeler]
    if p.augment_word_dropout:
        parts.append(f"word dropout {p.augment_word_dropout:g}")
    if p.sample_by_labels:
        parts.append("drawn by labels")
    if p.gold_every_round:
        parts.append("gold clients every round")
    return " + ".join(parts)


def zero_shot_row(run: dict[str, Any]) -> dict[str, Any]:
    """The untrained prompt model's row, from a prompt run's own start (summary.json `initial`: the
    same test texts, before round 0): no training, no upload, no emulated time."""
    return {
        **run,
        "method": ZERO_SHOT,
        "variant": ZERO_SHOT,
        "accuracy": run["start_accuracy"],
        "pseudo_labels": 0,
        "labeler": "",
        "pseudo_precision": float("nan"),
        "bytes_up": 0,
        "emulated_hours": 0.0,
        "_wall_s": 0.0,  # no run of its own
    }


def _order(r: dict[str, Any]) -> tuple:
    methods = (ZERO_SHOT, *METHODS)
    base = variant_of(r).partition("@")[0]
    rank = methods.index(base) if base in methods else len(methods)
    dorder = {d: i for i, d in enumerate(KNOWN)}
    return (dorder.get(r["dataset"], 99), r["dataset"], r["seed"], rank, variant_of(r))


def variant_of(row: dict[str, Any]) -> str:
    """What a row is reported as: its method, or method@labeler for a labeler's own row."""
    return row.get("variant") or row["method"]


def collect_rows(out: Path) -> list[dict[str, Any]]:
    """Every completed run folder under <out>/<dataset>/runs/, in dataset, seed, method order, with
    a zero-shot row per dataset and seed (from its Prompt-only run, else any prompt run's start)."""
    from fedml_fes.runtime.methods import get_method

    rows = []
    for rd in sorted(Path(out).glob("*/runs/*-s*")):
        if rd.is_dir():
            row = run_row(rd)
            if row is not None:
                rows.append(row)
    starts: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["method"] != "prompt_only"):
        prompt = getattr(get_method(r["method"]), "prompt", False)
        if prompt and not math.isnan(r["start_accuracy"]):
            starts.setdefault((r["dataset"], r["seed"]), r)
    rows += [zero_shot_row(r) for r in starts.values()]
    rows.sort(key=_order)
    return rows


def below_start(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs that ended below their own starting accuracy: training made the model worse."""
    return [r for r in rows if r["method"] != ZERO_SHOT and r["accuracy"] < r.get("start_accuracy", float("nan"))]
