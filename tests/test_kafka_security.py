"""The Kafka listener's security is the msgpack listener's: TLS with the same tls_* files (clients'
security.protocol=SSL), the client certificate's subject as the principal, SASL/PLAIN over TLS checked
against auth_tokens_file, and the same [[acl]] rules (Describe for Metadata and ListOffsets, Read for Fetch),
a denied topic reaching the client as TOPIC_AUTHORIZATION_FAILED. Real clients, real daemons."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import tempfile

import pytest

import reference as R
from daemon_helpers import start_daemon, stop_daemon
from test_kafka_clients import free_port, our_records, run_client, span
from kafka_clients import digest
from tls_certs import make_certs

ACL = '''
[[acl]]
principal = "CN=reader"
topics = ["plain"]
operations = ["describe", "read"]
[[acl]]
principal = "token:etl"
topics = ["plain", "compressed"]
operations = ["describe", "read"]
'''


def _daemon(d: str, certs, *, mutual: bool):
    port = free_port()
    sock, conf = os.path.join(d, "s"), os.path.join(d, "c.toml")
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("etl:s3cret\n")
    os.chmod(tokens, 0o600)
    with open(conf, "w") as f:
        f.write(f'log_dirs = ["{R.require() / "logs"}"]\nsocket = "{sock}"\n'
                f'tls_cert_file = "{certs.pem("server")}"\ntls_key_file = "{certs.key("server")}"\n'
                + (f'tls_client_ca_file = "{certs.pem("ca")}"\n' if mutual else f'auth_tokens_file = "{tokens}"\n')
                + ACL + f'[kafka]\nlisten = "127.0.0.1:{port}"\n')
    return start_daemon(["--config", conf], d, sock), f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def secured():
    """(certs, mutual-TLS bootstrap, TLS+SASL bootstrap): two daemons, one per way to authenticate."""
    d = tempfile.mkdtemp(prefix="lks", dir="/tmp")
    certs = make_certs(os.path.join(d, "certs"))
    os.makedirs(os.path.join(d, "m"))
    os.makedirs(os.path.join(d, "p"))
    mutual, mutual_at = _daemon(os.path.join(d, "m"), certs, mutual=True)
    try:
        sasl, sasl_at = _daemon(os.path.join(d, "p"), certs, mutual=False)
    except BaseException:
        stop_daemon(mutual)
        raise
    try:
        yield certs, mutual_at, sasl_at
    finally:
        errs = [stop_daemon(p) for p in (mutual, sasl)]
        shutil.rmtree(d, ignore_errors=True)
        for code, err in errs:
            assert code == 0 and "Traceback" not in err, err


def _target(name: str) -> str:
    return f"{name}:0:{span(str(R.log_dir(f'{name}-0')), name, 0)}"


@pytest.mark.parametrize("client", ("confluent", "kafka-python"))
def test_tls_with_a_client_certificate_reads_what_its_acl_allows(secured, client):
    certs, at, _ = secured
    ssl_opts = ["ssl", certs.pem("ca"), certs.pem("reader"), certs.key("reader")]
    got = run_client(client, at, "consume", "read_uncommitted", _target("plain"), *ssl_opts)
    want = our_records(str(R.log_dir("plain-0")), "plain", 0, committed=False)
    assert got[_target("plain")]["digest"] == digest(want)


def test_a_denied_topic_reaches_the_client_as_an_authorization_error(secured):
    certs, at, _ = secured
    ssl_opts = ["ssl", certs.pem("ca"), certs.pem("reader"), certs.key("reader")]
    got = run_client("confluent", at, "group", "denied", "compressed", "10", "4", *ssl_opts)
    assert got["seen"] == [] and any("Topic authorization failed" in e for e in got["errors"]), got


def test_sasl_plain_over_tls_names_the_token_as_principal(secured):
    certs, _, at = secured
    opts = ["ssl", certs.pem("ca"), "-", "-", "sasl", "etl", "s3cret"]
    got = run_client("confluent", at, "consume", "read_uncommitted", _target("compressed"), *opts)
    want = our_records(str(R.log_dir("compressed-0")), "compressed", 0, committed=False)
    assert got[_target("compressed")]["digest"] == digest(want)
    denied = run_client("confluent", at, "group", "denied", "txn", "10", "4", *opts)
    assert denied["seen"] == [] and any("Topic authorization failed" in e for e in denied["errors"]), denied


def test_a_wrong_password_is_refused(secured):
    certs, _, at = secured
    got = run_client("confluent", at, "consume", "read_uncommitted", _target("plain"),
                     "ssl", certs.pem("ca"), "-", "-", "sasl", "etl", "wrong")
    assert "SASL authentication error: authentication failed: wrong user name or password" in got["error"], got
    assert got[_target("plain")]["count"] == 0


def test_a_request_before_sasl_authentication_closes_the_connection(secured):
    certs, _, at = secured
    host, port = at.split(":")
    ctx = ssl.create_default_context(cafile=certs.pem("ca"))
    ctx.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=10) as raw, ctx.wrap_socket(raw) as s:
        body = struct.pack(">hhi", 3, 4, 1) + struct.pack(">h", 1) + b"x" + struct.pack(">ib", -1, 0)  # Metadata v4
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(100) == b""  # closed, nothing answered
