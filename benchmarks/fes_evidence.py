"""Issue 5's evidence: FeS vs FedFSL and FedFSL-BIAS (and FeS without filtering), side by side.

    .venv/bin/python benchmarks/fes_evidence.py            # AG News, seed 0
    .venv/bin/python benchmarks/fes_evidence.py --rounds 5

All runs share the partition and seed. FedFSL and FedFSL-BIAS run run_configs/agnews_fedfsl.yaml
(FedFSL-BIAS with the bias-only learning rate of FeS's config); FeS and its no-filtering
ablation run run_configs/agnews_fes.yaml. Printed and written to runs/fes_evidence/:
accuracy, pseudo-label accuracy, upload bytes per client per round, share of the labeling
clients' pools inferred, client compute seconds per round measured here, and peak training
memory when the run recorded one.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

RUNS = (  # name, config, method, extra overrides
    ("FedFSL", "run_configs/agnews_fedfsl.yaml", "fedfsl", {}),
    ("FedFSL-BIAS", "run_configs/agnews_fedfsl.yaml", "fedfsl_bias", {"train_args.learning_rate": 0.001}),
    ("FeS", "run_configs/agnews_fes.yaml", "fes", {}),
    ("FeS without filtering", "run_configs/agnews_fes.yaml", "fes_no_rf", {}),
)


def _mean(xs: list[float]) -> float:
    return statistics.mean(xs) if xs else float("nan")


def measure(run_dir: Path) -> dict:
    rows, summary = common.read_rows(run_dir), common.read_summary(run_dir)
    ups = [int(r["bytes_up"]) / max(1, len(r["clients"].split())) for r in rows]
    compute = [float(r["client_compute_s_max"]) + float(r.get("label_compute_s_max") or 0 or 0)
               if (r.get("label_compute_s_max") or "") not in ("", "nan") else float(r["client_compute_s_max"])
               for r in rows]
    inferred = sum(common.floats(rows, "inferred"))
    mem_cols = [k for k in (rows[0] if rows else {}) if "mem" in k.lower()]
    mem = max((v for k in mem_cols for v in common.floats(rows, k)), default=float("nan"))
    return {"accuracy": summary.get("final"), "best": summary.get("best"),
            "pseudo_acc": _mean(common.floats(rows, "pseudo_acc")),
            "pseudo_total": int(common.floats(rows, "pseudo_total")[-1]) if common.floats(rows, "pseudo_total") else 0,
            "upload_per_client": _mean(ups), "inferred_fraction": _mean(common.floats(rows, "inferred_fraction")),
            "inferred": inferred, "compute_s": _mean(compute), "peak_mem": mem}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--out", default="runs/agnews", help="shared with table1.py: same runs are reused")
    opts = p.parse_args(argv)
    out = Path(opts.out)
    results = {}
    for name, cf, method, extra in RUNS:
        overrides = {"common_args.random_seed": opts.seed, "train_args.method": method, **extra}
        if opts.rounds:
            overrides["train_args.comm_round"] = opts.rounds
        run_dir = out / f"{method}-s{opts.seed}"
        summary = common.run_one(cf, run_dir, overrides, tag=name)
        print(f"{name}: final accuracy {summary.get('final')}", flush=True)
        results[name] = measure(run_dir)
    base = results["FedFSL"]
    lines = ["| method | accuracy | pseudo-label acc | upload/client/round | vs FedFSL | pool inferred | "
             "client compute s/round | peak train mem |", "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        ratio = base["upload_per_client"] / r["upload_per_client"] if r["upload_per_client"] else float("nan")
        mem = f"{r['peak_mem'] / 2**20:.1f} MiB" if r["peak_mem"] == r["peak_mem"] else "n/a"
        lines.append(f"| {name} | {r['accuracy']:.4f} | {r['pseudo_acc']:.4f} | {r['upload_per_client']:,.0f} B | "
                     f"{ratio:,.0f}x less | {100 * r['inferred_fraction']:.1f}% | {r['compute_s']:.2f} | {mem} |")
    text = "\n".join(lines) + "\n"
    (out / "fes_evidence.md").write_text(f"# FeS vs FedFSL on AG News (seed {opts.seed})\n\n{text}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
