"""Traffic of FedBERT split learning against FedAvg of the whole model, measured.

    .venv/bin/python benchmarks/split_traffic.py [--rounds 1] [--out benchmarks/results/split_traffic.json]
    .venv/bin/python benchmarks/split_traffic.py --rounds 5 --only mlm_parallel mlm_sequential --merge

Runs `run_configs/split_mlm_bbc.yaml` and `run_configs/split_cls_bbc.yaml` in-process (BBC
News, offline MiniLM, 4 clients per round, 10 split steps each, batch 16, 64 tokens) for each
schedule (parallel, sequential; MLM also with float16 activations on the wire) and reads back
the bytes the server counted: every payload's length as sent (`fedml_fes.splitfed.wire`). The
FedAvg column is the length of the whole model's parameters packed in the same wire format,
once down and once up per client per round (what FedAvg of the whole model moves), and is
checked against a real FedAvg round of the same setting on the project's FedAvg runtime
(`fedbert_mlm` for MLM, `fedcls` for classification; its metrics.csv `bytes_down` and
`bytes_up`, raw tensor bytes without a header). The break-even is the number of split steps
per client per round at which split learning has moved as many bytes as FedAvg. After one
round accuracy says nothing; `--rounds N --merge` reruns some variants (and their task's
FedAvg) for N rounds and replaces their rows, to compare the schedules' masked-token accuracy
with FedAvg's after the same number of optimizer steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = [  # (name, config, overrides)
    ("mlm_parallel", "split_mlm_bbc.yaml", {"split_args.schedule": "parallel"}),
    ("mlm_sequential", "split_mlm_bbc.yaml", {"split_args.schedule": "sequential"}),
    (
        "mlm_parallel_fp16",
        "split_mlm_bbc.yaml",
        {"split_args.schedule": "parallel", "split_args.wire_dtype": "float16"},
    ),
    ("cls_parallel", "split_cls_bbc.yaml", {"split_args.schedule": "parallel"}),
    ("cls_sequential", "split_cls_bbc.yaml", {"split_args.schedule": "sequential"}),
]


def measure(name: str, config: str, overrides: dict, rounds: int, runs: Path) -> dict:
    from fedml_fes.config import load_config
    from fedml_fes.splitfed.runtime import make_split_run_dir, run_in_process

    cfg = load_config(
        ROOT / "run_configs" / config,
        {
            **overrides,
            "train_args.comm_round": rounds,
            "split_args.save_model": False,
            "common_args.output_dir": str(runs),
        },
    )
    run_dir = make_split_run_dir(cfg, str(runs / f"{name}_r{rounds}"))
    start = time.time()
    summary = run_in_process(cfg, run_dir, echo=lambda line: print(f"  [{name}] {line}", flush=True))
    traffic = summary["traffic_bytes"]
    messages = summary["traffic_messages"]
    steps = messages["activations_up"]
    clients_rounds = messages["model_pull_up"]  # one pull per client per round
    per_step = {k: traffic[k] / steps for k in ("activations_up", "activations_down", "gradients_up", "gradients_down")}
    step_total = sum(per_step.values())
    model_per_client_round = (
        traffic["model_pull_up"] + traffic["model_pull_down"] + traffic["model_push_up"] + traffic["model_push_down"]
    ) / clients_rounds
    split_per_client_round = sum(traffic.values()) / clients_rounds
    fedavg = 2 * summary["full_model_bytes"]
    s = cfg.split_args
    return {
        "variant": name,
        "task": s.task,
        "schedule": s.schedule,
        "wire_dtype": s.wire_dtype,
        "model": cfg.model.model,
        "batch_size": cfg.train.batch_size,
        "max_seq_length": cfg.model.max_seq_length,
        "local_steps": s.local_steps,
        "clients_per_round": cfg.train.client_num_per_round,
        "rounds": rounds,
        "steps_measured": steps,
        "bytes_per_step": step_total,
        "bytes_per_step_by_kind": per_step,
        "client_part_bytes_per_client_round": model_per_client_round,
        "split_bytes_per_client_round": split_per_client_round,
        "split_bytes_per_round": sum(traffic.values()) / rounds,
        "fedavg_bytes_per_client_round": fedavg,
        "fedavg_bytes_per_round": fedavg * cfg.train.client_num_per_round,
        "split_over_fedavg": split_per_client_round / fedavg,
        "break_even_steps": (fedavg - model_per_client_round) / step_total,
        "client_part_params": summary["client_part_params"],
        "body_params": summary["body_params"],
        "full_model_bytes": summary["full_model_bytes"],
        "final_metric": {summary["primary_metric"]: summary["final"]},
        "wall_s": round(time.time() - start, 1),
        "run_dir": str(run_dir),
    }


FEDAVG = {
    "mlm": ("split_mlm_bbc.yaml", {"train_args.method": "fedbert_mlm", "mlm_args.local_steps": 10}),
    "classification": ("split_cls_bbc.yaml", {"train_args.method": "fedcls", "train_args.epochs": 1}),
}


def measure_fedavg(task: str, runs: Path, rounds: int) -> dict:
    """One FedAvg round of the whole model on the project's in-process FedAvg runtime; bytes per client."""
    import csv

    from fedml_fes.config import load_config
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    config, overrides = FEDAVG[task]
    cfg = load_config(
        ROOT / "run_configs" / config,
        {
            **overrides,
            "train_args.comm_round": rounds,
            "common_args.output_dir": str(runs),
            "common_args.cache_dir": str(runs / f"cache_{task}"),
        },
    )
    run_dir = make_run_dir(cfg, str(runs / f"fedavg_{task}_r{rounds}"))
    start = time.time()
    summary = run_in_process(
        cfg, run_dir, progress=False, echo=lambda line: print(f"  [fedavg_{task}] {line}", flush=True)
    )
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    clients = sum(int(r["updates_accepted"]) for r in rows)
    return {
        "method": cfg.train.method,
        "rounds": rounds,
        "client_updates": clients,
        "bytes_down_per_client_round": sum(int(r["bytes_down"]) for r in rows) / clients,
        "bytes_up_per_client_round": sum(int(r["bytes_up"]) for r in rows) / clients,
        "final_metric": {summary["primary_metric"]: summary["final"]},
        "wall_s": round(time.time() - start, 1),
        "run_dir": str(run_dir),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=1, help="rounds per variant (traffic per step does not depend on it)")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "split_traffic", help="where the runs go")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "split_traffic.json")
    p.add_argument("--only", nargs="*", default=None, help="variant names (default: all)")
    p.add_argument("--merge", action="store_true", help="replace these variants' rows in --out, keep the others")
    opts = p.parse_args()
    rows = []
    for name, config, overrides in VARIANTS:
        if opts.only and name not in opts.only:
            continue
        rows.append(measure(name, config, overrides, opts.rounds, opts.runs))
        r = rows[-1]
        print(
            f"{name}: {r['bytes_per_step'] / 1e3:.1f} kB/step, "
            f"split {r['split_bytes_per_client_round'] / 1e6:.2f} MB "
            f"vs FedAvg {r['fedavg_bytes_per_client_round'] / 1e6:.2f} MB per client per round, "
            f"break-even {r['break_even_steps']:.0f} steps",
            flush=True,
        )
    fedavg = {}
    for task in sorted({r["task"] for r in rows}):
        fedavg[f"{task}_r{opts.rounds}"] = f = measure_fedavg(task, opts.runs, opts.rounds)
        print(
            f"FedAvg ({f['method']}) measured: {f['bytes_down_per_client_round'] / 1e6:.2f} MB down + "
            f"{f['bytes_up_per_client_round'] / 1e6:.2f} MB up per client per round, "
            f"final {f['final_metric']}",
            flush=True,
        )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for r in rows:
        r["measured"] = stamp
    if opts.merge and opts.out.is_file():
        old = json.loads(opts.out.read_text())
        key = lambda r: (r["variant"], r["rounds"])  # noqa: E731
        rows = [r for r in old["rows"] if key(r) not in {key(x) for x in rows}] + rows
        fedavg = {**old.get("fedavg_runtime", {}), **fedavg}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    # run folders as paths from the checkout's root, never this machine's
    from fedml_fes_plugins.bench.paths import portable_text

    opts.out.write_text(portable_text(json.dumps({"rows": rows, "fedavg_runtime": fedavg}, indent=2), ROOT))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
