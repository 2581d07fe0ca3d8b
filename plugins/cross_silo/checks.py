"""Checks a cross-silo process runs before starting: its port, the broker, the S3 bucket.

Without them, bad input hangs instead of failing: FedML's gRPC server shares a port that is
taken (SO_REUSEPORT) and messages go astray; paho retries a refused broker login forever;
boto3 retries an unreachable endpoint for minutes. Each check takes at most
`comm_args.connect_timeout_s` and ends in one line that names the setting to fix.
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from fedml_fes.errors import FesError
from fedml_fes_plugins.cross_silo.config import CrossSiloSettings
from fedml_fes_plugins.cross_silo.tls import TlsFiles

MQTT_REFUSALS = {
    1: "unacceptable protocol version",
    2: "client id rejected",
    3: "broker unavailable",
    4: "bad user name or password",
    5: "not authorised",
}


def check_port(ip: str, port: int, what: str) -> None:
    """This process must be able to listen on ip:port, alone."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of a previous run is fine
        try:
            s.bind((ip, port))
            s.listen(1)
        except OSError as e:
            if e.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
                raise FesError(
                    f"port {port} on {ip} ({what}) is in use: stop what holds it or change the ipconfig"
                ) from None
            raise FesError(
                f"cannot listen on {ip}:{port} ({what}): {e.strerror}; is this row meant for this machine?"
            ) from None


def _reach(host: str, port: int, timeout_s: float, what: str, setting: str) -> None:
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))
        raise FesError(f"cannot reach the {what} at {host}:{port} ({reason}); is it running? ({setting})") from None


def check_mqtt(mqtt: dict[str, Any], timeout_s: float, tls: TlsFiles | None = None) -> None:
    """Reach the broker and log in with the configured credentials (and certificate)."""
    import ssl

    import paho.mqtt.client as paho

    host, port = mqtt["BROKER_HOST"], int(mqtt["BROKER_PORT"])
    setting = "comm_args.customized_training_mqtt_config"
    _reach(host, port, timeout_s, "MQTT broker", setting)
    client = paho.Client(client_id=f"fes-check-{uuid.uuid4().hex[:12]}", clean_session=True)
    if mqtt.get("MQTT_USER"):
        client.username_pw_set(mqtt["MQTT_USER"], mqtt.get("MQTT_PWD"))
    result: dict[str, int] = {}
    client.on_connect = lambda _c, _u, _f, rc: result.setdefault("rc", rc)
    if tls is not None:
        client.tls_set(ca_certs=tls.ca, certfile=tls.cert, keyfile=tls.key)
    try:
        client.connect(host, port, keepalive=max(int(timeout_s), 5))
        deadline = time.monotonic() + timeout_s
        while "rc" not in result and time.monotonic() < deadline:
            if client.loop(timeout=0.1) not in (0,) and "rc" not in result:
                break
    except ssl.SSLError as e:
        raise FesError(
            f"the TLS handshake with the MQTT broker at {host}:{port} failed ({e.reason or e}): is it a TLS "
            f"port, and is its certificate signed by comm_args.tls_ca for the name {host}?"
        ) from None
    except OSError as e:
        raise FesError(f"cannot reach the MQTT broker at {host}:{port} ({e}); is it running? ({setting})") from None
    finally:
        try:
            client.disconnect()
        except Exception:
            pass
    rc = result.get("rc")
    if rc is None:
        raise FesError(
            f"the MQTT broker at {host}:{port} did not accept a connection within {timeout_s:g}s "
            f"(wrong port, not an MQTT broker, or a TLS port while comm_args.tls_* is unset?) ({setting})"
        )
    if rc != 0:
        user = mqtt.get("MQTT_USER")
        who = f" for user '{user}'" if user else " (no MQTT_USER set)"
        raise FesError(
            f"the MQTT broker at {host}:{port} refused the login{who}: "
            f"{MQTT_REFUSALS.get(rc, f'code {rc}')} ({setting})"
        )


def check_s3(s3: dict[str, Any], timeout_s: float) -> None:
    """Reach the S3 endpoint and see the bucket with the configured keys."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    setting = "comm_args.customized_training_s3_config"
    endpoint, bucket = s3.get("CN_S3_ENDPOINT"), s3["BUCKET_NAME"]
    where = endpoint or f"AWS region {s3.get('CN_REGION_NAME')}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint or None,
        region_name=s3.get("CN_REGION_NAME") or None,
        aws_access_key_id=s3["CN_S3_AKI"],
        aws_secret_access_key=s3["CN_S3_SAK"],
        config=Config(
            signature_version="s3v4",
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"max_attempts": 1, "mode": "standard"},
        ),
    )
    try:
        client.head_bucket(Bucket=bucket)
    except EndpointConnectionError:
        raise FesError(f"cannot reach the S3 endpoint {where}; is it running? ({setting})") from None
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", "?"))
        if code in ("403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"):
            raise FesError(
                f"the S3 endpoint {where} refused the credentials (CN_S3_AKI / CN_S3_SAK) for bucket "
                f"'{bucket}' ({setting})"
            ) from None
        if code in ("404", "NoSuchBucket"):
            raise FesError(f"bucket '{bucket}' does not exist at {where}: create it first ({setting})") from None
        raise FesError(f"the S3 endpoint {where} answered {code} for bucket '{bucket}' ({setting})") from None
    except BotoCoreError as e:
        raise FesError(f"cannot use the S3 endpoint {where}: {e} ({setting})") from None


def preflight(settings: CrossSiloSettings, rank: int) -> None:
    """Everything process `rank` can check about its transport before starting."""
    tls = settings.tls(rank)  # the files are readable, or one line naming the key
    if settings.backend == "GRPC":
        peer = settings.grpc_peers[rank]
        check_port(peer.ip, peer.port, f"rank {rank} in {settings.grpc_ipconfig_path}")
        return
    check_mqtt(settings.mqtt, settings.connect_timeout_s, tls)
    check_s3(settings.s3, settings.connect_timeout_s)
