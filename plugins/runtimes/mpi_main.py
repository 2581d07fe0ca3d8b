"""Entry point of every mpirun rank: rank 0 serves, ranks 1..N-1 play clients.

    mpirun -np 3 python -m fedml_fes_plugins.runtimes.mpi_main --cf run_configs/demo_bbc_fedcls.yaml

Any failure ends every rank: a worker's error is reported to the server, which records it
and releases the others; anything unexpected calls MPI Abort after printing one line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from fedml_fes.config import load_config, parse_overrides
from fedml_fes.errors import FesError
from fedml_fes_plugins.adapters.hard_exit import abort_mpi
from fedml_fes_plugins.runtimes.rank import join_world, rank_parser

TAG = "@fes "


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = rank_parser("fedml_fes_plugins.runtimes.mpi_main", "One rank of a FeS run under mpirun (rank 0 = server).")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir from its checkpoint (the last finished round)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    world = join_world(TAG, opts.tagged_output)
    comm, rank, size, emit, prefix = world.comm, world.rank, world.size, world.emit, world.prefix

    def fatal(line: str) -> None:
        print(f"{prefix}error: {line}", file=sys.stdout, flush=True)
        abort_mpi(comm, 1)

    try:
        cfg = load_config(opts.cf, parse_overrides(opts.set))
        if size < 2:
            raise FesError(f"mpirun needs at least 2 processes (1 server + >= 1 client worker), got -np {size}")
        if opts.resume and not opts.run_dir:
            raise FesError("--resume needs --run-dir: the run directory of the run to continue")
        logging.basicConfig(level=cfg.tracking_args.log_level)
        logging.getLogger().setLevel(cfg.tracking_args.log_level)
        from fedml_fes.runtime.job import build_job
        from fedml_fes.runtime.rundir import make_run_dir

        if rank == 0:  # the other ranks wait at the broadcast below while it builds
            from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

            ensure_mlm_build(cfg, emit)
        run_dir = str(make_run_dir(cfg, opts.run_dir)) if rank == 0 else None
        run_dir = Path(comm.bcast(run_dir, root=0))
        from fedml_fes_plugins.adapters.offline import offline_fedml_init

        args = cfg.flat_args()
        args.training_type, args.backend = "simulation", "MPI"
        args = offline_fedml_init(args, run_dir)
        logging.getLogger().setLevel(cfg.tracking_args.log_level)
        job = build_job(cfg, role="server" if rank == 0 else "client", run_dir=run_dir)
        from fedml_fes_plugins.runtimes.mpi_managers import FesClientManager, FesServerManager

        if rank == 0:
            emit(f"run directory: {run_dir}")
            manager = FesServerManager(args, job, run_dir, comm, rank, size, "MPI", emit, fatal, resume=opts.resume)
            manager.run()
            if manager.error:
                emit(f"error: {manager.error}")
                return 1
            emit(f"done: {job.method.primary_metric}={manager.summary.get('final')} (summary.json in {run_dir})")
            return 0
        manager = FesClientManager(args, job, comm, rank, size, "MPI")
        manager.run()
        return 0
    except FesError as e:
        if rank == 0 or size < 2:
            print(f"{prefix}error: {e}", flush=True)
        sys.stdout.flush()
        abort_mpi(comm, 1)
    except Exception as e:  # never leave the other ranks waiting
        print(f"{prefix}error: rank {rank}: {type(e).__name__}: {e}", flush=True)
        logging.exception("rank %s failed", rank)
        abort_mpi(comm, 1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
