"""Runtime overhead: the same local training, raw and through each runtime (issue 13, item 5).

One config (run_configs/overhead.yaml: FedCLS on BBC News, the offline MiniLM, gold labels on
every client so each played client trains a few batches) runs through the in-process runtime
and through `mpirun -np 3` (a server and two workers); each writes metrics.csv with the
round's wall time and its clients. Then the same (round, client) trainings run raw: the
method's own `local_train` (tokenize, forward, backward, optimizer steps) called directly on
each played client's data, no runtime around it, timed one by one.

    in-process overhead = sum of round walls / sum of raw trainings - 1
    mpirun overhead     = sum of round walls / sum over rounds of the busier worker's raw
                          trainings (the same round-robin split the runtime uses) - 1

Raw trainings are timed in a separate process after the run, so machine drift between the two
shows up in that figure; the second figure divides by the training time the runtime measured
around each task in the same run (client_costs.csv `compute_s`): the share spent outside
training (sending, validating, aggregating, bookkeeping).

Round walls of the last round are left out (it evaluates on the test split; a runtime's
evaluation is not training overhead), as are the first `--warmup` rounds. Everything runs
with one torch thread per process. Targets (issue 13): <= 10% in-process, <= 25% mpirun.

    .venv/bin/python benchmarks/overhead.py                     # both runtimes, table to stdout
    .venv/bin/python benchmarks/overhead.py --runtimes inprocess --rounds 4
    .venv/bin/python benchmarks/overhead.py --set train_args.method=prompt_only --set model_args.tuning=bias
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from fedml_fes.config import load_config, parse_overrides
from fedml_fes.runtime.job import build_job, configure_torch, make_run_dir
from fedml_fes.runtime.payload import assign_slots
from fedml_fes.runtime.tasks import ClientTask, task_seed

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CF = "run_configs/overhead.yaml"


def _rounds(run_dir: Path) -> list[tuple[int, list[int], float]]:
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    return [(int(r["round"]), [int(c) for c in r["clients"].split()], float(r["round_wall_s"])) for r in rows]


def run_inprocess(cf: str, out: Path, overrides: dict) -> Path:
    from fedml_fes_plugins.runtimes.inprocess import run_in_process
    cfg = load_config(cf, overrides)
    run_dir = make_run_dir(cfg, str(out / "inprocess"))
    run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)
    return run_dir


def run_mpirun(cf: str, out: Path, sets: list[str]) -> Path:
    run_dir = out / "mpirun"
    cmd = [sys.executable, "-m", "fedml_fes_plugins.cli.main", "mpirun", "-np", "3", "--cf", str(Path(cf).resolve()),
           "--run-dir", str(run_dir.resolve())] + [a for s in sets for a in ("--set", s)]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return run_dir


def raw_times(cf: str, overrides: dict, played: list[tuple[int, list[int]]], scratch: Path) -> dict:
    """Seconds of each (round, client)'s training called directly, no runtime."""
    cfg = load_config(cf, overrides)
    configure_torch(cfg)
    job = build_job(cfg, "server", make_run_dir(cfg, str(scratch)))
    times = {}
    for rnd, clients in played:
        for cid in clients:
            seed = task_seed(cfg.common.random_seed, rnd, cid)
            torch.manual_seed(seed)
            gen = torch.Generator().manual_seed(seed)
            start = time.perf_counter()
            job.method.local_train(job.model, job.tokenizer, job.data.clients[cid],
                                   cfg.for_round(rnd, job.method.uses_pseudo, False), gen, job.device, None)
            times[(rnd, cid)] = time.perf_counter() - start
    return times


def in_run_compute(run_dir: Path) -> dict:
    """Seconds of each (round, client)'s training as the runtime measured it (client_costs.csv)."""
    rows = csv.DictReader((run_dir / "client_costs.csv").open())
    return {(int(r["round"]), int(r["client_id"])): float(r["compute_s"]) for r in rows if r["phase"] == "train"}


def baseline(kept, times: dict, workers: int | None) -> float:
    """The rounds' training alone: every client one after another (in-process), or the busier
    worker's clients (the same round-robin split the runtime uses)."""
    base = 0.0
    for rnd, clients, _ in kept:
        if workers is None:
            base += sum(times[(rnd, c)] for c in clients)
        else:
            tasks = [ClientTask(rnd, c, "train", 0) for c in clients]
            base += max(sum(times[(rnd, t.client_id)] for t in ts) for ts in assign_slots(tasks, workers).values())
    return base


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--cf", default=DEFAULT_CF)
    p.add_argument("--out", default="runs/overhead")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1, help="first rounds left out (model load, first-touch costs)")
    p.add_argument("--runtimes", nargs="+", default=["inprocess", "mpirun"], choices=["inprocess", "mpirun"])
    p.add_argument("--json", default="", help="also write the figures here")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config key for every run, e.g. --set model_args.tuning=bias")
    opts = p.parse_args(argv)
    out = Path(opts.out) / time.strftime("%Y%m%d-%H%M%S")
    sets = [f"train_args.comm_round={opts.rounds}", f"train_args.frequency_of_the_test={opts.rounds}",
            "common_args.torch_threads=1"]
    sets += opts.set
    overrides = parse_overrides(sets)
    results = {}
    for name in opts.runtimes:
        run_dir = run_inprocess(opts.cf, out, overrides) if name == "inprocess" else run_mpirun(opts.cf, out, sets)
        rounds = _rounds(run_dir)
        raw = raw_times(opts.cf, overrides, [(r, c) for r, c, _ in rounds], out / f"raw-{name}")
        kept = rounds[opts.warmup:-1]
        workers = None if name == "inprocess" else 2
        wall = sum(w for _, _, w in kept)
        base, inside = baseline(kept, raw, workers), baseline(kept, in_run_compute(run_dir), workers)
        results[name] = {"rounds_measured": len(kept), "wall_s": round(wall, 3), "raw_s": round(base, 3),
                         "in_run_train_s": round(inside, 3), "overhead": round(wall / base - 1, 4),
                         "orchestration": round(wall / inside - 1, 4),
                         "round_wall_median_s": round(statistics.median(w for _, _, w in kept), 3),
                         "run_dir": str(run_dir)}
        print(f"{name}: {len(kept)} rounds, runtime {wall:.2f}s vs raw {base:.2f}s -> overhead "
              f"{wall / base - 1:+.1%}; vs the training the run itself measured ({inside:.2f}s): "
              f"{wall / inside - 1:+.1%}", flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
