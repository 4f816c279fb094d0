"""`workers = N`: several daemon processes on the same sockets, under one supervisor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import msgpack
import pytest

import reference as R
from daemon_helpers import REPO, blocking_call, short_dir  # noqa: F401 - fixture


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def test_two_workers_share_the_socket_and_stop_together(short_dir):  # noqa: F811
    sock = os.path.join(short_dir, "d.sock")
    proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--log-dir", str(R.require() / "logs"),
                             "--socket", sock, "--workers", "2"], cwd=short_dir, env=dict(os.environ, PYTHONPATH=REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if blocking_call(sock, "ping", timeout=5) == (None, "pong"):
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(workers) == 2
        seen, held = set(), []
        for _ in range(200):  # the kernel hands each connection to whichever worker accepts first
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(sock)
            s.sendall(msgpack.packb([0, 1, "stats", []]))
            u = msgpack.Unpacker(raw=False)
            while (msg := next(u, None)) is None:
                u.feed(s.recv(65536))
            seen.add(msg[3]["worker"])
            held.append(s)
            if seen == {0, 1}:
                break
        assert seen == {0, 1}
        err, got = blocking_call(sock, "resolve_offset", "plain", 0, 250)
        assert err is None and (got["segment"], got["base_offset"], got["position"]) == (231, 250, 6430)
        for s in held:
            s.close()
        proc.send_signal(signal.SIGHUP)  # reaches every worker: they rescan and go on serving
        time.sleep(0.3)
        assert _children(proc.pid) == workers
        proc.send_signal(signal.SIGTERM)  # reaches every worker: all drain and exit, then the supervisor
        assert proc.wait(30) == 0
        assert not any(os.path.exists(f"/proc/{w}") and open(f"/proc/{w}/stat").read().split()[2] != "Z"
                       for w in workers)
        assert not os.path.exists(sock)
        assert proc.stderr.read().count("SIGHUP: rescanning") == 2  # one line from each worker
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _pipelining_client(sock_path: str, ready: "threading.Barrier", results: list) -> None:
    """Pipelines requests (answered inline and in worker threads) until the daemon closes the connection;
    appends (answers received, error or None)."""
    import selectors

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.setblocking(False)
    u = msgpack.Unpacker(raw=False)
    calls = [("ping", []), ("resolve_offset", ["plain", 0, 100]), ("resolve_offsets", ["plain", 0, [5, 100, 200]]),
             ("read", ["large", 0, 1000, 200_000]), ("segments", ["plain", 0])]
    out, sent, answered, error = b"", 0, 0, None
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    ready.wait()
    try:
        while True:
            for _, events in sel.select(5):
                if events & selectors.EVENT_WRITE:
                    if not out and sent - answered < 32:  # at most 32 outstanding
                        method, params = calls[sent % len(calls)]
                        out = msgpack.packb([0, sent, method, params])
                        sent += 1
                    if out:
                        try:
                            out = out[s.send(out):]
                        except (BrokenPipeError, ConnectionResetError):
                            sel.modify(s, selectors.EVENT_READ)  # the daemon stopped reading: wait for its end
                            out = b""
                if events & selectors.EVENT_READ:
                    data = s.recv(1 << 20)
                    if not data:
                        return
                    u.feed(data)
                    for msg in u:
                        assert msg[0] == 1 and msg[2] is None, msg
                        answered += 1
    except OSError as err:  # ECONNRESET: the daemon reset the connection
        error = err
    finally:
        results.append((answered, error))
        s.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_answers_every_request_it_read_and_closes_cleanly(short_dir, workers):  # noqa: F811
    """Clients pipeline requests while SIGTERM arrives: the daemon answers every request it read (the
    requests it counted equal the answers clients received) and ends each connection without a reset."""
    import re
    import threading

    sock = os.path.join(short_dir, "d.sock")
    proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--log-dir", str(R.require() / "logs"),
                             "--socket", sock, "--workers", str(workers)], cwd=short_dir,
                            env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    probes, workers_pids = 0, []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                probes += 1
                if blocking_call(sock, "ping", timeout=5) == (None, "pong"):
                    break
            except OSError:
                probes -= 1
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        workers_pids = _children(proc.pid) if workers > 1 else []
        clients, results = 8, []
        ready = threading.Barrier(clients + 1)
        threads = [threading.Thread(target=_pipelining_client, args=(sock, ready, results)) for _ in range(clients)]
        for t in threads:
            t.start()
        ready.wait()
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(30)
        assert proc.wait(30) == 0
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in workers_pids:  # a worker left behind by a failure here must not outlive the test
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"lookupd" in f.read():
                        os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
    assert len(results) == clients and not [e for _, e in results if e is not None], results
    handled = sum(int(n) for n in re.findall(r"stopped after (\d+) requests", stderr))
    assert len(re.findall(r"stopped after", stderr)) == workers, stderr
    answered = sum(n for n, _ in results)
    assert answered > 5 * clients, results  # the clients were busy when the signal came
    assert handled == answered + probes, (handled, answered, probes, stderr[-2000:])
