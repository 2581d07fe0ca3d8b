"""Cross-silo transport settings: which FedML backend, where the peers are, how long to wait.

A cross-silo run is one server process (rank 0) and K client processes ("silos", ranks
1..K) started separately, possibly on different machines, that talk through FedML's
`FedMLCommManager` over gRPC or MQTT_S3. Everything a process needs to find its peers
lives in the run config's `comm_args`, checked here before any process touches the network,
so that a wrong rank or a missing broker setting is one clear line instead of a hang or,
worse, FedML silently fetching the FedML cloud's broker.

The keys below are `comm_args` of the one typed run config (`fedml_fes.config`, read by
`load_config`); this module only checks what FedML's transports need of them.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

from fedml_fes.config import FesConfig, load_config
from fedml_fes.errors import FesError
from fedml_fes_plugins.cross_silo.tls import KEYS as TLS_KEYS
from fedml_fes_plugins.cross_silo.tls import TlsFiles, tls_for

TRANSPORTS = ("GRPC", "MQTT_S3")


MQTT_REQUIRED = ("BROKER_HOST", "BROKER_PORT")
S3_REQUIRED = ("BUCKET_NAME", "CN_S3_AKI", "CN_S3_SAK")
IPCONFIG_COLUMNS = ("eid", "rank", "grpc_server_ip", "grpc_server_port")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def owner_rank(client_id: int, silo_num: int) -> int:
    """Device c lives on silo 1 + c % K: its state (pseudo labels) stays on that silo's disk."""
    return 1 + int(client_id) % silo_num


@dataclass(frozen=True)
class GrpcPeer:
    """One row of FedML's gRPC ipconfig: where rank `rank` listens."""

    rank: int
    ip: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass
class CrossSiloSettings:
    backend: str
    silo_num: int
    run_id: str
    round_timeout_s: float
    join_timeout_s: float
    connect_timeout_s: float
    idle_timeout_s: float  # a silo that hears nothing from the server this long gives up
    fingerprint: str  # of the job (data, model, method, seed): every process must agree
    grpc_ipconfig_path: str = ""
    grpc_peers: dict[int, GrpcPeer] = field(default_factory=dict)
    mqtt: dict[str, Any] = field(default_factory=dict)
    s3: dict[str, Any] = field(default_factory=dict)
    # Ids the silos have on the wire (MQTT topics), by rank. Locally the ranks themselves;
    # under FedML MLOps the edge ids the platform assigns (a silo knows only its own).
    silo_ids: dict[int, int] = field(default_factory=dict)
    server_id: int = 0  # the server's id in MQTT topics (FedML MLOps: its edge id)
    tls_paths: dict[str, str] = field(default_factory=dict)  # comm_args.tls_*, `{rank}` unfilled

    def tls(self, rank: int) -> TlsFiles | None:
        """Process `rank`'s CA, certificate and key, checked readable; None without TLS."""
        return tls_for(SimpleNamespace(**self.tls_paths), rank)

    @property
    def ranks(self) -> list[int]:
        return list(range(1, self.silo_num + 1))

    def wire_id(self, rank: int) -> int:
        """The id in a message's sender / receiver field (0 for the server, as FedML does)."""
        return 0 if rank == 0 else self.silo_ids.get(rank, rank)

    def rank_of(self, wire_id: Any) -> int | None:
        try:
            wire = int(wire_id)
        except (TypeError, ValueError):
            return None
        if wire == 0:
            return 0
        return next((rank for rank, w in self.silo_ids.items() if w == wire), None)

    def owner_rank(self, client_id: int) -> int:
        """The silo that plays (and stores the state of) emulated device `client_id`."""
        return owner_rank(client_id, self.silo_num)

    def check_rank(self, role: str, rank: int) -> None:
        if role not in ("server", "client"):
            raise FesError(f"--role must be server or client, got '{role}'")
        if role == "server" and rank != 0:
            raise FesError(f"the server is rank 0, got --rank {rank} with --role server")
        if role == "client" and not 1 <= rank <= self.silo_num:
            where = (
                f"{self.grpc_ipconfig_path} (client ranks 1-{self.silo_num})"
                if self.backend == "GRPC"
                else f"comm_args.silo_num ({self.silo_num}: ranks 1-{self.silo_num})"
            )
            raise FesError(f"rank {rank} is outside {where}")

    def where(self, rank: int) -> str:
        """A human description of how rank `rank` is reached, for error messages."""
        if self.backend == "GRPC":
            return f"rank {rank} at {self.grpc_peers[rank].address}"
        return f"rank {rank} via the MQTT broker {self.mqtt['BROKER_HOST']}:{self.mqtt['BROKER_PORT']}"


def job_fingerprint(cfg: FesConfig) -> str:
    """What must be equal in every process for the rounds to mean anything."""
    d = cfg.to_dict()
    chosen = {k: d[k] for k in ("data_args", "model_args", "train_args", "mlm_args", "prompt_args", "pseudo_args")}
    chosen["random_seed"] = cfg.common.random_seed
    return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:12]


def load_cross_silo(
    path: str | os.PathLike,
    overrides: Mapping[str, Any] | None = None,
    silo_ids: Mapping[int, int] | None = None,
    server_id: int = 0,
) -> tuple[FesConfig, CrossSiloSettings]:
    """Parse a cross-silo run config: the FeS config plus its checked transport settings.

    `silo_ids` (rank -> id) and `server_id` are the wire ids FedML MLOps assigns; by default
    the ranks themselves."""
    cfg = load_config(path, overrides)
    return cfg, settings_from(cfg, silo_ids, server_id)


def settings_from(cfg: FesConfig, silo_ids: Mapping[int, int] | None = None, server_id: int = 0) -> CrossSiloSettings:
    def comm(key: str) -> Any:
        return getattr(cfg.comm_args, key)

    if cfg.common.training_type != "cross_silo":
        raise FesError(
            f"{cfg.source}: cross-silo processes need common_args.training_type: cross_silo, "
            f"got '{cfg.common.training_type}'"
        )
    backend = str(cfg.comm.backend).upper()
    if backend not in TRANSPORTS:
        raise FesError(
            f"comm_args.backend must be {' or '.join(TRANSPORTS)} for a cross-silo run, got '{cfg.comm.backend}'"
        )
    for key in ("round_timeout_s", "join_timeout_s", "connect_timeout_s"):
        if not float(comm(key)) > 0:
            raise FesError(f"comm_args.{key} must be > 0, got {comm(key)}")
    fingerprint = job_fingerprint(cfg)
    s = CrossSiloSettings(
        backend=backend,
        silo_num=int(comm("silo_num")),
        run_id=str(comm("run_id")) or f"fes{fingerprint}",
        round_timeout_s=float(comm("round_timeout_s")),
        join_timeout_s=float(comm("join_timeout_s")),
        connect_timeout_s=float(comm("connect_timeout_s")),
        idle_timeout_s=float(cfg.comm.worker_timeout_s),
        fingerprint=fingerprint,
    )
    if s.silo_num < 0:
        raise FesError(f"comm_args.silo_num must be >= 1, got {s.silo_num}")
    if backend == "GRPC":
        s.grpc_ipconfig_path = str(comm("grpc_ipconfig_path"))
        s.grpc_peers = read_ipconfig(s.grpc_ipconfig_path)
        client_ranks = sorted(r for r in s.grpc_peers if r > 0)
        if s.silo_num == 0:
            s.silo_num = len(client_ranks)
        missing = [r for r in range(0, s.silo_num + 1) if r not in s.grpc_peers]
        if missing:
            raise FesError(
                f"{s.grpc_ipconfig_path} has no row for rank(s) {missing} "
                f"(needs ranks 0-{s.silo_num}: the server and comm_args.silo_num={s.silo_num} silos)"
            )
    else:
        s.mqtt = mqtt_settings(comm("customized_training_mqtt_config"))
        s.s3 = s3_settings(comm("customized_training_s3_config"))
        if s.silo_num < 1:
            raise FesError("comm_args.silo_num must be >= 1 with MQTT_S3 (the number of client processes)")
    if s.silo_num < 1:
        raise FesError(f"{s.grpc_ipconfig_path} lists no client rank (rank >= 1)")
    s.silo_ids = {int(r): int(w) for r, w in (silo_ids or {r: r for r in s.ranks}).items()}
    ids = list(s.silo_ids.values())
    if any(r not in s.ranks for r in s.silo_ids) or len(set(ids)) != len(ids) or 0 in ids:
        raise FesError(f"client ids {s.silo_ids} must be distinct, non-zero, for ranks 1-{s.silo_num}")
    s.server_id = int(server_id)
    s.tls_paths = {k: str(getattr(cfg.comm, k) or "") for k in TLS_KEYS}
    if 0 < sum(bool(v) for v in s.tls_paths.values()) < len(TLS_KEYS):
        s.tls(0)  # the one-line error naming what is missing
    return s


def read_ipconfig(path: str) -> dict[int, GrpcPeer]:
    """FedML's gRPC ipconfig CSV. FedML keys peers by eid and looks itself up by rank, so
    eid must equal rank; a rank missing from the file would silently become 0.0.0.0:8890+rank."""
    p = Path(path)
    if not p.is_file():
        raise FesError(
            f"comm_args.grpc_ipconfig_path: file not found: {path} (a relative path in a config file "
            f"is from the file's folder, one given with --set from the current directory; "
            f"layout: {','.join(IPCONFIG_COLUMNS)})"
        )
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        if any(c not in header for c in IPCONFIG_COLUMNS):
            raise FesError(f"{path}: header must be {','.join(IPCONFIG_COLUMNS)}, got {','.join(header) or 'nothing'}")
        peers: dict[int, GrpcPeer] = {}
        for line, row in enumerate(reader, start=2):
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            try:
                eid, rank, port = int(row["eid"]), int(row["rank"]), int(row["grpc_server_port"])
            except ValueError:
                raise FesError(f"{path} line {line}: eid, rank and grpc_server_port must be integers") from None
            if eid != rank:
                raise FesError(f"{path} line {line}: eid {eid} must equal rank {rank} (FedML looks peers up by eid)")
            if rank < 0 or rank in peers:
                raise FesError(f"{path} line {line}: rank {rank} is negative or listed twice")
            if not 0 < port < 65536 or not row["grpc_server_ip"]:
                raise FesError(f"{path} line {line}: needs an IP address and a port in 1-65535")
            peers[rank] = GrpcPeer(rank, row["grpc_server_ip"], port)
    return peers


def _expand(value: Any, where: str) -> Any:
    """`${NAME}` in a broker/S3 setting is read from the environment (keeps secrets out of files)."""
    if not isinstance(value, str):
        return value
    for name in _ENV_REF.findall(value):
        if name not in os.environ:
            raise FesError(f"{where} refers to ${{{name}}}, which is not set in the environment")
    return _ENV_REF.sub(lambda m: os.environ[m.group(1)], value)


def mqtt_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """FedML's customized_training_mqtt_config, complete: FedML reads every key without a default."""
    where = "comm_args.customized_training_mqtt_config"
    values = {k: _unset_to_none(_expand(v, f"{where}.{k}")) for k, v in (raw or {}).items()}
    missing = [k for k in MQTT_REQUIRED if values.get(k) is None]
    if missing:
        raise FesError(f"{where} needs {', '.join(missing)} (without them FedML would fetch the FedML cloud's broker)")
    try:
        port, keepalive = int(values["BROKER_PORT"]), int(values.get("MQTT_KEEPALIVE") or 60)
    except (TypeError, ValueError):
        raise FesError(f"{where}.BROKER_PORT and MQTT_KEEPALIVE must be integers") from None
    user = _unset_to_none(values.get("MQTT_USER"))
    return {
        "BROKER_HOST": str(values["BROKER_HOST"]),
        "BROKER_PORT": port,
        "MQTT_USER": user,
        "MQTT_PWD": _unset_to_none(values.get("MQTT_PWD")) if user else None,
        "MQTT_KEEPALIVE": keepalive,
    }


def _unset_to_none(value: Any) -> Any:
    """An empty YAML value may reach here as None, "" or, through a string coercion, "None"."""
    return None if value in (None, "", "None") else value


def s3_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """FedML's customized_training_s3_config: an endpoint (MinIO, moto) or an AWS region."""
    where = "comm_args.customized_training_s3_config"
    values = {k: _unset_to_none(_expand(v, f"{where}.{k}")) for k, v in (raw or {}).items()}
    missing = [k for k in S3_REQUIRED if values.get(k) is None]
    if not (values.get("CN_S3_ENDPOINT") or values.get("CN_REGION_NAME")):
        missing.append("CN_S3_ENDPOINT or CN_REGION_NAME")
    if missing:
        raise FesError(f"{where} needs {', '.join(missing)} (without them FedML would use the FedML cloud's storage)")
    return {k: str(v) for k, v in values.items() if v is not None}
