"""`fedml-fes cross-device-local`: a whole cross-device run on this machine, supervised.

With `--local-services` it starts a real MQTT broker (mosquitto) and an S3 endpoint (moto) on
free loopback ports (`cross_silo/services.py`), else it uses the config's. Then the K
emulated devices, each its own process (or `devices_per_process` of them in one), and FedML's
cross-device server, all at once. Each process's output is kept in `<run_dir>/logs/`, the pids in
`<run_dir>/processes.json`.

Ending: the run is over when the server exits. The first process that exits with an error
decides the error line (a device's own failure, not the server's "went offline" after it);
everything still running is then stopped. Every child dies with the launcher
(PR_SET_PDEATHSIG), and the whole run has a deadline (`timeout_s`).
"""

from __future__ import annotations

import json
import queue
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from fedml_fes.errors import FesError
from fedml_fes_plugins.cross_device.settings import STATS_FILE
from fedml_fes_plugins.cross_silo.services import Child as ServiceChild
from fedml_fes_plugins.cross_silo.services import LocalJob, LocalRun, Service, start_mosquitto, start_s3

DEVICE_GRACE_S = 15.0  # after the server's end, devices get this long to leave
FAILURE_GRACE_S = 5.0  # after the first failure, the others get this long to end on their own
MODULE = "fedml_fes_plugins.cross_device.main"


class Child(ServiceChild):
    """A server or device process: every line goes to the launcher; its last error line is kept."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str], lines: queue.Queue):
        self.last_error: str | None = None  # before the reader thread starts
        super().__init__(name, cmd, log_path, env, lines)

    def forward(self, line: str) -> str | None:
        text = line.rstrip("\n")
        if text.startswith("error: "):
            self.last_error = text[len("error: ") :]
        return text

    def failure(self) -> str | None:
        """Its error line once it exited non-zero (None while running or after success)."""
        rc = self.proc.poll()
        if rc is None or rc == 0:
            return None
        self.reader.join(timeout=2.0)
        if not self.last_error:
            return f"{self.name} exited with code {rc} (see {self.log_path})"
        return self.last_error if self.last_error.startswith(self.name) else f"{self.name}: {self.last_error}"


def _effective_config(job: LocalJob, services: list[Service]) -> tuple[Path, Path, Any, Any]:
    from fedml_fes.config import config_from_dict, parse_overrides, read_sections
    from fedml_fes.runtime.preview import check_before_run
    from fedml_fes.runtime.rundir import make_run_dir, release_run_dir
    from fedml_fes_plugins.cross_device.settings import check_devices, device_settings

    raw = read_sections(job.config_path, parse_overrides(job.overrides))
    cfg = config_from_dict(
        {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}, source=str(job.config_path)
    )
    check_devices(cfg)  # bad input fails before a run directory exists
    if not job.local_services:
        device_settings(cfg)  # the broker and bucket settings too (placeholders with --local-services)
    check_before_run(cfg)
    path = make_run_dir(cfg, job.run_dir, lock=True)  # held until run_local returns
    try:
        comm = raw.setdefault("comm_args", {})
        comm["run_id"] = comm.get("run_id") or f"fes-{path.name}"
        if job.local_services:
            services.append(start_mosquitto(path / "services" / "mosquitto"))
            services.append(start_s3(path / "services" / "s3"))
            comm["customized_training_mqtt_config"] = services[0].config
            comm["customized_training_s3_config"] = services[1].config
        effective = path / "cross_device.yaml"
        effective.write_text(yaml.safe_dump(raw, sort_keys=False))
        cfg = config_from_dict(
            {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}, source=str(effective)
        )
        return path, effective, cfg, device_settings(cfg)
    except BaseException:
        release_run_dir(path)
        raise


# what a process says when another one ended first (server.py, device.py): a consequence, never the cause
LAST_WILL = "went offline (its MQTT last will)"


def _first_failure(children: dict[str, Child]) -> str | None:
    """The error line that names the cause. By the time the launcher looks, the failing process and
    the ones its end took down may all have exited; their "went offline" lines rank last (a device
    told of the server's exit must not hide the server's own error, nor the server a killed device's)."""
    errors = [e for e in (child.failure() for child in children.values()) if e]
    causes = [e for e in errors if LAST_WILL not in e]
    return (causes or errors or [None])[0]


def run_local(job: LocalJob) -> dict[str, Any]:
    """Devices + FedML's cross-device server here; the run's summary with the transfer
    statistics under `cross_device`, or FesError with the one error line."""
    from fedml_fes_plugins.cross_device.settings import check_transport

    run = LocalRun()
    start = time.monotonic()
    deadline = start + job.timeout_s if job.timeout_s else None
    try:
        path, effective, cfg, settings = _effective_config(job, run.services)
        run.path = path  # locked: `close` releases it
        check_transport(settings)
        if cfg.model.mlm_from:  # built (or found cached) before the devices load it; the import is FedML's 10 s
            from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

            ensure_mlm_build(cfg, job.echo)
        edges, per = list(settings.edge_ids), max(1, job.devices_per_process)
        run.prepare(cfg.common.torch_threads, 1 + -(-len(edges) // per))  # the server and the device processes
        base = [sys.executable, "-W", "ignore", "-m", MODULE, "--cf", str(effective), "--run-dir", str(path)]
        for group in (edges[i : i + per] for i in range(0, len(edges), per)):
            first, last = group[0], group[-1]
            if first == last:
                run.start(
                    Child, f"device {first}", base + ["--role", "device", "--edge-id", str(first)], f"device{first}.log"
                )
            else:
                name, ids = f"devices {first}-{last}", f"{first}-{last}"
                run.start(Child, name, base + ["--role", "device", "--edge-ids", ids], f"devices{ids}.log")
        # at once: whichever connects first, the other finds it (protocol.py: a device says ONLINE when it
        # has subscribed, the server asks every device when it has), so start-up costs the slowest load, not the sum
        run.start(Child, "server", base + ["--role", "server"], "server.log")
        run.write_pids()
        error = _supervise(run.children, run.lines, job.echo, deadline)
    finally:
        run.close()
    if error:
        raise FesError(error)
    summary = json.loads((path / "summary.json").read_text())
    summary["cross_device"] = transfer_stats(path, time.monotonic() - start)
    return summary


def _supervise(
    children: dict[str, Child], lines: queue.Queue, echo: Callable[[str], None], deadline: float | None
) -> str | None:
    """Follow the run until the server ends; the error line, if any."""
    server = children["server"]
    while server.proc.poll() is None or server.reader.is_alive() or not lines.empty():
        if deadline and time.monotonic() > deadline:
            return "the cross-device run did not end within its time limit"
        error = _first_failure(children)
        if error:  # the others end themselves within seconds (last wills); their logs then say how
            _wait_all(children, FAILURE_GRACE_S)
            return error
        try:
            name, text = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if (
            name == "server"
            or text.startswith(("error: ", "warning: "))
            or " finished: " in text
            or text.endswith(" ready")
        ):
            echo(text)  # a device's lines name it
    error = _first_failure(children)
    if error:
        return error
    _wait_all(children, DEVICE_GRACE_S)
    return _first_failure(children)


def _wait_all(children: dict[str, Child], grace_s: float) -> None:
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(c.proc.poll() is None for c in children.values()):
        time.sleep(0.1)


def transfer_stats(run_dir: Path, wall_s: float) -> dict[str, Any]:
    """What the devices moved (their `device.json`) and what the server saw (`cross_device.json`)."""
    devices = [json.loads(p.read_text()) for p in sorted((run_dir / "devices").glob("*/device.json"))]
    server = json.loads((run_dir / STATS_FILE).read_text()) if (run_dir / STATS_FILE).exists() else {}
    return {
        **server,
        "wall_s": round(wall_s, 1),
        "bytes_down": sum(d["bytes_down"] for d in devices),
        "bytes_up": sum(d["bytes_up"] for d in devices),
        "mqtt_bytes": sum(d["mqtt_bytes_in"] + d["mqtt_bytes_out"] for d in devices),
        "mqtt_messages": sum(d.get("mqtt_messages", 0) for d in devices),
        "device_rounds": [d["rounds"] for d in devices],
    }
