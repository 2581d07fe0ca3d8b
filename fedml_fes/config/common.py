"""common_args (run identity and where files go), and what every section's checks share."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FesError

OFFLINE_MINILM = "offline:all-MiniLM-L6-v2"


def check(ok: bool, message: str) -> None:
    """One error line (`FesError`) unless `ok`: every section's validation is written with it."""
    if not ok:
        raise FesError(message)


@dataclass
class CommonConfig:
    """Run identity and where files go."""

    training_type: str = "simulation"  # FedML's key: simulation | cross_silo
    random_seed: int = 0
    run_name: str = ""  # empty: <method>-<dataset>-<seed>-<time>
    output_dir: str = "runs"  # run directories are created below it
    cache_dir: str = ""  # empty: <output_dir>/cache (e.g. the federated MLM build)
    # 0: torch's default in one process; the local launchers (mpirun, cross-silo-local,
    # cross-device-local) share this machine's cores among their processes. Pin it to compare
    # runtimes bit for bit
    torch_threads: int = 0
    # forward passes in float32 or under bfloat16 autocast; auto: bfloat16 where the hardware
    # has it (CUDA, CPUs with AMX / AVX-512 BF16), else float32 (fedml_fes/precision.py)
    precision: str = "auto"


def validate_common(c: CommonConfig) -> None:
    """common_args' values, one error line each."""
    check(
        c.training_type in ("simulation", "cross_silo"),
        f"common_args.training_type must be simulation or cross_silo, got '{c.training_type}'",
    )
    check(c.random_seed >= 0, f"common_args.random_seed must be >= 0, got {c.random_seed}")
    check(c.torch_threads >= 0, f"common_args.torch_threads must be >= 0 (0 = torch default), got {c.torch_threads}")
    check(
        c.precision in ("auto", "float32", "bfloat16"),
        f"common_args.precision must be auto, float32 or bfloat16, got '{c.precision}'",
    )
