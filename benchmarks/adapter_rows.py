"""Benchmark rows of finished adapter/LoRA runs beside FedCLS, FedFSL and FeS runs.

    .venv/bin/python benchmarks/adapter_rows.py RUN_DIR [RUN_DIR ...] [--out results.json]

Every row is computed the way the fidelity benchmark computes its own
(`fedml_fes_plugins.bench.fidelity.run_row`: final test accuracy, upload bytes summed over the
rounds, emulated Jetson TX2 hours under the run's cost_args), plus the peak training memory
measured per client task (`peak_train_bytes` in client_costs.csv, the largest task) and
the bytes of one client update (the first round's upload over its clients). Runs are only read.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def row(run_dir: Path) -> dict:
    from fedml_fes_plugins.bench.fidelity import run_row

    r = run_row(run_dir)
    if r is None:
        raise SystemExit(f"{run_dir} is not a completed run")
    tasks = list(csv.DictReader((run_dir / "client_costs.csv").open()))
    first = next(csv.DictReader((run_dir / "metrics.csv").open()))
    out = {k: v for k, v in r.items() if not k.startswith("_")}
    out["peak_train_MB"] = max(float(t.get("peak_train_bytes") or 0) for t in tasks) / 1e6
    out["update_bytes"] = int(float(first["bytes_up"])) // max(1, len(first["clients"].split()))
    out["run_dir"] = str(run_dir)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    rows = [row(d) for d in args.run_dirs]
    print(
        "| method | seed | accuracy (%) | upload, whole run (MB) | one update (bytes) | peak train memory (MB) "
        "| emulated TX2 hours |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['method']} | {r['seed']} | {100 * r['accuracy']:.1f} | {r['bytes_up'] / 1e6:,.2f} | "
            f"{r['update_bytes']:,} | {r['peak_train_MB']:.1f} | {r['emulated_hours']:.4f} |"
        )
    if args.out:
        from fedml_fes_plugins.bench.paths import portable_text

        args.out.write_text(
            portable_text(json.dumps(rows, indent=2), ROOT) + "\n"
        )  # run folders from the checkout's root


if __name__ == "__main__":
    main()
