"""FedBERT split learning under mpirun: rank 0 holds the server body, ranks 1..N-1 play clients.

    fedml-fes split -np 3 --cf run_configs/split_mlm_bbc.yaml
    mpirun -np 3 python -m fedml_fes_plugins.runtimes.split_mpi --cf run_configs/split_mlm_bbc.yaml

The ranks drive the same `SplitRun` (server) and `ClientSide` (clients) objects as the
in-process runtime (`fedml_fes.splitfed.runtime`); only the link differs: each client message
is a (kind, client id, payload bytes) tuple sent to rank 0, which answers with the reply's
bytes. The server counts the payloads it receives and sends, so traffic and metrics rows are
those of `fedml-fes split` in-process for the same config and seed (tested).

Why mpi4py and not FedML. FedML 0.9.6's split_nn MPI simulation
(`fedml/simulation/mpi/split_nn/`) is the two-part SplitNN: the client sends its activations
*with the labels* to the server (`client_manager.py:81-86`, `MSG_ARG_KEY_ACTS: (acts,
labels)`), the server computes the loss (`server.py:42-51`), and clients take turns in a ring
passing a semaphore (`client_manager.py:35-66`), so only the sequential schedule exists. FedBERT
keeps the head and the labels on the client (a U-shaped split: four payloads per step) and
needs the parallel schedule; a shim would replace every message handler of it. FedML's
`FedMLCommManager` would carry the messages, but a split step is a blocking request and reply
in the middle of a backward pass, while FedML's managers run handlers on a receive thread fed
by a polling loop (`plugins/adapters/mpi_transport.py` names those lines); the client would
need its own wait on top. Plain mpi4py point-to-point messages fit the protocol as it is, and
ranks start without importing FedML (and torchvision). Waits probe with a backing-off sleep
instead of MPI's busy poll, so a waiting rank leaves the cores to the ones computing.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fedml_fes.config import FesConfig, load_config, parse_overrides
from fedml_fes.errors import FesError, one_line
from fedml_fes_plugins.adapters.hard_exit import abort_mpi
from fedml_fes_plugins.runtimes.rank import join_world, rank_parser

if TYPE_CHECKING:  # the launcher is imported by the launch only: a rank never needs it
    from fedml_fes_plugins.runtimes.launcher import MpirunJob

TAG = "@split "
MODULE = "fedml_fes_plugins.runtimes.split_mpi"  # the ranks' module, under `fedml-fes split -np N`
TAG_REQUEST, TAG_REPLY, TAG_CONTROL = 11, 12, 13
PROBE_MIN_S, PROBE_MAX_S = 0.0002, 0.01


def _recv(comm, source: int, tag: int) -> tuple[Any, int]:
    """(message, source rank), waiting with a backing-off probe instead of a busy poll."""
    from mpi4py import MPI

    status = MPI.Status()
    wait = PROBE_MIN_S
    while not comm.Iprobe(source=source, tag=tag, status=status):
        time.sleep(wait)
        wait = min(wait * 2, PROBE_MAX_S)
    src = status.Get_source()
    return comm.recv(source=src, tag=tag), src


class MpiLink:
    """A client rank's link: the payload goes to rank 0, the reply's bytes come back."""

    def __init__(self, comm):
        self.comm = comm

    def exchange(self, kind: str, client_id: int, payload: bytes) -> bytes:
        self.comm.send((kind, client_id, payload), dest=0, tag=TAG_REQUEST)
        return _recv(self.comm, 0, TAG_REPLY)[0]


def _serve(comm, server, expected: int) -> list[dict[str, Any]]:
    """Answer client messages until `expected` workers report their clients done."""
    reports: list[dict[str, Any]] = []
    done = 0
    while done < expected:
        (kind, client_id, payload), src = _recv(comm, -1, TAG_REQUEST)  # -1: MPI.ANY_SOURCE
        if kind == "done":
            reports.extend(payload)
            done += 1
        elif kind == "error":
            raise FesError(f"rank {src}: {payload}")
        else:
            comm.send(server.handle(kind, client_id, payload), dest=src, tag=TAG_REPLY)
    return reports


def serve_rounds(cfg: FesConfig, comm, run, emit: Callable[[str], None]) -> dict[str, Any]:
    """Rank 0: open each round, hand its clients to worker ranks (round-robin), answer their
    messages, close it. Parallel: every worker plays its share at once; sequential: one client
    at a time, in the round's order, on the one body."""
    from fedml_fes.report.metrics import format_row

    workers = list(range(1, comm.Get_size()))
    for r in range(cfg.train.comm_round):
        clients = run.begin_round(r)
        plan = [(workers[i % len(workers)], c) for i, c in enumerate(clients)]
        if cfg.split_args.schedule == "parallel":
            shares: dict[int, list[int]] = {}
            for w, c in plan:
                shares.setdefault(w, []).append(c)
            for w, cs in shares.items():
                comm.send(("play", r, cs), dest=w, tag=TAG_CONTROL)
            reports = _serve(comm, run.server, len(shares))
        else:
            reports = []
            for w, c in plan:
                comm.send(("play", r, [c]), dest=w, tag=TAG_CONTROL)
                reports += _serve(comm, run.server, 1)
        row = run.end_round(r, reports)
        emit(format_row(row, run.metric) + f"  bytes/step={row['bytes_per_step']:.0f}")
    return run.finish()


def play_clients(comm, side) -> None:
    """Ranks 1..N-1: play the clients rank 0 names, round after round, until told to stop."""
    link = MpiLink(comm)
    while True:
        msg, _ = _recv(comm, 0, TAG_CONTROL)
        if msg[0] == "stop":
            return
        _, round_idx, clients = msg
        try:
            reports = [side.client.play(round_idx, c, link) for c in clients]
        except Exception as e:  # rank 0 names it, writes summary.json and ends every rank
            comm.send(("error", -1, f"round {round_idx}: {one_line(e)}"), dest=0, tag=TAG_REQUEST)
            continue
        comm.send(("done", -1, reports), dest=0, tag=TAG_REQUEST)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return rank_parser(
        "fedml_fes_plugins.runtimes.split_mpi",
        "One rank of a split-learning run under mpirun (rank 0 = server body).",
        "run config YAML (split_args)",
    ).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    world = join_world(TAG, opts.tagged_output)
    comm, rank, size, emit, prefix = world.comm, world.rank, world.size, world.emit, world.prefix

    run = None
    try:
        cfg = load_config(opts.cf, parse_overrides(opts.set))
        if size < 2:
            raise FesError(
                f"split learning under mpirun needs at least 2 processes (1 server + >= 1 client), got -np {size}"
            )
        logging.basicConfig(level=cfg.tracking_args.log_level)
        from fedml_fes.splitfed.parts import split_model
        from fedml_fes.splitfed.runtime import ClientSide, SplitRun, make_split_run_dir, prepare

        run_dir = str(make_split_run_dir(cfg, opts.run_dir)) if rank == 0 else None
        run_dir = Path(comm.bcast(run_dir, root=0))
        data, oracle, tokenizer, model, device = prepare(cfg, role="server" if rank == 0 else "client")
        if rank == 0:
            emit(f"run directory: {run_dir}")
            run = SplitRun(cfg, run_dir, data, tokenizer, model, device)
            summary = serve_rounds(cfg, comm, run, emit)
            for w in range(1, size):
                comm.send(("stop",), dest=w, tag=TAG_CONTROL)
            emit(f"done: {run.metric}={summary.get('final')} (summary.json in {run_dir})")
            return 0
        part, _ = split_model(model, cfg.split_args.task, cfg.split_args.client_layers)
        play_clients(comm, ClientSide(cfg, data, oracle, tokenizer, part, device))
        return 0
    except Exception as e:  # one line, summary.json marked failed, and no rank left waiting
        error = one_line(e) if rank == 0 else f"rank {rank}: {one_line(e)}"
        if run is not None:
            run.finish("failed", error)
        print(f"{prefix}error: {error}", flush=True)
        logging.getLogger(__name__).debug("rank %s failed", rank, exc_info=True)
        abort_mpi(comm, 1)
    return 1


# ---- the launcher (`fedml-fes split -np N`) ----


def run_split_mpirun(job: MpirunJob, run_dir: Path) -> dict[str, Any]:
    """Run the job's ranks (this module's), show their lines, keep mpirun's whole output in
    <run_dir>/mpirun.log; returns summary.json's content, raises FesError with the ranks'
    error line."""
    import json

    from fedml_fes_plugins.runtimes.launcher import run_ranks

    cmd = job.command(run_dir, module=MODULE)
    run_dir = Path(run_dir)
    with (run_dir / "mpirun.log").open("w") as log:
        rc, error = run_ranks(job, cmd, log, TAG)
    if rc != 0 or error:
        raise FesError(error or f"mpirun exited with code {rc} (see {run_dir / 'mpirun.log'})")
    return json.loads((run_dir / "summary.json").read_text())


def run_split_command(cfg: FesConfig, opts: argparse.Namespace) -> dict[str, Any]:
    """`fedml-fes split`: in-process without -np, else under mpirun with -np processes."""
    from fedml_fes.model_files import resolve_model_path
    from fedml_fes.splitfed.runtime import make_split_run_dir, run_in_process
    from fedml_fes_plugins.runtimes.launcher import MpirunJob

    resolve_model_path(cfg.model.model)  # a missing local model: one line now, not from every rank later
    if opts.np:
        job = MpirunJob.from_options(cfg, opts)  # -np and the host file checked before anything is created
        return run_split_mpirun(job, make_split_run_dir(cfg, opts.run_dir, lock=True))
    run_dir = make_split_run_dir(cfg, opts.run_dir, lock=True)
    print(f"run directory: {run_dir}", flush=True)
    return run_in_process(cfg, run_dir, echo=lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())
