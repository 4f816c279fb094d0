"""Certificates for the TLS tests, made with `cryptography`: a CA, a server certificate for 127.0.0.1 and
localhost, client certificates (one expired), and a second CA with a client certificate of its own."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_NOW = datetime.datetime.now(datetime.timezone.utc)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: str, cert: x509.Certificate, key=None) -> None:
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        with open(path[:-len(".pem")] + ".key", "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        os.chmod(path[:-len(".pem")] + ".key", 0o600)


def _ca(cn: str):
    key = _key()
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(days=1)).not_valid_after(_NOW + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca, cn: str | x509.Name, *, server: bool = False, expired: bool = False):
    """A certificate `ca` signed for the common name `cn` (or the whole subject `cn`)."""
    ca_cert, ca_key = ca
    key = _key()
    start, end = (_NOW - datetime.timedelta(days=10), _NOW - datetime.timedelta(days=1)) if expired else \
        (_NOW - datetime.timedelta(days=1), _NOW + datetime.timedelta(days=30))
    subject = _name(cn) if isinstance(cn, str) else cn
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


@dataclass
class Certs:
    """Paths: `<name>.pem` and `<name>.key` in `dir` for every name below."""

    dir: str

    def pem(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.pem")

    def key(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.key")

    def client(self, name: str) -> dict[str, str]:
        """The Python client's keyword arguments for client certificate `name` (None: CA only)."""
        kw = {"tls_ca": self.pem("ca")}
        if name:
            kw.update(tls_cert=self.pem(name), tls_key=self.key(name))
        return kw

    def renew_server(self) -> None:
        """A new server certificate (same CA), written over the old files: what a reload picks up."""
        _write(self.pem("server"), *_leaf(self._ca, "lookupd-renewed", server=True))


def make_certs(directory: str) -> Certs:
    """ca, server (CN=lookupd), etl (CN=spark-etl), reader (CN=reader), expired (CN=spark-etl, expired),
    other-ca and stranger (CN=spark-etl, signed by other-ca); admin (O=ops, CN=admin: the principal
    `CN=admin,O=ops`) and lookalike (the one common name `admin,O=ops`: `CN=admin\\,O\\=ops`)."""
    os.makedirs(directory, exist_ok=True)
    ca, other = _ca("lookupd test CA"), _ca("another CA")
    _write(os.path.join(directory, "ca.pem"), ca[0])
    _write(os.path.join(directory, "other-ca.pem"), other[0])
    _write(os.path.join(directory, "server.pem"), *_leaf(ca, "lookupd", server=True))
    _write(os.path.join(directory, "etl.pem"), *_leaf(ca, "spark-etl"))
    _write(os.path.join(directory, "reader.pem"), *_leaf(ca, "reader"))
    _write(os.path.join(directory, "expired.pem"), *_leaf(ca, "spark-etl", expired=True))
    _write(os.path.join(directory, "stranger.pem"), *_leaf(other, "spark-etl"))
    _write(os.path.join(directory, "admin.pem"), *_leaf(ca, x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ops"), x509.NameAttribute(NameOID.COMMON_NAME, "admin")])))
    _write(os.path.join(directory, "lookalike.pem"), *_leaf(ca, "admin,O=ops"))
    certs = Certs(directory)
    certs._ca = ca
    return certs
