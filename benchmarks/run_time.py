"""Where a fidelity run's wall time goes, per dataset and method, from the run folders alone.

    .venv/bin/python benchmarks/run_time.py benchmarks/results/fidelity_paper_regime \
        --out benchmarks/results/run_time.md

Per run: its wall time (`summary.json`), the part outside the rounds (model and data loading,
the zero-shot evaluation), and inside them the clients' training and labeling compute as the
clients timed it (`client_costs.csv`, phase `train` / `label`, summed over clients: the
in-process runtime runs them one after another) and the rest of the round (`metrics.csv`'s
`round_wall_s` minus both: test evaluation, aggregation, update and global files, checkpoints).
Means over the seeds found. A sampling profiler names the parts of that rest; see
docs/BENCHMARK.md for one such profile.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import read_rows, read_summary  # noqa: E402

PHASES = ("train", "label")


def run_times(run_dir: Path) -> dict[str, float]:
    """One run's wall time and its parts (s)."""
    wall = float(read_summary(run_dir)["wall_s"])
    rounds = sum(float(r["round_wall_s"] or 0) for r in read_rows(run_dir))
    phase = dict.fromkeys(PHASES, 0.0)
    with (run_dir / "client_costs.csv").open() as f:
        for r in csv.DictReader(f):
            if r["phase"] in phase:
                phase[r["phase"]] += float(r["compute_s"] or 0)
    return {"wall": wall, "outside": wall - rounds, **phase, "rest": rounds - sum(phase.values())}


def table(root: Path) -> str:
    by: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for summary in sorted(root.glob("*/runs/*/summary.json")):
        run_dir = summary.parent
        if read_summary(run_dir).get("status") != "completed":
            continue
        by[(run_dir.parent.parent.name, run_dir.name.rsplit("-s", 1)[0])].append(run_times(run_dir))
    lines = [
        "| dataset | method | runs | wall (s) | outside rounds | clients' training | clients' labeling | rest of the rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (dataset, method), runs in sorted(by.items()):
        mean = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        share = {k: 100 * mean[k] / mean["wall"] for k in mean}
        cells = [f"{mean[k]:.0f} ({share[k]:.0f}%)" for k in ("outside", "train", "label", "rest")]
        lines.append(f"| {dataset} | {method} | {len(runs)} | {mean['wall']:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", help="a fidelity results folder (holds DATASET/runs/METHOD-sSEED)")
    p.add_argument("--out", default=None)
    o = p.parse_args()
    text = (
        "# Where a run's time goes\n\n"
        f"Made by `benchmarks/run_time.py {o.root}` from the run folders; means over seeds, seconds "
        "(share of the wall time).\n\n" + table(Path(o.root))
    )
    if o.out:
        Path(o.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
