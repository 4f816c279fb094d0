"""TLS on the TCP listener, named tokens and [[acl]] rules: the real daemon as a subprocess, through each client.

Certificates come from tests/tls_certs.py. One daemon serves mutual TLS with ACLs for most tests;
others start their own where the setting differs.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import warnings

import pytest
import trio

import reference as R
from daemon_helpers import REPO, RawPeer, blocking_call, running, short_dir  # noqa: F401 - fixture
from spark_fixtures import reference_rows, spark  # noqa: F401 - the shared Spark session
from tls_certs import make_certs

from lookupd.errors import InvalidArgument, Unavailable
from lookupd.rpc.client import Client, RemoteError, TrioClient


class Daemon:
    """`lookupd serve` with a config file; its TCP port and metrics port read from its log."""

    def __init__(self, workdir: str, config: str):
        self.dir = workdir
        self.sock = os.path.join(workdir, "d.sock")
        self.log = os.path.join(workdir, "daemon.log")
        path = os.path.join(workdir, "lookupd.toml")
        with open(path, "w") as f:
            f.write(f'log_dirs = ["{R.require() / "logs"}"]\nsocket = "{self.sock}"\n' + config)
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--config", path], cwd=workdir,
                                     env=dict(os.environ, PYTHONPATH=REPO), stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + 30
        while "serving" not in self.text():
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.05)
        m = re.search(r"tcp 127\.0\.0\.1:(\d+)", self.text())
        self.port = int(m.group(1)) if m else None
        m = re.search(r"metrics on https?://[^:]+:(\d+)", self.text())
        self.metrics_port = int(m.group(1)) if m else None
        self.address = f"tls://127.0.0.1:{self.port}"

    def text(self) -> str:
        with open(self.log) as f:
            return f.read()

    def threads(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"Threads:\s+(\d+)", f.read()).group(1))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("certs")))


ACLS = f"""
[[acl]]
principal = "CN=spark-etl"
topics = ["plain", "large*"]
operations = ["describe", "read"]

[[acl]]
principal = "CN=reader"
topics = ["plain"]
operations = ["describe"]

[[acl]]
principal = "CN=admin,O=ops"
topics = ["compressed"]
operations = ["describe", "read"]

[[acl]]
principal = "token:ops"
topics = ["compressed"]
operations = ["describe"]

[[acl]]
principal = "unix:{os.getuid()}"
topics = ["*"]
operations = ["describe", "read"]
"""


def _tokens_file(directory: str) -> str:
    path = os.path.join(directory, "tokens")
    with open(path, "w") as f:
        f.write("# name:secret\nops:ops-secret-1\n\nbatch:batch-secret-2\n")
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="module")
def mtls(certs, tmp_path_factory):
    """Mutual TLS, named tokens, ACLs and metrics over TLS."""
    d = str(tmp_path_factory.mktemp("mtls"))
    daemon = Daemon(d, f'tcp = "127.0.0.1:0"\ntls_cert_file = "{certs.pem("server")}"\n'
                       f'tls_key_file = "{certs.key("server")}"\ntls_client_ca_file = "{certs.pem("ca")}"\n'
                       f'auth_tokens_file = "{_tokens_file(d)}"\ntls_handshake_timeout_s = 1.0\n'
                       f'metrics = "127.0.0.1:0"\nmetrics_tls = true\n' + ACLS)
    yield daemon
    daemon.stop()


# ---------------------------------------------------------------------------------- Python client


def test_mutual_tls_principal_and_acl(mtls, certs):
    with Client(mtls.address, **certs.client("etl")) as c:
        assert c.ping() == "pong"
        assert c.lookup_offset("plain", 0, 5) == blocking_call(mtls.sock, "lookup_offset", "plain", 0, 5, "floor")[1]
        assert c.read("plain", 0, 0, 1)["records"]
        big = c.read("large", 0, 0, 8 << 20)  # megabytes of records: many TLS records, in order
        assert len(big["records"]) > 1 << 20
        assert big == blocking_call(mtls.sock, "read", "large", 0, 0, 8 << 20)[1]
        assert {p["topic"] for p in c.partitions()} == {"plain", "large"}  # only what it may describe
        with pytest.raises(RemoteError) as e:
            c.lookup_offset("compressed", 0, 0)
        assert e.value.code == "UNAUTHORIZED" and "describe" in e.value.message and "'compressed'" in e.value.message
        assert c.ping() == "pong"  # a denial does not end the connection
    with Client(mtls.address, **certs.client("reader")) as c:
        assert c.resolve_offset("plain", 0, 3)["base_offset"] <= 3
        for call in (lambda: c.read("plain", 0, 0, 1), lambda: c.lookup_offsets("plain", 0, [1, 2])):
            with pytest.raises(RemoteError, match="UNAUTHORIZED: CN=reader may not read topic 'plain'"):
                call()
    # The Unix socket: principal unix:<uid>, allowed everything by its rule; nothing else changed there.
    err, parts = blocking_call(mtls.sock, "partitions")
    assert err is None and {p["topic"] for p in parts} > {"plain", "large", "compressed"}


def test_a_subject_is_never_taken_for_another(mtls, certs):
    """Issue 40: the common name `admin,O=ops` joined unescaped was the principal `CN=admin,O=ops` and read what
    that subject may. As Kafka writes it (RFC 2253, lookupd.daemon.principal) it is `CN=admin\\,O\\=ops`."""
    with Client(mtls.address, **certs.client("admin")) as c:  # subject O=ops, CN=admin
        assert c.read("compressed", 0, 0, 1)["records"]
    with Client(mtls.address, **certs.client("lookalike")) as c:
        with pytest.raises(RemoteError) as e:
            c.read("compressed", 0, 0, 1)
        assert e.value.code == "UNAUTHORIZED"
        assert e.value.message.startswith("CN=admin\\,O\\=ops may not read topic 'compressed'"), e.value.message
        assert c.partitions() == []  # it may describe nothing either


def test_named_token_inside_tls_is_the_principal(mtls, certs):
    with Client(mtls.address, token="ops-secret-1", **certs.client("reader")) as c:
        assert c.lookup_offset("compressed", 0, 0) is not None  # token:ops may describe compressed
        with pytest.raises(RemoteError, match="token:ops may not describe topic 'plain'"):
            c.lookup_offset("plain", 0, 0)
    with pytest.raises(RemoteError, match="UNAUTHORIZED: wrong token"):
        Client(mtls.address, token="nope", **certs.client("reader"))


@pytest.mark.parametrize("who, why", [("expired", "certificate"), ("stranger", "certificate"), (None, "certificate")])
def test_refused_client_certificates_are_closed_and_logged(mtls, certs, who, why):
    with pytest.raises(Unavailable):
        with Client(mtls.address, timeout=5, **certs.client(who)) as c:
            c.ping()  # TLS 1.3: a refused client certificate shows at the first read
    with Client(mtls.address, **certs.client("etl")) as c:
        assert c.ping() == "pong"  # everyone else is served
    deadline = time.monotonic() + 5
    while not re.search(r"TLS handshake failed: .*" + why, mtls.text(), re.I):
        assert time.monotonic() < deadline, mtls.text()[-3000:]
        time.sleep(0.05)


def test_server_name_and_certificate_are_verified(mtls, certs):
    with pytest.raises(Unavailable, match="TLS: CERTIFICATE_VERIFY_FAILED"):
        Client(mtls.address, tls_cert=certs.pem("etl"), tls_key=certs.key("etl"))  # the system CAs: not ours
    with pytest.raises(Unavailable, match="TLS: CERTIFICATE_VERIFY_FAILED"):
        Client(mtls.address, **dict(certs.client("etl"), tls_ca=certs.pem("other-ca")))
    with Client(f"tls://localhost:{mtls.port}", **certs.client("etl")) as c:  # the name in its SAN
        assert c.ping() == "pong"
    with pytest.raises(InvalidArgument, match="not a tls://"):
        Client(f"127.0.0.1:{mtls.port}", tls_ca=certs.pem("ca"))


def test_tls_failures_name_the_cause_and_the_flag(mtls, certs):
    """Issue 44: the likely cause and what to pass, not OpenSSL's reason alone."""
    with pytest.raises(Unavailable) as e:
        with Client(mtls.address, timeout=5, tls_ca=certs.pem("ca")) as c:
            c.ping()
    assert f"cannot reach lookupd at {mtls.address}: the daemon wants a client certificate: pass --tls-cert and " \
           "--tls-key (TLS: TLSV13_ALERT_CERTIFICATE_REQUIRED)" == str(e.value)
    with pytest.raises(Unavailable) as e:
        Client(mtls.address, **dict(certs.client("etl"), tls_ca=certs.pem("other-ca")))
    assert f"cannot reach lookupd at {mtls.address}: the server's certificate is not signed by --tls-ca " \
           f"{certs.pem('other-ca')} (TLS: CERTIFICATE_VERIFY_FAILED)" == str(e.value)
    with pytest.raises(Unavailable) as e:
        Client(mtls.address, tls_cert=certs.pem("etl"), tls_key=certs.key("etl"))
    assert "the server's certificate is not signed by a CA this system trusts: pass --tls-ca FILE" in str(e.value)
    with pytest.raises(Unavailable) as e:
        with Client(mtls.address, timeout=5, **certs.client("stranger")) as c:
            c.ping()
    assert f"the daemon does not trust --tls-cert {certs.pem('stranger')}: it is not signed by the daemon's " \
           "tls_client_ca_file (TLS: TLSV1_ALERT_UNKNOWN_CA)" in str(e.value)
    for plain in (f"127.0.0.1:{mtls.port}", f"localhost:{mtls.port}"):
        with pytest.raises(Unavailable) as e:
            with Client(plain, timeout=5) as c:
                c.ping()
        assert str(e.value) == f"cannot reach lookupd at {plain}: this port speaks TLS: use tls://{plain}"

    async def trio_plain():
        async with await TrioClient.connect(f"127.0.0.1:{mtls.port}", timeout=5) as c:
            await c.ping()
    with pytest.raises(Unavailable, match=f"this port speaks TLS: use tls://127.0.0.1:{mtls.port}$"):
        trio.run(trio_plain)


def test_cli_tls_mistakes_are_one_line(mtls, certs):
    def query(*args):
        return subprocess.run([sys.executable, "-m", "lookupd", "query", "--socket", mtls.address, *args, "ping"],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    r = query("--tls-ca", certs.pem("ca"), "--tls-cert", certs.pem("etl"))  # the key is in its own file
    assert (r.returncode, r.stderr) == (1, f"lookupd query: --tls-cert {certs.pem('etl')} holds no private key: "
                                           "pass --tls-key FILE\n")
    r = query("--tls-ca", certs.pem("ca"), "--tls-key", certs.key("etl"))
    assert r.stderr == f"lookupd query: --tls-key {certs.key('etl')} needs its certificate too: pass --tls-cert FILE\n"
    r = query("--tls-ca", certs.pem("ca"), "--tls-cert", certs.pem("etl"), "--tls-key", certs.key("reader"))
    assert r.stderr == f"lookupd query: --tls-key {certs.key('reader')} is not the private key of --tls-cert " \
                       f"{certs.pem('etl')}\n"
    r = query("--tls-ca", certs.pem("ca"))
    assert r.stderr == f"lookupd query: cannot reach lookupd at {mtls.address}: the daemon wants a client " \
                       "certificate: pass --tls-cert and --tls-key (TLS: TLSV13_ALERT_CERTIFICATE_REQUIRED)\n"


def test_plaintext_garbage_and_slow_handshakes_are_closed(mtls, certs):
    err = None
    try:
        with Client(f"127.0.0.1:{mtls.port}", timeout=5) as c:  # msgpack-rpc in clear on the TLS port
            c.ping()
    except Unavailable as e:
        err = e
    assert err is not None
    with socket.create_connection(("127.0.0.1", mtls.port)) as s:  # silent: the handshake deadline closes it
        s.settimeout(10)
        t0 = time.monotonic()
        assert s.recv(100) == b""
        assert time.monotonic() - t0 < 5
    with Client(mtls.address, **certs.client("etl")) as c:
        assert c.ping() == "pong"
    assert "no TLS handshake within 1 s" in mtls.text()


def test_handshake_fuzz_leaves_the_daemon_serving(mtls, certs):
    """Random bytes and mutated ClientHellos: each connection closed, the daemon serving afterwards."""
    rnd = random.Random(34)
    ctx = ssl.create_default_context(cafile=certs.pem("ca"))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    for i in range(150):
        if i % 3 == 0:
            data = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 600)))
        else:
            data = bytearray(hello)
            for _ in range(rnd.randrange(1, 8)):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
            data = bytes(data[:rnd.randrange(1, len(data) + 1)])
        with socket.create_connection(("127.0.0.1", mtls.port)) as s:
            s.settimeout(5)
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                while s.recv(4096):
                    pass
            except OSError:
                pass
    with Client(mtls.address, **certs.client("etl")) as c:
        assert c.lookup_offset("plain", 0, 5) is not None
    assert blocking_call(mtls.sock, "ping") == (None, "pong")
    assert "INTERNAL" not in mtls.text() and "Traceback" not in mtls.text()


def test_metrics_over_tls_count_denials_by_principal(mtls, certs):
    with Client(mtls.address, token="batch-secret-2", **certs.client("reader")) as c:
        with pytest.raises(RemoteError, match="UNAUTHORIZED"):
            c.lookup_offset("plain", 0, 0)
    ctx = ssl.create_default_context(cafile=certs.pem("ca"))
    ctx.load_cert_chain(certs.pem("etl"), certs.key("etl"))
    text = urllib.request.urlopen(f"https://127.0.0.1:{mtls.metrics_port}/metrics", context=ctx, timeout=10) \
        .read().decode()
    assert re.search(r'lookupd_acl_denials_total\{principal="token:batch",worker="0"\} [1-9]', text), text
    assert "batch-secret-2" not in text
    with pytest.raises(OSError):  # plaintext http to the TLS metrics port
        urllib.request.urlopen(f"http://127.0.0.1:{mtls.metrics_port}/metrics", timeout=5).read()


# ---------------------------------------------------------------------------------- other clients


def test_cli_query_over_tls(mtls, certs):
    def query(cert, *args):
        return subprocess.run([sys.executable, "-m", "lookupd", "query", "--socket", mtls.address,
                               "--tls-ca", certs.pem("ca"), "--tls-cert", certs.pem(cert), "--tls-key",
                               certs.key(cert), *args], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=REPO))
    r = query("etl", "lookup_offset", "plain", "0", "5", "floor")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == blocking_call(mtls.sock, "lookup_offset", "plain", 0, 5, "floor")[1]
    r = query("reader", "read", "plain", "0", "0", "100")
    assert r.returncode == 1 and "UNAUTHORIZED" in r.stderr and "read topic 'plain'" in r.stderr
    r = query("expired", "ping")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_trio_client_over_tls(mtls, certs):
    async def main():
        async with await TrioClient.connect(mtls.address, **certs.client("etl")) as c:
            answers = []
            async with trio.open_nursery() as n:
                for o in range(20):
                    n.start_soon(lambda o=o: _append(answers, c.resolve_offset("plain", 0, o)))
            assert len(answers) == 20
            with pytest.raises(RemoteError, match="UNAUTHORIZED"):
                await c.segments("compressed", 0)

    async def _append(out, aw):
        out.append(await aw)
    trio.run(main)


# ---------------------------------------------------------------------------------- reload, token-only TLS


def test_sighup_reloads_the_certificate_under_load_losing_no_answer(certs, tmp_path):
    certs2 = make_certs(str(tmp_path / "c"))
    d = Daemon(str(tmp_path), f'tcp = "127.0.0.1:0"\ntls_cert_file = "{certs2.pem("server")}"\n'
                              f'tls_key_file = "{certs2.key("server")}"\n')
    try:
        expected = blocking_call(d.sock, "resolve_offset", "plain", 0, 7)[1]
        stop, counts, errors = threading.Event(), [0] * 4, []

        def load(i):
            try:
                with Client(d.address, tls_ca=certs2.pem("ca")) as c:  # one connection, open across the reload
                    while not stop.is_set():
                        assert c.resolve_offset("plain", 0, 7) == expected
                        counts[i] += 1
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)
        threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        before = list(counts)
        certs2.renew_server()
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "TLS certificate reloaded" not in d.text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert all(a > b for a, b in zip(counts, before))  # every open connection went on being answered
        ctx = ssl.create_default_context(cafile=certs2.pem("ca"))
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", d.port)), server_hostname="127.0.0.1") as s:
            assert ("commonName", "lookupd-renewed") in [a for rdn in s.getpeercert()["subject"] for a in rdn]
    finally:
        d.stop()


def test_tls_with_a_token_and_no_client_certificate(certs, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    d = Daemon(str(tmp_path), f'tcp = "127.0.0.1:0"\ntls_cert_file = "{certs.pem("server")}"\n'
                              f'tls_key_file = "{certs.key("server")}"\nauth_token_file = "{token}"\n')
    try:
        with Client(d.address, tls_ca=certs.pem("ca")) as c:
            with pytest.raises(RemoteError, match="must call auth"):
                c.ping()
        with Client(d.address, tls_ca=certs.pem("ca"), token="s3cret") as c:
            assert c.lookup_offset("compressed", 0, 0) is not None  # no [[acl]]: everything allowed
        ver = ssl.create_default_context(cafile=certs.pem("ca"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1's name: what the daemon refuses
            ver.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError):  # TLS 1.2 and newer only
            ver.wrap_socket(socket.create_connection(("127.0.0.1", d.port)), server_hostname="127.0.0.1")
    finally:
        d.stop()


def test_non_loopback_plaintext_is_refused_at_start_up(tmp_path):
    r = subprocess.run([sys.executable, "-m", "lookupd", "serve", "--log-dir", str(R.require() / "logs"),
                        "--socket", str(tmp_path / "s.sock"), "--tcp", "0.0.0.0:0"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode != 0 and "without TLS" in r.stderr and "allow_plaintext_tcp" in r.stderr, r.stderr


def test_metrics_endpoint_is_bounded(tmp_path):
    """Issue 29: idle connections to /metrics each held a thread; now at most METRICS_MAX_THREADS do."""
    from lookupd.daemon.metrics import METRICS_MAX_THREADS

    d = Daemon(str(tmp_path), 'metrics = "127.0.0.1:0"\n')
    idle = []
    try:
        time.sleep(1.5)  # a rescan or two: trio's worker thread is there
        base = d.threads()
        for _ in range(300):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", d.metrics_port))
            idle.append(s)
        most, deadline = 0, time.monotonic() + 3
        while time.monotonic() < deadline:
            most = max(most, d.threads())
            time.sleep(0.05)
        # the cap, and room for trio's worker threads: before it, a thread per connection, never given back
        assert METRICS_MAX_THREADS == 4 and most <= base + 4 + 2, (base, most)
        assert blocking_call(d.sock, "resolve_offsets", "plain", 0, [1, 2, 3])[0] is None  # threads still start
        url = f"http://127.0.0.1:{d.metrics_port}/metrics"
        for s in idle:
            s.close()
        assert b"lookupd_requests_total" in urllib.request.urlopen(url, timeout=30).read()  # served again
    finally:
        for s in idle:
            s.close()
        d.stop()


def test_metrics_scrapes_are_answered_beside_dribbling_clients(tmp_path):
    """Issue 40: four clients each sending their request a byte at a time held all four slots (a timeout per
    read never fired): 0 of 5 scrapes answered. Each connection now gets METRICS_DEADLINE_S in all, and a
    scrape waits for the first slot freed, so all 5 are answered although the dribblers reconnect at once."""
    from lookupd.daemon.metrics import METRICS_DEADLINE_S, METRICS_MAX_THREADS

    d = Daemon(str(tmp_path), 'metrics = "127.0.0.1:0"\n')
    stop, cut = threading.Event(), [0]

    def dribble() -> None:
        """One byte of a request every 0.5 s; reconnects the moment the daemon closes the connection."""
        while not stop.is_set():
            with socket.create_connection(("127.0.0.1", d.metrics_port)) as s:
                try:
                    for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n" * 100:
                        s.sendall(bytes([byte]))
                        if select.select([s], [], [], 0.5)[0] and not s.recv(1):
                            raise ConnectionResetError("closed by the daemon")
                        if stop.is_set():
                            return
                except OSError:
                    cut[0] += 1  # straight back in

    dribblers = [threading.Thread(target=dribble) for _ in range(METRICS_MAX_THREADS)]
    try:
        for t in dribblers:
            t.start()
        time.sleep(1.0)  # every slot held by a dribbler
        url = f"http://127.0.0.1:{d.metrics_port}/metrics"
        answered = []
        for _ in range(5):
            started = time.monotonic()
            answered.append(b"lookupd_requests_total" in urllib.request.urlopen(url, timeout=20).read())
            assert time.monotonic() - started < 2 * METRICS_DEADLINE_S + 5  # waited for one slot, not more
        assert answered == [True] * 5
        assert cut[0] >= METRICS_MAX_THREADS, cut  # the dribblers were cut, not served
    finally:
        stop.set()
        for t in dribblers:
            t.join(10)
        d.stop()


# ---------------------------------------------------------------------------------- Spark and FUSE


def test_spark_reads_over_mutual_tls(mtls, certs, spark):
    def load(cert):
        return (spark.read.format("kafka-segments").option("lookupd.address", mtls.address)
                .option("lookupd.tls.ca", certs.pem("ca")).option("lookupd.tls.cert", certs.pem(cert))
                .option("lookupd.tls.key", certs.key(cert)).option("lookupd.readFrom", "daemon")
                .option("subscribe", "plain").load())
    rows = load("etl").select("offset").collect()
    assert sorted(r.offset for r in rows) == [r[0] for r in reference_rows("plain-0")]
    with pytest.raises(Exception, match="UNAUTHORIZED: CN=reader may not read topic 'plain'"):
        load("reader").count()  # it may describe (plan) but not read


def test_fuse_mount_over_mutual_tls(mtls, certs, tmp_path):
    from test_fusefs_helpers import Mount, require_fuse

    require_fuse()
    m = Mount(mtls.address, str(tmp_path), "--tls-ca", certs.pem("ca"), "--tls-cert", certs.pem("etl"),
              "--tls-key", certs.key("etl")).start()
    try:
        assert sorted(os.listdir(m.root)) == ["large", "plain"]  # what CN=spark-etl may describe
        with open(os.path.join(m.root, "plain", "0", "00000000000000000000.log"), "rb") as f:
            assert f.read(1000) == blocking_call(mtls.sock, "read", "plain", 0, 0, 1 << 20)[1]["records"][:1000]
    finally:
        m.stop()
    r = subprocess.run([sys.executable, "-m", "fusefs", "mount", str(tmp_path / "m2"), "--socket", mtls.address,
                        "--tls-ca", certs.pem("ca"), "--tls-cert", certs.pem("expired"), "--tls-key",
                        certs.key("expired")], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr


def test_acl_denials_name_the_topic_and_the_permission_in_every_client(mtls, certs, spark, tmp_path):
    """Issue 40: a Spark read of a topic the ACLs deny said "topic(s) compressed not found", and the mount had no
    such directory: each client now says which topic and which operation its principal may not have."""
    from test_fusefs_helpers import Mount, require_fuse

    # Spark: CN=spark-etl may not describe `compressed`, so the daemon does not list it
    with pytest.raises(Exception, match=r"TopicAuthorizationError: Not authorized to access topics: \[compressed\]: "
                                        r".*UNAUTHORIZED: CN=spark-etl may not describe topic 'compressed'"):
        (spark.read.format("kafka-segments").option("lookupd.address", mtls.address)
         .option("lookupd.tls.ca", certs.pem("ca")).option("lookupd.tls.cert", certs.pem("etl"))
         .option("lookupd.tls.key", certs.key("etl")).option("subscribe", "plain,compressed").load().count())
    # the CLI: the daemon's answer, as it is
    r = subprocess.run([sys.executable, "-m", "lookupd", "query", "--socket", mtls.address, "--tls-ca", certs.pem("ca"),
                        "--tls-cert", certs.pem("etl"), "--tls-key", certs.key("etl"), "segments", "compressed", "0"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 1 and "UNAUTHORIZED: CN=spark-etl may not describe topic 'compressed'" in r.stderr, r.stderr
    # the mount: EACCES, not ENOENT, and the daemon's reason in its log; a topic that is allowed but not to read
    # (CN=reader on `plain`) lists, and its files refuse reads with EACCES
    require_fuse()
    for cert, paths, topic, operation in (("etl", (("compressed",), ("compressed", "0")), "compressed", "describe"),
                                          ("reader", (("plain", "0", "00000000000000000000.log"),), "plain", "read")):
        m = Mount(mtls.address, str(tmp_path / cert), "--tls-ca", certs.pem("ca"), "--tls-cert", certs.pem(cert),
                  "--tls-key", certs.key(cert)).start()
        try:
            for path in paths:
                with pytest.raises(PermissionError):
                    if operation == "read":
                        with open(m.path(*path), "rb") as f:
                            f.read(100)
                    else:
                        os.stat(m.path(*path))
            assert f"may not {operation} topic '{topic}'" in m.log, m.log[-2000:]
            with pytest.raises(FileNotFoundError):  # a partition the allowed topic does not have is still ENOENT
                os.stat(m.path("plain", "7"))
        finally:
            m.stop()


# ---------------------------------------------------------------------------------- pure logic and config


def test_acl_rules_and_their_errors():
    from lookupd.daemon.acl import Acl
    from lookupd.errors import Unauthorized

    acl = Acl.from_config([{"principal": "CN=etl", "topics": ["orders", "pay-*"], "operations": ["read"]},
                           {"principal": "token:*", "topics": ["*"], "operations": ["describe"]}])
    assert acl.allowed("CN=etl", "orders", "read") and acl.allowed("CN=etl", "pay-eu", "read")
    assert not acl.allowed("CN=etl", "orders2", "read") and not acl.allowed("CN=etl", "orders", "describe")
    assert acl.allowed("token:ops", "anything", "describe") and not acl.allowed("token:ops", "x", "read")
    with pytest.raises(Unauthorized, match="CN=etl may not describe topic 'orders'"):
        acl.check("CN=etl", "orders", "describe")
    acl.check("CN=etl", 5, "read")  # not a topic: left to the method's own INVALID_ARGUMENT
    assert acl.denials == {"CN=etl": 1}
    assert Acl.from_config([]) is None
    for bad, why in (({"principal": "x", "topics": ["t"], "operations": ["write"]}, "unknown operation"),
                     ({"principal": "x", "topics": [], "operations": ["read"]}, "topics must be a non-empty"),
                     ({"principal": "", "topics": ["t"], "operations": ["read"]}, "principal must be"),
                     ({"principal": "x", "topic": ["t"], "operations": ["read"]}, "unknown key")):
        with pytest.raises(InvalidArgument, match=why):
            Acl.from_config([bad])


def test_tls_config_errors(certs, tmp_path):
    from lookupd.daemon.config import Config, read_tokens

    def check(**kw):
        Config(log_dirs=["/x"], **kw).check()
    with pytest.raises(InvalidArgument, match="both tls_cert_file and tls_key_file"):
        check(tls_cert_file=certs.pem("server"))
    with pytest.raises(InvalidArgument, match="tls_client_ca_file"):
        check(tls_client_ca_file=certs.pem("ca"))
    with pytest.raises(InvalidArgument, match="metrics_tls needs"):
        check(metrics="9999", metrics_tls=True)
    with pytest.raises(InvalidArgument, match=r"\[\[acl\]\] number 1"):
        check(acl=[{"principal": "x"}])
    path = tmp_path / "tokens"
    path.write_text("a:1\nb 2\n")
    with pytest.raises(InvalidArgument, match="line 2: expected name:secret"):
        read_tokens(str(path))
    path.write_text("a:1\na:2\n")
    with pytest.raises(InvalidArgument, match="appears twice"):
        read_tokens(str(path))
    r = subprocess.run([sys.executable, "-m", "lookupd", "serve", "--log-dir", str(R.require() / "logs"),
                        "--socket", str(tmp_path / "s.sock"), "--tcp", "127.0.0.1:0", "--config",
                        str(_write(tmp_path / "c.toml", f'tls_cert_file = "{certs.pem("etl")}"\n'
                                                        f'tls_key_file = "{certs.key("server")}"\n'))],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode != 0 and "cannot load tls_cert_file" in r.stderr and "Traceback" not in r.stderr, r.stderr


def _write(path, text: str):
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------- TLS within the daemon's limits
# In process (tests/daemon_helpers.running), so the daemon's accounting can be looked at.


async def _tls_peer(d, certs, client: str | None = None, rcvbuf: int | None = None) -> RawPeer:
    """A msgpack-rpc peer over TLS to the in-process daemon's TCP listener (`rcvbuf`: a small receive window,
    so unread answers stay in the daemon rather than in the kernel)."""
    port = next(b.sock.getsockname()[1] for b in d.listeners if b.kind == "tcp")
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.setblocking(False)
    raw = trio.SocketStream(trio.socket.from_stdlib_socket(s))
    await raw.socket.connect(("127.0.0.1", port))
    ctx = ssl.create_default_context(cafile=certs.pem("ca"))
    if client:
        ctx.load_cert_chain(certs.pem(client), certs.key(client))
    stream = trio.SSLStream(raw, ctx, server_hostname="127.0.0.1")
    await stream.do_handshake()
    return RawPeer(stream)


@pytest.mark.trio
async def test_unsent_tls_ciphertext_counts_against_the_buffer_limits(certs, short_dir):
    """Ciphertext the socket has not taken is held by the connection like unsent plaintext: one unread 8 MiB
    answer over TLS counts (muting the connection), and two such connections over max_buffered_bytes get
    the one holding the most closed, while the other's answer arrives whole once its client reads."""
    mib = 1 << 20
    async with running(os.path.join(short_dir, "d.sock"), tcp="127.0.0.1:0", tls_cert_file=certs.pem("server"),
                       tls_key_file=certs.key("server"), max_buffered_bytes_per_connection=mib,
                       max_buffered_bytes=3 * mib) as d:
        first = await _tls_peer(d, certs, rcvbuf=64 << 10)
        await first.request("read", "large", 0, 0, 8 * mib)
        with trio.fail_after(20):
            while d.buffers.total < 2 * mib:  # the answer's ciphertext, held after its thread ended
                await trio.sleep(0.02)
        second = await _tls_peer(d, certs, rcvbuf=64 << 10)
        await second.request("read", "large", 0, 0, 8 * mib)
        with trio.fail_after(20):
            while d.counters.connections != 1:  # over 3 MiB together: the biggest holder is closed
                await trio.sleep(0.02)
        with open(R.require() / "logs" / "large-0" / "00000000000000000000.log", "rb") as f:
            want = f.read(8 * mib)
        answers = []
        for peer in (first, second):
            try:
                with trio.fail_after(20):
                    msg = await peer.recv()
            except (trio.BrokenResourceError, ssl.SSLError):
                msg = None
            answers.append(msg)
        whole = [m for m in answers if m is not None and m[:3] == [1, 1, None]]
        assert len(whole) == 1, [m if m is None else m[:3] for m in answers]  # the survivor's, whole and right
        assert want.startswith(whole[0][3]["records"]) and len(whole[0][3]["records"]) > 4 * mib


async def _raw_tcp(d) -> trio.SocketStream:
    port = next(b.sock.getsockname()[1] for b in d.listeners if b.kind == "tcp")
    return await trio.open_tcp_stream("127.0.0.1", port)


async def _closed_within(stream: trio.abc.Stream, seconds: float) -> bool:
    """Whether the daemon closes `stream` within `seconds` (what it sends first is skipped)."""
    with trio.move_on_after(seconds):
        try:
            while await stream.receive_some(1 << 16):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


@pytest.mark.trio
async def test_tls_handshakes_are_made_within_the_pre_auth_limits(certs, short_dir):
    """Under mutual TLS (no token) a connection is unauthenticated until its certificate is verified: a
    silent handshake gets auth_timeout_s (shorter than tls_handshake_timeout_s here), handshakes count
    among max_unauthenticated_connections (the oldest closed), and a certificate authenticates: no deadline
    and full-size messages afterwards."""
    async with running(os.path.join(short_dir, "d.sock"), tcp="127.0.0.1:0", tls_cert_file=certs.pem("server"),
                       tls_key_file=certs.key("server"), tls_client_ca_file=certs.pem("ca"),
                       tls_handshake_timeout_s=30.0, auth_timeout_s=1.0, max_unauthenticated_connections=2) as d:
        silent = [await _raw_tcp(d) for _ in range(3)]  # one more than the cap: the oldest is closed
        assert await _closed_within(silent[0], 5)
        authed = await _tls_peer(d, certs, client="etl")
        assert await authed.call("ping") == (None, "pong")
        for late in silent[1:]:  # no handshake within auth_timeout_s
            assert await _closed_within(late, 5)
        await trio.sleep(1.3)  # past the deadline: the certificate authenticated this one
        assert await authed.call("ping") == (None, "pong")
        offsets = list(range(20_000))  # ~60 KB of msgpack, near the 64 KiB limit before auth
        err, result = await authed.call("resolve_offsets", "plain", 0, offsets + offsets)
        assert err is None and len(result["segment"]) == 40_000


@pytest.mark.trio
async def test_failed_handshakes_are_logged_through_the_rate_limited_client_log(certs, short_dir, caplog):
    """A flood of connections that fail their handshake writes a bounded number of lines, and the
    lines left out are counted in the next one written."""
    import logging

    from lookupd.daemon.clientlog import LINES_BURST

    n = 3 * LINES_BURST
    with caplog.at_level(logging.INFO, logger="lookupd"):
        async with running(os.path.join(short_dir, "d.sock"), tcp="127.0.0.1:0", tls_cert_file=certs.pem("server"),
                           tls_key_file=certs.key("server")) as d:
            async def garbage() -> None:
                s = await _raw_tcp(d)
                await s.send_all(b"GET / HTTP/1.0\r\n\r\n")  # not TLS: the handshake fails at once
                await _closed_within(s, 10)
                await s.aclose()

            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(garbage)
            await trio.sleep(0.2)  # room in the rate limit for one more line
            await garbage()
    lines = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
    assert len(lines) < n
    assert any("left out before this one: rate limit" in line for line in lines), lines[-3:]


@pytest.mark.trio
async def test_named_tokens_are_throttled_per_address_and_any_bytes_are_a_wrong_token(certs, short_dir):
    """auth_tokens_file's tokens (no auth_token_file) go through the per-address wait before a token is
    checked, and token bytes that are not UTF-8 are a wrong token like any other (never INTERNAL)."""
    from lookupd.daemon.authlimit import delay

    async with running(os.path.join(short_dir, "d.sock"), tcp="127.0.0.1:0", tls_cert_file=certs.pem("server"),
                       tls_key_file=certs.key("server"), auth_tokens_file=_tokens_file(short_dir)) as d:
        p = await _tls_peer(d, certs)
        for msgid, token in ((1, b"\xa3\xff\xfe\x80"), (2, b"\xc4\x03\xff\xfe\x80")):  # str and bin, invalid UTF-8
            await p.send_bytes(b"\x94\x00" + bytes([msgid]) + b"\xa4auth\x91" + token)
            msg = await p.recv()
            assert msg[:2] == [1, msgid] and msg[2]["code"] == "UNAUTHORIZED", msg
        assert d.counters.errors == 2
        t0 = trio.current_time()  # the waits count from the last wrong token's answer
        q = await _tls_peer(d, certs)  # a new connection from the same address waits its turn
        err, _ = await q.call("auth", "ops-secret-2")
        assert err["code"] == "UNAUTHORIZED"
        assert trio.current_time() - t0 >= delay(2) * 0.95, "a new connection started afresh"
        t0 = trio.current_time()
        assert await q.call("auth", "batch-secret-2") == (None, True)
        assert trio.current_time() - t0 >= delay(3) * 0.95
        assert (await q.call("lookup_offset", "plain", 0, 0, "floor"))[0] is None
