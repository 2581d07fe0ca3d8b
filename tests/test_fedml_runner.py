"""FeS driven by FedML's own runtime: `mpi/fedml_fes_main.py` (a FedML user's FedMLRunner
script) under a real `mpirun -np 3`, against the in-process runtime on the same config."""

import contextlib
import json
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fedml_fes.config import config_from_dict, load_config
from fedml_fes.errors import FesError
from fedml_fes.runtime.payload import (
    PLAN_KEY,
    assign_slots,
    pack_error,
    pack_plan,
    pack_updates,
    unpack_plan,
    unpack_updates,
)
from fedml_fes.runtime.rundir import make_run_dir
from fedml_fes.runtime.tasks import ClientTask, ClientUpdate

from .conftest import small_config, write_config

REPO = Path(__file__).resolve().parents[1]

FES_KEYS = {
    "data_args": {"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
    "tuning_args": {"full_layers": 0, "bias_layers": 1},
    "pacing_args": {"grid": ["1,2,10", "2,1,20"], "parallel_trials": 2},
    "filter_args": {"knn": 5},
    "pseudo_args": {"start_round": 1, "label_clients": 3, "per_pass": 10},
}


def _rows(run_dir: Path, keys=("round", "clients", "train_loss", "test_acc", "pseudo_total", "bytes_up")) -> list:
    """metrics.csv's columns that must match across runtimes (wall times differ)."""
    import csv

    with (Path(run_dir) / "metrics.csv").open() as f:
        return [{k: r.get(k) for k in keys} for r in csv.DictReader(f)]


def _tasks():
    return [ClientTask(0, c, "train", 7 + c, {"trial": 1} if c == 5 else {}) for c in (9, 2, 5, 4)]


def test_plan_travels_in_the_params_dict_and_each_slot_reads_its_own():
    params = OrderedDict(w=torch.arange(3.0))
    payload = pack_plan(params, 3, "train", _tasks(), slots=2)
    assert list(payload)[:1] == ["w"] and payload[PLAN_KEY].dtype == torch.uint8
    got = {s: unpack_plan(payload, s) for s in (0, 1, 2)}
    assert torch.equal(got[0][0]["w"], params["w"]) and PLAN_KEY not in got[0][0]
    assert [t.client_id for t in got[0][1]] == [2, 5] and [t.client_id for t in got[1][1]] == [4, 9]
    assert got[2][1] == []  # a slot with nothing to do this phase
    assert got[0][1][1] == ClientTask(0, 5, "train", 12, {"trial": 1})
    assert sorted(t.client_id for ts in assign_slots(_tasks(), 3).values() for t in ts) == [2, 4, 5, 9]
    with pytest.raises(FesError, match="no '__fes_plan__'"):
        unpack_plan(params, 0)


def test_a_silos_answer_carries_every_client_it_played():
    import numpy as np

    ups = [
        ClientUpdate(2, 4, OrderedDict(b=torch.ones(2)), 10.0, {"train_loss": 0.5}),
        ClientUpdate(
            2, 9, OrderedDict(), 0.0, {"pseudo_count": 3.0}, {"example_ids": np.asarray([1, 7]), "labels": [0, 1]}
        ),
    ]
    back = unpack_updates(pack_updates(ups))
    assert [(u.round_idx, u.client_id, u.weight) for u in back] == [(2, 4, 10.0), (2, 9, 0.0)]
    assert torch.equal(back[0].params["b"], torch.ones(2)) and not back[1].params
    assert back[1].report == {"example_ids": [1, 7], "labels": [0, 1]} and back[0].metrics == {"train_loss": 0.5}
    with pytest.raises(FesError, match="rank 2: client 4: boom"):
        unpack_updates(pack_error("rank 2: client 4: boom"))
    with pytest.raises(FesError, match="FeS trainer"):
        unpack_updates(OrderedDict(w=torch.zeros(1)))


def test_plugins_are_found_through_package_entry_points():
    from importlib.metadata import entry_points

    from fedml_fes_plugins import fedml_plugin

    found = {e.name: e.load() for e in entry_points(group="fedml.plugins")}
    assert found["fes_trainer"] is fedml_plugin.FesTrainer and found["fes_aggregator"] is fedml_plugin.FesAggregator
    assert found["fes_data_loader"] is fedml_plugin.load_data and found["fes_model"] is fedml_plugin.create_model
    assert found["fes_init"] is fedml_plugin.init


def test_fedml_args_count_silos_and_phases(tmp_path, tiny_model_dir):
    """FedML's client counts are silos and its rounds are FeS phases (the shims named in
    fedml_plugin.fedml_args); FeS's own counts stay in the typed config."""
    from fedml_fes_plugins.fedml_plugin import fedml_args

    cfg = config_from_dict(
        small_config(
            tmp_path, tiny_model_dir, train_args={"method": "fedfsl", "comm_round": 4}, filter_args={"method": "vote_k"}
        )
    )
    args = fedml_args(cfg, tmp_path, worker_num=2)
    assert (args.client_num_in_total, args.client_num_per_round, args.worker_num) == (2, 2, 2)
    assert args.comm_round == 8 and args.training_type == "cross_silo" and args.backend == "MPI"
    assert args.fes_config is cfg and cfg.train.client_num_per_round == 3 and cfg.data.client_num_in_total == 8
    assert fedml_args(config_from_dict(small_config(tmp_path, tiny_model_dir)), tmp_path, 2).comm_round == 3


def test_phases_follow_the_in_process_calls(tmp_path, tiny_model_dir):
    """The phase sequence makes the same RoundServer calls, in the same order, as the
    in-process loop: same metrics rows."""
    from fedml_fes.report.metrics import RunRecorder
    from fedml_fes.runtime.aggregator import FedAvgCore
    from fedml_fes.runtime.client import LocalTrainer
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.phases import PhaseSequence
    from fedml_fes.runtime.server import RoundServer
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 3},
        **{k: v for k, v in FES_KEYS.items() if k in ("data_args", "pseudo_args")},
    )
    cfg = config_from_dict(raw)
    local = run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    run_dir = make_run_dir(cfg, str(tmp_path / "phases"))
    job = build_job(cfg, "both", run_dir)
    phases = PhaseSequence(RoundServer(job, FedAvgCore(job), RunRecorder(run_dir, "test_acc")))
    trainer = LocalTrainer(job)
    names = []
    while not phases.done:
        params = phases.server.global_params()
        results = []
        for t in phases.tasks:
            trainer.set_params(params)
            results.append(trainer.run(t, job.data.clients[t.client_id]))
        names.append(phases.name)
        phases.finish(results)
    assert names == ["label", "train"] * 3 and phases.total == 6
    assert _rows(run_dir) == _rows(tmp_path / "local") and len(_rows(run_dir)) == 3
    assert local["status"] == "completed"


def _fedml_main(cf: Path, run_dir: Path, *sets: str, np: int = 3, flags: tuple = ()) -> subprocess.CompletedProcess:
    from fedml_fes_plugins.runtimes.launcher import find_mpirun

    cmd = [find_mpirun(), "-np", str(np)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [
        "--oversubscribe",
        sys.executable,
        "-W",
        "ignore",
        str(REPO / "mpi" / "fedml_fes_main.py"),
        "--cf",
        str(cf),
        "--run-dir",
        str(run_dir),
    ]
    for s in sets:
        cmd += ["--set", s]
    cmd += list(flags)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)


@pytest.mark.slow
def test_fedml_runner_script_under_mpirun_matches_in_process(tmp_path, tiny_model_dir):
    """A FedML user's FedMLRunner script (mpi/fedml_fes_main.py) with the FeS trainer and
    aggregator under mpirun -np 3: FedML's cross-silo runtime over MPI calls the hooks; the
    final accuracy is the in-process runtime's (within 1 point; in fact the same rows). FeS
    here; FedFSL in the killed-while-checkpointing test below and over gRPC and MQTT_S3;
    FedCLS through FedML's cross-silo runtime in tests/test_cross_silo_integration.py."""
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(tmp_path, tiny_model_dir, **{k: dict(v) for k, v in FES_KEYS.items()})
    raw["train_args"].update({"method": "fes", "comm_round": 3})
    cf = write_config(tmp_path / "c.yaml", raw)
    cfg = load_config(cf)
    out = _fedml_main(cf, tmp_path / "fedml")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((tmp_path / "fedml" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["runtime"] == "fedml_cross_silo"
    local = run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    assert abs(summary["final"] - local["final"]) <= 0.01
    assert _rows(tmp_path / "fedml") == _rows(tmp_path / "local")
    assert "round   2: test_acc=" in out.stdout and "done: test_acc=" in out.stdout


@pytest.mark.slow
def test_fedml_runner_script_killed_while_checkpointing_resumes_to_the_in_process_run(
    tmp_path, tiny_model_dir, monkeypatch
):
    """FedFSL under mpirun -np 3 through the FedMLRunner script: the server rank is SIGKILLed
    while it saves round 1's checkpoint (the labels of round 1 already on the clients' disk).
    Without --resume the command is refused; with it (-np 2: the checkpoint does not depend on
    how many silos play the clients), FedML runs only the phases left and the run ends with the
    in-process run's rows (this is also FedFSL's case of the test above: the same config, every
    round but the first run after the resume)."""
    from fedml_fes.runtime.checkpoint import load_checkpoint
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    from .test_resume import KILLER

    raw = small_config(
        tmp_path, tiny_model_dir, **{k: dict(v) for k, v in FES_KEYS.items() if k in ("data_args", "pseudo_args")}
    )
    raw["train_args"].update({"method": "fedfsl", "comm_round": 3})
    cf = write_config(tmp_path / "c.yaml", raw)
    run_dir = tmp_path / "fedml"
    killer = tmp_path / "killer"
    killer.mkdir()
    (killer / "sitecustomize.py").write_text(KILLER)
    with monkeypatch.context() as env:  # mpirun passes its environment to the ranks it starts
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(killer), os.environ.get("PYTHONPATH")])))
        env.setenv("FES_TEST_KILL", "save:1")
        killed = _fedml_main(cf, run_dir)
    assert killed.returncode != 0 and load_checkpoint(run_dir)["round"] == 0, killed.stdout[-2000:]
    again = _fedml_main(cf, run_dir, np=2)  # the server refuses; -np 2: one rank fewer to start
    assert again.returncode != 0 and "holds an unfinished run (rounds 0-0 of 3 done)" in again.stdout, again.stdout[
        -2000:
    ]
    out = _fedml_main(cf, run_dir, np=2, flags=("--resume",))  # one silo plays every client
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "resuming after round 0 of 3" in out.stdout and "round   2: test_acc=" in out.stdout
    assert "done: test_acc=" in out.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["runtime"] == "fedml_cross_silo"
    cfg = load_config(cf)
    run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    assert _rows(run_dir) == _rows(tmp_path / "local") and len(_rows(run_dir)) == 3


@pytest.mark.slow
def test_fedml_runner_script_names_the_failing_silo(tmp_path, tiny_model_dir, faults):
    faults(raise_in_round=1)
    raw = small_config(tmp_path, tiny_model_dir)
    cf = write_config(tmp_path / "c.yaml", raw)
    out = _fedml_main(cf, tmp_path / "fedml")
    assert out.returncode != 0
    assert "error: failed in round 1: rank " in out.stdout and "injected fault" in out.stdout
    summary = json.loads((tmp_path / "fedml" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1


def test_s3_cache_lands_in_the_run_directory_and_home_is_untouched(tmp_path):
    from fedml.core.distributed.communication.s3 import remote_storage

    from fedml_fes_plugins.adapters.offline import contain_s3_cache

    home_before = os.environ.get("HOME")
    contain_s3_cache(tmp_path / "fedml_home")
    assert remote_storage.expanduser("~") == str(tmp_path / "fedml_home")
    assert remote_storage.expanduser("~/x") == str(tmp_path / "fedml_home" / "x")
    assert os.environ.get("HOME") == home_before


def test_offline_init_restores_fedml_fetch_config(tmp_path):
    from fedml.core import mlops

    from fedml_fes_plugins.adapters.offline import offline_fedml_init

    before = mlops.fetch_config
    args = config_from_dict({"train_args": {"comm_round": 1}}).flat_args()
    args.training_type, args.backend = "simulation", "sp"
    offline_fedml_init(args, tmp_path)
    assert mlops.fetch_config is before and args.config_version == "release"


def test_mpi_watchdog_waits_for_a_running_handler():
    """The own MPI managers' watchdog shares one lock with the message handlers: a handler
    busy longer than the timeout (a slow evaluation) is never failed halfway; once the server
    waits for workers longer than the timeout, the run fails with one line."""
    import threading
    import time
    from types import SimpleNamespace

    from fedml_fes_plugins.runtimes.mpi_managers import FesServerManager

    failed = []
    m = object.__new__(FesServerManager)
    m.job = SimpleNamespace(cfg=SimpleNamespace(comm=SimpleNamespace(worker_timeout_s=0.2)))
    m._lock, m.summary, m.error, m.round_idx = threading.RLock(), None, None, 3
    m.pending, m._last_activity = {1}, time.monotonic()
    m.session = SimpleNamespace(fail=lambda e: {"status": "failed", "error": e})
    m.on_fatal = failed.append
    watchdog = threading.Thread(target=m._watch, daemon=True)

    def slow_handler(_msg):
        watchdog.start()
        time.sleep(0.8)  # four timeouts long, workers still pending
        assert m.summary is None and not failed

    m._guard(slow_handler)(None)
    assert m.error is None
    watchdog.join(timeout=5)
    assert failed == [m.error] and "no answer from worker ranks [1] in round 3" in m.error


@pytest.mark.slow
def test_fedml_runner_script_bad_config_is_one_line_on_every_rank(tmp_path, tiny_model_dir):
    raw = small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 0})
    out = _fedml_main(write_config(tmp_path / "c.yaml", raw), tmp_path / "fedml")
    assert out.returncode != 0
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "comm_round" in errors[0], out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "fedml").exists()


def _grpc_ipconfig(path: Path, silos: int = 2) -> str:
    from fedml_fes_plugins.cross_silo.services import free_port

    rows = ["eid,rank,grpc_server_ip,grpc_server_port"] + [f"{r},{r},127.0.0.1,{free_port()}" for r in range(silos + 1)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _rank_processes(cf: Path, run_dir: Path, timeout_s: float) -> tuple[list[subprocess.Popen], list[str]]:
    """mpi/fedml_fes_main.py as one process per rank (gRPC: per ipconfig row; MQTT_S3: silo_num 2):
    [server, silo 1, silo 2] and their outputs. Silos start first: they must wait for the server."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    by_rank = {
        r: subprocess.Popen(
            [
                sys.executable,
                "-W",
                "ignore",
                str(REPO / "mpi" / "fedml_fes_main.py"),
                "--cf",
                str(cf),
                "--run-dir",
                str(run_dir),
                "--rank",
                str(r),
            ],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in (1, 2, 0)
    }
    procs = [by_rank[r] for r in sorted(by_rank)]
    try:
        return procs, [p.communicate(timeout=timeout_s)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()


def _assert_every_rank_ended_cleanly(procs: list[subprocess.Popen], outs: list[str]) -> None:
    """Exit code 0 on every rank; else each failed rank's output tail, whole (an assertion's
    repr would be cut to a line or two, as it was when a finished silo died in CI)."""
    failed = [
        f"--- rank {rank} exited {p.returncode}:\n{out[-6000:]}"
        for rank, (p, out) in enumerate(zip(procs, outs))
        if p.returncode != 0
    ]
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)


@pytest.mark.slow
def test_fedml_runner_script_over_grpc_matches_in_process(tmp_path, tiny_model_dir):
    """The same FedMLRunner script as three processes speaking FedML's gRPC backend on
    127.0.0.1 (one per ipconfig rank): the same metrics rows as the in-process runtime."""
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 2},
        comm_args={
            "backend": "GRPC",
            "grpc_ipconfig_path": _grpc_ipconfig(tmp_path / "ip.csv"),
            **_tls_keys(tmp_path / "certs", 2),  # FedML's own runtime over mutual TLS too
        },
        **{k: dict(v) for k, v in FES_KEYS.items() if k in ("data_args", "pseudo_args")},
    )
    cf = write_config(tmp_path / "c.yaml", raw)
    run_dir = tmp_path / "fedml"
    procs, outs = _rank_processes(cf, run_dir, timeout_s=900)
    _assert_every_rank_ended_cleanly(procs, outs)  # no silo outlived as "gone"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["runtime"] == "fedml_cross_silo"
    cfg = load_config(cf)
    run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    assert _rows(run_dir) == _rows(tmp_path / "local") and len(_rows(run_dir)) == 2


def _tls_keys(folder: Path, silo_num: int) -> dict[str, str]:
    """A throw-away CA and certificates; the comm_args that point every rank at its own."""
    from fedml_fes_plugins.cross_silo.certs import comm_keys, make_run_certs

    make_run_certs(folder, silo_num)
    return comm_keys(folder)


@contextlib.contextmanager
def _mqtt_s3(tmp_path: Path, run_id: str):
    """mosquitto (TLS, a certificate per rank, the run's ACL) and a moto S3 endpoint on
    loopback: the comm_args for the FedMLRunner script."""
    from fedml_fes_plugins.cross_silo.certs import broker_files
    from fedml_fes_plugins.cross_silo.services import mqtt_acl, start_mosquitto, start_s3

    from .test_cross_silo_services import ensure_mosquitto

    ensure_mosquitto()
    tls = _tls_keys(tmp_path / "certs", 2)
    broker = start_mosquitto(
        tmp_path / "mosquitto", tls=broker_files(tmp_path / "certs"), acl=mqtt_acl(run_id, 0, {1: 1, 2: 2})
    )
    s3 = start_s3(tmp_path / "s3")
    try:
        yield {
            "backend": "MQTT_S3",
            "silo_num": 2,
            "run_id": run_id,
            **tls,
            "customized_training_mqtt_config": {
                "BROKER_HOST": "127.0.0.1",
                "BROKER_PORT": broker.port,
                "MQTT_USER": "",
                "MQTT_PWD": "",
                "MQTT_KEEPALIVE": 180,
            },
            "customized_training_s3_config": dict(s3.config),
        }
    finally:
        broker.stop()
        s3.stop()


@pytest.mark.slow
def test_fedml_runner_script_over_mqtt_s3_matches_in_process(tmp_path, tiny_model_dir):
    """The same FedMLRunner script over FedML's MQTT_S3 backend: messages through a mosquitto
    broker, tensors through a (moto) S3 bucket, both on loopback; the same metrics rows as
    the in-process runtime."""
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    with _mqtt_s3(tmp_path, "fes-runner-test") as comm:
        raw = small_config(
            tmp_path,
            tiny_model_dir,
            train_args={"method": "fedfsl", "comm_round": 2},
            comm_args=comm,
            **{k: dict(v) for k, v in FES_KEYS.items() if k in ("data_args", "pseudo_args")},
        )
        cf = write_config(tmp_path / "c.yaml", raw)
        run_dir = tmp_path / "fedml"
        procs, outs = _rank_processes(cf, run_dir, timeout_s=900)
    _assert_every_rank_ended_cleanly(procs, outs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["runtime"] == "fedml_cross_silo"
    cfg = load_config(cf)
    run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    assert _rows(run_dir) == _rows(tmp_path / "local") and len(_rows(run_dir)) == 2


@pytest.mark.slow
def test_a_failed_grpc_run_leaves_no_silo_waiting(tmp_path, tiny_model_dir, faults):
    """A device raises in round 1: the server records the failure and exits; FedML's silos
    would wait for its next message forever, the ServerWatch ends each in one line."""
    faults(raise_in_round=1)
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        comm_args={"backend": "GRPC", "grpc_ipconfig_path": _grpc_ipconfig(tmp_path / "ip.csv")},
    )
    cf = write_config(tmp_path / "c.yaml", raw)
    run_dir = tmp_path / "fedml"
    procs, outs = _rank_processes(cf, run_dir, timeout_s=300)  # a hang fails here
    assert procs[0].returncode != 0 and "error: failed in round 1: rank " in outs[0], outs[0][-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    for p, out in zip(procs[1:], outs[1:]):
        assert p.returncode == 1 and "is gone; silo rank" in out, out[-2000:]


@pytest.mark.slow
def test_a_failed_mqtt_s3_run_leaves_no_silo_waiting(tmp_path, tiny_model_dir, faults):
    """The same over MQTT_S3: the server fails and exits; the broker publishes its connection's
    last will, and each silo's MqttServerWatch ends it in one line (FedML's silo would wait
    for the server's next message forever)."""
    faults(raise_in_round=1)
    with _mqtt_s3(tmp_path, "fes-runner-fail") as comm:
        cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir, comm_args=comm))
        run_dir = tmp_path / "fedml"
        procs, outs = _rank_processes(cf, run_dir, timeout_s=300)  # a hang fails here
    assert procs[0].returncode != 0 and "error: failed in round 1: rank " in outs[0], outs[0][-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    for p, out in zip(procs[1:], outs[1:]):
        assert p.returncode == 1 and "(rank 0, MQTT broker 127.0.0.1:" in out and "is gone; silo rank" in out, out[
            -2000:
        ]


def test_mqtt_server_watch_reads_only_a_live_will_of_its_own_server():
    """A will the broker kept from an earlier run (retained) or another server's is no news."""
    from fedml_fes_plugins.fedml_plugin import MqttServerWatch

    watch = object.__new__(MqttServerWatch)  # no broker: only the will's reading runs
    watch.server_id, watch.gone = "0", __import__("threading").Event()

    def will(payload: dict, retain: bool = False):
        watch._on_will(None, None, SimpleNamespace(payload=json.dumps(payload).encode(), retain=retain))

    will({"ID": 0, "status": "OFFLINE"}, retain=True)
    will({"ID": 7, "status": "OFFLINE"})
    will({"ID": 0, "status": "ONLINE"})
    assert watch.server_alive()
    will({"ID": 0, "status": "OFFLINE"})
    assert not watch.server_alive()


class _FakeWatch:
    def __init__(self, armed: bool, alive: bool):
        import threading

        self.armed, self.alive, self.stopped = threading.Event(), alive, None
        if armed:
            self.armed.set()

    def server_alive(self) -> bool:
        return self.alive

    def stop(self, why: str = "") -> None:
        self.stopped = why
        raise SystemExit(1)


@pytest.mark.parametrize("armed,alive,ends", [(True, False, True), (False, False, False), (True, True, False)])
def test_a_send_to_a_server_that_died_ends_the_silo_in_one_line(monkeypatch, armed, alive, ends):
    """The race CI hit: a silo still training when the server failed sends its update to a
    closed port. Once the server was heard and its port is closed, that ends the silo the
    ServerWatch way; any other send failure stays an error."""
    import grpc

    from fedml_fes_plugins.cross_silo.transport import BlockingGrpcCommManager, StartupTolerantGrpcCommManager

    def refused(self, msg, timeout_s=0.0):
        raise grpc.RpcError("UNAVAILABLE")

    monkeypatch.setattr(BlockingGrpcCommManager, "send_message", refused)
    manager = object.__new__(StartupTolerantGrpcCommManager)  # no gRPC server: only the send path runs
    manager.args = SimpleNamespace(fes_server_watch=_FakeWatch(armed, alive))
    with pytest.raises(SystemExit if ends else grpc.RpcError):
        manager.send_message(object())
    assert (manager.args.fes_server_watch.stopped is not None) == ends


@pytest.mark.slow
def test_server_watch_stop_is_one_line_and_exit_code_1():
    code = (
        "from fedml_fes_plugins.fedml_plugin import ServerWatch\n"
        "ServerWatch('127.0.0.1', 9, rank=2).stop('send failed')"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.strip() == "", p.stderr[-2000:]
    assert (
        p.stdout.strip().splitlines()[-1]
        == "error: the server (rank 0 at 127.0.0.1:9) is gone; silo rank 2 stops (send failed)"
    )


def test_mqtt_stop_flushes_the_last_messages_first(monkeypatch):
    """FedML's silo publishes FINISHED and disconnects at once, inside paho's callback; the shim
    lets paho's queue drain before FedML's stop runs (else the server waits for that status forever)."""
    from fedml.core.distributed.communication.mqtt_s3 import mqtt_s3_multi_clients_comm_manager as mqtt_s3

    from fedml_fes_plugins.cross_silo import transport

    cls = mqtt_s3.MqttS3MultiClientsCommManager
    calls = []
    monkeypatch.setattr(cls, "stop_receive_message", lambda self: calls.append(("stop", len(self.queue))))
    monkeypatch.setattr(
        transport,
        "flush_mqtt",
        lambda manager, timeout_s: (calls.append(("flush", len(manager.queue))), manager.queue.clear()),
    )
    transport.use_flushing_mqtt_stop()
    transport.use_flushing_mqtt_stop()  # idempotent: one flush per stop
    manager = SimpleNamespace(queue=["FINISHED"])
    cls.stop_receive_message(manager).join(timeout=10)  # deferred: FedML calls it inside paho's callback
    assert calls == [("flush", 1), ("stop", 0)]


def test_fedml_grpc_manager_name_points_at_the_startup_tolerant_one():
    from fedml.core.distributed.communication.grpc import grpc_comm_manager

    from fedml_fes_plugins.cross_silo.transport import StartupTolerantGrpcCommManager, use_startup_tolerant_grpc

    before = grpc_comm_manager.GRPCCommManager
    try:
        use_startup_tolerant_grpc()
        assert grpc_comm_manager.GRPCCommManager is StartupTolerantGrpcCommManager
        assert issubclass(StartupTolerantGrpcCommManager, before)
    finally:
        grpc_comm_manager.GRPCCommManager = before


def test_tensors_cross_the_mpi_wire_as_arrays_bit_for_bit():
    """The MPI managers pickle numpy views (one buffer copy) instead of torch tensors; what
    arrives is the same values, dtypes and names, and a malformed payload stays malformed."""
    import pickle

    import numpy as np

    from fedml_fes_plugins.adapters.wire import tensors_from_wire, tensors_to_wire

    sent = OrderedDict(
        w=torch.randn(4, 3),
        b=torch.randn(3, dtype=torch.float64),
        i=torch.arange(5),
        h=torch.randn(2, dtype=torch.bfloat16),
        g=torch.randn(2, requires_grad=True),
    )
    wire = tensors_to_wire(sent)
    assert all(isinstance(wire[k], np.ndarray) for k in "wbig") and isinstance(wire["h"], torch.Tensor)
    got = tensors_from_wire(pickle.loads(pickle.dumps(wire, protocol=5)))
    assert list(got) == list(sent)
    assert all(got[k].dtype == sent[k].dtype and torch.equal(got[k], sent[k].detach()) for k in sent)
    assert tensors_from_wire("not tensors") == "not tensors" and tensors_to_wire(None) is None


def test_a_message_travels_with_its_arrays_out_of_band_and_arrives_bit_for_bit():
    """send_out_of_band / receive_out_of_band over a stand-in for mpi4py's comm: the header is
    one small pickled message, each array's memory goes as a buffer message of its own (not
    copied into the pickle), and the receiver gets equal arrays as views of one allocation."""
    import numpy as np

    from fedml_fes_plugins.adapters import mpi_transport as t

    class Wire:  # one rank pair: what `send`/`Send` put on it, in order
        def __init__(self):
            self.messages = []

        def send(self, obj, dest, tag):
            import pickle

            self.messages.append((tag, pickle.dumps(obj)))

        def Send(self, buf, dest, tag):
            self.messages.append((tag, bytes(buf)))

        def recv(self, source, tag):
            import pickle

            got_tag, data = self.messages.pop(0)
            assert got_tag == tag
            return pickle.loads(data)

        def Recv(self, buf, source, tag):
            got_tag, data = self.messages.pop(0)
            assert got_tag == tag and len(data) == buf.nbytes
            buf[:] = data

    params = OrderedDict(
        w=np.random.rand(300, 7000).astype(np.float32),
        b=np.arange(5, dtype=np.int64),
        f=np.asfortranarray(np.random.rand(4, 3)),
        e=np.zeros(0, dtype=np.float32),
        odd=np.arange(3, dtype=np.int8),
        s=np.random.rand(6, 4)[:, ::2],
    )
    msg = {"round": 3, "params": params, "tasks": [{"client": 5}]}
    wire = Wire()
    t.send_out_of_band(wire, msg, dest=1)
    header_tag, header = wire.messages[0]
    assert header_tag == t.HEADER_TAG and len(header) < 2_000  # the arrays are not in it
    assert sum(tag == t.BUFFER_TAG for tag, _ in wire.messages) >= 4
    got = t.receive_out_of_band(wire, source=0)
    assert wire.messages == [] and got["round"] == 3 and got["tasks"] == [{"client": 5}]
    assert list(got["params"]) == list(params)
    for k, v in params.items():
        assert got["params"][k].dtype == v.dtype and np.array_equal(got["params"][k], v), k
    assert all(got["params"][k].flags.writeable and got["params"][k].ctypes.data % t.ALIGN == 0 for k in "wb")
    assert torch.equal(torch.from_numpy(got["params"]["w"]), torch.from_numpy(params["w"]))


def test_the_mpi_receive_thread_backs_off_while_idle_and_stops():
    """FedML's receive thread probed every 1 ms for the whole run; ours queues every message
    in order, probes less and less often while none comes (up to PROBE_MAX_S), and stops."""
    import queue
    import threading
    import time

    from fedml_fes_plugins.adapters import mpi_transport as t

    class FakeChannel:  # OutOfBandChannel's interface
        def __init__(self):
            self.pending, self.probes, self.lock = [], [], threading.Lock()

        def poll(self):
            with self.lock:
                self.probes.append(time.monotonic())
                return 2 if self.pending else None

        def receive(self, source):
            assert source == 2
            with self.lock:
                return self.pending.pop(0)

    comm, got = FakeChannel(), queue.Queue()
    thread = t.BackoffReceiveThread(comm, 1, 3, "test", got)
    thread.start()
    time.sleep(0.5)  # idle: about 25 probes at the backed-off interval, not 500
    idle = len(comm.probes)
    with comm.lock:
        comm.pending += ["a", "b"]
    assert [got.get(timeout=1), got.get(timeout=1)] == ["a", "b"]
    thread.stop()
    thread.join(timeout=2)
    assert not thread.is_alive()
    assert 3 <= idle <= 0.5 / t.PROBE_MAX_S + 10, idle  # FedML's thread: about 500


@pytest.mark.slow
def test_a_benchmark_worker_ending_in_os_exit_leaves_no_wandb_temp_dirs(tmp_path):
    """FedML imports wandb, whose import makes temp folders that only exit handlers remove; the
    benchmark's spawned workers end in os._exit (multiprocessing), so their loop removes them
    (the leak itself, and `hard_exit`'s removal: tests/test_clean_stop.py)."""
    code = (
        "import os, queue\n"
        "from fedml_fes_plugins.adapters.offline import import_fedml\n"
        "from fedml_fes_plugins.bench.fidelity_run import _worker_loop\n"
        "import_fedml()\n"
        "print(sum('wandb' in n for n in os.listdir(os.environ['TMPDIR'])), flush=True)\n"
        "tasks = queue.Queue()\n"
        "tasks.put(None)\n"
        "_worker_loop(tasks, queue.Queue())\n"
        "os._exit(0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) >= 3  # made at import
    assert [p.name for p in tmp_path.iterdir() if "wandb" in p.name] == []
