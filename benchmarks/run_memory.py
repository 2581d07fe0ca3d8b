"""One fidelity run's peak memory: client updates and the server's global tensors held in memory
against parked on disk between their reads (`fedml_fes.runtime.spill`), and parked with
gradient checkpointing (train_args.gradient_checkpointing), side by side in one invocation.

    .venv/bin/python benchmarks/run_memory.py                       # FedFSL, BBC News, seed 10, 3 rounds
    .venv/bin/python benchmarks/run_memory.py --method fes --rounds 4
    .venv/bin/python benchmarks/run_memory.py --modes parked checkpointed
    .venv/bin/python benchmarks/run_memory.py --method fedfsl_bias --modes parked checkpointed \
        --results benchmarks/results/run_memory_bias.json     # what checkpoint_bias_only saves

Each mode runs in its own fresh process (one torch thread), one after the other, from the shared
fidelity config (run_configs/fidelity.yaml) with only the dataset keys, method, seed and round
count changed; the round count reaches the first pseudo-label round, the round that trains the
most clients. Printed and written (--results): each mode's peak RSS (the process's high-water
mark, ru_maxrss), wall time and final accuracy, and whether the two runs' metrics agree.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import read_rows  # noqa: E402

from fedml_fes.runtime.spill import DEFAULT_MIN_BYTES  # noqa: E402

# mode: (spill_min_bytes: never or the runtime's default, train_args.gradient_checkpointing)
MODES = {"held": (2**62, False), "parked": (DEFAULT_MIN_BYTES, False), "checkpointed": (DEFAULT_MIN_BYTES, True)}


def _high_water_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)  # KiB on Linux


def _rss_gb() -> float:
    with open("/proc/self/status") as f:
        return round(int(next(line for line in f if line.startswith("VmRSS")).split()[1]) / 1e6, 2)


def _child(opts: argparse.Namespace) -> None:
    from fedml_fes.config import load_config
    from fedml_fes.models import is_causal_lm
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.bench.fidelity_spec import DATASETS, dataset_overrides
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    out = Path(opts.out) / opts.child
    overrides = {
        **dataset_overrides(
            DATASETS[opts.dataset], opts.agnews_dir or "", causal=is_causal_lm(load_config(opts.cf).model.model)
        ),
        "train_args.method": opts.method,
        "train_args.comm_round": opts.rounds,
        "common_args.random_seed": opts.seed,
        "common_args.torch_threads": 1,
        "common_args.output_dir": str(out),
        "common_args.cache_dir": str(Path(opts.out) / "cache"),
        "train_args.gradient_checkpointing": MODES[opts.child][1],
        "train_args.checkpoint_bias_only": True,  # a mode checkpoints whatever trains, bias-only plans too
    }
    cfg = load_config(opts.cf, overrides)
    started = time.perf_counter()
    # as each round ends: the high-water mark so far (where the peak was reached) and the RSS now
    peaks: list[dict[str, float]] = []

    def echo(line: str) -> None:
        peaks.append({"peak_gb": _high_water_gb(), "rss_gb": _rss_gb()})
        print(f"{line}  [{peaks[-1]}]", flush=True)

    summary = run_in_process(
        cfg, make_run_dir(cfg, str(out / "run")), progress=False, echo=echo, spill_min_bytes=MODES[opts.child][0]
    )
    print(
        "RESULT "
        + json.dumps(
            {
                "mode": opts.child,
                "status": summary.get("status"),
                "final": summary.get("final"),
                "wall_s": round(time.perf_counter() - started, 1),
                "peak_rss_gb": _high_water_gb(),
                "by_round": peaks,
            }
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cf", default="run_configs/fidelity.yaml")
    p.add_argument("--dataset", default="bbc_news", help="bbc_news, trec or agnews (with --agnews-dir)")
    p.add_argument("--agnews-dir", default=None)
    p.add_argument("--method", default="fedfsl")
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="runs/run_memory")
    p.add_argument("--results", default="benchmarks/results/run_memory.json")
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES), help="default: all three")
    p.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.child:
        _child(opts)
        return 0
    results = []
    for mode in opts.modes:
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--child", mode]
        print(f"[{mode}] {' '.join(cmd[1:])}", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            print(f"run_memory: error: the {mode} run failed:\n" + "\n".join(tail), file=sys.stderr)
            return 1
        result = json.loads(lines[-1][len("RESULT ") :])
        rows = read_rows(Path(opts.out) / mode / "run")
        result["updates_max"] = max(int(r["updates_accepted"]) for r in rows)
        result["test_acc"] = [r.get("test_acc", "") for r in rows]
        with open(Path(opts.out) / mode / "run" / "client_costs.csv", newline="") as f:
            costs = [r for r in csv.DictReader(f) if r["phase"] == "train"]
        result["client_training_s"] = round(sum(float(r["compute_s"]) for r in costs), 1)
        results.append(result)
        print(
            f"[{mode}] peak RSS {result['peak_rss_gb']} GB, {result['wall_s']} s, final {result['final']}", flush=True
        )
    first = results[0]
    report = {
        "command": "benchmarks/run_memory.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "dataset": opts.dataset,
        "method": opts.method,
        "seed": opts.seed,
        "rounds": opts.rounds,
        "runs": results,
        "same_metrics": all(r["test_acc"] == first["test_acc"] and r["final"] == first["final"] for r in results),
    }
    Path(opts.results).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.results).write_text(json.dumps(report, indent=2) + "\n")
    peaks = ", ".join(
        f"{r['mode']} {r['peak_rss_gb']} GB ({r['wall_s']} s, clients' training {r['client_training_s']} s)"
        for r in results
    )
    print(f"peak RSS: {peaks}; same metrics: {report['same_metrics']}; written: {opts.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
