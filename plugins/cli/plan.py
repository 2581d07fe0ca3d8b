"""`fedml-fes plan --cf CONFIG`: choose the co-planning depth with short proxy runs.

Each probe is a real in-process run of the config (its method, e.g. `fes`) for a few
rounds with `tuning_args.bias_layers = depth` and no fully trained layer; its score on the
gold-label validation set (never the test split) and its measured client compute per round
feed `fedml_fes.tuning.planner.search_depth`. The score is what the config's AUG-E is measured
in (`pacing_args.val_signal`): metrics.csv `val_acc`, or minus `val_nll` for log_likelihood.
Where the method holds validation labels out of training (FeS's adaptive pacing, AutoFedNLP's
progressive configurator), a config that holds none out (`val_holdout: 0`) gets the default
quarter in its probes: a few rounds fit the labels trained on under any depth, and every probe
would tie at 1.0. The result (a table and the chosen `tuning_args`) is printed and written to
plan.json.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from fedml_fes.config import FesConfig
from fedml_fes.config.labeling import PacingConfig
from fedml_fes.errors import FesError
from fedml_fes.runtime.rundir import make_run_dir
from fedml_fes.tuning.planner import Probe, search_depth
from fedml_fes_plugins.runtimes.inprocess import run_in_process


def probe_config(cfg: FesConfig, depth: int, rounds: int) -> FesConfig:
    """The config a probe runs: `depth` bias-only top layers, `rounds` rounds, validation labels held out."""
    holdout = cfg.pacing.val_holdout or PacingConfig.val_holdout
    return dataclasses.replace(
        cfg,
        tuning_args=dataclasses.replace(cfg.tuning, full_layers=0, bias_layers=depth),
        train_args=dataclasses.replace(cfg.train, comm_round=rounds),
        pacing_args=dataclasses.replace(cfg.pacing, val_holdout=holdout),
    )


def _probe(cfg: FesConfig, out: Path, rounds: int):
    column = "val_nll" if cfg.pacing.val_signal == "log_likelihood" else "val_acc"

    def probe(depth: int) -> Probe:
        c = probe_config(cfg, depth, rounds)
        run_dir = make_run_dir(c, str(out / f"depth{depth}"))  # a run folder: config.yaml, plot, `--resume`
        run_in_process(c, run_dir, progress=False, echo=lambda _l: None)
        rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
        cost = sum(float(r["client_compute_s_max"]) for r in rows) / max(len(rows), 1)
        per_client = [int(r["bytes_up"]) / max(len(r["clients"].split()), 1) for r in rows]
        val = [float(r[column]) for r in rows if r.get(column) not in (None, "", "nan")]
        if not val:
            raise FesError(f"probe at depth {depth} recorded no validation score (no gold labels?)")
        score = -val[-1] if column == "val_nll" else val[-1]
        print(f"  depth {depth}: validation {column} {val[-1]:.4f}, client compute {cost:.2f}s/round", flush=True)
        return Probe(depth, score, cost, int(max(per_client, default=0)))

    return probe


def check_plan_options(opts) -> None:
    """The command's own numbers, one error line each, before any model is read."""
    if opts.rounds < 1:
        raise FesError(f"--rounds must be >= 1 (proxy rounds per probed depth), got {opts.rounds}")
    if opts.tolerance < 0:
        raise FesError(f"--tolerance must be >= 0, got {opts.tolerance}")
    if opts.max_depth < 0:
        raise FesError(f"--max-depth must be >= 1 (0: every layer), got {opts.max_depth}")


def run_plan(cfg: FesConfig, opts) -> int:
    from fedml_fes.runtime.inert import tuning_mode

    check_plan_options(opts)
    mode = tuning_mode(cfg.train.method, cfg.model.tuning)
    if mode != "plan":
        raise FesError(
            f"fedml-fes plan chooses tuning_args' layer plan, which {cfg.train.method} does not use "
            f"(it trains '{mode}'): plan fes, or a method with model_args.tuning: plan"
        )
    from fedml_fes.models import skeleton
    from fedml_fes.runtime.methods import decides_on_validation, get_method
    from fedml_fes.tuning.plan import num_layers
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    ensure_mlm_build(cfg)
    total = num_layers(skeleton(cfg.model.model, masked_lm=True))  # the depth, without reading weights
    max_depth = min(opts.max_depth or total, total)
    out = Path(opts.out or Path(cfg.common.output_dir) / "plan")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FesError(f"--out {out}: cannot create the folder ({e.strerror or e})") from None
    probed = probe_config(cfg, max_depth, opts.rounds)
    scored_on = (
        f"{probed.pacing.val_holdout:.0%} of the gold labels, held out"
        if decides_on_validation(get_method(cfg.train.method), probed)
        else "the gold labels it trains on (the method holds none out)"
    )
    print(
        f"planning {cfg.train.method} on {cfg.data.dataset}: {total} layers, depths 1..{max_depth}, "
        f"{opts.rounds} proxy rounds each, tolerance {opts.tolerance} in "
        f"{'mean log-likelihood' if cfg.pacing.val_signal == 'log_likelihood' else 'accuracy'} on {scored_on}",
        flush=True,
    )
    result = search_depth(max_depth, _probe(cfg, out, opts.rounds), opts.tolerance)
    print(result.table())
    chosen = {"full_layers": 0, "bias_layers": result.chosen.depth}
    print(
        f"chosen plan: tuning_args: {chosen} (reference depth {result.reference.depth}: "
        f"score {result.reference.score:.4f})"
    )
    (out / "plan.json").write_text(
        json.dumps(
            {
                "chosen": chosen,
                "probes": [dataclasses.asdict(p) for p in result.probes],
                "layers": total,
                "tolerance": opts.tolerance,
            },
            indent=2,
        )
    )
    return 0
