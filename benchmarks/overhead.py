"""Runtime overhead: the same local training, raw and through each runtime.

One config (run_configs/overhead.yaml: FedCLS on BBC News, the offline MiniLM, gold labels on
every client so each played client trains a few batches) runs through the in-process runtime,
through `mpirun -np 3` (a server and two workers) and as a cross-silo run over gRPC on loopback
(a server and two silos); each writes metrics.csv with the round's wall time and its clients.
Then the same (round, client) trainings run raw: the method's own `local_train` (tokenize,
forward, backward, optimizer steps) called directly on each played client's data, no runtime
around it, timed one by one, in as many processes as the runtime has workers, side by side,
each with the clients the runtime gave that worker:

    overhead = sum of round walls / sum over rounds of the busiest worker's raw trainings - 1

Workers: in-process one; mpirun two, the runtime's round-robin split (`assign_slots`);
cross-silo two, device c on silo 1 + c % 2. Raw workers run side by side because the
runtime's workers do: two trainings on two cores run slower than one alone, and that is the
machine, not the runtime.

Each runtime runs `--repeats` times, alternating with its raw pass (run, raw, run, raw), and
the figure pools them (sum of walls / sum of baselines), so the machine's drift over minutes
falls on both sides. A second figure divides by the training time the runtime measured around
each task in the same run (client_costs.csv `compute_s`): the share spent outside training
(sending, validating, aggregating, bookkeeping).

Round walls of the last round are left out (it evaluates on the test split; a runtime's
evaluation is not training overhead), as are the first `--warmup` rounds. Everything runs
with one torch thread per process. Targets: <= 10% in-process, <= 25% mpirun.

    .venv/bin/python benchmarks/overhead.py                     # every runtime, table to stdout
    .venv/bin/python benchmarks/overhead.py --runtimes inprocess --rounds 4 --repeats 1
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
from typing import Callable

# torch and the runtime are imported where they are used: a raw worker whose spec or config is
# bad fails in a second, before the 10 s those imports take
from fedml_fes.config import add_set_argument, load_config, parse_overrides
from fedml_fes.errors import FesError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CF = "run_configs/overhead.yaml"
RUNTIMES = ("inprocess", "mpirun", "cross_silo", "cross_silo_plain")
WORKERS = {"inprocess": 1, "mpirun": 2, "cross_silo": 2, "cross_silo_plain": 2}
READY_TIMEOUT_S = 300.0

Round = tuple[int, list[int], float]  # (round, played clients, wall seconds)
Split = Callable[[list[int]], list[list[int]]]  # a round's clients -> each worker's clients


def mpirun_split(clients: list[int], workers: int = 2) -> list[list[int]]:
    """The MPI runtime's split of a round's training tasks: round-robin in client-id order."""
    from fedml_fes.runtime.payload import assign_slots
    from fedml_fes.runtime.tasks import ClientTask

    plan = assign_slots([ClientTask(0, c, "train", 0) for c in clients], workers)
    return [[t.client_id for t in plan[s]] for s in range(workers)]


def cross_silo_split(clients: list[int], silos: int = 2) -> list[list[int]]:
    """The cross-silo runtime's: each device on its owner silo (ranks 1..silos)."""
    from fedml_fes_plugins.cross_silo.config import owner_rank

    return [[c for c in clients if owner_rank(c, silos) == rank] for rank in range(1, silos + 1)]


def split_for(runtime: str) -> Split:
    if runtime == "inprocess":
        return lambda clients: [list(clients)]
    return mpirun_split if runtime == "mpirun" else cross_silo_split


def baseline(kept: list[Round], times: dict, split: Split) -> float:
    """The rounds' training alone: per round, the busiest worker's trainings one after another."""
    return sum(
        max(sum(times[(rnd, c)] for c in share) for share in split(clients) if share) if clients else 0.0
        for rnd, clients, _ in kept
    )


def worker_tasks(rounds: list[Round], split: Split, workers: int) -> list[list[tuple[int, int]]]:
    """Each raw worker's (round, client) trainings, in round order."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(workers)]
    for rnd, clients, _ in rounds:
        for w, share in enumerate(split(clients)):
            out[w] += [(rnd, c) for c in share]
    return out


def _rounds(run_dir: Path) -> list[Round]:
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    return [(int(r["round"]), [int(c) for c in r["clients"].split()], float(r["round_wall_s"])) for r in rows]


def run_inprocess(cf: str, run_dir: Path, sets: list[str]) -> Path:
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    cfg = load_config(cf, parse_overrides(sets))
    run_dir = make_run_dir(cfg, str(run_dir))
    run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)
    return run_dir


def run_mpirun(cf: str, run_dir: Path, sets: list[str]) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "fedml_fes_plugins.cli.main",
        "mpirun",
        "-np",
        "3",
        "--cf",
        str(Path(cf).resolve()),
        "--run-dir",
        str(run_dir.resolve()),
    ] + [a for s in sets for a in ("--set", s)]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return run_dir


def run_cross_silo(cf: str, run_dir: Path, sets: list[str], tls: bool = True) -> Path:
    """Server + 2 silos over FedML's gRPC on fresh loopback ports (`cross-silo-local
    --local-services`): mutual TLS with a throw-away CA, or plaintext (`--no-tls`)."""
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    silo = ["common_args.training_type=cross_silo", "comm_args.backend=GRPC", "comm_args.silo_num=2"]
    job = LocalJob(
        str(Path(cf).resolve()), sets + silo, str(run_dir.resolve()), local_services=True, echo=lambda _l: None
    )
    run_local(job, tls=tls)
    return run_dir


RUNNERS = {
    "inprocess": run_inprocess,
    "mpirun": run_mpirun,
    "cross_silo": run_cross_silo,
    "cross_silo_plain": lambda cf, run_dir, sets: run_cross_silo(cf, run_dir, sets, tls=False),
}


def codec_times(cf: str, sets: list[str], scratch: Path, repeats: int = 5) -> dict:
    """One update of this config's trainable tensors, encoded and decoded: FES1 (what crosses
    gRPC and S3 now) against pickle (what FedML 0.9.6 sends), best of `repeats`."""
    import pickle

    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes.tuning.params import trainable_state
    from fedml_fes_plugins.adapters.codec import decode, encode

    cfg = load_config(cf, parse_overrides(sets))
    job = build_job(cfg, "server", make_run_dir(cfg, str(scratch)))
    params = {"model_params": trainable_state(job.model)}

    def best(fn: Callable[[], object]) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    blob = encode(params)
    return {
        "payload_mb": round(len(blob) / 1e6, 3),
        "fes1_s": round(best(lambda: decode(encode(params), len(blob) + 1)), 4),
        "pickle_s": round(best(lambda: pickle.loads(pickle.dumps(params))), 4),
    }


def raw_worker(spec_path: str) -> int:
    """One raw worker (a child process): build the job, say ready, wait for go, time each task."""
    spec = json.loads(Path(spec_path).read_text())
    cfg = load_config(spec["cf"], parse_overrides(spec["sets"]))
    import torch

    from fedml_fes.runtime.job import build_job, configure_torch
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes.runtime.tasks import task_seed

    configure_torch(cfg)
    job = build_job(cfg, "server", make_run_dir(cfg, spec["scratch"]))
    Path(spec["ready"]).touch()
    go, deadline = Path(spec["go"]), time.monotonic() + READY_TIMEOUT_S
    while not go.exists():  # the parent says go once every worker is ready; it may have died
        if time.monotonic() > deadline:
            raise FesError(f"no start signal within {READY_TIMEOUT_S:g}s")
        time.sleep(0.01)
    times = []
    for rnd, cid in spec["tasks"]:
        seed = task_seed(cfg.common.random_seed, rnd, cid)
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        job.method.local_train(
            job.model,
            job.tokenizer,
            job.data.clients[cid],
            cfg.for_round(rnd, job.method.uses_pseudo, False),
            gen,
            job.device,
            None,
        )
        times.append([rnd, cid, time.perf_counter() - start])
    Path(spec["out"]).write_text(json.dumps(times))
    return 0


def raw_times(cf: str, sets: list[str], tasks: list[list[tuple[int, int]]], scratch: Path) -> dict:
    """Seconds of each (round, client)'s training called directly, no runtime: one process per
    worker, started together once every one has loaded its model."""
    scratch.mkdir(parents=True, exist_ok=True)
    go = scratch / "go"
    procs, outs, readies = [], [], []
    for w, mine in enumerate(tasks):
        spec = {
            "cf": cf,
            "sets": sets,
            "tasks": mine,
            "scratch": str(scratch / f"job{w}"),
            "ready": str(scratch / f"ready{w}"),
            "go": str(go),
            "out": str(scratch / f"times{w}.json"),
        }
        path = scratch / f"spec{w}.json"
        path.write_text(json.dumps(spec))
        procs.append(subprocess.Popen([sys.executable, __file__, "--raw-worker", str(path)], cwd=REPO))
        outs.append(Path(spec["out"]))
        readies.append(Path(spec["ready"]))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(r.exists() for r in readies):
        if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise SystemExit(f"overhead: a raw worker failed before starting (see {scratch})")
        time.sleep(0.05)
    go.touch()
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"overhead: a raw worker failed (see {scratch})")
    return {(rnd, cid): s for out in outs for rnd, cid, s in json.loads(out.read_text())}


def in_run_compute(run_dir: Path) -> dict:
    """Seconds of each (round, client)'s training as the runtime measured it (client_costs.csv)."""
    rows = csv.DictReader((run_dir / "client_costs.csv").open())
    return {(int(r["round"]), int(r["client_id"])): float(r["compute_s"]) for r in rows if r["phase"] == "train"}


def pair_figures(run_dir: Path, kept: list[Round], raw: dict, split: Split) -> dict:
    """One (run, raw pass) pair: round walls, the raw baseline, the training the run measured."""
    return {
        "wall_s": sum(w for _, _, w in kept),
        "raw_s": baseline(kept, raw, split),
        "in_run_train_s": baseline(kept, in_run_compute(run_dir), split),
        "round_wall_median_s": statistics.median(w for _, _, w in kept),
        "rounds_measured": len(kept),
        "run_dir": str(run_dir),
    }


def pooled(name: str, pairs: list[dict]) -> dict:
    """The runtime's figures over its pairs (sums of walls over sums of baselines), and each pair's."""
    wall, raw, inside = (sum(p[k] for p in pairs) for k in ("wall_s", "raw_s", "in_run_train_s"))
    return {
        "workers": WORKERS[name],
        "repeats": len(pairs),
        "wall_s": round(wall, 3),
        "raw_s": round(raw, 3),
        "in_run_train_s": round(inside, 3),
        "overhead": round(wall / raw - 1, 4),
        "orchestration": round(wall / inside - 1, 4),
        "pairs": [
            {
                **p,
                "overhead": round(p["wall_s"] / p["raw_s"] - 1, 4),
                "orchestration": round(p["wall_s"] / p["in_run_train_s"] - 1, 4),
                **{k: round(p[k], 3) for k in ("wall_s", "raw_s", "in_run_train_s", "round_wall_median_s")},
            }
            for p in pairs
        ],
    }


def measure(name: str, cf: str, sets: list[str], out: Path, repeats: int, warmup: int) -> dict:
    """`repeats` pairs of (run, raw pass), pooled."""
    split = split_for(name)
    pairs = []
    for i in range(repeats):
        run_dir = RUNNERS[name](cf, out / f"{name}-{i}", sets)
        kept = _rounds(run_dir)[warmup:-1]
        raw = raw_times(cf, sets, worker_tasks(kept, split, WORKERS[name]), out / f"raw-{name}-{i}")
        pairs.append(pair_figures(run_dir, kept, raw, split))
    return pooled(name, pairs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    p.add_argument("--cf", default=DEFAULT_CF)
    p.add_argument("--out", default="runs/overhead")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1, help="first rounds left out (model load, first-touch costs)")
    p.add_argument("--repeats", type=int, default=2, help="(run, raw pass) pairs per runtime, pooled")
    p.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=RUNTIMES)
    p.add_argument("--json", default="", help="also write the figures here")
    add_set_argument(p, "override a config key for every run, e.g. --set model_args.tuning=bias")
    p.add_argument("--raw-worker", default="", help=argparse.SUPPRESS)  # internal: one raw worker process
    opts = p.parse_args(argv)
    if opts.raw_worker:
        try:
            return raw_worker(opts.raw_worker)
        except FesError as e:  # one line; the parent names the folder
            print(f"overhead raw worker: {e}", file=sys.stderr)
            return 1
    if opts.rounds < opts.warmup + 2:
        p.error(f"--rounds {opts.rounds} leaves no round to measure after {opts.warmup} warm-up round(s) and the last")
    out = Path(opts.out) / time.strftime("%Y%m%d-%H%M%S")
    sets = [
        f"train_args.comm_round={opts.rounds}",
        f"train_args.frequency_of_the_test={opts.rounds}",
        "common_args.torch_threads=1",
    ] + opts.set
    results = {}
    if "cross_silo" in opts.runtimes:
        results["codec"] = c = codec_times(opts.cf, sets, out / "codec")
        print(
            f"one update ({c['payload_mb']:.1f} MB): FES1 encode+decode {c['fes1_s'] * 1e3:.1f} ms, "
            f"pickle dumps+loads {c['pickle_s'] * 1e3:.1f} ms",
            flush=True,
        )
    for name in opts.runtimes:
        r = results[name] = measure(name, opts.cf, sets, out, opts.repeats, opts.warmup)
        each = ", ".join(f"{q['overhead']:+.1%}" for q in r["pairs"])
        if opts.json:  # after each runtime: a later failure loses nothing measured
            Path(opts.json).write_text(json.dumps(results, indent=2) + "\n")
        print(
            f"{name} ({r['workers']} worker(s), {r['repeats']} x {r['pairs'][0]['rounds_measured']} rounds): "
            f"runtime {r['wall_s']:.2f}s vs raw {r['raw_s']:.2f}s -> overhead {r['overhead']:+.1%} (each: {each}); "
            f"vs the training the run itself measured ({r['in_run_train_s']:.2f}s): {r['orchestration']:+.1%}",
            flush=True,
        )
    if "cross_silo" in results and "cross_silo_plain" in results:
        tls, plain = results["cross_silo"]["wall_s"], results["cross_silo_plain"]["wall_s"]
        results["tls_vs_plaintext"] = round(tls / plain - 1, 4)
        print(f"cross-silo gRPC, mutual TLS + FES1 against plaintext + FES1: round walls {tls / plain - 1:+.1%}")
        if opts.json:
            Path(opts.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
