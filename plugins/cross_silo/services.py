"""A real MQTT broker (mosquitto) and an S3-compatible endpoint (moto), on free loopback ports.

For local cross-silo runs and their tests: MQTT_S3 needs both, and nothing may reach the
FedML cloud. Production points `customized_training_mqtt_config` / `_s3_config` at its own
broker and MinIO / AWS S3 instead (docs/DEPLOY.md). Every process started here dies with
the process that started it (PR_SET_PDEATHSIG on Linux), so a killed launcher leaves no
broker behind.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fedml_fes.errors import FesError
from fedml_fes_plugins.cross_silo.certs import rank_name
from fedml_fes_plugins.cross_silo.tls import TlsFiles
from fedml_fes_plugins.runtimes.rank import process_threads

MOSQUITTO_PATHS = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto", "/opt/homebrew/sbin/mosquitto")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, for a listener that a child process opens later. Chosen below the
    kernel's ephemeral range: a port from bind(0) is ephemeral, so between this call and the
    child's bind any outgoing connection (another test's client, a forwarder) may take it as
    its local port, and the child fails with 'address in use'."""
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # nothing free below the range: let the kernel pick
        s.bind((host, 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when its parent dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def child_env(run_dir: Path, threads: int) -> dict[str, str]:
    """A launched process's environment: it writes under the launcher's lock on `run_dir`
    (handed down, `rundir.inherited_lock_env`) and computes on `threads` threads
    (`rank.process_threads`) unless OMP_NUM_THREADS says otherwise."""
    from fedml_fes.runtime.rundir import inherited_lock_env

    env = {**os.environ, **inherited_lock_env(run_dir)}
    env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


class Child:
    """One supervised process and the thread that copies its output into its log and passes
    lines on to the launcher's queue (`forward` says which and how; `finished` runs when its
    output ends). Used by the cross-silo and the cross-device launchers."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str], lines: queue.Queue):
        self.name = name
        self.log_path = log_path
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env=env,
            preexec_fn=die_with_parent,
        )
        self.reader = threading.Thread(target=self._read, args=(lines,), daemon=True)
        self.reader.start()

    def forward(self, line: str) -> str | None:
        """What of an output line goes to the queue (None: the log only)."""
        return line.rstrip("\n")

    def finished(self, lines: queue.Queue) -> None:
        """Its output ended."""

    def _read(self, lines: queue.Queue) -> None:
        with self.log_path.open("w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                text = self.forward(line)
                if text is not None:
                    lines.put((self.name, text))
        self.finished(lines)

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; always reaps."""
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        except ProcessLookupError:
            pass


def wait_for_port(host: str, port: int, proc: subprocess.Popen, name: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise FesError(f"{name} exited at start (code {proc.returncode}): {' | '.join(tail) or 'no output'}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    stop_process(proc)
    raise FesError(f"{name} did not listen on {host}:{port} within {timeout_s:g}s (see {log})")


@dataclass
class Service:
    name: str
    proc: subprocess.Popen
    host: str
    port: int
    log: Path
    config: dict[str, Any] = field(default_factory=dict)  # what FedML's customized_* config needs

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass
class LocalJob:
    """What a launcher of a whole run on this machine (`cross-silo-local`, `cross-device-local`)
    is asked for: the config file and its `--set` items, the run folder (None: a new one under
    common_args.output_dir), whether to start the services on free loopback ports
    (`--local-services`), where the run's lines go and how long it may take (None: no limit);
    cross-device only: how many emulated devices one process plays (`--devices-per-process`)."""

    config_path: str
    overrides: list[str] = field(default_factory=list)
    run_dir: str | None = None
    local_services: bool = False
    echo: Callable[[str], None] = print
    timeout_s: float | None = None
    devices_per_process: int = 1


def placeholder_services() -> dict[str, dict[str, Any]]:
    """Broker and bucket settings for an MQTT_S3 config launched with `--local-services`: the config
    must name both to load, and the launcher replaces them with the services it starts."""
    return {
        "customized_training_mqtt_config": {"BROKER_HOST": "127.0.0.1", "BROKER_PORT": 1},
        "customized_training_s3_config": {
            "CN_S3_ENDPOINT": "http://127.0.0.1:1",
            "CN_S3_AKI": "k",
            "CN_S3_SAK": "s",
            "BUCKET_NAME": "fes",
        },
    }


class LocalRun:
    """The processes a launcher starts on this machine for one run (`cross-silo-local`,
    `cross-device-local`): the services it started (broker, bucket), then the children, which
    share one environment, one line queue and `<run_dir>/logs/`. `close` stops them all and
    releases the run directory's lock, whatever ended the launch."""

    def __init__(self) -> None:
        self.services: list[Service] = []
        self.children: dict[str, Child] = {}
        self.lines: queue.Queue = queue.Queue()
        self.path: Path | None = None  # the run directory, locked, once it exists
        self.env: dict[str, str] = {}

    def prepare(self, torch_threads: int, processes: int) -> None:
        """Before the first child: their environment (`processes` of them computing here) and
        `<run_dir>/logs/`."""
        self.env = child_env(self.path, process_threads(torch_threads, processes))
        (self.path / "logs").mkdir(exist_ok=True)

    def start(self, kind: type[Child], name: str, cmd: list[str], log_name: str) -> None:
        self.children[name] = kind(name, cmd, self.path / "logs" / log_name, self.env, self.lines)

    def write_pids(self) -> None:
        """`<run_dir>/processes.json`: every child's and service's pid."""
        pids = {name: c.proc.pid for name, c in self.children.items()} | {s.name: s.pid for s in self.services}
        (self.path / "processes.json").write_text(json.dumps(pids, indent=2))

    def close(self) -> None:
        from fedml_fes.runtime.rundir import release_run_dir

        for child in self.children.values():
            child.stop()
        for service in self.services:
            service.stop()
        if self.path is not None:
            release_run_dir(self.path)


def find_mosquitto() -> str:
    found = shutil.which("mosquitto") or next((p for p in MOSQUITTO_PATHS if os.access(p, os.X_OK)), None)
    if not found:
        raise FesError(
            "mosquitto not found: install it (Debian/Ubuntu: apt-get install mosquitto; macOS: brew install mosquitto)"
        )
    return found


def _password_file(path: Path, users: dict[str, str], mosquitto: str) -> None:
    tool = shutil.which("mosquitto_passwd") or str(Path(mosquitto).parent.parent / "bin" / "mosquitto_passwd")
    path.write_text("")
    for user, password in users.items():
        out = subprocess.run([tool, "-b", str(path), user, password], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise FesError(f"mosquitto_passwd failed: {out.stderr.strip() or out.stdout.strip()}")


def mqtt_acl(run_id: str, server_id: int, silo_ids: dict[int, int]) -> str:
    """A mosquitto ACL for one run under TLS, users being certificate names (`rank-N`): each
    process publishes only on the topics FedML sends its own messages on
    (`mqtt_s3_multi_clients_comm_manager.py:248-321`: the server on
    `fedml_<run>_<server>_<silo>`, silo s on `fedml_<run>_<s>`) and reads only those meant for
    it; the status topics (`flserver/`, `flclient/`: last wills) go one way each."""
    prefix = f"fedml_{run_id}_"
    lines = [f"user {rank_name(0)}"]
    for wire in silo_ids.values():
        lines += [f"topic write {prefix}{server_id}_{wire}", f"topic read {prefix}{wire}"]
    lines += ["topic readwrite flserver/#", "topic read flclient/#", ""]
    for rank, wire in sorted(silo_ids.items()):
        lines += [
            f"user {rank_name(rank)}",
            f"topic write {prefix}{wire}",
            f"topic read {prefix}{server_id}_{wire}",
            "topic write flclient/#",
            "topic read flserver/#",
            "",
        ]
    return "\n".join(lines)


def start_mosquitto(
    workdir: Path,
    port: int | None = None,
    users: dict[str, str] | None = None,
    timeout_s: float = 10.0,
    tls: TlsFiles | None = None,
    acl: str | None = None,
) -> Service:
    """mosquitto on 127.0.0.1 only; anonymous unless `users` (name -> password) is given.
    With `tls` (the broker's CA, certificate and key) it takes TLS connections only, from
    clients with a certificate signed by that CA, whose name is the user `acl` names."""
    exe = find_mosquitto()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    lines = [
        f"listener {port} 127.0.0.1",
        "persistence false",
        f"log_dest file {workdir / 'mosquitto.log'}",  # flushed per line (its stdout is not, into a file)
        f"allow_anonymous {'false' if users or tls else 'true'}",
    ]
    if tls is not None:
        lines += [
            f"cafile {tls.ca}",
            f"certfile {tls.cert}",
            f"keyfile {tls.key}",
            "require_certificate true",
            "use_identity_as_username true",
        ]
    if acl is not None:
        (workdir / "mosquitto.acl").write_text(acl)
        lines.append(f"acl_file {workdir / 'mosquitto.acl'}")
        # refusals ("Denied PUBLISH from rank-2 ...") are debug lines in mosquitto 2.0
        lines += [f"log_type {t}" for t in ("error", "warning", "notice", "information", "debug")]
    if users:
        _password_file(workdir / "mosquitto.passwd", users, exe)
        lines.append(f"password_file {workdir / 'mosquitto.passwd'}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lines.append("user root")  # else it drops to 'mosquitto', who cannot read a private workdir
    conf = workdir / "mosquitto.conf"
    conf.write_text("\n".join(lines) + "\n")
    log, early = workdir / "mosquitto.log", workdir / "mosquitto.out"  # early: errors before the log opens
    with early.open("w") as out:
        proc = subprocess.Popen(
            [exe, "-c", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
    wait_for_port("127.0.0.1", port, proc, "mosquitto", early, timeout_s)
    return Service(
        "mosquitto",
        proc,
        "127.0.0.1",
        port,
        log,
        {
            "BROKER_HOST": "127.0.0.1",
            "BROKER_PORT": port,
            "MQTT_KEEPALIVE": 60,
            **({"MQTT_USER": next(iter(users)), "MQTT_PWD": next(iter(users.values()))} if users else {}),
        },
    )


def start_s3(
    workdir: Path,
    port: int | None = None,
    bucket: str = "fes",
    timeout_s: float = 30.0,
    env: dict[str, str] | None = None,
    create_bucket: bool = True,
) -> Service:
    """moto's S3 server on 127.0.0.1 with `bucket` created; any keys work (moto checks none)."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        raise FesError(
            "a local S3 endpoint needs moto's server: pip install 'moto[server]==5.2.5' (or pip install -e '.[local]')"
        )
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = workdir / "moto.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            preexec_fn=die_with_parent,
        )
    wait_for_port("127.0.0.1", port, proc, "moto S3 server", log, timeout_s)
    config = {
        "CN_S3_ENDPOINT": f"http://127.0.0.1:{port}",
        "CN_REGION_NAME": "us-east-1",
        "CN_S3_AKI": "fes-local",
        "CN_S3_SAK": "fes-local-secret",
        "BUCKET_NAME": bucket,
    }
    service = Service("moto", proc, "127.0.0.1", port, log, config)
    if create_bucket:
        try:
            s3_client(config).create_bucket(Bucket=bucket)
        except Exception as e:
            service.stop()
            raise FesError(f"could not create bucket '{bucket}' on the local S3 endpoint: {e}") from None
    return service


def s3_client(config: dict[str, Any]) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=config.get("CN_S3_ENDPOINT"),
        region_name=config.get("CN_REGION_NAME"),
        aws_access_key_id=config["CN_S3_AKI"],
        aws_secret_access_key=config["CN_S3_SAK"],
        config=Config(signature_version="s3v4", retries={"max_attempts": 2}),
    )
