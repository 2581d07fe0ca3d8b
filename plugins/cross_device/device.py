"""An emulated device: the phone's side of FedML 0.9.6's cross-device protocol, in Python.

FedML's Android SDK is the device FedML's cross-device server expects; this process speaks
the same protocol (`protocol.py`: MQTT topics and JSON messages, model objects in the S3
bucket) and trains with the one FeS trainer (`FesTrainer`), so a FeS run's devices can be
Python processes on a board, a PC, or one machine. Per round it:

1. gets S2C_INIT_CONFIG / S2C_SYNC_MODEL_TO_CLIENT, downloads the round's object by its
   presigned URL (as a phone would: no bucket credentials needed to read);
2. hands it to `FesTrainer` (`set_model_params`: this device's tasks in the FeS plan, found by
   its slot = its position in the server's `client_id_list`; `train`; `get_model_params`);
3. uploads the answer under a fresh key and sends C2S_SEND_MODEL_TO_SERVER.

After `comm_round` rounds (from the server's start_train JSON), or when the plan says the run
is done, it reports FINISHED and leaves. It ends in one line, never hangs: when the server's
last will arrives (the server died), or when the server is silent for
`comm_args.worker_timeout_s`. Its own failure closes its connection without a goodbye, so
the broker publishes its last will, which ends the server's run in one line.

Device-side state: a FeS client's pseudo labels live in the run directory's per-client
store, as under FedML's cross-silo runtime, so devices that share a run directory may play
any FeS client the plan gives them (a real phone would keep one client's store on its disk).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError, one_line
from fedml_fes.runtime.payload import PLAN_KEY, decode_json, unpack_updates
from fedml_fes_plugins.adapters.hard_exit import leave
from fedml_fes_plugins.adapters.trainer import FesTrainer
from fedml_fes_plugins.cross_device.protocol import (
    CLIENT_LAST_WILL,
    FINISHED,
    OFFLINE,
    ONLINE,
    SERVER_LAST_WILL,
    MyMessage,
    comm_round_of,
    decode_payload,
    device_object_key,
    device_to_server_topic,
    encode_payload,
    model_message,
    server_to_device_topic,
    start_train_topic,
    status_message,
)
from fedml_fes_plugins.cross_device.settings import DeviceRunSettings, fedml_namespace

READY = "ready"  # a device's line once it is subscribed: "device <edge> ready"


class DeviceGone(Exception):
    """The device must stop; the message is its one line."""


class EmulatedDevice:
    def __init__(
        self,
        cfg: FesConfig,
        run_dir: Path,
        settings: DeviceRunSettings,
        edge_id: int,
        echo: Callable[[str], None] = print,
        train_lock: threading.Lock | None = None,
    ):
        if edge_id not in settings.edge_ids:
            raise FesError(
                f"--edge-id {edge_id}: comm_args.silo_num is {len(settings.edge_ids)}, so devices are "
                f"1 to {len(settings.edge_ids)}"
            )
        self.cfg, self.run_dir, self.s, self.edge, self.echo = cfg, Path(run_dir), settings, edge_id, echo
        self.inbox: queue.Queue = queue.Queue()
        self.comm_round: int | None = None
        self.rounds_done = 0
        self.started_round = False
        self.stats = {
            "edge_id": edge_id,
            "rounds": 0,
            "bytes_down": 0,
            "bytes_up": 0,
            "mqtt_bytes_in": 0,
            "mqtt_bytes_out": 0,
            "mqtt_messages": 0,  # published and received, this device's side of the broker
            "train_s": 0.0,
        }
        self.trainer: FesTrainer | None = None
        self.client: Any = None
        self.s3: Any = None
        # devices played by one process share its model: one trains at a time
        self.train_lock = train_lock or threading.Lock()

    # ---- set-up ---------------------------------------------------------------------------
    def build(self, job: Any = None) -> None:
        """The FeS job (or another device's in the same process) and this device's trainer,
        before the device says it is online."""
        from fedml_fes.runtime.job import build_job

        args = fedml_namespace(self.cfg, self.run_dir, self.s)
        args.rank, args.role, args.client_id = self.edge, "client", self.edge
        args.fes_job = job if job is not None else build_job(self.cfg, "client", self.run_dir)
        self.args = args
        self.trainer = FesTrainer(args.fes_job.model, args)
        self.trainer.set_id(self.s.slot(self.edge))

    def connect(self) -> None:
        import paho.mqtt.client as mqtt

        from fedml_fes_plugins.cross_silo.services import s3_client

        self.s3 = s3_client(self.s.s3)
        m = self.s.mqtt
        self.client = mqtt.Client(
            client_id=f"fes-device-{self.s.run_id}-{self.edge}-{uuid.uuid4().hex[:8]}", clean_session=True
        )
        if m.get("MQTT_USER"):
            self.client.username_pw_set(m["MQTT_USER"], m.get("MQTT_PWD"))
        # the broker publishes this if the device drops without a goodbye (as FedML's clients do)
        self.client.will_set(CLIENT_LAST_WILL, json.dumps({"ID": self.edge, "status": OFFLINE}), qos=2)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = lambda _c, _u, msg: None if msg.retain else self.inbox.put(msg)
        self.client.connect(m["BROKER_HOST"], int(m["BROKER_PORT"]), int(m.get("MQTT_KEEPALIVE") or 60))
        self.client.loop_start()

    def _on_connect(self, client, _userdata, _flags, rc) -> None:
        if rc != 0:
            self.inbox.put(DeviceGone(f"the MQTT broker refused the connection (code {rc})"))
            return
        client.subscribe(
            [
                (server_to_device_topic(self.s.run_id, self.s.server_id, self.edge), 2),
                (start_train_topic(self.edge), 2),
                (SERVER_LAST_WILL, 2),
            ]
        )

    def _on_subscribe(self, _client, _userdata, _mid, _granted) -> None:
        # announce: a server already up hears it; one that starts later asks (CHECK_CLIENT_STATUS)
        self._publish(status_message(self.edge, self.s.server_id, ONLINE))
        self.echo(f"device {self.edge} {READY}")

    def _publish(self, payload: str, wait: bool = False) -> None:
        info = self.client.publish(device_to_server_topic(self.s.run_id, self.edge), payload, qos=2)
        self.stats["mqtt_bytes_out"] += len(payload)
        self.stats["mqtt_messages"] += 1
        if wait:
            info.wait_for_publish(timeout=10)

    # ---- the rounds -----------------------------------------------------------------------
    def run(self) -> None:
        """Until the run is over (return) or the device must stop (DeviceGone)."""
        heard = time.monotonic()
        while True:
            try:
                msg = self.inbox.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() - heard > self.s.worker_timeout_s:
                    raise DeviceGone(f"no message from the server for {self.s.worker_timeout_s:g}s") from None
                continue
            if isinstance(msg, DeviceGone):
                raise msg
            heard = time.monotonic()
            self.stats["mqtt_bytes_in"] += len(msg.payload)
            self.stats["mqtt_messages"] += 1
            body = json.loads(msg.payload)
            if msg.topic == SERVER_LAST_WILL:
                if str(body.get("ID")) == str(self.s.server_id) and body.get("status") == OFFLINE:
                    raise DeviceGone("the server went offline (its MQTT last will)")
            elif msg.topic == start_train_topic(self.edge):
                self.comm_round = comm_round_of(body)
            elif self._handle(body):
                return

    def _handle(self, body: dict[str, Any]) -> bool:
        """One server message; True when the run is over for this device."""
        kind = body.get(MyMessage.MSG_ARG_KEY_TYPE)
        if kind == MyMessage.MSG_TYPE_S2C_CHECK_CLIENT_STATUS:
            self._publish(status_message(self.edge, self.s.server_id, ONLINE))
        elif kind == MyMessage.MSG_TYPE_S2C_INIT_CONFIG and self.started_round:
            pass  # a second INIT_CONFIG (the server re-sends it on a repeated ONLINE): already training
        elif kind in (MyMessage.MSG_TYPE_S2C_INIT_CONFIG, MyMessage.MSG_TYPE_S2C_SYNC_MODEL_TO_CLIENT):
            self.started_round = True
            payload = decode_payload(self._download(body))
            phase = decode_json(payload[PLAN_KEY]).get("phase") if PLAN_KEY in payload else None
            if phase == "done" or (self.comm_round is not None and self.rounds_done >= self.comm_round):
                self._publish(status_message(self.edge, self.s.server_id, FINISHED), wait=True)
                return True
            self._train_and_answer(payload)
        return False

    def _download(self, body: dict[str, Any]) -> bytes:
        url = body.get(MyMessage.MSG_ARG_KEY_MODEL_PARAMS_URL)
        key = body.get(MyMessage.MSG_ARG_KEY_MODEL_PARAMS_KEY) or body.get(MyMessage.MSG_ARG_KEY_MODEL_PARAMS)
        try:
            if url:
                with urllib.request.urlopen(url, timeout=60) as r:
                    data = r.read()
            else:
                data = self.s3.get_object(Bucket=self.s.s3["BUCKET_NAME"], Key=key)["Body"].read()
        except Exception as e:
            raise DeviceGone(f"cannot download the global model (key {key}): {one_line(e)}") from None
        self.stats["bytes_down"] += len(data)
        return data

    def _train_and_answer(self, payload: Any) -> None:
        with self.train_lock:
            t0 = time.monotonic()
            self.trainer.set_model_params(payload)
            self.trainer.train(None, self.args.fes_job.device, self.args)
            answer = self.trainer.get_model_params()  # the played clients' updates, or this device's error
            self.stats["train_s"] += time.monotonic() - t0
            data = encode_payload(answer)
        key = device_object_key(self.s.run_id, self.edge)
        try:
            self.s3.put_object(Bucket=self.s.s3["BUCKET_NAME"], Key=key, Body=data)
        except Exception as e:
            raise DeviceGone(f"cannot upload the update (key {key}): {one_line(e)}") from None
        self.stats["bytes_up"] += len(data)
        try:  # FedML's num_samples: the answer's FeS weights (gold + pseudo labels); 0 for an error
            weight = sum(float(u.weight) for u in unpack_updates(answer))
        except FesError:
            weight = 0.0
        self._publish(model_message(self.edge, self.s.server_id, key, int(round(weight))))
        self.rounds_done += 1
        self.stats["rounds"] = self.rounds_done

    def close(self) -> None:
        """A goodbye: the broker drops this device's last will."""
        folder = self.run_dir / "devices" / str(self.edge)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "device.json").write_text(json.dumps(self.stats, indent=2))
        self.client.disconnect()
        self.client.loop_stop()


def run_device(
    cfg: FesConfig, run_dir: str, settings: DeviceRunSettings, edge_id: int, echo: Callable[[str], None] = print
) -> int:
    """One device process: 0 when the run finished, 1 with one `error:` line otherwise. A
    failing device leaves without a goodbye, so the server hears of it (its last will)."""
    return run_devices(cfg, run_dir, settings, [edge_id], echo)


def run_devices(
    cfg: FesConfig,
    run_dir: str,
    settings: DeviceRunSettings,
    edge_ids: list[int],
    echo: Callable[[str], None] = print,
) -> int:
    """Devices `edge_ids` played by this process, each with its own MQTT connection, inbox and
    thread, sharing one FeS job (model, data) and training one at a time: a hundred devices
    on a host that holds a few hundred MiB per process, not per device. 0 when every device
    finished; the first device that fails ends the process with its one `error:` line, so
    every device here leaves without a goodbye and the server hears of each (last wills)."""
    from fedml_fes_plugins.cross_silo.transport import use_outgoing_only_inflight_count

    use_outgoing_only_inflight_count()
    lock = threading.Lock()
    devices = [EmulatedDevice(cfg, Path(run_dir), settings, e, echo, lock) for e in edge_ids]
    job = None
    for device in devices:
        device.build(job)
        job = device.args.fes_job

    def play(device: EmulatedDevice) -> None:
        try:
            device.connect()
            device.run()
        except DeviceGone as e:
            echo(f"error: device {device.edge}: {e}")
            leave(1)
        except Exception as e:
            echo(f"error: device {device.edge}: {one_line(e)}")
            leave(1)

    threads = [threading.Thread(target=play, args=(d,), name=f"device-{d.edge}", daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for device in devices:
        device.close()
        echo(
            f"device {device.edge} finished: {device.stats['rounds']} rounds, {device.stats['bytes_down']} bytes "
            f"down, {device.stats['bytes_up']} bytes up"
        )
    return 0
