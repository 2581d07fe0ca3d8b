"""Where and how a run executes and is measured: comm_args (transport), device_args,
tracking_args and cost_args (cost emulation), each with its checks.

cost_args is checked by `cost.settings.validate_cost`, beside the profiles it names (`validate`
imports it only when it runs; it imports nothing of the config).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .common import check


@dataclass
class CommConfig:
    """Transport settings (FedML keys)."""

    backend: str = "MPI"
    mpi_host_file: str = "mpi/mpi_host_file"
    worker_timeout_s: float = 600.0  # a worker silent this long ends the run
    # cross-silo (FedML gRPC / MQTT_S3), see docs/DEPLOY.md
    grpc_ipconfig_path: str = "deploy/grpc_ipconfig.csv"
    customized_training_mqtt_config: dict = field(default_factory=dict)
    customized_training_s3_config: dict = field(default_factory=dict)
    silo_num: int = 0  # client processes; 0: as many as the gRPC ipconfig lists
    run_id: str = ""
    round_timeout_s: float = 300.0  # a phase waits this long, then aggregates what arrived
    join_timeout_s: float = 120.0  # every client process must join within this
    connect_timeout_s: float = 5.0  # broker / endpoint reachability checks
    # TLS for cross-silo gRPC and MQTT, all three or none (docs/DEPLOY.md); `{rank}` in a path is
    # the process's rank, so one config serves every process. Empty: plaintext, trusted networks only.
    tls_ca: str = ""  # the CA every process trusts
    tls_cert: str = ""  # this process's certificate, e.g. certs/rank-{rank}.crt
    tls_key: str = ""  # its private key


def validate_comm(cm: CommConfig) -> None:
    """comm_args' values, one error line each; files and brokers are checked by the runtime that
    uses them."""
    check(cm.silo_num >= 0, f"comm_args.silo_num must be >= 0, got {cm.silo_num}")
    for key in ("round_timeout_s", "join_timeout_s", "connect_timeout_s", "worker_timeout_s"):
        check(getattr(cm, key) > 0, f"comm_args.{key} must be > 0, got {getattr(cm, key)}")


@dataclass
class DeviceConfig:
    using_gpu: bool = False
    gpu_id: int = 0


def validate_device(dv: DeviceConfig) -> None:
    check(dv.gpu_id >= 0, f"device_args.gpu_id must be >= 0, got {dv.gpu_id}")


@dataclass
class TrackingConfig:
    enable_wandb: bool = False  # accepted for FedML compatibility; must stay false offline
    log_level: str = "WARNING"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def validate_tracking(tr: TrackingConfig) -> None:
    """tracking_args' values, one error line each; the log level becomes upper case."""
    check(
        not tr.enable_wandb,
        "tracking_args.enable_wandb must be false: runs are offline and write only to the run directory",
    )
    level = str(tr.log_level).upper()
    check(
        level in LOG_LEVELS,
        f"tracking_args.log_level must be one of {', '.join(LOG_LEVELS)}, got '{tr.log_level}'",
    )
    tr.log_level = level


@dataclass
class CostConfig:
    """Cost emulation: which device profiles and network a run's report applies (docs/BENCHMARK.md).

    Runs record device-independent work (FLOPs, bytes, memory) in client_costs.csv; these
    settings only say how reports turn it into emulated time and energy.
    """

    devices: list = field(default_factory=lambda: ["jetson_tx2", "rpi_4b", "host"])  # profile names or .yaml paths
    device_dir: str = ""  # extra folder searched first for <name>.yaml profiles
    bandwidth_MBps: float = 1.0  # downlink, MB/s (10^6 bytes); the paper's slow link
    uplink_MBps: float = 0.0  # 0: same as bandwidth_MBps
    # seconds each message pays beyond its bytes (handshakes, requests, round trips); 0: the
    # paper's model. Measured: docs/COST_MODEL.md "The network term against a real link"
    message_overhead_s: float = 0.0
    bandwidth_sweep: list = field(default_factory=lambda: [0.1, 0.3, 1.0, 3.0, 10.0])  # MB/s
    convergence_tail: int = 3  # convergence accuracy = mean of the last N evaluated rounds
    measure_memory: bool = True  # peak training memory from tensors saved for backward
