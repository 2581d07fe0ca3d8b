"""The labeler variant table: FedFSL (or FeS) on the tuning seeds with one pseudo-label setting
changed per variant, each variant a fidelity-harness output folder.

    .venv/bin/python benchmarks/fidelity.py --datasets bbc_news trec --methods fedfsl --seeds 10 \\
        --set pseudo_args.per_pass_fraction=0.083 --set train_args.frequency_of_the_test=10 \\
        --set pseudo_args.labeler=contextual --out runs/tune/contextual --results runs/tune/contextual --jobs 2
    .venv/bin/python benchmarks/labeler_variants.py runs/tune --out benchmarks/results/labelers \
        --reference po_base f32_po_base

Reads every `<root>/<variant>/<dataset>/runs/<run>-s<seed>/` that completed (the fidelity
harness's rows: final accuracy, pseudo-label precision over all passes, the run's start) and
writes `<out>/labelers.csv` and `labelers.md`: one row per variant, a column per dataset and
seed. With `--reference`, labelers.md also pairs each variant with the reference variants'
Prompt-only runs of the same dataset, seed and device (precision included): seed-to-seed swings
of Prompt-only itself (TREC-6: 63-84 over seeds 10-13) dwarf a labeler's effect, so a variant is
judged by its mean difference on the seeds both ran. Refuses reported seeds (0-2): variants are
chosen on seeds >= 10 only.
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


def paired(rows: list[dict], references: list[str]) -> list[dict]:
    """Each non-reference variant's accuracy minus Prompt-only's, per dataset, on the seeds where a
    reference variant ran Prompt-only on the same device (the summary's `device`: CPU float32 and
    bfloat16 runs are never paired)."""
    base = {
        (r["dataset"], r["seed"], r["device"]): r["accuracy"]
        for r in rows
        if r["variant"] in references and r["method"] == "prompt_only"
    }
    groups: dict[tuple[str, str, str], list[tuple[int, float, float]]] = {}
    for r in rows:
        ref = base.get((r["dataset"], r["seed"], r["device"]))
        if r["variant"] in references or ref is None:
            continue
        groups.setdefault((r["variant"], r["method"], r["dataset"]), []).append((r["seed"], r["accuracy"], ref))
    out = []
    for (variant, method, dataset), hits in groups.items():
        deltas = [a - ref for _, a, ref in hits]
        out.append(
            {
                "variant": variant,
                "method": method,
                "dataset": dataset,
                "seeds": sorted(s for s, _, _ in hits),
                "mean": sum(a for _, a, _ in hits) / len(hits),
                "reference_mean": sum(ref for _, _, ref in hits) / len(hits),
                "delta": sum(deltas) / len(deltas),
                "wins": sum(d > 0 for d in deltas),
            }
        )
    return sorted(out, key=lambda p: (p["dataset"], -len(p["seeds"]), -p["delta"]))


def paired_lines(pairs: list[dict], references: list[str]) -> list[str]:
    lines = [
        "",
        f"## Against Prompt-only, paired by seed (reference variants: {', '.join(references)})",
        "",
        "Test accuracy (%) on the seeds where both ran, the same device and precision; `wins`: seeds "
        "where the variant beat Prompt-only.",
        "",
        "| dataset | variant (method) | seeds | variant mean | Prompt-only mean | difference | wins |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        lines.append(
            f"| {p['dataset']} | {p['variant']} ({p['method']}) | {' '.join(map(str, p['seeds']))} | "
            f"{100 * p['mean']:.1f} | {100 * p['reference_mean']:.1f} | {100 * p['delta']:+.1f} | "
            f"{p['wins']} of {len(p['seeds'])} |"
        )
    return lines


def write(rows: list[dict], out: Path, command: str, references: list[str] = ()) -> Path:
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
    if references:
        lines += paired_lines(paired(rows, list(references)), list(references))
    (out / "labelers.md").write_text("\n".join(lines) + "\n")
    return out / "labelers.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", help="folder of variant folders (each a fidelity --out)")
    p.add_argument("--out", default="benchmarks/results/labelers", help="where labelers.csv and .md go")
    p.add_argument(
        "--reference", nargs="*", default=[], help="variants whose Prompt-only runs the others are paired with"
    )
    opts = p.parse_args(argv)
    try:
        rows = collect(Path(opts.root))
        if not rows:
            raise FesError(f"no completed run under {opts.root}")
        from fedml_fes_plugins.bench.paths import portable_command

        missing = [v for v in opts.reference if not any(r["variant"] == v for r in rows)]
        if missing:
            raise FesError(f"--reference {' '.join(missing)}: no completed run of that variant under {opts.root}")
        command = portable_command(" ".join(["benchmarks/labeler_variants.py", *sys.argv[1:]]))
        path = write(rows, Path(opts.out), command, opts.reference)
    except FesError as e:
        print(f"labeler_variants: error: {e}", file=sys.stderr)
        return 1
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
