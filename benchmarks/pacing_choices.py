"""What FeS's AUG-E configurator saw and chose, from finished runs' `events.log`.

    .venv/bin/python benchmarks/pacing_choices.py benchmarks/results/fidelity_bf16 --out PATH.md

For every FeS run folder under the given roots (`<root>/<dataset>/runs/fes*-s<seed>/`, the
fidelity harness's layout): how many trials ran, in how many rounds, the spread of the trials'
delta_acc *within* a round (configurations trialled side by side) against the spread *between*
rounds (the same gain measured from a different global model), the configurations chosen, the
labeling events that followed and the pseudo labels held at the end. A trial's gain is the
round's validation after averaging its group in, minus `pacing_args.trial_baseline`'s (by
default the previous global model's): when the spread between rounds dwarfs the spread within
one, the ranking says which round a configuration was trialled in more than what it labels.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TRIAL = re.compile(r"round (\d+): pacing trial (<[^>]+>) done: delta_acc=([-+0-9.e]+)")
CHOSE = re.compile(r"pacing (?:re-trial )?chose (?:\(was <[^>]+>\) )?(<[^>]+>)")


def read_events(run_dir: Path) -> dict:
    """Trials (round, configuration, delta) and the configurations chosen, in order."""
    text = (run_dir / "events.log").read_text() if (run_dir / "events.log").is_file() else ""
    trials = [(int(r), cfg, float(d)) for r, cfg, d in TRIAL.findall(text)]
    return {"trials": trials, "chosen": CHOSE.findall(text)}


def spreads(trials: list[tuple[int, str, float]]) -> tuple[float, float]:
    """(largest max-min of delta among one round's trials, max-min of the rounds' mean deltas)."""
    by_round: dict[int, list[float]] = {}
    for r, _, d in trials:
        by_round.setdefault(r, []).append(d)
    if not by_round:
        return float("nan"), float("nan")
    within = max(max(v) - min(v) for v in by_round.values())
    means = [sum(v) / len(v) for v in by_round.values()]
    return within, max(means) - min(means)


def measure(run_dir: Path) -> dict:
    ev, rows = read_events(run_dir), common.read_rows(run_dir)
    within, between = spreads(ev["trials"])
    events = sum(1 for r in rows if r.get("label_clients"))
    last = rows[-1] if rows else {}
    return {
        "trials": len(ev["trials"]),
        "rounds": len({r for r, _, _ in ev["trials"]}),
        "within": within,
        "between": between,
        "chosen": ev["chosen"],
        "events": events,
        "pseudo": int(float(last.get("pseudo_total") or 0)),
        "acc": common.floats(rows, "test_acc")[-1] if common.floats(rows, "test_acc") else float("nan"),
    }


def table(roots: list[Path]) -> str:
    lines = [
        "| run | trials (rounds) | delta spread within a round | between rounds | chosen | labeling events | "
        "pseudo labels at the end | test acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for root in roots:
        for run_dir in sorted(root.glob("*/runs/fes*-s*")):
            if not (run_dir / "metrics.csv").is_file():
                continue
            m = measure(run_dir)
            lines.append(
                f"| {root.name} {run_dir.parent.parent.name} {run_dir.name} | {m['trials']} ({m['rounds']}) | {m['within']:.4f} | "
                f"{m['between']:.4f} | {' then '.join(m['chosen']) or '-'} | {m['events']} | {m['pseudo']} | "
                f"{100 * m['acc']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path, help="folders holding <dataset>/runs/fes*-s<seed>/")
    ap.add_argument("--out", help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        print(f"pacing_choices: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 1
    common.print_and_write_table(
        "pacing_choices.py", "FeS pacing: trials and choices", table(args.roots), args.out, argv
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
