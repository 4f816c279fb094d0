"""Hostile clients against the real daemon process: whatever one connection sends, the daemon keeps serving."""

from __future__ import annotations

import os
import socket

import msgpack
import pytest

import reference as R
from daemon_helpers import blocking_call, short_dir, start_daemon, stop_daemon  # noqa: F401

TOKEN = "let-me-in"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def daemon(short_dir):  # noqa: F811
    token = os.path.join(short_dir, "token")
    with open(token, "w") as f:
        f.write(TOKEN)
    os.chmod(token, 0o600)
    port = _free_port()
    conf = os.path.join(short_dir, "lookupd.toml")
    with open(conf, "w") as f:
        f.write(f'log_dirs = ["{R.require() / "logs"}"]\ntcp = "127.0.0.1:{port}"\nauth_token_file = "{token}"\n')
    sock = os.path.join(short_dir, "d.sock")
    proc = start_daemon(["--config", conf, "--socket", sock], short_dir, sock)
    yield proc, sock, port
    if proc.poll() is None:
        stop_daemon(proc)


def _answers(address, payload: bytes) -> list:
    """Send `payload` on a new connection and collect what the daemon says until it closes or goes quiet."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(address)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        u, out = msgpack.Unpacker(raw=False), []
        try:
            while data := s.recv(1 << 16):
                u.feed(data)
                out += list(u)
        except (socket.timeout, ConnectionResetError):
            pass
        return out


@pytest.mark.parametrize("depth", [100, 980, 1000, 1025, 5000])
def test_a_deeply_nested_message_gets_an_error_and_the_daemon_keeps_serving(daemon, depth):
    proc, sock, port = daemon
    payload = b"\x91" * depth + b"\xc0"   # [[[...[nil]...]]], the one-packet crash
    for address in (sock, ("127.0.0.1", port)):  # TCP: before auth, on a token-protected port
        answers = _answers(address, payload)
        assert answers and answers[0][0] == 2 and answers[0][1] == "error", answers
        assert answers[0][2][0]["code"] == "INVALID_ARGUMENT"
        assert "nested" in answers[0][2][0]["message"], answers  # a reason, not "StackError: "
        assert proc.poll() is None, "the daemon exited"
        assert blocking_call(sock, "ping") == (None, "pong")


def test_a_deep_request_is_answered_by_msgid_and_the_connection_goes_on(daemon):
    proc, sock, _ = daemon
    deep = None
    for _ in range(50):
        deep = [deep]
    payload = msgpack.packb([0, 7, "resolve_offset", ["plain", 0, deep]]) + msgpack.packb([0, 8, "ping", []])
    answers = _answers(sock, payload)
    assert answers[0][:2] == [1, 7] and answers[0][2]["code"] == "INVALID_ARGUMENT"
    assert "nested" in answers[0][2]["message"]
    assert answers[1] == [1, 8, None, "pong"]
    assert proc.poll() is None


def test_a_wide_value_in_an_error_message_stays_short(daemon):
    _, sock, _ = daemon
    wide = [[0] * 1000] * 100
    answers = _answers(sock, msgpack.packb([wide, 1, "x", []]))
    assert answers[0][2][0]["code"] == "INVALID_ARGUMENT"
    assert len(answers[0][2][0]["message"]) < 200


def test_descriptor_exhaustion_refuses_new_clients_and_keeps_every_partition(short_dir):  # noqa: F811
    """Under a low RLIMIT_NOFILE, clients past the budget get UNAVAILABLE, connected clients keep getting
    answers, and rescans still list every partition (accept never meets EMFILE)."""
    import resource
    import time

    limit = 256
    sock = os.path.join(short_dir, "d.sock")
    proc = start_daemon(["--log-dir", str(R.require() / "logs"), "--socket", sock], short_dir, sock,
                        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    clients = []
    try:
        n_partitions = len(blocking_call(sock, "partitions")[1])
        refused = 0
        for _ in range(limit + 50):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(sock)
            try:
                s.sendall(msgpack.packb([0, 1, "ping", []]))
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused and closed already; its notification is still to be read
            u = msgpack.Unpacker(raw=False)
            while (msg := next(u, None)) is None:
                data = s.recv(4096)
                assert data, "closed without an answer"
                u.feed(data)
            if msg[0] == 2:
                assert msg[1] == "error" and msg[2][0]["code"] == "UNAVAILABLE", msg
                assert "file descriptors" in msg[2][0]["message"]
                refused += 1
                s.close()
            else:
                assert msg == [1, 1, None, "pong"]
                clients.append(s)
        assert refused >= 50 and clients, (refused, len(clients))
        time.sleep(1.5)  # a rescan or more under the shortage
        for s in clients[:5]:  # connected clients still get answers
            s.sendall(msgpack.packb([0, 2, "partitions", []]))
            u = msgpack.Unpacker(raw=False)
            while (msg := next(u, None)) is None:
                u.feed(s.recv(1 << 20))
            assert msg[2] is None and len(msg[3]) == n_partitions
        for s in clients:
            s.close()
        clients.clear()
        time.sleep(0.5)
        assert len(blocking_call(sock, "partitions")[1]) == n_partitions
        assert proc.poll() is None
    finally:
        for s in clients:
            s.close()
        code, stderr = stop_daemon(proc)
    assert code == 0 and "Too many open files" not in stderr, stderr
