"""The fidelity suite's outputs: fidelity.csv (one row per run, COLUMNS) and fidelity.md (the
shared config, the accuracy tables, time to accuracy (fidelity_time.py), runs that ended below
their start, the done-checks, one table per dataset), rebuilt from the run folders alone.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

from fedml_fes.errors import FesError
from fedml_fes.pretrain.source import mlm_origin
from fedml_fes_plugins.bench.fidelity_checks import _mean, _pct, checks, shared_config_check, summarize
from fedml_fes_plugins.bench.fidelity_rows import _order, below_start, collect_rows, variant_of
from fedml_fes_plugins.bench.fidelity_spec import (
    DATASETS,
    HELD_OUT,
    KNOWN,
    METHODS,
    SEEDS,
    ZERO_SHOT,
    Echo,
    FidelityOptions,
    label_of,
)
from fedml_fes_plugins.bench.paths import in_checkout as _in_checkout
from fedml_fes_plugins.bench.paths import portable_path

COLUMNS = (
    "dataset",
    "seed",
    "method",
    "accuracy",
    "majority_rate",
    "pseudo_labels",
    "labeler",
    "pseudo_precision",
    "start_accuracy",
    "bytes_up",
    "emulated_hours",
    "model",
    "device",
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_fmt(r.get(c, "")) for c in COLUMNS])
    return path


def render(rows: list[dict[str, Any]], command: str, date: str, out: Path, meta: dict | None = None) -> str:
    meta = meta or {}
    cells, majority = summarize(rows)
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        "# Fidelity benchmark: FedCLS, Prompt-only, Pseudo-only, FedFSL, FedFSL-BIAS and FeS on one shared config",
        "",
        f"Produced by `{command}` on {date}, from the run folders in `{out}`.",
    ]
    runs_cmds = [c for c in meta.get("commands", []) if "--report-only" not in c.get("command", "")]
    if runs_cmds:
        lines += ["", "Runs made by: " + "; ".join(f"`{c['command']}` ({c['date']})" for c in runs_cmds[-5:]) + "."]
    present = list(dict.fromkeys(r["dataset"] for r in rows))
    from_files = [d for d in present if d not in KNOWN]
    if rows:
        from fedml_fes.runtime.inert import inert_keys, is_inert

        c0 = rows[0]["_config"]
        # the MLM head as a run that reads it has it (a FedCLS run's config may predate its keys)
        reads_mlm = [
            r["_config"]
            for r in rows
            if not is_inert(
                "model_args.mlm_from", inert_keys(r["method"], r["_config"].get("model_args", {}).get("tuning", "full"))
            )
        ]
        m, t, d = (reads_mlm or [c0])[0].get("model_args", {}), c0.get("train_args", {}), c0.get("data_args", {})
        model = m.get("model", "?") + (
            f" + MLM head: {mlm_origin(_in_checkout(m['mlm_from']), m.get('mlm_on_job_data', False))}"
            if m.get("mlm_from")
            else ""
        )
        lines += [
            "",
            f"Shared config: `{meta.get('config', '?')}`. Model {model}, max length "
            f"{m.get('max_seq_length')}; "
            f"{t.get('comm_round')} rounds of {t.get('client_num_per_round')} clients; "
            f"{d.get('gold_labels')} gold labels (gamma {d.get('gold_sparsity')}, Dirichlet alpha "
            f"{d.get('partition_alpha')}); test accuracy after the last round on up to "
            f"{d.get('max_test_examples') or 'all'} test examples. Per dataset only the data keys "
            f"(dataset, data_dir, client_num_in_total) and the built-in PVP's pattern id differ"
            + (
                ""
                if not from_files
                else f" ({', '.join(from_files)}, from --dataset-file: also where and how the data reads, "
                f"and its own PVP)"
            )
            + "; per run only the method and the seed.",
        ]
        devices = sorted({r.get("device") or "not recorded" for r in rows})
        lines += ["", "Computed on: " + "; ".join(devices) + "."]
        differ = shared_config_check(rows)
        lines += [
            "",
            "One shared config across all runs: "
            + (
                "yes (checked from every run's config.yaml)."
                if not differ
                else f"**NO**, the runs differ in {', '.join(differ)}."
            ),
        ]
    held = [d for d in HELD_OUT if d in present] + from_files  # none of them tuned anything
    matrix = [d for d in DATASETS if set(present) - set(held) or not held] + held
    expected = len(matrix) * len(METHODS) * len(SEEDS)
    variants = sum("@" in variant_of(r) for r in rows)  # method@labeler rows: beside the matrix, not in it
    in_matrix = sum(r["method"] != ZERO_SHOT for r in rows) - variants
    lines += [
        "",
        f"Completed runs: {in_matrix} (the full matrix is {expected}: {len(matrix)} datasets x {len(METHODS)} "
        f"methods x seeds {', '.join(map(str, SEEDS))})"
        + (f", and {variants} runs of `method@labeler` rows." if variants else "."),
        "",
        f"Run time: {sum(r.get('_wall_s', 0.0) for r in rows) / 3600:.1f} h over these runs (each run's own "
        "wall time, summary.json; a resumed run counts the part after resuming).",
    ]
    if held:
        lines += [
            "",
            f"Held out of all tuning (nothing in the shared config was chosen on it, on any seed): {', '.join(held)}.",
        ]
    lines += [
        "",
        "Accuracy in %: mean ± std over seeds (sample std) and per seed. Pseudo labels: in use at the end "
        "of the run. Upload: all clients' upload bytes over the whole run. TX2 h: the run's emulated time on "
        "the Jetson TX2 profile (fedml_fes/cost, docs/BENCHMARK.md). Means over seeds.",
        "",
    ]
    if cells:
        names = list(cells)
        ordered = list(dict.fromkeys(variant_of(r) for r in sorted(rows, key=lambda r: _order(r)[3:])))
        lines += ["## Mean accuracy (%)", "", "| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for m in ordered:
            lines.append(
                f"| {label_of(m)} | "
                + " | ".join(
                    f"{_pct(cells[d][m].mean)} ± {_pct(cells[d][m].std)}" if m in cells[d] else "-" for d in names
                )
                + " |"
            )
        lines += ["| majority class | " + " | ".join(_pct(majority[d]) for d in names) + " |", ""]
    from fedml_fes_plugins.bench.fidelity_time import time_tables

    lines += time_tables(rows, label_of, variant_of)
    worse = below_start(rows)
    lines += [
        "## Runs that ended below their own start",
        "",
        (
            "None: every run ended at or above its untrained model's accuracy (the zero-shot row for prompt methods)."
            if not worse
            else "Training made these runs worse than the model they started from: "
            + "; ".join(
                f"{r['dataset']} {label_of(variant_of(r))} seed {r['seed']} "
                f"{_pct(r['accuracy'])}% < {_pct(r['start_accuracy'])}%"
                for r in worse
            )
            + "."
        ),
        "",
    ]
    lines += ["## Done-checks", ""]
    for c in checks(rows):
        lines.append(f"- ({c.key}) {c.claim}: **{'met' if c.met else 'NOT met'}**")
        lines += [f"  - {x}" for x in c.details]
    for d, by_method in cells.items():
        spec = KNOWN.get(d)
        cfg = next(r["_config"] for r in rows if r["dataset"] == d)
        prompt = cfg.get("prompt_args", {})
        pvp = f'pattern "{prompt["pattern"]}"' if prompt.get("pattern") else f"pattern id {prompt.get('pattern_id')}"
        lines += [
            "",
            f"## {spec.label if spec else d} (`{d}`): {cfg['data_args'].get('client_num_in_total')} "
            f"clients, {pvp}, majority-class rate {_pct(majority[d])}%",
            "",
            "| method | accuracy | "
            + " | ".join(f"seed {s}" for s in seeds)
            + " | pseudo labels | right (%) | upload (bytes) | TX2 h |",
            "|---|---|" + "---|" * len(seeds) + "---|---|---|---|",
        ]
        for m in by_method:  # rows arrive in report order (collect_rows)
            c = by_method[m]
            per = " | ".join(_pct(c.per_seed[s]) if s in c.per_seed else "-" for s in seeds)
            lines.append(
                f"| {label_of(m)} | {_pct(c.mean)} ± {_pct(c.std)} | {per} | {c.pseudo_labels:,.0f} | "
                f"{_pct(c.precision)} | {c.bytes_up:,.0f} | {c.hours:.4g} |"
            )
        lines.append(
            f"| majority class | {_pct(majority[d])} | "
            + " | ".join(
                _pct(_mean([r["majority_rate"] for r in rows if r["dataset"] == d and r["seed"] == s])) for s in seeds
            )
            + " | | | | |"
        )
        golds = {r["seed"]: r["_gold"] for r in rows if r["dataset"] == d and r.get("_gold")}
        if golds:
            lines += [
                "",
                "Gold labels per class (each seed's few-shot set, before FeS's validation hold-out): "
                + "; ".join(
                    f"seed {s}: " + ", ".join(f"{c} {n}" for c, n in zip(g["classes"], g["counts"]))
                    for s, g in sorted(golds.items())
                )
                + ".",
            ]
    return "\n".join(lines) + "\n"


def report(o: FidelityOptions, echo: Echo = print) -> Path:
    """fidelity.csv and fidelity.md from the run folders in --out (nothing is trained)."""
    out = Path(o.out)
    rows = collect_rows(out)
    if not rows:
        raise FesError(f"no completed fidelity run in {out} yet: run without --report-only first")
    meta_path = out / "fidelity.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    results = Path(o.results)
    write_csv(rows, results / "fidelity.csv")
    md = results / "fidelity.md"
    md.write_text(render(rows, o.command or "?", time.strftime("%Y-%m-%d %H:%M"), portable_path(str(out)), meta))
    from fedml_fes_plugins.bench.fidelity_time import write_figures

    for path in write_figures(rows, results, label_of, variant_of):
        echo(f"figure: {portable_path(str(path))}")
    return md
