"""Per class: the pseudo labels' share against the test texts', and what a pseudo-label method
predicts and gets right against Prompt-only of the same seed (the same gold labels, no pseudo
labels).

    .venv/bin/python benchmarks/pseudo_class_mix.py runs/fidelity --datasets trec --methods fedfsl fes \\
        --out benchmarks/results/pseudo_class_mix.md

Reads `<root>/<dataset>/runs/<method>-s<seed>/` run folders of the fidelity harness, finished,
with their clients' `pseudo_labels.json` (fedml_fes/report/class_shift.py `class_mix`).
A diagnosis of finished runs: nothing here picks a setting.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedml_fes.errors import FesError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_and_write_table  # noqa: E402

from fedml_fes.report.class_shift import class_mix


def _completed(run: Path) -> bool:
    try:
        return json.loads((run / "summary.json").read_text()).get("status") == "completed"
    except (OSError, ValueError):
        return False


def tables(root: Path, datasets: list[str], methods: list[str]) -> list[str]:
    out: list[str] = []
    for dataset in datasets:
        runs = root / dataset / "runs"
        for method in methods:
            for run in sorted(runs.glob(f"{method}-s*")):
                seed = run.name.rsplit("-s", 1)[-1]
                base = runs / f"prompt_only-s{seed}"
                if not (_completed(run) and _completed(base)):
                    continue
                mine, po = class_mix(run), class_mix(base)
                if mine.pseudo_share is None:
                    continue
                acc_m, acc_p = (
                    float((mine.accuracy * mine.test_share).sum()),
                    float((po.accuracy * po.test_share).sum()),
                )
                out += [
                    f"**{dataset} {method} seed {seed}**: accuracy {100 * acc_m:.1f}, Prompt-only {100 * acc_p:.1f}",
                    "",
                    "| class | test % | pseudo labels % | predicted %: method / Prompt-only | accuracy %: method / Prompt-only |",
                    "|---|---|---|---|---|",
                ]
                for i, name in enumerate(mine.names):
                    out.append(
                        f"| {name} | {100 * mine.test_share[i]:.0f} | {100 * mine.pseudo_share[i]:.0f} | "
                        f"{100 * mine.predicted[i]:.0f} / {100 * po.predicted[i]:.0f} | "
                        f"{100 * mine.accuracy[i]:.0f} / {100 * po.accuracy[i]:.0f} |"
                    )
                out.append("")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", help="a fidelity harness output folder (its --out)")
    p.add_argument("--datasets", nargs="+", default=["agnews", "bbc_news", "trec"])
    p.add_argument("--methods", nargs="+", default=["fedfsl", "fes"])
    p.add_argument("--out", default=None, help="write the tables here (markdown) as well")
    opts = p.parse_args(argv)
    try:
        lines = tables(Path(opts.root), opts.datasets, opts.methods)
    except FesError as e:
        print(f"pseudo_class_mix: error: {e}", file=sys.stderr)
        return 1
    if not lines:
        print(
            "pseudo_class_mix: error: no finished pseudo-label run with a Prompt-only run of its seed", file=sys.stderr
        )
        return 1
    print_and_write_table("pseudo_class_mix.py", "Pseudo labels' class mix", "\n".join(lines), opts.out, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
