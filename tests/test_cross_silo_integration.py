"""Cross-silo runs for real: separate server and silo processes over gRPC and over MQTT_S3
(mosquitto + a moto S3 endpoint on loopback), with silos killed, restarted and misbehaving.

Every process a test starts is killed in its `finally`; every wait has a deadline.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import yaml

from fedml_fes.errors import FesError

from .conftest import small_config, start_cross_silo_node, write_config
from .test_cross_silo_services import ensure_mosquitto

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
RUN_LIMIT_S = 500
# two silos, so that one can fail beside a healthy one; each more silo is one more process,
# about 13 s of CPU importing torch, transformers and FedML before its first round
SILOS = 2


@pytest.fixture(scope="session")
def mosquitto_exe() -> str:
    return ensure_mosquitto()


def _config(tmp_path: Path, model_dir: str, backend: str, name: str = "c.yaml", **sections) -> Path:
    raw = small_config(tmp_path, model_dir, **sections)
    raw["common_args"]["training_type"] = "cross_silo"
    raw.setdefault("comm_args", {}).update(
        {"backend": backend, "silo_num": SILOS, "join_timeout_s": 240, **sections.get("comm_args", {})}
    )
    return write_config(tmp_path / name, raw)


def _in_process(cf: Path, run_dir: Path) -> dict:
    from fedml_fes.config import load_config
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    cfg = load_config(cf)
    return run_in_process(cfg, make_run_dir(cfg, str(run_dir)), progress=False, echo=lambda _l: None)


def _rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _round_wall(run_dir: Path) -> float:
    rows = _rows(run_dir)
    return sum(float(r["round_wall_s"]) for r in rows) / len(rows)


def _alive(pid: int) -> bool:
    """Running, not a zombie (a killed launcher's children are reaped by init, or not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def _wait_dead(pids, timeout_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


class Processes:
    """Cross-silo processes started by a test; all killed on exit."""

    def __init__(self, cf: Path, logs: Path):
        self.cf, self.logs = cf, logs
        self.procs: dict[str, subprocess.Popen] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, role: str, rank: int, run_dir: Path, *extra: str) -> subprocess.Popen:
        self.procs[name] = start_cross_silo_node(self.cf, role, rank, run_dir, self.logs / f"{name}.log", *extra)
        return self.procs[name]

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for(self, name: str, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log(name):
            if time.monotonic() > deadline or self.procs[name].poll() is not None:
                raise AssertionError(f"'{text}' not in {name}'s output:\n{self.log(name)[-3000:]}")
            time.sleep(0.2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _ipconfig(path: Path, silo_num: int = SILOS) -> str:
    from fedml_fes_plugins.cross_silo.services import free_port

    rows = ["eid,rank,grpc_server_ip,grpc_server_port"] + [
        f"{r},{r},127.0.0.1,{free_port()}" for r in range(silo_num + 1)
    ]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_grpc_run_matches_in_process(tmp_path, tiny_model_dir, clean_home):
    """Same seed, same per-round accuracies; nothing written outside the run directory."""
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    cf = _config(tmp_path, tiny_model_dir, "GRPC", comm_args={"round_timeout_s": 120})
    lines: list[str] = []
    summary = run_local(
        LocalJob(str(cf), run_dir=str(tmp_path / "silo"), local_services=True, echo=lines.append, timeout_s=RUN_LIMIT_S)
    )
    local = _in_process(cf, tmp_path / "local")
    assert summary["status"] == "completed" and summary["runtime"] == "fedml_cross_silo_grpc"
    assert summary["per_round"] == local["per_round"] and len(local["per_round"]) == 3
    assert any(line.startswith(f"silos joined: ranks {list(range(1, SILOS + 1))} over GRPC (TLS)") for line in lines)
    assert any(line.startswith("round   2: test_acc=") for line in lines)
    assert [r["clients"] for r in _rows(tmp_path / "silo")] == [r["clients"] for r in _rows(tmp_path / "local")]
    assert list(clean_home.iterdir()) == []
    comm = yaml.safe_load((tmp_path / "silo" / "cross_silo.yaml").read_text())["comm_args"]
    assert comm["tls_cert"].endswith("rank-{rank}.crt")  # --local-services runs over mutual TLS
    print(
        f"\nper-round wall, tiny model: in-process {_round_wall(tmp_path / 'local'):.3f}s, "
        f"cross-silo gRPC {_round_wall(tmp_path / 'silo'):.3f}s"
    )


def test_mqtt_s3_run_survives_a_silo_killed_mid_round(tmp_path, tiny_model_dir, mosquitto_exe, faults):
    """mosquitto + moto S3 on loopback; silo 2 is SIGKILLed while it holds round tasks: the
    server waits round_timeout_s, aggregates what arrived, logs the dropout and finishes."""
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    cf = _config(tmp_path, tiny_model_dir, "MQTT_S3", train_args={"comm_round": 5}, comm_args={"round_timeout_s": 6})
    faults(stall_in_round=1, stall_on_rank=2, stall_s=300)
    run_dir = tmp_path / "silo"
    lines: list[str] = []
    killed: dict[str, int] = {}

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("silo 2: stalling in round") and not killed:
            pid = json.loads((run_dir / "processes.json").read_text())["silo2"]
            os.kill(pid, signal.SIGKILL)
            killed["round"] = int(line.split("round ")[1].split()[0])

    summary = run_local(LocalJob(str(cf), run_dir=str(run_dir), local_services=True, echo=echo, timeout_s=RUN_LIMIT_S))
    assert killed, "silo 2 never got tasks to stall on"
    r = killed["round"]
    assert summary["status"] == "completed" and summary["rounds_completed"] == 5
    assert summary["runtime"] == "fedml_cross_silo_mqtt_s3"
    assert len(_rows(run_dir)) == 5
    events = (run_dir / "events.log").read_text()
    assert "silo rank 2 dropped: sent nothing within 6s (comm_args.round_timeout_s)" in events
    assert "silo rank 2 exited with code -9" in lines
    local = _in_process(cf, tmp_path / "local")
    assert summary["per_round"][:r] == local["per_round"][:r]  # identical until the dropout
    pids = json.loads((run_dir / "processes.json").read_text())
    assert set(pids) == {"server", *(f"silo{r}" for r in range(1, SILOS + 1)), "mosquitto", "moto"}
    assert _wait_dead(pids.values(), 5) == []
    broker_log = (run_dir / "services" / "mosquitto" / "mosquitto.log").read_text()
    assert all(f"u'rank-{r}'" in broker_log for r in range(SILOS + 1))  # TLS: each process is its certificate
    assert "Denied" not in broker_log  # the ACL lets every process do its job
    print(
        f"\nper-round wall, tiny model: in-process {_round_wall(tmp_path / 'local'):.3f}s, "
        f"cross-silo MQTT_S3 {_round_wall(run_dir):.3f}s (round {r} waited for the timeout)"
    )


def _owned_by(rank: int, clients: str, silo_num: int = SILOS) -> list[int]:
    return [int(c) for c in clients.split() if 1 + int(c) % silo_num == rank]


def test_grpc_silo_killed_and_restarted_continues_from_its_stored_state(tmp_path, tiny_model_dir, faults):
    """FedFSL (pseudo labels on the silo's disk): silo 2 is killed mid-round and restarted on
    the same directory; the server drops the lost tasks, takes it back with its devices'
    stored labels, and the run completes with silo 2's devices training again."""
    cf = _config(
        tmp_path,
        tiny_model_dir,
        "GRPC",
        train_args={"method": "fedfsl", "comm_round": 6},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args={"label_clients": 3, "per_pass": 10},
        comm_args={"grpc_ipconfig_path": _ipconfig(tmp_path / "ip.csv"), "round_timeout_s": 240},
    )
    faults(stall_in_round=2, stall_on_rank=2, stall_s=300)
    run_dir = tmp_path / "run"
    with Processes(cf, tmp_path / "logs") as procs:
        server = procs.start("server", "server", 0, run_dir)
        for rank in range(1, SILOS + 1):
            procs.start(f"silo{rank}", "client", rank, run_dir / "silos" / str(rank))
        procs.wait_for("silo2", "stalling in round", RUN_LIMIT_S)
        store = run_dir / "silos" / "2" / "clients"
        stored = {
            int(p.parent.name): len(json.loads(p.read_text())["example_ids"])
            for p in store.glob("*/pseudo_labels.json")
        }
        procs.procs["silo2"].send_signal(signal.SIGKILL)
        procs.procs["silo2"].wait()
        os.environ.pop("FES_TEST_FAULTS")  # the restarted silo does not stall (monkeypatch restores it)
        procs.start("silo2-again", "client", 2, run_dir / "silos" / "2")
        assert server.wait(timeout=RUN_LIMIT_S) == 0, procs.log("server")[-3000:]
        for name in ("silo1", "silo2-again", *(f"silo{r}" for r in range(3, SILOS + 1))):
            assert procs.procs[name].wait(timeout=30) == 0, procs.log(name)[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 6
    events = (run_dir / "events.log").read_text().splitlines()
    rejoined = next(i for i, e in enumerate(events) if "silo rank 2 rejoined (restarted)" in e)
    assert stored, "silo 2's devices held no pseudo labels before the kill: the test proves nothing"
    for client, count in stored.items():
        assert f"client {client}: {count} pseudo labels" in events[rejoined]
    assert any("silo rank 2 dropped: restarted" in e for e in events[rejoined:])
    assert not any("silo rank 2 is offline" in e for e in events[rejoined:])
    assert "resuming with stored state (client " in procs.log("silo2-again")
    rejoin_round = int(events[rejoined].split("before round ")[1].split()[0])
    later = [r for r in _rows(run_dir) if int(r["round"]) > rejoin_round]
    assert any(_owned_by(2, r["clients"]) for r in later), "silo 2's devices never trained after rejoining"


def _rogue_silo(cf: Path, rank: int, stop: threading.Event, sent: list[str]) -> None:
    """A silo speaking the protocol with bad updates: NaN, wrong shapes, garbage, foreign clients."""
    import torch

    from fedml_fes_plugins.adapters import messages as m
    from fedml_fes_plugins.adapters.wire import tensors_from_wire
    from fedml_fes_plugins.cross_silo import protocol as p
    from fedml_fes_plugins.cross_silo.config import load_cross_silo
    from fedml_fes_plugins.cross_silo.node import QueuedCommManager
    from fedml_fes_plugins.cross_silo.transport import fedml_args

    cfg, settings = load_cross_silo(cf)
    node = QueuedCommManager(fedml_args(cfg, settings, rank), settings, rank)

    def bad_payload(kind: str, tasks: list, params) -> object:
        if kind == "garbage":
            return "not a list of updates"
        out = []
        for t in tasks:
            bad = OrderedDict((k, v.clone()) for k, v in params.items())
            name = next(iter(bad))
            if kind == "nan":
                bad[name].view(-1)[0] = float("nan")
            elif kind == "shape":
                bad[name] = torch.zeros(3, 3, dtype=bad[name].dtype)
            out.append(
                {
                    "round_idx": t.round_idx,
                    "client_id": t.client_id if kind != "foreign" else 0,
                    "params": bad,
                    "weight": 5.0,
                    "metrics": {},
                    "report": {},
                }
            )
        return out

    def logic() -> None:
        kinds = ["nan", "shape", "garbage", "foreign"]
        deadline = time.monotonic() + RUN_LIMIT_S
        joined, last = False, 0.0
        while not stop.is_set() and time.monotonic() < deadline:
            if not joined and time.monotonic() - last > 1:
                last = time.monotonic()
                node.send(
                    node.message(
                        m.MSG_C2S_JOIN,
                        0,
                        **{
                            m.KEY_RANK: rank,
                            m.KEY_SESSION: "rogue",
                            m.KEY_FINGERPRINT: settings.fingerprint,
                            m.KEY_STATE: {},
                        },
                    )
                )
            got = node.next_message(0.5)
            if got is None:
                continue
            msg_type, msg = got
            if msg_type == m.MSG_S2C_WELCOME:
                joined = True
            elif msg_type == m.MSG_S2C_FINISH:
                return
            elif msg_type == m.MSG_S2C_TASKS:
                tasks = p.parse_tasks(msg.get(m.KEY_TASKS))
                reply = node.message(
                    m.MSG_C2S_UPDATES, 0, **{m.KEY_ROUND: msg.get(m.KEY_ROUND), m.KEY_PHASE: msg.get(m.KEY_PHASE)}
                )
                if tasks:
                    kind = kinds[len(sent) % len(kinds)]
                    sent.append(kind)
                    # the global arrives as arrays (adapters/wire.py); the rogue answers with tensors
                    reply.add_params(p.PAYLOAD, bad_payload(kind, tasks, tensors_from_wire(msg.get(p.PAYLOAD))))
                node.send(reply)

    node.run_role(logic)


def test_malformed_and_non_finite_updates_are_rejected_never_averaged(tmp_path, tiny_model_dir):
    cf = _config(
        tmp_path,
        tiny_model_dir,
        "GRPC",
        train_args={"comm_round": 6, "client_num_per_round": 4},
        comm_args={"silo_num": 3, "grpc_ipconfig_path": _ipconfig(tmp_path / "ip.csv", 3), "round_timeout_s": 120},
    )  # two silo processes and the rogue, a thread here, as rank 3
    run_dir = tmp_path / "run"
    stop, sent = threading.Event(), []
    rogue = threading.Thread(target=_rogue_silo, args=(cf, 3, stop, sent), daemon=True)
    try:
        with Processes(cf, tmp_path / "logs") as procs:
            server = procs.start("server", "server", 0, run_dir)
            for rank in (1, 2):
                procs.start(f"silo{rank}", "client", rank, run_dir / "silos" / str(rank))
            rogue.start()
            assert server.wait(timeout=RUN_LIMIT_S) == 0, procs.log("server")[-3000:]
    finally:
        stop.set()
        rogue.join(timeout=30)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 6
    assert summary["final"] == summary["final"]  # not NaN
    assert len(sent) >= 3, sent
    events = (run_dir / "events.log").read_text()
    expected = {
        "nan": "has non-finite values",
        "shape": "is ((3, 3), torch.float32)",
        "garbage": "rejected from silo rank 3: payload is a str, not a list of updates",
        "foreign": "rejected from silo rank 3: update for client 0, which this silo was not asked to play",
    }
    for kind in set(sent):
        assert expected[kind] in events, (kind, events)
    for row in _rows(run_dir):  # the rogue's devices (2, 5) never made it into an average
        assert not _owned_by(3, row["clients"], silo_num=3)
    assert any(int(r["updates_accepted"]) < int(r["updates_planned"]) for r in _rows(run_dir))


def test_launcher_cleans_up_when_the_run_fails(tmp_path, tiny_model_dir, mosquitto_exe, faults):
    """Every device raises in round 1: one error line, every process (broker and S3 too) gone."""
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    cf = _config(tmp_path, tiny_model_dir, "MQTT_S3", train_args={"comm_round": 4}, comm_args={"round_timeout_s": 60})
    faults(raise_in_round=1)
    run_dir = tmp_path / "silo"
    with pytest.raises(FesError) as e:
        run_local(
            LocalJob(str(cf), run_dir=str(run_dir), local_services=True, echo=lambda _l: None, timeout_s=RUN_LIMIT_S)
        )
    assert "round 1: no valid client update to aggregate" in str(e.value) and "\n" not in str(e.value)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1
    assert "injected fault in round 1" in (run_dir / "events.log").read_text()
    pids = json.loads((run_dir / "processes.json").read_text())
    assert len(pids) == SILOS + 3 and _wait_dead(pids.values(), 5) == []  # with the broker and S3


def test_killing_the_launcher_leaves_no_process_behind(tmp_path, tiny_model_dir, mosquitto_exe):
    cf = _config(tmp_path, tiny_model_dir, "MQTT_S3", train_args={"comm_round": 200}, comm_args={"round_timeout_s": 60})
    run_dir = tmp_path / "silo"
    fes = Path(sys.executable).parent / "fedml-fes"
    launcher = subprocess.Popen(
        [str(fes), "cross-silo-local", "--local-services", "--cf", str(cf), "--run-dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: dict = {}
    try:
        deadline = time.monotonic() + RUN_LIMIT_S
        while not (run_dir / "metrics.csv").exists():
            assert time.monotonic() < deadline and launcher.poll() is None, "the run never finished a round"
            time.sleep(0.5)
        pids = json.loads((run_dir / "processes.json").read_text())
        assert all(_alive(p) for p in pids.values())
        launcher.kill()
        launcher.wait()
        assert _wait_dead(pids.values(), 20) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_mlops_packages_build_and_run_like_the_octopus_agent(tmp_path, tiny_model_dir, mosquitto_exe):
    """`fedml build` client/server packages, then run them the way FedML's agent does: unzip,
    rewrite config/fedml_config.yaml with the run's values, start the entry with --cf --rank
    --role. Edge ids are not ranks, as on the platform."""
    import zipfile

    import yaml

    from fedml_fes_plugins.cross_silo.services import start_mosquitto, start_s3

    dest = tmp_path / "build"
    out = subprocess.run(
        ["bash", str(REPO / "deploy" / "build_mlops_packages.sh"), str(dest)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    packages = {kind: dest / "dist-packages" / f"{kind}-package.zip" for kind in ("client", "server")}
    wheel = zipfile.ZipFile(next((dest / "stage" / "src" / "wheels").glob("fedml_fes-*.whl"))).namelist()
    for init in (REPO / "fedml_fes").rglob("__init__.py"):  # every core package ships (the edge installs it)
        assert init.relative_to(REPO).as_posix() in wheel, init
    for kind, zip_path in packages.items():
        names = zipfile.ZipFile(zip_path).namelist()
        for member in (
            "fedml/fes_mlops_entry.py",
            "fedml/config/fedml_config.yaml",
            "fedml/config/fes_config.yaml",
            "fedml/config/bootstrap.sh",
            "conf/fedml.yaml",
        ):
            assert f"{kind}-package/{member}" in names, (kind, member)
        assert any(n.startswith(f"{kind}-package/fedml/wheels/fedml_fes-") for n in names)
    broker, s3 = start_mosquitto(tmp_path / "mq"), start_s3(tmp_path / "s3")
    edges, server_id, run_id = [1001, 1002], 77, 4242
    overrides = {
        "model_args.model": tiny_model_dir,
        "model_args.max_seq_length": 32,
        "common_args.torch_threads": 1,
        "data_args.client_num_in_total": 8,
        "data_args.gold_labels": 32,
        "data_args.gold_sparsity": 100,
        "data_args.max_test_examples": 60,
        "data_args.max_train_examples": 400,
        "train_args.comm_round": 2,
        "train_args.client_num_per_round": 3,
        "train_args.learning_rate": 0.001,
        "comm_args.join_timeout_s": 240,
        "comm_args.round_timeout_s": 120,
    }

    def install(kind: str, rank: int, edge_id: int) -> Path:
        root = tmp_path / f"agent{rank}"
        zipfile.ZipFile(packages[kind]).extractall(root)
        fedml_dir = root / f"{kind}-package" / "fedml"
        conf = fedml_dir / "config"
        (conf / "mqtt_config.yaml").write_text(yaml.safe_dump(broker.config))
        (conf / "s3_config.yaml").write_text(yaml.safe_dump(s3.config))
        shell = yaml.safe_load((conf / "fedml_config.yaml").read_text())
        shell["comm_args"].update(
            mqtt_config_path=str(conf / "mqtt_config.yaml"), s3_config_path=str(conf / "s3_config.yaml")
        )
        shell["common_args"]["using_mlops"] = True
        shell["train_args"].update(
            run_id=run_id,
            client_num_in_total=len(edges),
            client_num_per_round=len(edges),
            client_id=edge_id,
            server_id=str(server_id),
            client_id_list=str(edges if rank == 0 else [edge_id]).replace(" ", ""),
        )
        shell["device_args"]["worker_num"] = len(edges)
        shell["fes_overrides"] = overrides
        (conf / "fedml_config.yaml").write_text(yaml.safe_dump(shell))
        return fedml_dir

    procs: list[subprocess.Popen] = []
    try:
        dirs = [install("server", 0, server_id)] + [install("client", r, e) for r, e in enumerate(edges, start=1)]
        for rank, fedml_dir in enumerate(dirs):
            role = "server" if rank == 0 else "client"
            with (tmp_path / f"entry{rank}.log").open("w") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-W",
                            "ignore",
                            "fes_mlops_entry.py",
                            "--cf",
                            "config/fedml_config.yaml",
                            "--rank",
                            str(rank),
                            "--role",
                            role,
                        ],
                        cwd=fedml_dir,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, "OMP_NUM_THREADS": "1"},
                    )
                )
        assert procs[0].wait(timeout=RUN_LIMIT_S) == 0, (tmp_path / "entry0.log").read_text()[-3000:]
        for rank in (1, 2):
            assert procs[rank].wait(timeout=30) == 0, (tmp_path / f"entry{rank}.log").read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        broker.stop()
        s3.stop()
    summary = json.loads(next((dirs[0] / "runs").glob("*/summary.json")).read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2
    assert "silos joined: ranks [1, 2] over MQTT_S3" in (tmp_path / "entry0.log").read_text()


def test_grpc_server_killed_while_checkpointing_resumes_to_the_uninterrupted_run(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    """FedFSL over gRPC (pseudo labels on the silos' disks): the server is SIGKILLed while it
    saves round 1's checkpoint, after the silos labeled in round 1. Re-running without --resume
    is refused; `cross-silo-local --resume` continues after round 0, every silo restores its
    devices to its snapshot of round 0, and the run ends as the uninterrupted in-process run."""
    from fedml_fes_plugins.cli.main import main
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    from .test_resume import KILLER

    cf = _config(
        tmp_path,
        tiny_model_dir,
        "GRPC",
        train_args={"method": "fedfsl", "comm_round": 3},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args={"label_clients": 3, "per_pass": 10},
        comm_args={"round_timeout_s": 120},
    )
    killer = tmp_path / "killer"
    killer.mkdir()
    (killer / "sitecustomize.py").write_text(KILLER)
    run_dir = tmp_path / "run"
    with monkeypatch.context() as env:  # the launcher passes its environment to the server and silos
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(killer), os.environ.get("PYTHONPATH")])))
        env.setenv("FES_TEST_KILL", "save:1")
        with pytest.raises(FesError, match="the server exited with code -9"):
            run_local(
                LocalJob(
                    str(cf), run_dir=str(run_dir), local_services=True, echo=lambda _l: None, timeout_s=RUN_LIMIT_S
                )
            )
    labeled = sorted((run_dir / "silos").glob("*/clients/*/pseudo_labels.json"))
    assert labeled and (run_dir / "checkpoint.pt").is_file()
    assert any((run_dir / "silos").glob("*/checkpoint_clients/round-00000"))

    capsys.readouterr()
    assert main(["cross-silo-local", "--cf", str(cf), "--run-dir", str(run_dir), "--local-services"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds an unfinished run (rounds 0-0 of 3 done): pass --resume" in err[0], err

    lines: list[str] = []
    job = LocalJob(str(cf), run_dir=str(run_dir), local_services=True, echo=lines.append, timeout_s=RUN_LIMIT_S)
    summary = run_local(job, resume=True)
    local = _in_process(cf, tmp_path / "local")
    assert summary["status"] == "completed" and summary["per_round"] == local["per_round"]
    assert any(line.startswith("resuming after round 0 of 3") for line in lines), lines
    assert any("devices restored to the end of round 0" in line for line in lines), lines
    keep = ("round", "clients", "pseudo_total", "pseudo_labeled", "pseudo_acc", "test_acc", "train_loss")
    assert [[r[k] for k in keep] for r in _rows(run_dir)] == [[r[k] for k in keep] for r in _rows(tmp_path / "local")]

    def labels(paths) -> dict:
        return {p.parent.name: p.read_bytes() for p in paths}

    assert labels((run_dir / "silos").glob("*/clients/*/pseudo_labels.json")) == labels(
        (tmp_path / "local" / "clients").glob("*/pseudo_labels.json")
    )
