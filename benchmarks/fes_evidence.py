"""FeS vs FedFSL and FedFSL-BIAS (and FeS without filtering), side by side.

    .venv/bin/python benchmarks/fes_evidence.py                  # the cpu preset, seed 0
    .venv/bin/python benchmarks/fes_evidence.py --bench runs/bench/cpu --report-only

The runs are the benchmark's (`fedml-fes bench --preset cpu`, resumable, same partition and
seed for every method; the settings live in run_configs/bench/cpu.yaml only): this script
runs the four methods it needs there unless they are finished, then prints and writes
`<bench>/fes_evidence.md`: convergence and final accuracy, pseudo-label accuracy, upload
bytes per client per round, share of the labeling clients' pools inferred, peak training
memory, client compute seconds per round measured here, and the paper's bars, met or not.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

METHODS = {"fedfsl": "FedFSL", "fedfsl_bias": "FedFSL-BIAS", "fes": "FeS", "fes_no_rf": "FeS without filtering"}


def _mean(xs: list[float]) -> float:
    return statistics.mean(xs) if xs else float("nan")


def measure(run_dir: Path, tail: int) -> dict:
    rows, summary = common.read_rows(run_dir), common.read_summary(run_dir)
    tasks = list(csv.DictReader((run_dir / "client_costs.csv").open()))
    train = [t for t in tasks if t["phase"] == "train" and t["accepted"] == "1"]
    slowest: dict[tuple[int, str], float] = {}  # a round's compute: its slowest task of each phase, summed
    for t in tasks:
        key = (int(t["round"]), t["phase"])
        slowest[key] = max(slowest.get(key, 0.0), float(t["compute_s"]))
    per_round: dict[int, float] = {}
    for (r, _phase), seconds in slowest.items():
        per_round[r] = per_round.get(r, 0.0) + seconds
    # a labeling round's pool size, from its inferred count and inferred fraction
    pool = sum(
        i / f for i, f in zip(common.floats(rows, "inferred"), common.floats(rows, "inferred_fraction")) if f > 0
    )
    accs = common.floats(rows, "test_acc")
    return {
        "convergence": _mean(accs[-tail:]),
        "final": summary.get("final"),
        "pseudo_acc": _mean(common.floats(rows, "pseudo_acc")),
        "upload": _mean([float(t["bytes_up"]) for t in train]),
        "inferred": sum(common.floats(rows, "inferred")),
        "inferred_fraction": sum(common.floats(rows, "inferred")) / pool if pool else float("nan"),
        "peak_mem": max((float(t["peak_train_bytes"]) for t in train), default=float("nan")),
        "compute_s": _mean(list(per_round.values())),
    }


def bars(r: dict[str, dict]) -> list[tuple[str, str, str, bool]]:
    fsl, fes, no_rf = r["fedfsl"], r["fes"], r["fes_no_rf"]
    traffic = fsl["upload"] / fes["upload"]
    memory = fsl["peak_mem"] / fes["peak_mem"]
    skipped = 1 - fes["inferred"] / no_rf["inferred"] if no_rf["inferred"] else float("nan")
    loss = 100 * (no_rf["convergence"] - fes["convergence"])
    gap = 100 * (fes["convergence"] - fsl["convergence"])
    from fedml_fes.report.paper_bars import PAPER_BARS as bar

    return [
        (
            "traffic per client and round, FedFSL / FeS",
            f">= {bar['traffic_reduction']:g}x",
            f"{traffic:,.0f}x",
            traffic >= bar["traffic_reduction"],
        ),
        (
            "peak training memory, FedFSL / FeS",
            f">= {bar['memory_reduction']:g}x",
            f"{memory:.2f}x",
            memory >= bar["memory_reduction"],
        ),
        (
            "unlabeled data skipped by filtering (vs FeS without it)",
            f">= {100 * bar['filtering_skipped']:g}%",
            f"{100 * skipped:.1f}%",
            skipped >= bar["filtering_skipped"],
        ),
        ("accuracy lost to filtering", "<= 1 point", f"{loss:+.1f} points", loss <= 1),
        ("FeS accuracy vs FedFSL (convergence)", ">= 0", f"{gap:+.1f} points", gap >= 0),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="cpu")
    p.add_argument("--bench", default=None, help="benchmark directory (default runs/bench/<preset>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true", help="read finished runs; train nothing")
    p.add_argument("--agnews-dir", default=None, help="AG News in its official CSV layout (data_args.data_dir)")
    opts = p.parse_args(argv)
    from fedml_fes.errors import FesError
    from fedml_fes_plugins.bench.config import load_bench, preset_path
    from fedml_fes_plugins.bench.runner import pending_runs, run_bench, run_dir_of

    data = {"data_args.data_dir": opts.agnews_dir} if opts.agnews_dir else None
    plan = load_bench(
        preset_path(opts.preset), data, {"methods": list(METHODS), "seeds": [opts.seed], "full_label": False}
    )
    out = Path(opts.bench or Path(plan.base.common.output_dir) / "bench" / opts.preset)
    try:
        if not opts.report_only and pending_runs(plan, out):  # (rebuilds <bench>/report for these methods)
            run_bench(plan, out, progress=False, echo=lambda line: print(line, flush=True))
        tail = plan.base.cost.convergence_tail
        results = {m: measure(run_dir_of(out, m, opts.seed), tail) for m in METHODS}
    except (FesError, FileNotFoundError) as e:
        print(f"fes_evidence: error: {e}", file=sys.stderr)
        return 1
    lines = [
        f"# FeS vs FedFSL ({opts.preset} preset, seed {opts.seed}; runs in {out / 'runs'})",
        "",
        f"Convergence accuracy: mean of the last {tail} evaluated rounds. Upload: bytes per accepted "
        "training task. Pool inferred: samples inferred / pool size over the labeling tasks. "
        "Compute: per round, the slowest training task + the slowest labeling task, measured here.",
        "",
        "| method | convergence acc | final acc | pseudo-label acc | upload/client/round | pool inferred | "
        "peak train memory | compute s/round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m, r in results.items():
        lines.append(
            f"| {METHODS[m]} | {100 * r['convergence']:.1f}% | {100 * (r['final'] or float('nan')):.1f}% | "
            f"{100 * r['pseudo_acc']:.1f}% | {r['upload']:,.0f} B | {100 * r['inferred_fraction']:.1f}% | "
            f"{r['peak_mem'] / 2**20:.1f} MiB | {r['compute_s']:.2f} |"
        )
    lines += ["", "| the paper's bar | target | measured | met |", "|---|---|---|---|"]
    lines += [f"| {name} | {target} | {value} | {'yes' if ok else 'no'} |" for name, target, value, ok in bars(results)]
    text = "\n".join(lines) + "\n"
    (out / "fes_evidence.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
