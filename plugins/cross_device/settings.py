"""A cross-device run's transport settings, read once from the FeS config's `comm_args`.

The keys are the cross-silo MQTT_S3 ones (docs/DEPLOY.md) with FedML's cross-device backend
name: `backend: MQTT_S3_MNN`, `silo_num` = the number of devices (edge ids 1..K),
`customized_training_mqtt_config` / `customized_training_s3_config` (always set, else
FedML 0.9.6 fetches the FedML cloud's broker and bucket, `core/distributed/
fedml_comm_manager.py:83-97`), `run_id`, and the timeouts FedML's cross-device server lacks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError
from fedml_fes_plugins.cross_silo.config import job_fingerprint, mqtt_settings, s3_settings

BACKEND = "MQTT_S3_MNN"
SERVER_ID = 0
STATS_FILE = "cross_device.json"  # the server's transfer statistics, in the run directory


@dataclass(frozen=True)
class DeviceRunSettings:
    run_id: str
    edge_ids: tuple[int, ...]
    mqtt: dict[str, Any]
    s3: dict[str, Any]
    join_timeout_s: float
    round_timeout_s: float
    worker_timeout_s: float
    connect_timeout_s: float
    server_id: int = SERVER_ID

    def slot(self, edge_id: int) -> int:
        """A device's slot in the server's plan: its position in FedML's `client_id_list`
        (`fedml_server_manager.py:287-289` files its answer under that index)."""
        return self.edge_ids.index(edge_id)


def check_devices(cfg: FesConfig) -> None:
    """The backend and the device count (what a launcher checks before creating anything)."""
    comm = cfg.comm
    if str(comm.backend).upper() != BACKEND:
        raise FesError(
            f"a cross-device run needs comm_args.backend {BACKEND} (FedML's cross-device backend), got '{comm.backend}'"
        )
    if int(comm.silo_num) < 1:
        raise FesError(f"comm_args.silo_num is the number of devices and must be >= 1, got {comm.silo_num}")


def device_settings(cfg: FesConfig) -> DeviceRunSettings:
    check_devices(cfg)
    comm = cfg.comm
    return DeviceRunSettings(
        run_id=str(comm.run_id) or f"fes{job_fingerprint(cfg)}",
        edge_ids=tuple(range(1, int(comm.silo_num) + 1)),
        mqtt=mqtt_settings(comm.customized_training_mqtt_config),
        s3=s3_settings(comm.customized_training_s3_config),
        join_timeout_s=float(comm.join_timeout_s),
        round_timeout_s=float(comm.round_timeout_s),
        worker_timeout_s=float(comm.worker_timeout_s),
        connect_timeout_s=float(comm.connect_timeout_s),
    )


def check_transport(settings: DeviceRunSettings) -> None:
    """Broker and bucket reachable with the configured credentials, before any model loads."""
    from fedml_fes_plugins.cross_silo.checks import check_mqtt, check_s3

    check_mqtt(settings.mqtt, settings.connect_timeout_s)
    check_s3(settings.s3, settings.connect_timeout_s)


def fedml_namespace(cfg: FesConfig, run_dir: Path, settings: DeviceRunSettings) -> Any:
    """FedML's flat args for a FeS process of this run, with what the FeS trainer and aggregator
    read (`fes_config`, `fes_run_dir`, `worker_num` = the plan's slots). As under FedML's
    cross-silo runtime (`fedml_plugin.fedml_args`), every device takes part in every FedML round
    (FeS picks its clients inside the plan) and one FedML round is one FeS phase."""
    from fedml_fes.runtime.methods import get_method
    from fedml_fes.runtime.phases import phases_per_round

    args = cfg.flat_args()
    args.fes_config, args.fes_run_dir, args.fes_resume = cfg, str(run_dir), False
    args.worker_num = len(settings.edge_ids)
    args.client_num_in_total = args.client_num_per_round = args.worker_num
    args.comm_round = cfg.train.comm_round * phases_per_round(get_method(cfg.train.method).uses_pseudo)
    args.frequency_of_the_test = args.comm_round  # FedML's own test cadence; scores come from FeS
    args.federated_optimizer = "FedAvg"  # ServerMNN runs FedAvg only (mnn_server.py:8)
    args.scenario = "horizontal"
    args.run_id, args.server_id = settings.run_id, settings.server_id
    args.client_id_list = json.dumps(list(settings.edge_ids))
    args.customized_training_mqtt_config = dict(settings.mqtt)
    args.customized_training_s3_config = dict(settings.s3)
    return args
