"""Why a skewed few-shot set can undo a good prior: per class, the gold labels' share against
the test split's, and how training moved the model's predictions and accuracy.

    .venv/bin/python benchmarks/gold_skew.py runs/tune/po_base runs/tune/po_balanced \\
        --out benchmarks/results/gold_skew.md

Reads every finished run folder under the given roots that holds the untrained model's
confusion matrix (`summary.json` `initial_test`), one table per run and, per root, the
correlation over all its classes between a class's gold-label skew (gold share minus test
share) and the change of its predicted share. Seeds 0-2 are refused: this is a tuning-seed
analysis (fedml_fes/report/class_shift.py holds the logic).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedml_fes.errors import FesError
from fedml_fes.report.class_shift import ClassShift, class_shift, skew_correlation
from fedml_fes_plugins.bench.fidelity_rows import gold_classes, heldout_classes

TUNING_SEEDS_FROM = 10


def _runs(root: Path) -> list[Path]:
    found = []
    for summary in sorted(root.rglob("summary.json")):
        run = summary.parent
        s = json.loads(summary.read_text())
        if s.get("status") != "completed" or not (s.get("initial_test") or {}).get("confusion"):
            continue
        seed = int(run.name.rsplit("-s", 1)[-1]) if "-s" in run.name else None
        if seed is not None and seed < TUNING_SEEDS_FROM:
            raise FesError(f"{run}: seed {seed} is a reported seed; this analysis uses seeds >= 10")
        found.append(run)
    return found


def _table(run: Path, rows: list[ClassShift]) -> list[str]:
    s = json.loads((run / "summary.json").read_text())
    head = (
        f"**{run.parent.parent.name} {run.name}** ({run.parent.parent.parent.name}): accuracy "
        f"{100 * s['initial']['test_acc']:.1f} -> {100 * s['final']:.1f}"
    )
    out = [
        head,
        "",
        "| class | gold % | test % | predicted % before -> after | accuracy % before -> after |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | {100 * r.gold_share:.0f} | {100 * r.test_share:.0f} | "
            f"{100 * r.predicted_before:.0f} -> {100 * r.predicted_after:.0f} | "
            f"{100 * r.acc_before:.0f} -> {100 * r.acc_after:.0f} |"
        )
    return out + [""]


def report(roots: list[Path], command: str) -> str:
    lines = ["# Gold-label skew and what training moved (tuning seeds only)", "", f"Made by `{command}`.", ""]
    for root in roots:
        runs = _runs(root)
        if not runs:
            raise FesError(f"{root}: no finished run with the untrained model's confusion matrix")
        everything: list[ClassShift] = []
        body: list[str] = []
        for run in runs:
            gold_classes(run), heldout_classes(run)  # written into the run folder if the harness has not yet
            rows = class_shift(run)
            everything += rows
            body += _table(run, rows)
        lines += [
            f"## {root.name}",
            "",
            f"Correlation over its {len(everything)} classes between gold-label skew (gold % - test %) and "
            f"the trained model's excess predicted share (predicted % after - test %): "
            f"{skew_correlation(everything):+.2f}; and the change of the predicted share (after - before): "
            f"{skew_correlation(everything, 'moved'):+.2f}.",
            "",
            *body,
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("roots", nargs="+", help="folders of run folders (a fidelity --out each)")
    p.add_argument("--out", help="write the report here too")
    opts = p.parse_args(argv)
    try:
        from fedml_fes_plugins.bench.paths import portable_command

        text = report(
            [Path(r) for r in opts.roots], portable_command(" ".join(["benchmarks/gold_skew.py", *sys.argv[1:]]))
        )
    except FesError as e:
        print(f"gold_skew: error: {e}", file=sys.stderr)
        return 1
    if opts.out:
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
