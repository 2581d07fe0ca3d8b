"""What every mpirun rank main shares (FedAvg's `mpi_main`, split learning's `split_mpi`):
its command line and its place in MPI_COMM_WORLD with a printer for the launcher's relay."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from fedml_fes.config import add_set_argument


def rank_parser(module: str, description: str, cf_help: str = "run config YAML") -> argparse.ArgumentParser:
    """--cf, --run-dir, --set and the launcher's hidden --tagged-output; callers add their own."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    p.add_argument("--cf", required=True, help=cf_help)
    p.add_argument("--run-dir", default=None, help="run directory (default: a new one under output_dir)")
    add_set_argument(p)
    p.add_argument("--tagged-output", action="store_true", help=argparse.SUPPRESS)
    return p


@dataclass
class World:
    comm: Any
    rank: int
    size: int
    emit: Callable[[str], None]  # one line to stdout, tagged when the launcher relays it
    prefix: str


def join_world(tag: str, tagged: bool) -> World:
    """MPI_COMM_WORLD (mpi4py imported here: importing it initializes MPI)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    prefix = tag if tagged else ""

    def emit(line: str) -> None:
        print(prefix + line, flush=True)

    return World(comm, comm.Get_rank(), comm.Get_size(), emit, prefix)
