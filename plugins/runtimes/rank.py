"""What every mpirun rank main shares (FedAvg's `mpi_main`, split learning's `split_mpi`):
its command line and its place in MPI_COMM_WORLD with a printer for the launcher's relay.
The cross-silo and cross-device process mains share the command line's core too."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, Callable

from fedml_fes.config import add_set_argument


def process_threads(torch_threads: int, processes: int) -> int:
    """Compute threads for each of the `processes` a local launcher starts on this machine:
    common_args.torch_threads where set, else this machine's cores shared among them (at least
    one). With torch's default (every core) in each, OpenMP threads spin waiting for cores the
    other processes hold: the demo on 2 cores beside one busy process took 175 s of CPU with
    two threads, 76 s with one."""
    if torch_threads > 0:
        return torch_threads
    return max(1, usable_cores() // max(1, processes))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no sched_getaffinity (macOS): every core
        return os.cpu_count() or 1


def add_process_arguments(
    p: argparse.ArgumentParser,
    cf_help: str = "run config YAML",
    run_dir_help: str = "run directory (default: a new one under output_dir)",
) -> None:
    """--cf, --run-dir and --set: what every process of a run is started with."""
    p.add_argument("--cf", required=True, help=cf_help)
    p.add_argument("--run-dir", default=None, help=run_dir_help)
    add_set_argument(p)


def rank_parser(module: str, description: str, cf_help: str = "run config YAML") -> argparse.ArgumentParser:
    """--cf, --run-dir, --set and the launcher's hidden --tagged-output; callers add their own."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    add_process_arguments(p, cf_help)
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
