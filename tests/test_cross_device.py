"""FeS on FedML 0.9.6's cross-device ("Beehive") server runtime with emulated devices.

Fast tests: the payload codec, the settings, the scoped FedML stand-ins. Slow tests: whole
runs with a real mosquitto broker and a moto S3 endpoint on loopback, FedML's `ServerMNN`
as the server and three device processes speaking its protocol; a run that completes (and
matches the in-process runtime), a device whose training fails, and a device killed mid-run.
Every run has a deadline; every process a run starts is stopped by the launcher.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError

from .conftest import small_config, write_config

RUN_LIMIT_S = 300  # one run's deadline on a loaded 2-core machine; unloaded it takes well under half


def _raw(tmp_path: Path, model_dir: str, **train) -> dict:
    from fedml_fes_plugins.cross_silo.services import placeholder_services

    raw = small_config(tmp_path, model_dir, train_args={"method": "fes", "comm_round": 2, **train})
    raw["comm_args"] = {
        "backend": "MQTT_S3_MNN",
        "silo_num": 3,
        "round_timeout_s": 120,
        "join_timeout_s": 200,
        "worker_timeout_s": 200,
        **placeholder_services(),
    }
    return raw


def _rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# ---- fast --------------------------------------------------------------------------------
def test_the_error_line_names_the_cause_not_the_last_will_that_followed():
    """All may have exited when the launcher looks: a "went offline" line is never preferred."""
    from fedml_fes_plugins.cross_device.launch import _first_failure

    class Ended:
        def __init__(self, error):
            self.error = error

        def failure(self):
            return self.error

    gone = "device 1: the server went offline (its MQTT last will)"
    children = {
        "device 1": Ended(gone),
        "device 2": Ended(None),
        "server": Ended("server: device 1 failed in round 1: injected fault in round 1"),
    }
    assert _first_failure(children) == "server: device 1 failed in round 1: injected fault in round 1"
    killed = {
        "server": Ended("server: device 2 went offline (its MQTT last will) before the run finished"),
        "device 2": Ended("device 2 exited with code -9 (see device2.log)"),
    }
    assert _first_failure(killed) == "device 2 exited with code -9 (see device2.log)"
    assert _first_failure({"device 1": Ended(gone)}) == gone
    assert _first_failure({"device 1": Ended(None)}) is None


def test_payload_roundtrip_keeps_every_tensor_and_the_plan():
    from fedml_fes.runtime.payload import PLAN_KEY, pack_plan, unpack_plan
    from fedml_fes.runtime.tasks import ClientTask
    from fedml_fes_plugins.cross_device.protocol import decode_payload, encode_payload

    shared = torch.arange(6.0).reshape(2, 3)
    params = OrderedDict([("enc.bias", torch.ones(3)), ("head.weight", shared), ("decoder.weight", shared)])
    tasks = [ClientTask(round_idx=0, client_id=c, kind="train", seed=c) for c in (4, 7)]
    message = pack_plan(params, 0, "train", tasks, slots=3)
    back = decode_payload(encode_payload(message))  # tied tensors (one storage) are copied, not refused
    assert set(back) == set(message) and PLAN_KEY in back
    for k in message:
        assert torch.equal(back[k], message[k])
    _, mine = unpack_plan(back, 1)
    assert [t.client_id for t in mine] == [7]


def test_settings_need_fedml_cross_device_backend_and_devices(tmp_path):
    from fedml_fes_plugins.cross_device.settings import device_settings

    raw = _raw(tmp_path, "offline:all-MiniLM-L6-v2")
    s = device_settings(config_from_dict(raw))
    assert s.edge_ids == (1, 2, 3) and s.slot(3) == 2 and s.run_id.startswith("fes")
    raw["comm_args"]["backend"] = "MQTT_S3"
    with pytest.raises(FesError, match="MQTT_S3_MNN"):
        device_settings(config_from_dict(raw))
    raw["comm_args"].update(backend="MQTT_S3_MNN", silo_num=0)
    with pytest.raises(FesError, match="number of devices"):
        device_settings(config_from_dict(raw))


def test_fedml_stand_ins_are_scoped():
    pytest.importorskip("MNN", reason="FedML's cross-device server imports MNN (pip install MNN)")
    from fedml.core.distributed.communication.s3.remote_storage_mnn import S3MNNStorage
    from fedml.cross_device.server_mnn import fedml_server_manager, server_mnn_api

    from fedml_fes_plugins.cross_device import shims

    before = (
        server_mnn_api.FedMLAggregator,
        fedml_server_manager.write_tensor_dict_to_mnn,
        S3MNNStorage.upload_model_file,
    )

    def fail(msg):
        raise AssertionError(msg)

    with shims.installed(fail):
        assert server_mnn_api.FedMLAggregator is shims.FesDeviceAggregator
        assert fedml_server_manager.write_tensor_dict_to_mnn is shims.write_message_file
        assert S3MNNStorage.upload_model_file is not before[2]
    assert (
        server_mnn_api.FedMLAggregator,
        fedml_server_manager.write_tensor_dict_to_mnn,
        S3MNNStorage.upload_model_file,
    ) == before


# ---- slow: whole runs over a real broker and bucket ------------------------------------------
@pytest.fixture(scope="module")
def services_ready():
    pytest.importorskip("MNN", reason="FedML's cross-device server imports MNN (pip install MNN)")
    pytest.importorskip("moto", reason="a local S3 endpoint needs moto[server]")
    from .test_cross_silo_services import ensure_mosquitto

    return ensure_mosquitto()


def _run(cf: Path, run_dir: Path, echo=lambda _l: None, per_process: int = 1) -> dict:
    from fedml_fes_plugins.cross_device.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    job = LocalJob(str(cf), run_dir=str(run_dir), local_services=True, echo=echo, timeout_s=RUN_LIMIT_S)
    job.devices_per_process = per_process
    return run_local(job)


@pytest.mark.slow
def test_three_devices_run_fes_on_fedml_cross_device_server(tmp_path, tiny_model_dir, services_ready):
    from fedml_fes.config import load_config
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    cf = write_config(tmp_path / "c.yaml", _raw(tmp_path, tiny_model_dir))
    t0 = time.monotonic()
    summary = _run(cf, tmp_path / "device", per_process=2)  # devices 1-2 share a process, 3 has its own
    wall = time.monotonic() - t0
    run_dir = tmp_path / "device"
    assert {p.name for p in (run_dir / "logs").iterdir()} >= {"devices1-2.log", "device3.log", "server.log"}
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2
    stats = summary["cross_device"]
    assert stats["fedml_rounds"] == 4  # 2 FeS rounds x (label, train) phases
    assert stats["device_rounds"] == [4, 4, 4]  # every device answers every FedML round
    assert stats["bytes_up"] == stats["bytes_received_by_server"] > 0  # what the devices uploaded, the server read
    assert stats["bytes_down"] > 0
    server_log = (run_dir / "logs" / "server.log").read_text()
    assert "register_message_receive_handlers" in server_log  # FedML's cross-device server manager ran
    for edge in (1, 2, 3):
        assert json.loads((run_dir / "devices" / str(edge) / "device.json").read_text())["rounds"] == 4
    # the same job in-process: the same FeS round logic gives the same rows
    cfg = load_config(cf)
    run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    device_rows, local_rows = _rows(run_dir), _rows(tmp_path / "local")
    for key in ("clients", "test_acc", "pseudo_total", "label_clients"):
        assert [r[key] for r in device_rows] == [r[key] for r in local_rows], key
    for a, b in zip(device_rows, local_rows):
        assert float(a["train_loss"]) == pytest.approx(float(b["train_loss"]), rel=1e-4)
    pids = json.loads((run_dir / "processes.json").read_text())
    assert not [n for n, pid in pids.items() if _alive(pid)]
    print(
        f"\ncross-device run: {wall:.1f}s wall, rounds {summary['rounds_completed']}, final {summary['final']:.4f}, "
        f"bytes down {stats['bytes_down']}, up {stats['bytes_up']}"
    )


@pytest.mark.slow
def test_a_device_whose_training_fails_ends_the_run_in_one_line(tmp_path, tiny_model_dir, services_ready, faults):
    faults(raise_in_round=1)  # every device process raises when it trains in FeS round 1
    cf = write_config(tmp_path / "c.yaml", _raw(tmp_path, tiny_model_dir))
    with pytest.raises(FesError) as err:  # the three devices in one process: one import, not three
        _run(cf, tmp_path / "run", per_process=3)
    line = str(err.value)
    assert "\n" not in line and "injected fault in round 1" in line and line.startswith("server:")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1
    pids = json.loads((tmp_path / "run" / "processes.json").read_text())
    assert not [n for n, pid in pids.items() if _alive(pid)]


@pytest.mark.slow
def test_a_device_killed_mid_run_ends_the_server_in_one_line(tmp_path, tiny_model_dir, services_ready):
    cf = write_config(tmp_path / "c.yaml", _raw(tmp_path, tiny_model_dir, comm_round=6))
    run_dir = tmp_path / "run"
    killed = threading.Event()

    def echo(line: str) -> None:
        if line.startswith("round   0:") and not killed.is_set():
            os.kill(json.loads((run_dir / "processes.json").read_text())["device 2"], signal.SIGKILL)
            killed.set()

    with pytest.raises(FesError) as err:
        _run(cf, run_dir, echo)
    assert killed.is_set() and "\n" not in str(err.value) and str(err.value).startswith("device 2")
    # the server ended itself on the device's MQTT last will, with one line and a failed summary
    assert "error: device 2 went offline (its MQTT last will)" in (run_dir / "logs" / "server.log").read_text()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    pids = json.loads((run_dir / "processes.json").read_text())
    assert not [n for n, pid in pids.items() if _alive(pid)]
