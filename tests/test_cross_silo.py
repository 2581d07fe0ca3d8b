"""Cross-silo settings, protocol checks and bad-input errors (fast: no model, no FedML run)."""

import re
import socket
import time
from collections import OrderedDict

import pytest
import torch

from fedml_fes.errors import FesError
from fedml_fes.runtime.tasks import ClientTask

from .conftest import REPO, start_lock_holder, write_config


def _raw(**comm) -> dict:
    return {"common_args": {"training_type": "cross_silo"}, "comm_args": {"backend": "GRPC", **comm}}


def _ipconfig(path, rows) -> str:
    path.write_text("eid,rank,grpc_server_ip,grpc_server_port\n" + "".join(f"{r}\n" for r in rows))
    return str(path)


def _grpc_config(tmp_path, silo_num=2, ports=None):
    ports = ports or [free_port() for _ in range(silo_num + 1)]
    ip = _ipconfig(tmp_path / "ip.csv", [f"{r},{r},127.0.0.1,{p}" for r, p in enumerate(ports)])
    return write_config(tmp_path / "c.yaml", _raw(grpc_ipconfig_path=ip, silo_num=silo_num)), ports


def free_port() -> int:
    from fedml_fes_plugins.cross_silo.services import free_port as fp

    return fp()


def _mqtt_raw(mqtt, s3, **comm) -> dict:
    return {
        "common_args": {"training_type": "cross_silo"},
        "comm_args": {
            "backend": "MQTT_S3",
            "silo_num": 2,
            "customized_training_mqtt_config": mqtt,
            "customized_training_s3_config": s3,
            **comm,
        },
    }


S3_OK = {"CN_S3_ENDPOINT": "http://127.0.0.1:1", "CN_S3_AKI": "a", "CN_S3_SAK": "b", "BUCKET_NAME": "fes"}


def test_shipped_configs_load_with_their_transport_settings(monkeypatch):
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    monkeypatch.chdir(REPO)
    cfg, s = load_cross_silo(REPO / "run_configs" / "cross_silo_grpc.yaml")
    assert (s.backend, s.silo_num, cfg.common.training_type) == ("GRPC", 3, "cross_silo")
    assert [s.grpc_peers[r].address for r in range(4)] == [f"127.0.0.1:{8890 + r}" for r in range(4)]
    monkeypatch.setenv("FES_S3_ACCESS_KEY", "key")
    monkeypatch.setenv("FES_S3_SECRET_KEY", "secret")
    cfg, s = load_cross_silo(REPO / "run_configs" / "cross_silo_mqtt_s3.yaml")
    assert s.backend == "MQTT_S3" and s.mqtt["BROKER_PORT"] == 1883 and s.mqtt["MQTT_USER"] is None
    assert s.s3["CN_S3_AKI"] == "key" and s.s3["CN_S3_SAK"] == "secret" and s.run_id == "fes-demo"
    assert cfg.data.dataset == "bbc_news"


def test_silo_count_defaults_to_the_client_ranks_of_the_ipconfig(tmp_path):
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    ip = _ipconfig(tmp_path / "ip.csv", [f"{r},{r},127.0.0.1,{9000 + r}" for r in range(3)])
    _, s = load_cross_silo(write_config(tmp_path / "c.yaml", _raw(grpc_ipconfig_path=ip)))
    assert s.silo_num == 2 and s.ranks == [1, 2] and s.round_timeout_s == 300.0
    assert [s.owner_rank(c) for c in range(5)] == [1, 2, 1, 2, 1]
    assert s.run_id.startswith("fes") and s.wire_id(2) == 2 and s.rank_of(2) == 2 and s.rank_of(7) is None


@pytest.mark.parametrize(
    "rows,message",
    [
        (["0,0,127.0.0.1,9000"], "no client rank"),
        (["0,0,127.0.0.1,9000", "2,2,127.0.0.1,9002"], "no row for rank(s) [1]"),
        (["0,0,127.0.0.1,9000", "5,1,127.0.0.1,9001"], "eid 5 must equal rank 1"),
        (["0,0,127.0.0.1,9000", "1,1,127.0.0.1,x"], "must be integers"),
        (["0,0,127.0.0.1,9000", "0,0,127.0.0.1,9001"], "listed twice"),
    ],
)
def test_bad_ipconfig_is_one_line_naming_the_problem(tmp_path, rows, message):
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    ip = _ipconfig(tmp_path / "ip.csv", rows)
    with pytest.raises(FesError, match=re.escape(message)):
        load_cross_silo(write_config(tmp_path / "c.yaml", _raw(grpc_ipconfig_path=ip)))


@pytest.mark.parametrize(
    "raw,message",
    [
        (
            _raw(grpc_ipconfig_path="nope.csv"),
            r"file not found: \S*/nope\.csv \(a relative path in a config file is from",
        ),
        ({"comm_args": {"backend": "GRPC"}}, "training_type: cross_silo"),
        ({"common_args": {"training_type": "cross_silo"}, "comm_args": {"backend": "MPI"}}, "must be GRPC or MQTT_S3"),
        (_mqtt_raw({"BROKER_HOST": "127.0.0.1"}, S3_OK), "needs BROKER_PORT"),
        (_mqtt_raw({}, S3_OK), "FedML cloud's broker"),
        (_mqtt_raw({"BROKER_HOST": "h", "BROKER_PORT": 1}, {"BUCKET_NAME": "b"}), "CN_S3_AKI, CN_S3_SAK"),
        (
            _mqtt_raw({"BROKER_HOST": "h", "BROKER_PORT": 1}, dict(S3_OK, CN_S3_SAK="${FES_TEST_UNSET_VAR}")),
            r"\$\{FES_TEST_UNSET_VAR\}, which is not set",
        ),
        (_mqtt_raw({"BROKER_HOST": "h", "BROKER_PORT": 1}, S3_OK, silo_num=0), "silo_num must be >= 1"),
        (_mqtt_raw({"BROKER_HOST": "h", "BROKER_PORT": 1}, S3_OK, round_timeout_s=0), "round_timeout_s must be > 0"),
        (_mqtt_raw({"BROKER_HOST": "h", "BROKER_PORT": 1}, S3_OK, silo_nmu=2), "unknown config key 'silo_nmu'"),
    ],
)
def test_bad_transport_settings_are_one_line_errors(tmp_path, raw, message):
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    with pytest.raises(FesError, match=message) as e:
        load_cross_silo(write_config(tmp_path / "c.yaml", raw))
    assert "\n" not in str(e.value)


def test_rank_outside_the_ipconfig_is_refused(tmp_path):
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    cf, _ = _grpc_config(tmp_path)
    _, s = load_cross_silo(cf)
    with pytest.raises(FesError, match=r"rank 3 is outside .*ip.csv \(client ranks 1-2\)"):
        s.check_rank("client", 3)
    with pytest.raises(FesError, match="the server is rank 0"):
        s.check_rank("server", 1)
    s.check_rank("client", 2)


def test_mlops_edge_ids_map_to_ranks(tmp_path):
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    cf = write_config(tmp_path / "c.yaml", _mqtt_raw({"BROKER_HOST": "h", "BROKER_PORT": 1}, S3_OK))
    _, s = load_cross_silo(cf, silo_ids={1: 1001, 2: 1002}, server_id=77)
    assert (s.wire_id(1), s.wire_id(2), s.rank_of(1002), s.rank_of(0), s.server_id) == (1001, 1002, 2, 0, 77)
    with pytest.raises(FesError, match="distinct"):
        load_cross_silo(cf, silo_ids={1: 5, 2: 5})


def _update(cid, **changes):
    item = {
        "round_idx": 3,
        "client_id": cid,
        "params": OrderedDict(w=torch.ones(2)),
        "weight": 4.0,
        "metrics": {"train_loss": 0.5},
        "report": {},
    }
    item.update(changes)
    return item


def test_updates_from_silos_are_parsed_defensively():
    from fedml_fes_plugins.cross_silo.protocol import parse_updates

    tasks = {1: ClientTask(3, 1, "train", 11), 4: ClientTask(3, 4, "train", 12)}
    payload = [
        _update(1),
        _update(1),
        _update(9),
        _update(4, round_idx=2),
        "junk",
        _update(4, params={"w": [1.0]}),
        _update(4, weight=float("nan")),
        _update(4, metrics={"x": "y"}),
    ]
    got, problems = parse_updates(payload, 3, tasks)
    assert [u.client_id for u in got] == [1] and got[0].weight == 4.0
    assert problems == [
        "second update for client 1 ignored",
        "update for client 9, which this silo was not asked to play",
        "update from client 4 is for round 2, not 3",
        "malformed update (needs round_idx, client_id, params, weight, metrics, report)",
        "update from client 4: params are not a mapping of names to tensors",
        "update from client 4 has weight nan",
        "update from client 4: metrics are not a mapping of names to numbers",
    ]
    assert parse_updates({"not": "a list"}, 3, tasks) == ([], ["payload is a dict, not a list of updates"])
    assert parse_updates(None, 3, tasks) == ([], [])
    # non-finite tensors pass this layer on purpose: RoundServer's validation rejects and logs them
    nan, _ = parse_updates([_update(4, params=OrderedDict(w=torch.tensor([float("nan"), 1.0])))], 3, tasks)
    assert len(nan) == 1


def test_an_update_crosses_the_silo_wire_as_arrays_and_arrives_as_the_same_tensors():
    """gRPC and the MQTT_S3 bucket carry what the silo sends as FES1 bytes: its tensors go as
    numpy arrays and the server reads back the same tensors, bit for bit."""
    import numpy as np

    from fedml_fes.runtime.tasks import ClientUpdate
    from fedml_fes_plugins.adapters.codec import decode, encode
    from fedml_fes_plugins.cross_silo.protocol import parse_updates, update_to_wire

    sent = ClientUpdate(
        3, 4, OrderedDict(w=torch.randn(4, 3), b=torch.randn(3, dtype=torch.float16)), 2.0, {"train_loss": 0.25}, {}
    )
    wire = update_to_wire(sent)
    assert all(isinstance(v, np.ndarray) for v in wire["params"].values())
    (got,), problems = parse_updates(decode(encode({"u": [wire]}), 1 << 20)["u"], 3, {4: ClientTask(3, 4, "train", 1)})
    assert problems == [] and list(got.params) == ["w", "b"]
    assert all(
        got.params[k].dtype == sent.params[k].dtype and torch.equal(got.params[k], sent.params[k]) for k in sent.params
    )


def test_labeling_reports_are_checked_against_the_pool():
    from fedml_fes_plugins.cross_silo.protocol import parse_updates

    tasks = {2: ClientTask(0, 2, "label", 5)}

    def check(cid, ids, labels):
        return "example ids outside the client's unlabeled pool" if any(i > 10 for i in ids) else None

    ok = _update(2, round_idx=0, params=OrderedDict(), weight=0.0, report={"example_ids": [1, 2], "labels": [0, 1]})
    bad = dict(ok, report={"example_ids": [1, 99], "labels": [0, 1]})
    uneven = dict(ok, report={"example_ids": [1], "labels": [0, 1]})
    assert len(parse_updates([ok], 0, tasks, check)[0]) == 1
    assert parse_updates([bad], 0, tasks, check)[1] == [
        "labeling report from client 2: example ids outside the client's unlabeled pool"
    ]
    assert "differ in length" in parse_updates([uneven], 0, tasks, check)[1][0]


def test_port_in_use_is_reported_before_starting(tmp_path):
    from fedml_fes_plugins.cross_silo.checks import check_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(FesError, match=f"port {port} on 127.0.0.1 \\(rank 1 in x.csv\\) is in use"):
            check_port("127.0.0.1", port, "rank 1 in x.csv")
    check_port("127.0.0.1", port, "rank 1 in x.csv")  # released: fine


def _cli(argv):
    from fedml_fes_plugins.cli.main import main

    return main(argv)


def test_cli_bad_input_exits_fast_with_one_line(tmp_path, capsys):
    """Port in use, rank outside the ipconfig, broker and S3 endpoint unreachable."""
    cf, ports = _grpc_config(tmp_path)
    start = time.monotonic()
    assert _cli(["cross-silo", "--role", "client", "--rank", "7", "--cf", str(cf)]) == 1
    assert "fedml-fes: error: rank 7 is outside" in capsys.readouterr().err
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports[0]))
        held.listen(1)
        assert _cli(["cross-silo", "--role", "server", "--rank", "0", "--cf", str(cf)]) == 1
    err = capsys.readouterr().err
    assert f"fedml-fes: error: port {ports[0]} on 127.0.0.1 (rank 0 in" in err and err.count("\n") == 1
    closed = free_port()
    mq = write_config(tmp_path / "m.yaml", _mqtt_raw({"BROKER_HOST": "127.0.0.1", "BROKER_PORT": closed}, S3_OK))
    assert _cli(["cross-silo", "--role", "client", "--rank", "1", "--cf", str(mq)]) == 1
    assert f"cannot reach the MQTT broker at 127.0.0.1:{closed}" in capsys.readouterr().err
    with socket.socket() as fake_broker:  # accepts TCP, speaks no MQTT: the S3 check is next
        fake_broker.bind(("127.0.0.1", 0))
        fake_broker.listen(4)
        from fedml_fes_plugins.cross_silo.checks import check_s3

        with pytest.raises(FesError, match="cannot reach the S3 endpoint http://127.0.0.1:1"):
            check_s3(S3_OK, 2.0)
    assert time.monotonic() - start < 30


def test_launcher_refuses_an_unreachable_broker_before_starting_anything(tmp_path, tiny_model_dir):
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    from .conftest import small_config

    raw = small_config(tmp_path, tiny_model_dir)
    raw.update(_mqtt_raw({"BROKER_HOST": "127.0.0.1", "BROKER_PORT": free_port()}, S3_OK))
    raw["common_args"] = {"training_type": "cross_silo", "output_dir": str(tmp_path / "runs")}
    cf = write_config(tmp_path / "c.yaml", raw)
    start = time.monotonic()
    with pytest.raises(FesError, match="cannot reach the MQTT broker"):
        run_local(LocalJob(str(cf), run_dir=str(tmp_path / "run"), echo=lambda _l: None))
    assert time.monotonic() - start < 15
    assert not (tmp_path / "run" / "processes.json").exists()


def test_a_cross_silo_run_dir_held_by_a_live_run_is_refused(tmp_path, capsys):
    """The server, a silo and the local launcher each hold their run directory's lock: a
    second process into a live one's folder is one line, and nothing in the folder changes."""
    cf, _ports = _grpc_config(tmp_path)
    run = tmp_path / "live"
    run.mkdir()
    (run / "metrics.csv").write_text("round,test_acc\n0,0.5\n")
    holder = start_lock_holder(run)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for argv in (
            ["cross-silo", "--role", "server", "--rank", "0"],
            ["cross-silo", "--role", "client", "--rank", "1"],
            ["cross-silo-local"],
        ):
            assert _cli([*argv, "--cf", str(cf), "--run-dir", str(run)]) == 1
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"run directory {run} is in use by another live run" in err, err
        assert sorted(p.name for p in run.iterdir()) == [".lock", "metrics.csv"]
        assert (run / "metrics.csv").read_text() == "round,test_acc\n0,0.5\n"
    finally:
        holder.kill()
        holder.wait()


def test_a_process_started_by_the_lock_holder_writes_under_its_lock(tmp_path):
    """The cross-silo launcher holds its folder and starts the server there: the server (named
    the folder in its environment) runs under the launcher's lock; any other process is refused."""
    import os

    from fedml_fes.runtime.rundir import inherited_lock_env, lock_run_dir, release_run_dir

    run = tmp_path / "run"
    run.mkdir()
    lock_run_dir(run)
    try:
        child = start_lock_holder(run, env={**os.environ, **inherited_lock_env(run)})
        assert child.stdout.readline().strip() == "locked"
        child.kill()
        child.wait()
        stranger = start_lock_holder(run)
        assert stranger.wait(timeout=60) == 1 and "is in use by another live run" in stranger.stderr.read()
    finally:
        release_run_dir(run)
