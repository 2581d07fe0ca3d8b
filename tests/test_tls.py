"""TLS for cross-silo runs, on loopback: real gRPC with mutual TLS, a real mosquitto with TLS
and an ACL. Rogue peers (no certificate, another rank's certificate, another silo's topic)
are refused with one log line each, and the legitimate message after them still arrives."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch

from fedml_fes.errors import FesError


@pytest.fixture(scope="session")
def mosquitto_exe() -> str:
    from tests.test_cross_silo_services import ensure_mosquitto

    return ensure_mosquitto()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from fedml_fes_plugins.cross_silo.certs import make_run_certs

    return make_run_certs(tmp_path_factory.mktemp("certs"), silo_num=2)


def _tls_args(certs, cert_rank: str = "{rank}") -> SimpleNamespace:
    return SimpleNamespace(
        tls_ca=str(certs / "ca.crt"),
        tls_cert=str(certs / f"rank-{cert_rank}.crt"),
        tls_key=str(certs / f"rank-{cert_rank}.key"),
    )


def test_certificates_name_their_rank_and_are_signed_by_the_run_ca(certs):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    for name in ("rank-0", "rank-1", "rank-2", "broker"):
        cert = x509.load_pem_x509_certificate((certs / f"{name}.crt").read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        cert.verify_directly_issued_by(ca)
        assert (certs / f"{name}.key").stat().st_mode & 0o077 == 0


def test_tls_settings_are_all_three_or_none_and_readable(certs, tmp_path):
    from fedml_fes_plugins.cross_silo.tls import tls_for

    assert tls_for(SimpleNamespace(tls_ca="", tls_cert="", tls_key=""), 1) is None
    files = tls_for(_tls_args(certs), 2)
    assert files.cert.endswith("rank-2.crt") and files.key.endswith("rank-2.key")
    with pytest.raises(FesError, match="comm_args.tls_key is not set"):
        tls_for(SimpleNamespace(tls_ca="a", tls_cert="b", tls_key=""), 1)
    with pytest.raises(FesError, match=r"comm_args.tls_cert: cannot read .*rank-7.crt"):
        tls_for(_tls_args(certs), 7)


def _free_port() -> int:
    from fedml_fes_plugins.cross_silo.services import free_port

    return free_port()


def test_grpc_with_mutual_tls_refuses_rogue_peers_and_delivers_the_silo(tmp_path, certs, caplog):
    """Server rank 0, silo rank 1, both over mutual TLS. Refused, each leaving the server
    running: a plaintext peer and one with no client certificate (the TLS handshake),
    a peer with silo 2's valid certificate that claims to be rank 1 (one log line naming its
    address), and a silo sending to a port whose certificate is not the receiver's rank."""
    import grpc
    from fedml.core.distributed.communication.grpc import grpc_comm_manager_pb2, grpc_comm_manager_pb2_grpc
    from fedml.core.distributed.communication.message import Message

    from fedml_fes_plugins.cross_silo.transport import BlockingGrpcCommManager

    ports = [_free_port() for _ in range(3)]
    ipconfig = tmp_path / "ipconfig.csv"
    ipconfig.write_text(
        "eid,rank,grpc_server_ip,grpc_server_port\n" + "".join(f"{r},{r},127.0.0.1,{p}\n" for r, p in enumerate(ports))
    )
    server = BlockingGrpcCommManager(str(ipconfig), client_rank=0, client_num=2, args=_tls_args(certs))
    silo = BlockingGrpcCommManager(str(ipconfig), client_rank=1, client_num=2, args=_tls_args(certs))
    impostor = BlockingGrpcCommManager(str(ipconfig), client_rank=1, client_num=2, args=_tls_args(certs, "2"))
    impostor.grpc_server.stop(0)  # it only sends (as rank 1, with rank 2's certificate)
    got: queue.Queue = queue.Queue()

    class Observer:
        def receive_message(self, msg_type, msg):
            got.put(msg)

    server.add_observer(Observer())
    loop = threading.Thread(target=server.message_handling_subroutine, daemon=True)
    loop.start()

    def message(value: float) -> Message:
        msg = Message(7, 1, 0)
        msg.add_params("model_params", OrderedDict([("w", torch.full((3,), value))]))
        return msg

    request = grpc_comm_manager_pb2.CommRequest(client_id=1, message=b"anything")
    ca = (certs / "ca.crt").read_bytes()
    try:
        for channel in (
            grpc.insecure_channel(f"127.0.0.1:{ports[0]}"),
            grpc.secure_channel(f"127.0.0.1:{ports[0]}", grpc.ssl_channel_credentials(ca)),  # no client cert
        ):
            with channel, pytest.raises(grpc.RpcError) as refused:
                grpc_comm_manager_pb2_grpc.gRPCCommManagerStub(channel).sendMessage(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        with caplog.at_level(logging.WARNING):
            impostor.send_message(message(2.0), timeout_s=10)  # TLS is fine, the claim is not
            # rank 1's address serves rank 1's certificate: a send "to rank 2" there is refused
            silo.grpc_mappings[2] = silo.grpc_mappings[1]._replace(eid=2, rank=2)
            with pytest.raises(grpc.RpcError):
                bad = Message(7, 1, 2)
                silo.send_message(bad, timeout_s=10)
            silo.send_message(message(1.0), timeout_s=10)
            arrived = got.get(timeout=20)
    finally:
        server.stop_receive_message()
        for m in (server, silo):
            m.grpc_server.stop(0)
    refusals = [r.getMessage() for r in caplog.records if "refused a gRPC message" in r.getMessage()]
    assert len(refusals) == 1 and "ipv4:127.0.0.1:" in refusals[0] and "certificate is rank-2" in refusals[0]
    assert torch.equal(arrived.get_params()["model_params"]["w"], torch.ones(3)) and got.empty()


def _mqtt_client(
    port: int, certs, name: str | None, received: list | None = None, topic: str | None = None, wait_s: float = 10.0
):
    import paho.mqtt.client as paho

    client = paho.Client(client_id=f"t-{name}-{time.monotonic_ns()}", clean_session=True)
    result: dict = {}
    subscribed = threading.Event()

    def on_connect(c, _u, _f, rc):
        result["rc"] = rc
        if topic and rc == 0:
            c.subscribe(topic, qos=1)

    client.on_connect = on_connect
    client.on_subscribe = lambda *_a: subscribed.set()
    client.on_message = lambda _c, _u, msg: received.append(msg.payload) if received is not None else None
    if name is None:
        client.tls_set(ca_certs=str(certs / "ca.crt"))
    else:
        client.tls_set(
            ca_certs=str(certs / "ca.crt"), certfile=str(certs / f"{name}.crt"), keyfile=str(certs / f"{name}.key")
        )
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    deadline = time.monotonic() + wait_s
    while "rc" not in result and time.monotonic() < deadline:
        time.sleep(0.05)
    if topic:
        subscribed.wait(10)
    return client, result.get("rc")


def test_mqtt_broker_with_tls_and_acl_refuses_another_silos_topic(tmp_path, certs, mosquitto_exe):
    """mosquitto as `--local-services` starts it: TLS only, the certificate's name is the user,
    the run's ACL. Silo 2 publishing on silo 1's topic is refused by the broker (its log says
    so, the server never sees it); silo 1's own message arrives; a client without a
    certificate is not let in; the preflight check logs in with the certificate."""
    from fedml_fes_plugins.cross_silo.certs import broker_files
    from fedml_fes_plugins.cross_silo.checks import check_mqtt
    from fedml_fes_plugins.cross_silo.services import mqtt_acl, start_mosquitto
    from fedml_fes_plugins.cross_silo.tls import tls_for

    broker_tls = broker_files(certs)
    broker = start_mosquitto(tmp_path / "mq", tls=broker_tls, acl=mqtt_acl("run7", 0, {1: 1, 2: 2}))
    clients = []
    try:
        received: list = []
        server, rc = _mqtt_client(broker.port, certs, "rank-0", received, topic="fedml_run7_1")
        clients.append(server)
        assert rc == 0
        rogue, rc = _mqtt_client(broker.port, certs, "rank-2")
        clients.append(rogue)
        rogue.publish("fedml_run7_1", b"forged", qos=1).wait_for_publish(10)
        honest, rc = _mqtt_client(broker.port, certs, "rank-1")
        clients.append(honest)
        honest.publish("fedml_run7_1", b"real", qos=1).wait_for_publish(10)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert received == [b"real"]
        log = broker.log.read_text()  # the connect line names the user, the refusal the client
        assert "u'rank-2'" in log and "Denied PUBLISH from t-rank-2" in log and "'fedml_run7_1'" in log
        # No client certificate: the broker ends the handshake. Under TLS 1.2 connect() raises;
        # under TLS 1.3 the client's side of the handshake may finish first and the broker's
        # alert arrives on the first read, so the refusal shows as no CONNACK, ever.
        try:
            anonymous, rc = _mqtt_client(broker.port, certs, None, wait_s=3.0)
            clients.append(anonymous)
        except OSError:
            rc = None
        assert rc is None
        config = {**broker.config}
        check_mqtt(config, 5.0, tls_for(_tls_args(certs), 1))
        with pytest.raises(FesError, match="did not accept a connection|TLS"):
            check_mqtt(config, 3.0)
    finally:
        for c in clients:
            c.loop_stop()
            with contextlib.suppress(OSError):  # the refused client's socket is already closed
                c.disconnect()
        broker.stop()


def test_certs_command_writes_what_a_deployment_needs_and_refuses_to_overwrite(tmp_path, capsys):
    from fedml_fes_plugins.cli.main import main

    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out), "--silos", "2", "--host", "10.0.0.5", "--run-id", "r1"]) == 0
    assert {p.name for p in out.iterdir()} >= {"ca.crt", "rank-0.key", "rank-2.crt", "broker.crt", "mosquitto.acl"}
    acl = (out / "mosquitto.acl").read_text()
    assert "user rank-2\ntopic write fedml_r1_2\ntopic read fedml_r1_0_2" in acl
    assert "tls_cert: " in capsys.readouterr().out
    assert main(["certs", "--out", str(out), "--silos", "2"]) == 1
    assert "already holds keys" in capsys.readouterr().err


def test_tls_paths_in_a_config_file_are_taken_from_its_folder(tmp_path):
    from fedml_fes.config import load_config
    from fedml_fes_plugins.cross_silo.config import settings_from

    (tmp_path / "ipconfig.csv").write_text(
        "eid,rank,grpc_server_ip,grpc_server_port\n0,0,127.0.0.1,1\n1,1,127.0.0.1,2\n"
    )
    cf = tmp_path / "cs.yaml"
    cf.write_text(
        "common_args: {training_type: cross_silo}\n"
        "comm_args: {backend: GRPC, grpc_ipconfig_path: ipconfig.csv, tls_ca: certs/ca.crt, "
        "tls_cert: 'certs/rank-{rank}.crt', tls_key: 'certs/rank-{rank}.key'}\n"
    )
    settings = settings_from(load_config(cf))
    assert settings.tls_paths["tls_cert"] == str(tmp_path / "certs" / "rank-{rank}.crt")
    with pytest.raises(FesError, match="comm_args.tls_ca: cannot read"):
        settings.tls(1)
    cf.write_text(cf.read_text().replace(", tls_key: 'certs/rank-{rank}.key'", ""))
    with pytest.raises(FesError, match="comm_args.tls_key is not set"):
        settings_from(load_config(cf))


@pytest.mark.slow
def test_fedml_mqtt_client_over_tls_survives_publishing_while_its_loop_reads(tmp_path, certs, mosquitto_exe):
    """FedML's MqttManager with the TLS shim, as a silo runs it: paho's loop_forever on one
    thread (reading what the server floods it with) while another thread publishes. Without
    one lock around the TLS socket's reads and writes the records interleave and the broker
    drops the connection ("bad record mac"); with it every message arrives both ways."""
    import paho.mqtt.client as paho
    from fedml.core.distributed.communication.mqtt.mqtt_manager import MqttManager

    from fedml_fes_plugins.cross_silo.certs import broker_files
    from fedml_fes_plugins.cross_silo.services import mqtt_acl, start_mosquitto
    from fedml_fes_plugins.cross_silo.tls import tls_for
    from fedml_fes_plugins.cross_silo.transport import use_tls_mqtt

    broker_tls = broker_files(certs)
    broker = start_mosquitto(tmp_path / "mq", tls=broker_tls, acl=mqtt_acl("r", 0, {1: 1}))
    n, payload, got = 600, json.dumps({"params": "x" * 20000}), {"silo": 0, "server": 0}  # FedML reads JSON
    use_tls_mqtt(tls_for(_tls_args(certs), 1))
    try:
        silo = MqttManager("127.0.0.1", broker.port, None, None, 30, f"silo-{time.monotonic_ns()}")
        silo.add_message_listener("fedml_r_0_1", lambda *_: got.__setitem__("silo", got["silo"] + 1))
        silo.add_connected_listener(lambda client: client.subscribe("fedml_r_0_1", qos=1))
        silo.connect()
        threading.Thread(target=silo.loop_forever, daemon=True).start()
        server = paho.Client(client_id=f"server-{time.monotonic_ns()}")
        server.tls_set(str(certs / "ca.crt"), str(certs / "rank-0.crt"), str(certs / "rank-0.key"))
        server.on_connect = lambda c, *_: c.subscribe("fedml_r_1", qos=1)
        server.on_message = lambda *_: got.__setitem__("server", got["server"] + 1)
        server.connect("127.0.0.1", broker.port)
        server.loop_start()
        time.sleep(1.0)

        def flood() -> None:
            for _ in range(n):
                server.publish("fedml_r_0_1", payload, qos=1)
                time.sleep(0.0005)

        flooder = threading.Thread(target=flood)
        flooder.start()
        for _ in range(n):
            silo.send_message("fedml_r_1", payload)
            time.sleep(0.0005)
        flooder.join()
        deadline = time.monotonic() + 30
        while got != {"silo": n, "server": n} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got == {"silo": n, "server": n}
        assert "bad record mac" not in broker.log.read_text()
    finally:
        use_tls_mqtt(None)
        broker.stop()
