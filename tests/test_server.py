"""The trio daemon in process over a temporary Unix socket (and TCP): concurrency, limits, faults."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import threading

import msgpack
import pytest
import trio

import reference as R
from daemon_helpers import RawPeer, copy_partition, running, short_dir  # noqa: F401 - fixture
from lookupd.rpc.client import RemoteError, TrioClient
from lookupd.errors import InvalidArgument, Unavailable
from lookupd.daemon import kafkasocket
from lookupd.daemon.config import Config
from lookupd.daemon.listeners import bind_unix, open_listeners
from lookupd.rpc.address import parse_host_port as parse_tcp
from lookupd.daemon.service import INLINE, METHODS, Method
from lookupd.rpc.methods import MethodSpec


@pytest.fixture
def sock(short_dir):
    R.require()
    return os.path.join(short_dir, "d.sock")


@pytest.mark.trio
async def test_answers_and_socket_mode(sock):
    async with running(sock) as d:
        assert oct(os.stat(sock).st_mode & 0o777) == "0o660"
        async with await TrioClient.connect(sock) as c:
            assert await c.ping() == "pong"
            assert await c.resolve_offset("plain", 0, 100) == {"segment": 0, "base_offset": 90, "last_offset": 111,
                                                                "position": 25241, "size": 6513}
            with pytest.raises(RemoteError) as e:
                await c.resolve_offset("plain", 0, 10**9)
            assert e.value.code == "OFFSET_OUT_OF_RANGE"
            stats = await c.stats()
            assert stats["requests"] == 4 and stats["errors"] == 1 and stats["connections"] == 1
    assert not os.path.exists(sock)  # removed on exit
    assert d.counters.connections == 0


@pytest.mark.trio
async def test_responses_come_back_out_of_order(sock):
    """A request waiting for a worker thread does not hold up the inline answers behind it."""
    async with running(sock, blocking_threads=1) as d:
        p = await RawPeer.unix(sock)
        async with d.limiter:  # every worker thread is busy
            slow = await p.request("resolve_offset", "plain", 0, 100)
            fast = await p.request("ping")
            assert (await p.recv())[1] == fast
        assert (await p.recv())[1:] == [slow, None, {"segment": 0, "base_offset": 90, "last_offset": 111,
                                                     "position": 25241, "size": 6513}]
        await p.aclose()


@pytest.mark.trio
async def test_in_flight_limit_pauses_reading(sock):
    async with running(sock, blocking_threads=1, max_in_flight_per_connection=4) as d:
        p = await RawPeer.unix(sock)
        async with d.limiter:
            ids = [await p.request("segments", "plain", 0) for _ in range(6)]
            ping = await p.request("ping")
            with trio.move_on_after(0.3) as waited:
                await p.recv()  # the ping is not even read: 4 requests are in flight
            assert waited.cancelled_caught
            other = await RawPeer.unix(sock)  # other connections are not affected
            assert await other.call("ping") == (None, "pong")
        got = [(await p.recv())[1] for _ in range(7)]
        assert sorted(got) == sorted(ids + [ping])
        await p.aclose()


@pytest.mark.trio
async def test_many_concurrent_requests_per_connection(sock):
    async with running(sock) as d:
        async with await TrioClient.connect(sock) as c:
            results = {}

            async def one(i):
                results[i] = await c.lookup_offset("large", 0, i * 97, "floor")

            async with trio.open_nursery() as n:
                for i in range(500):
                    n.start_soon(one, i)
            assert len(results) == 500 and all(r["offset"] <= i * 97 for i, r in results.items())
        assert d.counters.errors == 0


@pytest.mark.trio
async def test_idle_timeout(sock):
    async with running(sock, idle_timeout_s=0.3):
        p = await RawPeer.unix(sock)
        assert await p.call("ping") == (None, "pong")
        with trio.fail_after(5):
            assert await p.recv() is None  # closed by the daemon


@pytest.mark.trio
async def test_garbage_stalled_and_vanishing_clients_do_not_affect_others(sock):
    async with running(sock, max_frame_bytes=4096) as d:
        good = await RawPeer.unix(sock)
        stalled = await RawPeer.unix(sock)
        await stalled.send_bytes(msgpack.packb([0, 1, "lookup_offset", ["plain", 0, 5, "floor"]])[:7])
        garbage = await RawPeer.unix(sock)
        await garbage.send_bytes(b"\xc1\xc1\xc1")
        msg = await garbage.recv()
        assert msg[:2] == [2, "error"] and msg[2][0]["code"] == "INVALID_ARGUMENT"
        assert await garbage.recv() is None
        big = await RawPeer.unix(sock)
        await big.send_bytes(msgpack.packb([0, 1, "ping", ["x" * 10000]]))
        msg = await big.recv()
        assert msg[:2] == [2, "error"] and msg[2][0]["code"] == "TOO_LARGE"
        assert await big.recv() is None
        for _ in range(5):  # gone mid-request
            v = await RawPeer.unix(sock)
            await v.request("partitions")
            await v.aclose()
        invalid = await RawPeer.unix(sock)
        await invalid.send_bytes(msgpack.packb([0, 9, "ping"]) + msgpack.packb({"x": 1}))
        assert (await invalid.recv())[:2] == [1, 9]
        assert (await invalid.recv())[:2] == [2, "error"]
        assert await invalid.call("ping") == (None, "pong")  # still open
        await invalid.send_bytes(msgpack.packb([2, "nvim_client_info", []]))  # ignored silently
        assert await invalid.call("ping") == (None, "pong")
        assert await good.call("lookup_offset", "plain", 0, 100, "floor") == \
               (None, {"segment": 0, "offset": 89, "position": 13079})
        await stalled.send_bytes(msgpack.packb([0, 1, "lookup_offset", ["plain", 0, 5, "floor"]])[7:])
        assert (await stalled.recv())[1:3] == [1, None]  # finishing the frame later is fine
        with trio.fail_after(5):
            while d.counters.connections != 3:
                await trio.sleep(0.01)


@pytest.mark.trio
async def test_internal_errors_are_answered_and_serving_goes_on(sock, monkeypatch, caplog):
    monkeypatch.setitem(METHODS, "boom", Method(lambda s, p: 1 // 0, MethodSpec((), INLINE)))
    monkeypatch.setitem(METHODS, "unpackable", Method(lambda s, p: {"x": object()}, MethodSpec((), INLINE)))
    async with running(sock):
        p = await RawPeer.unix(sock)
        err, _ = await p.call("boom")
        assert err["code"] == "INTERNAL" and "ZeroDivisionError" in err["message"]
        err, _ = await p.call("unpackable")
        assert err["code"] == "INTERNAL"
        assert await p.call("ping") == (None, "pong")
    assert "ZeroDivisionError" in caplog.text  # the bug is logged (with its traceback)


@pytest.mark.trio
async def test_max_connections(sock):
    async with running(sock, max_connections=2):
        a, b = await RawPeer.unix(sock), await RawPeer.unix(sock)
        assert await a.call("ping") == (None, "pong")
        assert await b.call("ping") == (None, "pong")
        c = await RawPeer.unix(sock)
        msg = await c.recv()
        assert msg[:2] == [2, "error"] and msg[2][0]["code"] == "UNAVAILABLE"
        assert await c.recv() is None
        await a.aclose()
        with trio.fail_after(5):
            while True:
                d = await RawPeer.unix(sock)
                first = await d.request("ping")
                msg = await d.recv()
                if msg[:2] == [1, first]:
                    break
                await trio.sleep(0.05)


def write_token(directory: str, token: str = "let-me-in") -> str:
    """A token file as an operator writes one (mode 0600); returns its path."""
    path = os.path.join(directory, "token")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


@pytest.mark.trio
async def test_tcp_needs_auth_when_a_token_is_set(sock, short_dir):
    token_file = write_token(short_dir)
    async with running(sock, tcp="127.0.0.1:0", auth_token_file=token_file) as d:
        port = next(b.sock.getsockname()[1] for b in d.listeners if b.kind == "tcp")
        p = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
        err, _ = await p.call("lookup_offset", "plain", 0, 100, "floor")
        assert err["code"] == "UNAUTHORIZED"
        err, _ = await p.call("auth", "wrong")
        assert err["code"] == "UNAUTHORIZED"
        assert await p.call("auth", "let-me-in") == (None, True)
        assert (await p.call("lookup_offset", "plain", 0, 100, "floor"))[0] is None
        async with await TrioClient.connect(f"127.0.0.1:{port}", token="let-me-in") as c:
            assert await c.ping() == "pong"
        with pytest.raises(RemoteError, match="UNAUTHORIZED"):
            await TrioClient.connect(f"127.0.0.1:{port}", token="nope")
        unix = await RawPeer.unix(sock)  # Unix socket peers are trusted
        assert await unix.call("ping") == (None, "pong")


@pytest.mark.trio
async def test_wrong_tokens_are_slowed_down_per_address_then_the_connection_is_closed(sock, short_dir):
    """The wait before a token is checked belongs to the source address: reconnecting does not reset it,
    and guesses sent at once on parallel connections are checked one per wait."""
    from lookupd.daemon.authlimit import AUTH_DELAY_S, delay
    from lookupd.daemon.service import MAX_AUTH_FAILURES

    token_file = write_token(short_dir)
    async with running(sock, tcp="127.0.0.1:0", auth_token_file=token_file) as d:
        port = next(b.sock.getsockname()[1] for b in d.listeners if b.kind == "tcp")
        p = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
        took = []
        for _ in range(MAX_AUTH_FAILURES):
            t0 = trio.current_time()
            err, _ = await p.call("auth", "guess")
            took.append(trio.current_time() - t0)
            assert err["code"] == "UNAUTHORIZED"
        assert took[0] < AUTH_DELAY_S and took[2] >= 2 * AUTH_DELAY_S, took  # each wrong token waits longer
        assert "closing the connection" in err["message"]
        assert await p.recv() is None  # closed after the last answer
        peers = [RawPeer(await trio.open_tcp_stream("127.0.0.1", port)) for _ in range(3)]
        t0 = trio.current_time()
        for q in peers:  # three guesses at once on new connections
            await q.request("auth", "guess")
        for q in peers:
            assert (await q.recv())[2]["code"] == "UNAUTHORIZED"
        waited = delay(MAX_AUTH_FAILURES) + delay(MAX_AUTH_FAILURES + 1) + delay(MAX_AUTH_FAILURES + 2)
        assert trio.current_time() - t0 >= waited * 0.95, "a new connection started afresh"
        p = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
        t0 = trio.current_time()
        assert await p.call("auth", "let-me-in") == (None, True)  # the right token too waits its turn
        assert trio.current_time() - t0 >= delay(MAX_AUTH_FAILURES + 3) * 0.95
        q = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
        with trio.fail_after(delay(MAX_AUTH_FAILURES + 4) / 2):
            assert await q.call("auth", "let-me-in") == (None, True)  # the right token cleared the address


def test_non_loopback_tcp_needs_tls_and_a_token(short_dir):
    cfg = Config(log_dirs=["/x"], socket="", tcp="0.0.0.0:0")
    with pytest.raises(InvalidArgument, match="without TLS.*tls_cert_file.*allow_plaintext_tcp"):
        open_listeners(cfg, None)
    cfg.allow_plaintext_tcp = True
    with pytest.raises(InvalidArgument, match="auth_token_file"):
        open_listeners(cfg, None)
    with pytest.raises(InvalidArgument, match="metrics on non-loopback address 0.0.0.0 without TLS"):
        open_listeners(Config(log_dirs=["/x"], socket="", tcp="", metrics="0.0.0.0:0"), None)
    assert parse_tcp("7000") == ("127.0.0.1", 7000) and parse_tcp(":7000") == ("127.0.0.1", 7000)
    assert parse_tcp("[::1]:7000") == ("::1", 7000) and parse_tcp("10.0.0.1:1") == ("10.0.0.1", 1)
    with pytest.raises(InvalidArgument):
        parse_tcp("host:port")


def test_a_kafka_connection_from_another_host_gets_the_hosts_congestion_control_back():
    """lookupd.daemon.kafkasocket: reno for what a Kafka listener accepts from this host, the host's choice
    for a peer elsewhere."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host_default = kafkasocket.congestion_control(listener)
        default = kafkasocket.unpaced_listener(listener)
        assert kafkasocket.congestion_control(listener) == kafkasocket.LOCAL_CONGESTION_CONTROL
        assert default == (None if host_default == kafkasocket.LOCAL_CONGESTION_CONTROL else host_default)
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                assert kafkasocket.congestion_control(accepted) == kafkasocket.LOCAL_CONGESTION_CONTROL  # inherited
                for here in ("127.0.0.1", "::ffff:127.0.0.1", None):
                    kafkasocket.accepted(accepted, b"cubic", here)
                    assert kafkasocket.congestion_control(accepted) == kafkasocket.LOCAL_CONGESTION_CONTROL
                # any process may choose reno; which others it may, the host says
                allowed = open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split()
                other = next(n.encode() for n in allowed + ["cubic"] if n != "reno")
                kafkasocket.accepted(accepted, other, "192.0.2.7")  # TEST-NET-1: another host
                assert kafkasocket.congestion_control(accepted) == other


def test_socket_file_rules(short_dir):
    path = os.path.join(short_dir, "sub", "d.sock")
    b = bind_unix(path, 0o600)  # creates the directory
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with pytest.raises(Unavailable, match="already listening"):
        bind_unix(path, 0o660)
    b.sock.close()  # a stale socket file: nothing listens any more
    bind_unix(path, 0o660).sock.close()
    os.unlink(path)
    open(path, "w").close()
    with pytest.raises(InvalidArgument, match="not a socket"):
        bind_unix(path, 0o660)


def test_config_file_and_overrides(short_dir):
    path = os.path.join(short_dir, "c.toml")
    with open(path, "w") as f:
        f.write('log_dirs = ["/a"]\nsocket_mode = 0o600\nidle_timeout_s = 5\nmax_frame_bytes = 65536\n')
    cfg = Config.load(path, log_dirs=None, socket="/tmp/x.sock", tcp=None)
    assert (cfg.log_dirs, cfg.socket, cfg.socket_mode, cfg.idle_timeout_s, cfg.max_frame_bytes) == \
           (["/a"], "/tmp/x.sock", 0o600, 5.0, 65536)
    assert Config.load(path, log_dirs=["/b"]).log_dirs == ["/b"]
    with open(path, "w") as f:
        f.write('log_dirs = ["/a"]\nmax_conections = 5\n')
    with pytest.raises(InvalidArgument, match="unknown config key 'max_conections'"):
        Config.load(path)
    with open(path, "w") as f:
        f.write('log_dirs = ["/a"]\nmax_connections = "many"\n')
    with pytest.raises(InvalidArgument, match="max_connections"):
        Config.load(path)
    with pytest.raises(InvalidArgument, match="--log-dir"):
        Config.load(None)


@pytest.mark.trio
async def test_graceful_stop_finishes_in_flight_requests(sock):
    async with running(sock, blocking_threads=1) as d:
        p = await RawPeer.unix(sock)
        async with d.limiter:
            msgid = await p.request("resolve_offset", "plain", 0, 100)
            await trio.sleep(0.05)
            d.stop()
            await trio.sleep(0.1)
            with pytest.raises(OSError):
                await trio.open_unix_socket(sock)  # no longer accepting
        msg = await p.recv()
        assert msg[1] == msgid and msg[2] is None
        assert await p.recv() is None


@pytest.mark.trio
async def test_rescan_picks_up_new_and_deleted_partitions(sock, short_dir):
    logs = os.path.join(short_dir, "logs")
    os.mkdir(logs)
    copy_partition("plain-0", logs)
    async with running(sock, log_dirs=[logs], rescan_interval_s=0.05) as d:
        async with await TrioClient.connect(sock) as c:
            assert [p["topic"] for p in await c.partitions()] == ["plain"]
            await trio.to_thread.run_sync(copy_partition, "txn-0", logs)
            with trio.fail_after(10):
                while len(await c.partitions()) != 2:
                    await trio.sleep(0.05)
            assert (await c.resolve_offset("txn", 0, 5))["segment"] == 0
            shutil.rmtree(os.path.join(logs, "plain-0"))
            with trio.fail_after(10):
                while len(await c.partitions()) != 1:
                    await trio.sleep(0.05)
            with pytest.raises(RemoteError, match="UNKNOWN_PARTITION"):
                await c.lookup_offset("plain", 0, 1)
    assert d.counters.connections == 0


@pytest.mark.trio
async def test_blocking_client_shared_by_threads(sock, short_dir):
    from lookupd.rpc.client import Client

    async with running(sock):
        def work():
            results = []
            with Client(sock, timeout=30) as c:
                def worker(k):
                    for i in range(50):
                        results.append(c.lookup_offset("large", 0, k * 1000 + i)["offset"] == k * 1000 + i)
                threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                with pytest.raises(RemoteError) as e:
                    c.read("plain", 0, 0, 1 << 40)
                assert e.value.code == "TOO_LARGE"
            return results

        results = await trio.to_thread.run_sync(work)
        assert len(results) == 400 and all(results)
    missing = os.path.join(short_dir, "nothing.sock")
    with pytest.raises(Unavailable, match=f"cannot reach lookupd at {missing}"):
        Client(missing)
    with pytest.raises(Unavailable, match="cannot reach lookupd at 127.0.0.1:1"):
        Client("127.0.0.1:1")


def test_blocking_client_says_why_a_request_is_too_large(tmp_path):
    """An oversized request is refused by the client with the limit named, not as a dead daemon."""
    import subprocess
    import sys
    import time

    from lookupd.rpc.client import Client
    from lookupd.errors import TooLarge

    sock = str(tmp_path / "l.sock")
    proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--log-dir", str(R.LOGS), "--socket", sock],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        with Client(sock) as c:
            with pytest.raises(TooLarge, match="over the daemon's frame limit of 1,048,576 bytes"):
                c.resolve_offsets("plain", 0, list(range(1 << 40, (1 << 40) + 200_000)))
            assert c.ping() == "pong"  # the connection is still fine
        with Client(sock, max_request_bytes=1 << 30) as c:  # a client that does not know the limit
            with pytest.raises(RemoteError, match="TOO_LARGE"):
                c.resolve_offsets("plain", 0, list(range(1 << 40, (1 << 40) + 200_000)))
    finally:
        proc.terminate()
        proc.wait(30)


def _documented_config_table() -> dict[str, str]:
    """The configuration table of docs/configuration.md, key to stated default."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "configuration.md")) as f:
        text = f.read()
    table = text[text.index("| key | default | meaning |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        key, default = [c.strip() for c in line.split("|")[1:3]]
        rows[key.strip("`")] = default
    return rows


def _flat(table: dict, prefix: str = "") -> dict:
    """A TOML table as dotted keys; `[remote.encryption.keys]` stays one key (a map of key ids)."""
    out = {}
    for key, value in table.items():
        name = prefix + key
        if isinstance(value, dict) and name != "remote.encryption.keys":
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def _config_defaults() -> dict:
    """Config's defaults as dotted keys, the nested [remote] and [kafka] tables' fields by their TOML spelling."""
    import dataclasses

    def defaults(cls) -> dict:
        out = {}
        for f in dataclasses.fields(cls):
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            out[".".join(getattr(cls, "NESTED", {}).get(f.name, (f.name,)))] = value
        return out

    top = defaults(Config)
    out = dict(top)
    for table in ("remote", "kafka"):
        nested = out.pop(table)
        out.update({f"{table}.{k}": v for k, v in defaults(type(nested)).items()})
    return out


def test_config_defaults_are_stated_alike_in_the_docs_and_the_example_file():
    """Config holds every default; docs/configuration.md's table and systemd/lookupd.toml.example must say the same."""
    import tomllib

    defaults = _config_defaults()
    documented = _documented_config_table()
    assert set(documented) == set(defaults), set(documented) ^ set(defaults)
    for key, stated in documented.items():
        value = tomllib.loads(f"v = {stated.strip('`')}")["v"]
        assert value == defaults[key], (key, stated, defaults[key])
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "systemd",
                           "lookupd.toml.example")
    with open(example, "rb") as f:
        shown = _flat(tomllib.load(f))
    assert set(shown) == set(defaults), set(shown) ^ set(defaults)
    for key, value in shown.items():
        if key != "log_dirs":  # the example names a broker's log dir
            assert value == defaults[key], (key, value, defaults[key])


def test_remote_table_is_read_and_checked(short_dir):
    path = os.path.join(short_dir, "r.toml")
    with open(path, "w") as f:
        f.write('log_dirs = ["/x"]\n[remote]\nbucket = "b"\nendpoint_url = "http://127.0.0.1:1"\n'
                'cache_dir = "/tmp/c"\ncache_bytes = 1024\n[remote.encryption.keys]\n"key-1" = "/k.pem"\n')
    cfg = Config.load(path)
    rc = cfg.remote.remote_config()
    assert (rc.bucket, rc.endpoint_url, rc.cache_dir, rc.cache_bytes, rc.region) == \
        ("b", "http://127.0.0.1:1", "/tmp/c", 1024, "us-east-1")
    assert rc.encryption_keys == {"key-1": "/k.pem"}
    assert Config(log_dirs=["/x"]).remote.remote_config() is None  # no bucket: no remote tier
    for bad, match in (('[remote]\nbuckt = "b"\n', "unknown config key 'remote.buckt'"),
                       ('[remote]\ncache_bytes = "big"\n', "remote.cache_bytes .* must be a int"),
                       ('remote = 3\n', "must be a table"),
                       ('[remote.encryption]\nkey = 1\n', r"\[remote.encryption.keys\]"),
                       ('[remote.encryption.keys]\nk = 1\n', "PEM file paths")):
        with open(path, "w") as f:
            f.write('log_dirs = ["/x"]\n' + bad)
        with pytest.raises(InvalidArgument, match=match):
            Config.load(path)


@pytest.mark.trio
async def test_metrics_are_served_in_the_prometheus_text_format(sock):
    import urllib.request

    async with running(sock, metrics="127.0.0.1:0") as d:
        p = await RawPeer.unix(sock)
        for _ in range(3):
            assert await p.call("ping") == (None, "pong")
        assert (await p.call("lookup_offset", "nosuch", 0, 1, "floor"))[0]["code"] == "UNKNOWN_PARTITION"
        await p.call("lookup_offset", "plain", 0, 100, "floor")
        await p.call("made_up_method")
        url = f"http://127.0.0.1:{d.metrics_server.server_port}/metrics"
        text = (await trio.to_thread.run_sync(lambda: urllib.request.urlopen(url, timeout=10).read())).decode()
    lines = set(text.splitlines())
    assert 'lookupd_requests_total{method="ping",worker="0"} 3.0' in lines
    assert 'lookupd_errors_total{code="UNKNOWN_PARTITION",method="lookup_offset",worker="0"} 1.0' in lines
    assert 'lookupd_requests_total{method="other",worker="0"} 1.0' in lines  # no label per made-up name
    assert any(line.startswith('lookupd_request_seconds_bucket{le="+Inf",method="lookup_offset"') for line in lines)
    assert any(line.startswith("lookupd_open_indexes{") for line in lines)
    assert any(line.startswith("lookupd_connections{") for line in lines)


def test_metrics_address_is_checked():
    with pytest.raises(InvalidArgument, match="HOST:PORT"):
        Config(log_dirs=["/x"], metrics="localhost:http").check()


async def _tcp_peer(d) -> RawPeer:
    port = next(b.sock.getsockname()[1] for b in d.listeners if b.kind == "tcp")
    return RawPeer(await trio.open_tcp_stream("127.0.0.1", port))


@pytest.mark.trio
async def test_before_auth_frames_are_small_and_time_is_short(sock, short_dir):
    """Until `auth` succeeds a TCP peer may send at most 64 KiB per message and has auth_timeout_s to do it."""
    from lookupd.daemon.connection import PRE_AUTH_FRAME_BYTES

    token_file = write_token(short_dir)
    async with running(sock, tcp="127.0.0.1:0", auth_token_file=token_file, auth_timeout_s=1.0) as d:
        big = ["plain", 0, list(range(20_000))]  # ~60 KB of msgpack, over the limit with its padding below
        request = msgpack.packb([0, 1, "resolve_offsets", big + ["x" * PRE_AUTH_FRAME_BYTES]])
        p = await _tcp_peer(d)
        await p.send_bytes(request)
        msg = await p.recv()
        assert msg[:2] == [2, "error"] and msg[2][0]["code"] == "TOO_LARGE", msg
        assert "before auth" in msg[2][0]["message"]
        assert await p.recv() is None
        p = await _tcp_peer(d)  # authenticated, the same request is read whole (and rejected for its params)
        assert await p.call("auth", "let-me-in") == (None, True)
        await p.send_bytes(request)
        msg = await p.recv()
        assert msg[:3] == [1, 1, {"code": "INVALID_ARGUMENT", "message": msg[2]["message"]}], msg
        assert (await p.call("resolve_offsets", *big))[0] is None
        await trio.sleep(1.3)  # past the auth deadline: an authenticated connection stays
        assert await p.call("ping") == (None, "pong")
        slow = await _tcp_peer(d)
        with trio.fail_after(5):
            msg = await slow.recv()  # never authenticated: told why, then closed
        assert msg[:2] == [2, "error"] and msg[2][0]["code"] == "UNAUTHORIZED", msg
        assert "auth_timeout_s" in msg[2][0]["message"]
        assert await slow.recv() is None


@pytest.mark.trio
async def test_unauthenticated_connections_are_capped_oldest_first(sock, short_dir):
    token_file = write_token(short_dir)
    async with running(sock, tcp="127.0.0.1:0", auth_token_file=token_file, max_unauthenticated_connections=2,
                       max_connections=5) as d:
        authed = await _tcp_peer(d)
        assert await authed.call("auth", "let-me-in") == (None, True)
        waiting = []
        for _ in range(8):  # more than max_connections: the oldest unauthenticated ones make room
            waiting.append(await _tcp_peer(d))
            await trio.sleep(0.02)
        for old in waiting[:-2]:
            with trio.fail_after(5):
                msg = await old.recv()
            assert msg[:2] == [2, "error"] and msg[2][0]["code"] == "UNAVAILABLE", msg
            assert "max_unauthenticated_connections" in msg[2][0]["message"]
        for young in waiting[-2:]:  # the two youngest still may authenticate
            assert await young.call("auth", "let-me-in") == (None, True)
        assert await authed.call("ping") == (None, "pong")
        another = await _tcp_peer(d)  # 3 authenticated + 1 waiting: room below max_connections
        assert await another.call("auth", "let-me-in") == (None, True)


@pytest.mark.trio
async def test_any_token_bytes_are_a_wrong_token(sock, short_dir):
    """A token string that is not UTF-8 is compared like any other: UNAUTHORIZED, and counted."""
    token_file = write_token(short_dir)
    async with running(sock, tcp="127.0.0.1:0", auth_token_file=token_file) as d:
        p = await _tcp_peer(d)
        for msgid, token in ((1, b"\xa3\xff\xfe\x80"), (2, b"\xc4\x03\xff\xfe\x80")):  # str and bin, invalid UTF-8
            await p.send_bytes(b"\x94\x00" + bytes([msgid]) + b"\xa4auth\x91" + token)
            msg = await p.recv()
            assert msg[:2] == [1, msgid] and msg[2]["code"] == "UNAUTHORIZED", msg
        assert "3 more closes the connection" in msg[2]["message"]  # both counted
        assert d.counters.errors == 2


@pytest.mark.trio
async def test_a_client_repeating_mistakes_writes_a_bounded_log(sock, short_dir, caplog):
    """Thousands of rejected requests on one connection make a line or two, not a line each."""
    import logging

    token_file = write_token(short_dir)
    with caplog.at_level(logging.INFO, logger="lookupd"):
        async with running(sock, tcp="127.0.0.1:0", auth_token_file=token_file) as d:
            p = await _tcp_peer(d)
            burst = b"".join(msgpack.packb([0, i, "lookup_offset", ["plain", 0, 1, "floor"]]) for i in range(3000))
            await p.send_bytes(burst + msgpack.packb({"not": "a message"}) * 500)
            for _ in range(3500):
                await p.recv()
            assert d.counters.errors == 3500
            await p.aclose()
            with trio.fail_after(5):
                while d.counters.connections:
                    await trio.sleep(0.01)
    lines = [r for r in caplog.records if "rejected" in r.getMessage() or "client errors" in r.getMessage()
             or "must be a non-empty array" in r.getMessage()]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines][:10]
    assert "3499 more client errors" in lines[-1].getMessage()


@pytest.mark.native  # the small read is answered on the event loop: C's one-call path
@pytest.mark.trio
async def test_big_reads_run_in_worker_threads(sock):
    """A `read` of more than INLINE_READ_MAX_BYTES waits for a worker thread even when its data is in memory;
    a small one is answered on the event loop."""
    from lookupd.daemon.service import INLINE_READ_MAX_BYTES

    async with running(sock, blocking_threads=1) as d:
        p = await RawPeer.unix(sock)
        big = INLINE_READ_MAX_BYTES * 4
        err, first = await p.call("read", "large", 0, 0, big)  # maps the index and pages the data in
        assert err is None and len(first["records"]) > INLINE_READ_MAX_BYTES
        async with d.limiter:  # every worker thread is busy
            big_id = await p.request("read", "large", 0, 0, big)
            small_id = await p.request("read", "large", 0, 0, 1)
            msg = await p.recv()
            assert msg[1] == small_id and msg[2] is None
            with trio.move_on_after(0.3) as waited:
                await p.recv()
            assert waited.cancelled_caught  # the big read waits for a thread
        msg = await p.recv()
        assert msg[1] == big_id and msg[3] == first


@pytest.mark.trio
async def test_one_connection_holds_at_most_its_share_of_the_worker_threads(sock, monkeypatch):
    from lookupd.daemon.service import THREAD

    running_now, most = {"a": 0, "b": 0}, {"a": 0, "b": 0}
    release = threading.Event()

    def slow(s, p):
        running_now[p[0]] += 1
        most[p[0]] = max(most[p[0]], running_now[p[0]])
        release.wait(10)
        running_now[p[0]] -= 1
        return p[0]

    monkeypatch.setitem(METHODS, "slow", Method(slow, MethodSpec(("who",), THREAD)))
    async with running(sock, blocking_threads=4, blocking_threads_per_connection=2):
        a, b = await RawPeer.unix(sock), await RawPeer.unix(sock)
        for _ in range(10):
            await a.request("slow", "a")
        with trio.fail_after(5):
            while running_now["a"] < 2:
                await trio.sleep(0.01)
        await trio.sleep(0.3)
        assert running_now["a"] == 2  # the other two threads stay free
        await b.request("slow", "b")
        with trio.fail_after(5):
            while running_now["b"] == 0:
                await trio.sleep(0.01)
        release.set()
        assert (await b.recv())[3] == "b"
        for _ in range(10):
            assert (await a.recv())[3] == "a"
    assert most == {"a": 2, "b": 1}


@pytest.mark.trio
async def test_connections_that_do_not_read_are_muted_then_the_biggest_is_closed(sock):
    """Unread answers past max_buffered_bytes_per_connection stop the connection being read; past
    max_buffered_bytes for all of them, the one holding the most is closed. A client that reads is served."""
    mib = 1 << 20
    async with running(sock, max_buffered_bytes_per_connection=mib, max_buffered_bytes=5 * mib,
                       blocking_threads_per_connection=1) as d:
        first = await RawPeer.unix(sock)
        await first.send_bytes(b"".join(msgpack.packb([0, i, "read", ["large", 0, 0, 4 * mib]]) for i in range(40)))
        with trio.fail_after(10):
            while d.buffers.total < mib:
                await trio.sleep(0.02)
        await trio.sleep(0.5)
        held = d.buffers.total
        assert mib <= held <= 5 * mib, held  # muted: its one answer being sent, nothing more
        good = await RawPeer.unix(sock)
        assert await good.call("ping") == (None, "pong")
        second = await RawPeer.unix(sock)  # ~4 MiB + ~2 MiB held: over 5 MiB, and the first holds the most
        await second.send_bytes(b"".join(msgpack.packb([0, i, "read", ["large", 0, 0, 2 * mib]]) for i in range(8)))
        with trio.fail_after(10):
            while d.counters.connections != 2:
                await trio.sleep(0.02)
        with trio.fail_after(10):
            while await first.recv() is not None:  # what was sent before the close, then the end
                pass
        assert await good.call("ping") == (None, "pong")
        with open(R.require() / "logs" / "large-0" / "00000000000000000000.log", "rb") as f:
            want = f.read(2 * mib)
        got = sorted([await second.recv() for _ in range(8)])  # read again as it reads: every answer whole and right
        assert [m[:3] for m in got] == [[1, i, None] for i in range(8)]
        assert all(want.startswith(m[3]["records"]) and len(m[3]["records"]) > mib for m in got)


def test_every_connection_action_has_its_own_case():
    """Connection._act names every Action in a case of its own (no fall-through: a kind added without
    one would fail here, and at run time in the catch-all, which raises)."""
    import ast
    import inspect
    import textwrap

    from lookupd.daemon.connection import Action, Connection

    tree = ast.parse(textwrap.dedent(inspect.getsource(Connection._act)))
    (match,) = [n for n in ast.walk(tree) if isinstance(n, ast.Match)]
    named = [ast.unparse(c.pattern) for c in match.cases]
    assert sorted(named[:-1]) == sorted(f"Action.{a.name}" for a in Action), named
    assert named[-1] == "_" and isinstance(match.cases[-1].body[0], ast.Raise), "the catch-all must raise"
