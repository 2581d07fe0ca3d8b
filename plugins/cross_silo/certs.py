"""A throw-away certificate authority and one certificate per process, for TLS runs.

A cross-silo run over TLS needs a CA that every process trusts and, for each process, a
certificate and key signed by it. The certificate's common name is the process's identity:
`rank-0` for the server, `rank-N` for silo N, `broker` for the MQTT broker. gRPC receivers
check that the name on a verified certificate is the rank the message claims to come from;
mosquitto takes the name as the MQTT user (`use_identity_as_username`) for its ACL.

`fedml-fes certs --out DIR --silos K [--host NAME ...]` writes them; the tests and
`--local-services` make them in a temporary folder. For a deployment whose machines have
their own PKI, any CA works as long as the names follow the rule above.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedml_fes_plugins.cross_silo.tls import TlsFiles

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
VALID_DAYS = 365


def rank_name(rank: int) -> str:
    """The common name a rank's certificate carries."""
    return f"rank-{int(rank)}"


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = path.with_suffix(".key")
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_file.chmod(0o600)


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
    )


def make_ca(out: Path, name: str = "fedml-fes run CA") -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA, written as out/ca.crt and out/ca.key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(name, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "ca", key, cert)
    return key, cert


def make_cert(
    out: Path,
    name: str,
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    hosts: Iterable[str] = DEFAULT_HOSTS,
) -> Path:
    """out/<name>.crt and .key, signed by `ca`, good as a server and as a client (a gRPC
    process is both); `hosts` are the names and addresses it serves on."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(name, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san([name, *hosts]), critical=False)  # gRPC checks peers by their name
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / name, key, cert)
    return out / f"{name}.crt"


def comm_keys(folder: str | Path) -> dict[str, str]:
    """The `comm_args.tls_*` values for certificates made by `make_run_certs` in `folder`."""
    folder = Path(folder)
    return {
        "tls_ca": str(folder / "ca.crt"),
        "tls_cert": str(folder / "rank-{rank}.crt"),
        "tls_key": str(folder / "rank-{rank}.key"),
    }


def broker_files(folder: str | Path) -> TlsFiles:
    """The MQTT broker's CA, certificate and key made by `make_run_certs` in `folder`."""
    folder = Path(folder)
    return TlsFiles(str(folder / "ca.crt"), str(folder / "broker.crt"), str(folder / "broker.key"))


def make_run_certs(out: str | Path, silo_num: int, hosts: Iterable[str] = DEFAULT_HOSTS) -> Path:
    """A CA plus rank-0..rank-K and broker certificates in `out`; returns the folder."""
    out = Path(out)
    hosts = tuple(dict.fromkeys([*DEFAULT_HOSTS, *hosts]))
    ca = make_ca(out)
    for rank in range(0, int(silo_num) + 1):
        make_cert(out, rank_name(rank), ca, hosts)
    make_cert(out, "broker", ca, hosts)
    return out
