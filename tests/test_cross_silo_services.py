"""A real mosquitto and a moto S3 endpoint on loopback: startup, and wrong credentials refused.

mosquitto comes from Debian (`apt-get install mosquitto`); when it is missing and the tests
run as root with apt-get (CI containers), the fixture installs it. The tests skip only when
it truly cannot be had, and say why.
"""

import json
import os
import shutil
import subprocess
import time

import pytest

from fedml_fes.errors import FesError


def ensure_mosquitto() -> str:
    from fedml_fes_plugins.cross_silo.services import find_mosquitto

    try:
        return find_mosquitto()
    except FesError:
        pass
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "mosquitto"]
        if subprocess.run(install, capture_output=True, env=env, timeout=900).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=900)
            subprocess.run(install, capture_output=True, env=env, timeout=900)
    try:
        return find_mosquitto()
    except FesError as e:
        pytest.skip(f"{e}; this machine cannot install it (needs root and apt-get)")


@pytest.fixture(scope="session")
def mosquitto_exe() -> str:
    return ensure_mosquitto()


@pytest.fixture
def broker(tmp_path, mosquitto_exe):
    from fedml_fes_plugins.cross_silo.services import start_mosquitto

    service = start_mosquitto(tmp_path / "mosquitto")
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def s3(tmp_path):
    from fedml_fes_plugins.cross_silo.services import start_s3

    service = start_s3(tmp_path / "s3")
    try:
        yield service
    finally:
        service.stop()


def test_local_broker_and_s3_pass_the_checks(broker, s3):
    from fedml_fes_plugins.cross_silo.checks import check_mqtt, check_s3

    check_mqtt(broker.config, 5.0)
    check_s3(s3.config, 5.0)
    with pytest.raises(FesError, match="bucket 'other' does not exist"):
        check_s3(dict(s3.config, BUCKET_NAME="other"), 5.0)


def test_wrong_mqtt_credentials_are_refused_within_seconds(tmp_path, mosquitto_exe):
    from fedml_fes_plugins.cross_silo.checks import check_mqtt
    from fedml_fes_plugins.cross_silo.services import start_mosquitto

    broker = start_mosquitto(tmp_path / "auth", users={"fes": "right"})
    try:
        check_mqtt(broker.config, 5.0)
        start = time.monotonic()
        with pytest.raises(FesError, match="refused the login for user 'fes': not authorised") as e:
            check_mqtt(dict(broker.config, MQTT_PWD="wrong"), 5.0)
        with pytest.raises(FesError, match=r"refused the login \(no MQTT_USER set\)"):
            check_mqtt(dict(broker.config, MQTT_USER=None), 5.0)
        assert time.monotonic() - start < 5 and "\n" not in str(e.value)
    finally:
        broker.stop()
    assert broker.proc.poll() is not None


def test_wrong_s3_credentials_are_refused(tmp_path):
    """moto checks keys against its IAM once INITIAL_NO_AUTH_ACTION_COUNT actions have passed."""
    import boto3

    from fedml_fes_plugins.cross_silo.checks import check_s3
    from fedml_fes_plugins.cross_silo.services import s3_client, start_s3

    service = start_s3(tmp_path / "s3auth", env={"INITIAL_NO_AUTH_ACTION_COUNT": "4"}, create_bucket=False)
    try:
        endpoint = service.config["CN_S3_ENDPOINT"]
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="fes")
        key = iam.create_access_key(UserName="fes")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName="fes", PolicyName="s3", PolicyDocument=json.dumps(policy))
        good = dict(service.config, CN_S3_AKI=key["AccessKeyId"], CN_S3_SAK=key["SecretAccessKey"])
        s3_client(good).create_bucket(Bucket=good["BUCKET_NAME"])
        check_s3(good, 5.0)
        with pytest.raises(FesError, match="refused the credentials"):
            check_s3(dict(good, CN_S3_SAK="wrong"), 5.0)
    finally:
        service.stop()


def test_mqtt_stop_from_another_thread_leaves_the_socket_to_pahos_loop(broker, monkeypatch):
    """FedML runs paho's loop_forever on the main thread and our deferred stop (the flushing shim)
    runs FedML's stop from another one; paho then wrote the DISCONNECT and closed the socket from
    that thread, under the loop's feet ("OSError: [Errno 9] Bad file descriptor": a finished silo
    with exit code 1, once in CI). Now the loop thread closes its own socket and loop_forever
    returns cleanly. The shim runs here as FedMLRunner's silo runs it, on a real broker."""
    import threading
    from types import SimpleNamespace

    import paho.mqtt.client as paho
    from fedml.core.distributed.communication.mqtt_s3 import mqtt_s3_multi_clients_comm_manager as mqtt_s3

    from fedml_fes_plugins.cross_silo import transport  # imports FedML quietly

    cls = mqtt_s3.MqttS3MultiClientsCommManager
    monkeypatch.setattr(cls, "stop_receive_message", cls.stop_receive_message)  # undone after the test
    transport.use_flushing_mqtt_stop()
    client = paho.Client(client_id="fes-stop-test", clean_session=True)
    connected, closers, ended = threading.Event(), [], {}
    client.on_connect = lambda *_a: connected.set()
    close = client._sock_close
    client._sock_close = lambda: (
        client._sock is not None and closers.append(threading.current_thread().name),
        close(),
    )[1]
    client.connect("127.0.0.1", broker.port, keepalive=30)

    def loop() -> None:
        try:
            ended["rc"] = client.loop_forever()
        except Exception as e:  # what killed FedML's silo
            ended["error"] = repr(e)

    loop_thread = threading.Thread(target=loop, name="paho-loop", daemon=True)
    loop_thread.start()
    assert connected.wait(10)
    with client._in_callback_mutex:  # on_connect has returned: the loop is idle in select()
        pass
    # FedML's manager as its stop (mqtt_s3_multi_clients_comm_manager.py:334-337) reads it
    manager = SimpleNamespace(
        mqtt_mgr=SimpleNamespace(_client=client, loop_stop=client.loop_stop, disconnect=client.disconnect)
    )
    cls.stop_receive_message(manager).join(timeout=30)
    loop_thread.join(timeout=10)
    assert not loop_thread.is_alive() and "error" not in ended, ended
    assert closers == ["paho-loop"], closers


@pytest.mark.slow
def test_a_burst_after_incoming_qos2_messages_reaches_every_device(broker):
    """paho 1.6.1 lowered its outgoing in-flight count for every incoming QoS 2 message, so a
    server that had heard 30 device statuses sent its next burst 50 at once and mosquitto
    dropped what was over its 20 in flight (transport.use_outgoing_only_inflight_count)."""
    import paho.mqtt.client as mqtt

    from fedml_fes_plugins.cross_silo.transport import use_outgoing_only_inflight_count

    use_outgoing_only_inflight_count()
    host, port = "127.0.0.1", int(broker.config["BROKER_PORT"])
    burst, statuses = 100, 30
    got: set[str] = set()
    clients = []

    def client(name: str) -> mqtt.Client:
        c = mqtt.Client(f"{name}-{time.monotonic_ns()}")
        c.connect(host, port)
        clients.append(c)
        return c

    try:
        device = client("device")
        device.on_message = lambda _c, _u, m: got.add(m.topic)
        device.subscribe("to_device/#", qos=2)
        device.loop_start()
        server = client("server")
        heard = []

        def on_status(c, _u, m):  # the last status triggers the burst, from paho's own loop
            heard.append(m.topic)
            if len(heard) == statuses:
                for i in range(burst):
                    c.publish(f"to_device/{i}", "x" * 64, qos=2)

        server.on_message = on_status
        server.subscribe("status/#", qos=2)
        server.loop_start()
        time.sleep(0.3)
        for i in range(statuses):
            device.publish(f"status/{i}", "ONLINE", qos=2)
        deadline = time.monotonic() + 20
        while len(got) < burst and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(heard) == statuses and len(got) == burst, (len(heard), len(got))
    finally:
        for c in clients:
            c.loop_stop()
            c.disconnect()


def test_free_ports_stay_out_of_the_kernels_ephemeral_range():
    """A port the kernel may hand an outgoing connection between our pick and the child's
    bind made a cross-silo server fail with 'address in use' (CI); picks stay below it."""
    from fedml_fes_plugins.cross_silo.services import _ephemeral_range, free_port

    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= p < low for p in ports)
    assert len(ports) > 1


def test_local_launchers_share_the_cores_among_their_processes(tmp_path, monkeypatch):
    """common_args.torch_threads 0 (torch's default: every core in each process) becomes this
    machine's cores shared among the processes a launcher starts here; a set value, or the
    user's own OMP_NUM_THREADS, wins. mpirun's ranks and cross-silo's processes alike."""
    from types import SimpleNamespace

    from fedml_fes_plugins.cross_silo.services import LocalRun
    from fedml_fes_plugins.runtimes import launcher, rank
    from fedml_fes_plugins.runtimes.rank import process_threads

    assert 1 <= rank.usable_cores() <= (os.cpu_count() or 1)
    monkeypatch.setattr(rank, "usable_cores", lambda: 8)
    assert [process_threads(0, n) for n in (1, 3, 4, 16)] == [8, 2, 2, 1]
    assert process_threads(3, 4) == 3
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    run = LocalRun()
    run.path = tmp_path
    run.prepare(0, 4)  # a server and three silos
    assert run.env["OMP_NUM_THREADS"] == "2"

    seen: list[dict] = []

    def popen(cmd, env, **_kw):
        seen.append(env)
        raise OSError("not started")

    monkeypatch.setattr(launcher.subprocess, "Popen", popen)
    job = SimpleNamespace(cfg=SimpleNamespace(common=SimpleNamespace(torch_threads=0)), np=3)
    with pytest.raises(OSError):
        launcher.run_ranks(job, ["mpirun"], log=None)
    assert seen[-1]["OMP_NUM_THREADS"] == "2"

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    run.prepare(0, 4)
    assert run.env["OMP_NUM_THREADS"] == "3"
    with pytest.raises(OSError):
        launcher.run_ranks(job, ["mpirun"], log=None)
    assert seen[-1]["OMP_NUM_THREADS"] == "3"
