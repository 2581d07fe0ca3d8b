"""`fedml-fes cross-silo-local`: a whole cross-silo run on this machine, supervised.

Starts the server and K silo processes (each with its own run directory, as separate
devices would have), and with `--local-services` what they need on free loopback ports:
mosquitto and a moto S3 endpoint for MQTT_S3, or a fresh gRPC ipconfig. It shows the
server's lines and the silos' notable ones, keeps every process's full output under
`<run_dir>/logs/`, and lists the pids in `<run_dir>/processes.json`.

Ending: when the server exits, silos get a short grace period, then everything left is
stopped. A silo failing before all have joined is bad input: everything stops at once and
its line is the error. A silo dying later is a dropout the server copes with. Every child
also dies with the launcher itself (PR_SET_PDEATHSIG), so nothing is orphaned even if the
launcher is killed.
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
from fedml_fes_plugins.cross_silo.certs import broker_files, comm_keys, make_run_certs
from fedml_fes_plugins.cross_silo.config import CrossSiloSettings, load_cross_silo
from fedml_fes_plugins.cross_silo.main import TAG
from fedml_fes_plugins.cross_silo.services import Child as ServiceChild
from fedml_fes_plugins.cross_silo.services import (
    LocalJob,
    LocalRun,
    Service,
    free_port,
    mqtt_acl,
    start_mosquitto,
    start_s3,
)
from fedml_fes_plugins.cross_silo.tls import KEYS as TLS_KEYS

SILO_GRACE_S = 15.0


class Child(ServiceChild):
    """A server or silo process: its tagged lines go to the launcher, then None when it ends."""

    def forward(self, line: str) -> str | None:
        return line[len(TAG) :].rstrip("\n") if line.startswith(TAG) else None

    def finished(self, lines: queue.Queue) -> None:
        lines.put((self.name, None))


def _local_grpc_ipconfig(path: Path, silo_num: int) -> None:
    rows = ["eid,rank,grpc_server_ip,grpc_server_port"]
    rows += [f"{r},{r},127.0.0.1,{free_port()}" for r in range(silo_num + 1)]
    path.write_text("\n".join(rows) + "\n")


def _prepare(
    job: LocalJob, services: list[Service], resume: bool = False, tls: bool = True
) -> tuple[Path, Path, Any, CrossSiloSettings]:
    """Run dir, services, and the effective config every process reads, checked. `resume`: the
    run in the job's run_dir can be continued (else a run left unfinished there is refused). `tls`:
    local services get a throw-away CA and run over TLS unless the config names its own files."""
    from fedml_fes.config import CommConfig, config_from_dict, parse_overrides, read_sections
    from fedml_fes.runtime.checkpoint import check_start
    from fedml_fes.runtime.rundir import check_not_locked, make_run_dir, release_run_dir

    overrides = parse_overrides(job.overrides)
    raw = read_sections(job.config_path, overrides)
    probe = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    cfg = config_from_dict(probe, source=str(job.config_path))
    if job.run_dir:
        check_not_locked(job.run_dir)  # a live run's folder: one line, before reading its checkpoint
    point = check_start(cfg, job.run_dir, resume)
    if point is not None and point["completed"]:
        raise AlreadyCompleted(Path(job.run_dir), point["num_rounds"])
    path = make_run_dir(cfg, job.run_dir, lock=True)  # held until run_local returns; its server writes under it
    try:
        comm = raw.setdefault("comm_args", {})
        comm["run_id"] = comm.get("run_id") or f"fes-{path.name}"
        backend = str(cfg.comm.backend).upper()
        if job.local_services and tls and not any(comm.get(k) for k in TLS_KEYS):  # secure by default
            _local_tls(comm, path / "services" / "certs", _silo_num(comm, job.config_path, overrides, backend))
        if job.local_services and backend == "MQTT_S3" and not any(comm.get(k) for k in TLS_KEYS):
            services.append(start_mosquitto(path / "services" / "mosquitto"))
            services.append(start_s3(path / "services" / "s3"))
            comm["customized_training_mqtt_config"] = services[0].config
            comm["customized_training_s3_config"] = services[1].config
        elif job.local_services and backend == "MQTT_S3":
            broker = broker_files(Path(comm["tls_ca"]).parent)  # the broker's pair beside the CA
            silos = {r: r for r in range(1, int(comm.get("silo_num") or 0) + 1)}
            acl = mqtt_acl(comm["run_id"], 0, silos)
            services.append(start_mosquitto(path / "services" / "mosquitto", tls=broker, acl=acl))
            services.append(start_s3(path / "services" / "s3"))
            comm["customized_training_mqtt_config"] = services[0].config
            comm["customized_training_s3_config"] = services[1].config
        elif backend == "GRPC" and not job.local_services:  # absolute: the children need not share our cwd
            comm["grpc_ipconfig_path"] = str(
                Path(comm.get("grpc_ipconfig_path") or CommConfig().grpc_ipconfig_path).resolve()
            )
        elif job.local_services and backend == "GRPC":
            silo_num = _silo_num(comm, job.config_path, overrides, backend)
            _local_grpc_ipconfig(path / "grpc_ipconfig.csv", silo_num)
            comm["grpc_ipconfig_path"] = str(path / "grpc_ipconfig.csv")
            comm["silo_num"] = silo_num
        effective = path / "cross_silo.yaml"
        effective.write_text(yaml.safe_dump(raw, sort_keys=False))
        cfg, settings = load_cross_silo(effective)
    except BaseException:
        release_run_dir(path)
        raise
    return path, effective, cfg, settings


def _silo_num(comm: dict[str, Any], config_path: str, overrides: dict[str, Any], backend: str) -> int:
    """comm_args.silo_num, or with gRPC and 0 there, the count of the configured ipconfig."""
    silo_num = int(comm.get("silo_num") or 0)
    if silo_num < 1 and backend == "GRPC":
        _, s = load_cross_silo(config_path, overrides)
        silo_num = s.silo_num
    return silo_num


def _local_tls(comm: dict[str, Any], folder: Path, silo_num: int) -> None:
    """A throw-away CA and certificates for the server, each silo and the broker; the run
    config points every process at its own (`{rank}`)."""
    make_run_certs(folder, max(silo_num, 1))
    comm.update(comm_keys(folder))


class AlreadyCompleted(Exception):
    """--resume of a run that has completed: nothing is started."""

    def __init__(self, run_dir: Path, num_rounds: int):
        super().__init__(f"the run in {run_dir} already completed all {num_rounds} rounds; nothing to resume")
        self.run_dir = run_dir


def run_local(job: LocalJob, resume: bool = False, tls: bool = True) -> dict[str, Any]:
    """Run server + silos here; returns the server's summary, raises FesError with the error line.
    `resume`: continue the run in the job's run_dir after its checkpointed round (the silos
    restore their devices to it); a completed run's summary is returned as it is. `tls`: local
    services run over TLS with a throw-away CA unless the config names its own files."""
    from fedml_fes.runtime.preview import check_before_run
    from fedml_fes_plugins.cross_silo.checks import check_port, preflight
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    run = LocalRun()
    try:
        try:
            path, effective, cfg, settings = _prepare(job, run.services, resume, tls)
        except AlreadyCompleted as done:
            job.echo(str(done))
            return json.loads((done.run_dir / "summary.json").read_text())
        run.path = path  # locked: `close` releases it
        check_before_run(cfg)
        if settings.backend == "GRPC":
            for rank, peer in sorted(settings.grpc_peers.items()):
                if rank <= settings.silo_num:
                    check_port(peer.ip, peer.port, f"rank {rank} in {settings.grpc_ipconfig_path}")
        else:
            preflight(settings, 0)
        ensure_mlm_build(cfg, job.echo)
        run.prepare(cfg.common.torch_threads, 1 + len(settings.ranks))  # the server and the silos
        base = [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "fedml_fes_plugins.cross_silo.main",
            "--cf",
            str(effective),
            "--tagged-output",
        ]
        server = base + ["--role", "server", "--rank", "0", "--run-dir", str(path)] + (["--resume"] if resume else [])
        run.start(Child, "server", server, "server.log")
        for rank in settings.ranks:
            silo = base + ["--role", "client", "--rank", str(rank), "--run-dir", str(path / "silos" / str(rank))]
            run.start(Child, f"silo{rank}", silo, f"silo{rank}.log")
        run.write_pids()
        error = _supervise(run.children, run.lines, job.echo, job.timeout_s)
        server_rc = run.children["server"].proc.returncode
    finally:
        run.close()
    if error or server_rc != 0:
        raise FesError(error or f"the server exited with code {server_rc} (see {path / 'logs' / 'server.log'})")
    return json.loads((path / "summary.json").read_text())


def _supervise(
    children: dict[str, Child], lines: queue.Queue, echo: Callable[[str], None], timeout_s: float | None
) -> str | None:
    """Follow the run until the server ends; the error line, if any."""
    server = children["server"]
    deadline = time.monotonic() + timeout_s if timeout_s else None
    started, error = False, None
    reported: set[str] = set()
    while True:
        if deadline and time.monotonic() > deadline:
            return f"the cross-silo run did not end within {timeout_s:g}s"
        try:
            name, text = lines.get(timeout=0.5)
        except queue.Empty:
            if server.proc.poll() is not None and not server.reader.is_alive() and lines.empty():
                break
            name, text = None, None
        if text is not None:
            if text.startswith("error: "):
                if name == "server":
                    error = error or text[len("error: ") :]
                elif not started:
                    return f"{_who(name)}: {text[len('error: ') :]}"
                else:
                    echo(f"{_who(name)}: {text}")
            else:
                started = started or (name == "server" and text.startswith("silos joined"))
                echo(text)
        for cname, child in children.items():
            rc = child.proc.poll()
            if cname == "server" or rc is None or cname in reported:
                continue
            reported.add(cname)
            if rc != 0 and not started:
                child.reader.join(timeout=2.0)
                while not lines.empty():  # its error line, if it printed one
                    n, t = lines.get_nowait()
                    if n == cname and t and t.startswith("error: "):
                        return f"{_who(cname)}: {t[len('error: ') :]}"
                return f"{_who(cname)} exited with code {rc} at start (see {child.log_path})"
            if rc != 0:
                echo(f"{_who(cname)} exited with code {rc}")
    end = time.monotonic() + SILO_GRACE_S
    while time.monotonic() < end and any(c.proc.poll() is None for c in children.values()):
        time.sleep(0.1)
    return error


def _who(name: str) -> str:
    return name.replace("silo", "silo rank ") if name.startswith("silo") else name
