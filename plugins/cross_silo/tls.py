"""TLS with a certificate per process: who may talk to a cross-silo run, and who they are.

`comm_args.tls_ca`, `tls_cert` and `tls_key` turn it on, for gRPC and for MQTT alike (all
three or none). `{rank}` in a path is the process's rank, so one config serves every process:
`tls_cert: certs/rank-{rank}.crt`. Certificates name their process: `rank-N`
(`certs.rank_name`), made by `fedml-fes certs` or any CA.

- gRPC: every process is a server and a client (FedML sends on a fresh channel to the
  peer's own server). Servers require a client certificate signed by the CA (mutual TLS), so
  a peer without one never gets past the handshake; a channel to rank r accepts only a
  server whose certificate names `rank-r`; and a receiver drops, with one log line naming
  the peer's address, a message whose sender rank is not the one on the peer's certificate.
- MQTT: paho connects with the same CA and certificate; the broker takes the certificate's
  name as the user (mosquitto `use_identity_as_username`) and its ACL lets each rank publish
  on its own topics only (`services.mqtt_acl`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from fedml_fes.errors import FesError

KEYS = ("tls_ca", "tls_cert", "tls_key")


@dataclass(frozen=True)
class TlsFiles:
    """One process's CA, certificate and key (paths, `{rank}` already filled in)."""

    ca: str
    cert: str
    key: str

    def read(self) -> tuple[bytes, bytes, bytes]:
        return tuple(_read(path, key) for path, key in zip((self.ca, self.cert, self.key), KEYS))  # type: ignore[return-value]

    def grpc_server_credentials(self) -> Any:
        import grpc

        ca, cert, key = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def grpc_channel_credentials(self) -> Any:
        import grpc

        ca, cert, key = self.read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FesError(f"comm_args.{key}: cannot read {path} ({e.strerror})") from None


def tls_for(values: Any, rank: int) -> TlsFiles | None:
    """The TLS files of process `rank` from an object with the `tls_*` attributes (the comm
    section or FedML's flat args); None when TLS is off. Checked: all three or none, readable."""
    raw = {k: str(getattr(values, k, "") or "") for k in KEYS}
    given = [k for k in KEYS if raw[k]]
    if not given:
        return None
    if len(given) != len(KEYS):
        missing = ", ".join(f"comm_args.{k}" for k in KEYS if k not in given)
        raise FesError(f"TLS needs comm_args.tls_ca, tls_cert and tls_key together; {missing} is not set")
    files = TlsFiles(*(os.path.expanduser(raw[k].replace("{rank}", str(int(rank)))) for k in KEYS))
    files.read()
    return files
