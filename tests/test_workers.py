"""`workers = N`: several daemon processes on the same sockets, under one supervisor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import msgpack

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
