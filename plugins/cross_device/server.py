"""The FeS server on FedML 0.9.6's cross-device server runtime (`fedml.cross_device.ServerMNN`).

What runs is FedML's: `ServerMNN` -> `init_server` -> `FedMLServerManager` over the
`MQTT_S3_MNN` backend, with the one FeS aggregator (`FesAggregator`) as its
`server_aggregator`, and the stand-ins of `shims.py` for the lines that assume MNN. FeS's
round logic runs in that aggregator's hooks, exactly as under FedML's cross-silo runtime:
one FedML round is one FeS phase, the plan and the answers travel inside the model files.

FedML's cross-device server has no deadlines: it waits for every device, every round,
forever (`server_mnn/fedml_aggregator.py:51-58`), and logs and swallows any exception in a
message handler (`mqtt_s3_mnn/mqtt_s3_comm_manager.py:195-199`). `Watchdog` gives the run an
end: devices that do not come online, a round without every answer, or a device whose
connection drops (its MQTT last will) end the server with one line and a failed
`summary.json`; the server's own last will then ends the devices.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, NoReturn

from fedml_fes.config import FesConfig
from fedml_fes.errors import one_line
from fedml_fes_plugins.adapters.aggregator import FesAggregator
from fedml_fes_plugins.adapters.hard_exit import leave
from fedml_fes_plugins.adapters.offline import offline_fedml_init
from fedml_fes_plugins.cross_device.protocol import (
    CLIENT_LAST_WILL,
    FINISHED,
    OFFLINE,
    MyMessage,
    device_to_server_topic,
    encode_payload,
)
from fedml_fes_plugins.cross_device.settings import BACKEND, STATS_FILE, DeviceRunSettings, fedml_namespace
from fedml_fes_plugins.cross_silo.transport import use_outgoing_only_inflight_count


class TestLoaderView:
    """What `ServerMNN` reads of its `test_dataloader` (`mnn_server.py:9`,
    `server_mnn_api.py:9,22`: `iter_number`; `fedml_aggregator.py:253`: `size`), for FeS's
    test set. FeS evaluates it itself; FedML only logs these."""

    def __init__(self, test: Any, batch_size: int):
        self.size = len(test)
        self.iter_number = math.ceil(self.size / max(1, batch_size))


def server_args(cfg: FesConfig, run_dir: Path, settings: DeviceRunSettings) -> Any:
    """FedML's namespace for its cross-device server."""
    args = fedml_namespace(cfg, run_dir, settings)
    args.training_type, args.backend = "cross_device", BACKEND
    args.rank, args.role = 0, "server"  # fedml/__init__.py:_init_cross_device sets the same
    cache = run_dir / "device_cache"  # the server's downloads (mqtt_s3_comm_manager.py:182) and its model file
    cache.mkdir(parents=True, exist_ok=True)
    args.model_file_cache_folder = str(cache)
    args.global_model_file_path = str(cache / "global_model.safetensors")
    # read into the start_train JSON at fedml_server_manager.py:112-138; FeS has no such keys
    for name in ("client_optimizer", "data_cache_dir", "train_size", "test_size"):
        if not hasattr(args, name):
            setattr(args, name, None)
    return args


class Watchdog:
    """Ends a server that would wait forever. It watches the devices on its own MQTT
    connection (their statuses and last wills on the topics the server reads) and the
    aggregator's phase clock."""

    def __init__(
        self,
        settings: DeviceRunSettings,
        fes: FesAggregator,
        fail: Callable[[str], NoReturn],
        finish_grace_s: float = 60.0,
    ):
        import paho.mqtt.client as mqtt

        self.settings, self.fes, self.fail, self.finish_grace_s = settings, fes, fail, finish_grace_s
        self.online: set[int] = set()
        self.finished: set[int] = set()
        self.offline: list[int] = []
        self.started = time.monotonic()
        self.all_online_at: float | None = None
        self.done_at: float | None = None
        self.aggregator = None  # FedML's FesDeviceAggregator, once ServerMNN built it
        self.client = mqtt.Client(client_id=f"fes-device-watch-{uuid.uuid4().hex[:10]}", clean_session=True)
        if settings.mqtt.get("MQTT_USER"):
            self.client.username_pw_set(settings.mqtt["MQTT_USER"], settings.mqtt.get("MQTT_PWD"))
        self.client.on_connect = self._subscribe
        self.client.on_message = self._on_message
        self.client.connect(
            settings.mqtt["BROKER_HOST"],
            int(settings.mqtt["BROKER_PORT"]),
            int(settings.mqtt.get("MQTT_KEEPALIVE") or 60),
        )
        self.client.loop_start()
        threading.Thread(target=self._watch, name="fes-device-watchdog", daemon=True).start()

    def _subscribe(self, client, _userdata, _flags, _rc) -> None:
        client.subscribe(
            [(CLIENT_LAST_WILL, 1)]
            + [(device_to_server_topic(self.settings.run_id, e), 1) for e in self.settings.edge_ids]
        )

    def _on_message(self, _client, _userdata, msg) -> None:
        if msg.retain:  # an earlier run's, kept by the broker
            return
        try:
            body = json.loads(msg.payload)
            if msg.topic == CLIENT_LAST_WILL:
                edge = int(body.get("ID"))
                if body.get("status") == OFFLINE and edge in self.settings.edge_ids and edge not in self.finished:
                    self.offline.append(edge)
            else:
                edge = int(body.get(MyMessage.MSG_ARG_KEY_SENDER))
                status = body.get(MyMessage.MSG_ARG_KEY_CLIENT_STATUS)
                self.online.add(edge)  # any message from a device shows it online
                if body.get(MyMessage.MSG_ARG_KEY_TYPE) == MyMessage.MSG_TYPE_C2S_CLIENT_STATUS and status == FINISHED:
                    self.finished.add(edge)
        except (ValueError, TypeError, AttributeError):
            return

    def _missing(self, have: set[int]) -> list[int]:
        return [e for e in self.settings.edge_ids if e not in have]

    def _watch(self) -> None:
        s = self.settings
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            if self.offline:
                edge = self.offline[0]
                self.fail(f"device {edge} went offline (its MQTT last will) before the run finished")
            agg = self.aggregator
            if self.all_online_at is None:
                if not self._missing(self.online) or (agg is not None and agg.phases_closed > 0):
                    self.all_online_at = now
                elif now - self.started > s.join_timeout_s:
                    self.fail(
                        f"devices {self._missing(self.online)} did not come online within "
                        f"{s.join_timeout_s:g}s (FedML's server starts when every device is online)"
                    )
                continue
            if self.fes.summary is not None:  # the run is complete: devices say FINISHED, then FedML ends
                self.done_at = self.done_at or now
                if now - self.done_at > self.finish_grace_s:
                    print(
                        f"warning: devices {self._missing(self.finished)} did not report FINISHED within "
                        f"{self.finish_grace_s:g}s; the run is complete",
                        flush=True,
                    )
                    leave(0)
                continue
            since = max(self.all_online_at, agg.phase_started if agg is not None else 0.0)
            if now - since > s.round_timeout_s:
                flags = agg.flag_client_model_uploaded_dict if agg is not None else {}
                late = [e for i, e in enumerate(s.edge_ids) if not flags.get(i, False)]
                self.fail(
                    f"round {getattr(self.fes.args, 'round_idx', '?')}: devices {late} sent no update "
                    f"within {s.round_timeout_s:g}s (FedML's cross-device server waits for every device)"
                )


def _write_stats(run_dir: Path, stats: dict[str, Any]) -> None:
    (run_dir / STATS_FILE).write_text(json.dumps(stats, indent=2))


def run_server(
    cfg: FesConfig, run_dir: str | None, settings: DeviceRunSettings, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    """The whole server: FeS job, FedML's cross-device runtime, until every device finished.
    Returns the run's summary; a failure ends the process (exit 1) after one `error:` line."""
    import fedml
    from fedml.cross_device import ServerMNN

    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.cross_device import shims
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    ensure_mlm_build(cfg, echo)
    path = make_run_dir(cfg, run_dir, lock=True)
    args = offline_fedml_init(server_args(cfg, path, settings), path)
    device = fedml.device.get_device(args)
    args.fes_job = build_job(cfg, "server", path)  # the server keeps the label oracle (pseudo-label accuracy)
    model = args.fes_job.model
    fes = FesAggregator(model, args)

    def fail(error: str) -> NoReturn:
        echo(f"error: {error}")
        sys.stdout.flush()
        try:
            fes.session.fail(error)
        except Exception:  # the line above is the report; the summary is best effort
            pass
        leave(1)

    fes.open(path, runtime="fedml_cross_device")  # the run's records (and the zero-shot evaluation)
    first = fes.get_model_params()  # the first phase's plan with the global tensors
    Path(args.global_model_file_path).write_bytes(encode_payload(first))
    use_outgoing_only_inflight_count()  # FedML's paho client: its bursts to every device must not exceed 20
    watchdog = Watchdog(settings, fes, fail)
    echo(
        f"cross-device server: run {settings.run_id}, devices {list(settings.edge_ids)}, "
        f"{args.comm_round} FedML rounds (FeS phases); waiting for the devices"
    )
    started = time.monotonic()

    def watch(aggregator: Any) -> None:
        watchdog.aggregator = aggregator

    try:
        with shims.installed(fail, on_created=watch):
            ServerMNN(
                args,
                device,
                TestLoaderView(args.fes_job.data.test, cfg.train.eval_batch_size),
                model,
                server_aggregator=fes,
            )
    except Exception as e:  # FedML's own start-up (broker login, ...) outside a message handler
        fail(f"FedML's cross-device server failed: {one_line(e)}")
    if fes.summary is None:
        fail("FedML's cross-device server stopped before the run finished")
    agg = watchdog.aggregator
    _write_stats(
        path,
        {
            "devices": len(settings.edge_ids),
            "fedml_rounds": agg.phases_closed,
            "bytes_received_by_server": agg.bytes_received,
            "server_wall_s": time.monotonic() - started,
        },
    )
    return fes.summary
