"""Pool the seeds of several fidelity result folders: per dataset, each method's mean accuracy
over every seed any of the CSVs holds, and the paired differences behind target (b) (FedFSL -
Prompt-only, FeS - Prompt-only, FeS - FedFSL; same seed: same partition and gold labels) with
their standard error, so that a three-seed miss can be told from seed noise.

    .venv/bin/python benchmarks/seed_pool.py benchmarks/results/fidelity_balanced/fidelity.csv \\
        benchmarks/results/fidelity_balanced_seeds3to5/fidelity.csv

Rows of the `@paper` variants (labeler exactly `paper` beside a shared config that labels
otherwise) are left out; `--labeler paper` takes them instead. A seed that appears in two CSVs
for the same dataset and method is refused: pooled seeds must be distinct runs.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

METHODS = ("prompt_only", "fedfsl", "fes")
LABELS = {"prompt_only": "Prompt-only", "fedfsl": "FedFSL", "fes": "FeS"}
PAIRS = (("fedfsl", "prompt_only"), ("fes", "prompt_only"), ("fes", "fedfsl"))


def pooled(csv_files: list[Path], labeler: str | None) -> dict[str, dict[str, dict[int, float]]]:
    """dataset -> method -> seed -> accuracy (0-1)."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for path in csv_files:
        if not path.is_file():
            raise SystemExit(f"seed_pool: no such file: {path}")
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            lacking = {"dataset", "seed", "method", "accuracy", "labeler"} - set(reader.fieldnames or ())
            if lacking:
                raise SystemExit(f"seed_pool: {path} is not a fidelity CSV (no column {', '.join(sorted(lacking))})")
            for r in reader:
                if r["method"] not in METHODS:
                    continue
                if r["method"] != "prompt_only" and (r["labeler"] == "paper") != (labeler == "paper"):
                    continue
                seeds = out.setdefault(r["dataset"], {}).setdefault(r["method"], {})
                seed = int(r["seed"])
                if seed in seeds:
                    raise SystemExit(f"seed_pool: {r['dataset']} {r['method']} seed {seed} is in two of the CSVs")
                seeds[seed] = float(r["accuracy"])
    return out


def table(data: dict[str, dict[str, dict[int, float]]]) -> list[str]:
    lines = [
        "| dataset | seeds | "
        + " | ".join(LABELS[m] for m in METHODS)
        + " | "
        + " | ".join(f"{LABELS[a]} - {LABELS[b]}" for a, b in PAIRS)
        + " |",
        "|---|---|" + "---|" * (len(METHODS) + len(PAIRS)),
    ]
    for dataset, by_method in data.items():
        seeds = sorted(set.union(*(set(s) for s in by_method.values())))
        cells = [f"{100 * statistics.mean(by_method[m].values()):.1f}" if by_method.get(m) else "-" for m in METHODS]
        for a, b in PAIRS:
            both = sorted(set(by_method.get(a, {})) & set(by_method.get(b, {})))
            diffs = [100 * (by_method[a][s] - by_method[b][s]) for s in both]
            if len(diffs) < 2:
                cells.append("-")
                continue
            se = statistics.stdev(diffs) / math.sqrt(len(diffs))
            cells.append(f"{statistics.mean(diffs):+.1f} ± {se:.1f} (n={len(diffs)})")
        lines.append(f"| {dataset} | {', '.join(map(str, seeds))} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", nargs="+", type=Path, help="fidelity.csv files of the fidelity harness")
    p.add_argument("--labeler", help="'paper': pool the @paper rows instead of the shared config's")
    a = p.parse_args(argv)
    print("\n".join(table(pooled(a.csv, a.labeler))))
    print("\nAccuracy (%): means over the seeds; differences in points, paired by seed, mean ± standard error.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
