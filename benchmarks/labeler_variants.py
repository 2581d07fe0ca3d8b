"""The labeler variant table: FedFSL (or FeS) on the tuning seeds with one pseudo-label setting
changed per variant, each variant a fidelity-harness output folder.

    .venv/bin/python benchmarks/fidelity.py --datasets bbc_news trec --methods fedfsl --seeds 10 \\
        --set pseudo_args.per_pass_fraction=0.083 --set train_args.frequency_of_the_test=10 \\
        --set pseudo_args.labeler=contextual --out runs/tune/contextual --results runs/tune/contextual --jobs 2
    .venv/bin/python benchmarks/labeler_variants.py runs/tune --out benchmarks/results/labelers

Reads every `<root>/<variant>/<dataset>/runs/<run>-s<seed>/` that completed (the fidelity
harness's rows: final accuracy, pseudo-label precision over all passes, the run's start) and
writes `<out>/labelers.csv` and `labelers.md`: one row per variant, a column per dataset and
seed. Refuses reported seeds (0-2): variants are chosen on seeds >= 10 only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from fedml_fes.errors import FesError
from fedml_fes_plugins.bench import fidelity as fid
from fedml_fes_plugins.bench.fidelity_checks import _pct
from fedml_fes_plugins.bench.fidelity_report import _fmt

TUNING_SEEDS_FROM = 10


def collect(root: Path) -> list[dict]:
    rows = []
    for variant in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        for r in fid.collect_rows(variant):
            if r["method"] == fid.ZERO_SHOT:
                continue
            if r["seed"] < TUNING_SEEDS_FROM:
                raise FesError(f"{r['_run_dir']}: seed {r['seed']} is a reported seed; variants are tuned on >= 10")
            rows.append({**r, "variant": variant.name})
    return rows


def write(rows: list[dict], out: Path, command: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cols = ("variant", "dataset", "seed", "method", "labeler", "accuracy", "pseudo_precision", "pseudo_labels")
    with (out / "labelers.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_fmt(r[c]) for c in cols])
    keys = sorted({(r["dataset"], r["seed"]) for r in rows})
    lines = [
        "# Labeler variants (tuning seeds only)",
        "",
        f"Made by `{command}` from the run folders; test accuracy after the last round, and in "
        "parentheses the pseudo labels' precision over all passes (%).",
        "",
        "| variant (method) | " + " | ".join(f"{d} s{s}" for d, s in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for variant, method in dict.fromkeys((r["variant"], r["method"]) for r in rows):
        cells = []
        for d, s in keys:
            hit = [r for r in rows if (r["variant"], r["method"], r["dataset"], r["seed"]) == (variant, method, d, s)]
            cells.append(f"{100 * hit[0]['accuracy']:.1f} ({_pct(hit[0]['pseudo_precision'])})" if hit else "-")
        lines.append(f"| {variant} ({method}) | " + " | ".join(cells) + " |")
    (out / "labelers.md").write_text("\n".join(lines) + "\n")
    return out / "labelers.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", help="folder of variant folders (each a fidelity --out)")
    p.add_argument("--out", default="benchmarks/results/labelers", help="where labelers.csv and .md go")
    opts = p.parse_args(argv)
    try:
        rows = collect(Path(opts.root))
        if not rows:
            raise FesError(f"no completed run under {opts.root}")
        from fedml_fes_plugins.bench.paths import portable_command

        path = write(
            rows, Path(opts.out), portable_command(" ".join(["benchmarks/labeler_variants.py", *sys.argv[1:]]))
        )
    except FesError as e:
        print(f"labeler_variants: error: {e}", file=sys.stderr)
        return 1
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
