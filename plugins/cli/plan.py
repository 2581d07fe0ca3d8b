"""`fedml-fes plan --cf CONFIG`: choose the co-planning depth with short proxy runs.

Each probe is a real in-process run of the config (its method, e.g. `fes`) for a few
rounds with `tuning_args.bias_layers = depth` and no fully trained layer; its accuracy on
the gold-label validation set (metrics.csv `val_acc`; never the test split) and
its measured client compute per round feed `fedml_fes.tuning.planner.search_depth`. The
result (a table and the chosen `tuning_args`) is printed and written to plan.json.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError
from fedml_fes.tuning.planner import Probe, search_depth
from fedml_fes_plugins.runtimes.inprocess import run_in_process


def _probe(cfg: FesConfig, out: Path, rounds: int):
    def probe(depth: int) -> Probe:
        c = dataclasses.replace(
            cfg,
            tuning_args=dataclasses.replace(cfg.tuning, full_layers=0, bias_layers=depth),
            train_args=dataclasses.replace(cfg.train, comm_round=rounds),
        )
        run_dir = out / f"depth{depth}"
        run_dir.mkdir(parents=True, exist_ok=True)
        run_in_process(c, run_dir, progress=False, echo=lambda _l: None)
        rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
        cost = sum(float(r["client_compute_s_max"]) for r in rows) / max(len(rows), 1)
        per_client = [int(r["bytes_up"]) / max(len(r["clients"].split()), 1) for r in rows]
        val = [float(r["val_acc"]) for r in rows if r.get("val_acc") not in (None, "", "nan")]
        acc = val[-1] if val else None
        if acc is None:
            raise FesError(f"probe at depth {depth} recorded no validation accuracy (no gold labels?)")
        print(f"  depth {depth}: validation accuracy {acc:.4f}, client compute {cost:.2f}s/round", flush=True)
        return Probe(depth, float(acc if acc is not None else -math.inf), cost, int(max(per_client, default=0)))

    return probe


def run_plan(cfg: FesConfig, opts) -> int:
    from fedml_fes.models import skeleton
    from fedml_fes.tuning.plan import num_layers
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    ensure_mlm_build(cfg)
    total = num_layers(skeleton(cfg.model.model, masked_lm=True))  # the depth, without reading weights
    max_depth = min(opts.max_depth or total, total)
    out = Path(opts.out or Path(cfg.common.output_dir) / "plan")
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"planning {cfg.train.method} on {cfg.data.dataset}: {total} layers, depths 1..{max_depth}, "
        f"{opts.rounds} proxy rounds each, tolerance {opts.tolerance}",
        flush=True,
    )
    result = search_depth(max_depth, _probe(cfg, out, opts.rounds), opts.tolerance)
    print(result.table())
    chosen = {"full_layers": 0, "bias_layers": result.chosen.depth}
    print(
        f"chosen plan: tuning_args: {chosen} (reference depth {result.reference.depth}: "
        f"accuracy {result.reference.accuracy:.4f})"
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
