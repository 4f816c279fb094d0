"""The systemd units verify, and the daemon works under socket activation with sd_notify."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import msgpack
import pytest

import reference as R
from daemon_helpers import short_dir  # noqa: F401 - fixture

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNITS = os.path.join(REPO, "systemd")
LOOKUPD = os.path.join(os.path.dirname(sys.executable), "lookupd")


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} not found (Debian package systemd)")
    return path


def need_lookupd() -> None:
    if not os.access(LOOKUPD, os.X_OK):
        pytest.skip(f"{LOOKUPD} is missing: install the project into the venv (make venv)")


def test_units_verify(short_dir):
    verify = need("systemd-analyze")
    need_lookupd()
    for name in ("lookupd.service", "lookupd.socket"):
        with open(os.path.join(UNITS, name)) as f:
            text = f.read().replace("/usr/local/bin/lookupd", LOOKUPD)
        with open(os.path.join(short_dir, name), "w") as f:
            f.write(text)
    r = subprocess.run([verify, "verify", os.path.join(short_dir, "lookupd.service"),
                        os.path.join(short_dir, "lookupd.socket")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "lookupd" not in r.stderr, r.stderr  # no warnings about our units


def test_example_config_loads():
    from lookupd.daemon.config import Config
    cfg = Config.load(os.path.join(UNITS, "lookupd.toml.example"))
    assert cfg.log_dirs == ["/var/lib/kafka/data"] and cfg == Config(log_dirs=cfg.log_dirs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(sock: socket.socket) -> list:
    sock.settimeout(30)
    sock.sendall(msgpack.packb([0, 1, "lookup_offset", ["plain", 0, 100, "floor"]]))
    u = msgpack.Unpacker(raw=False)
    while True:
        data = sock.recv(65536)
        assert data, "connection closed"
        u.feed(data)
        for msg in u:
            return msg


def receive_states(notify: socket.socket, want: str, timeout: float = 30) -> list[str]:
    """Datagrams from the daemon until one contains `want`."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        notify.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got.append(notify.recv(4096).decode())
        except socket.timeout:
            break
        if want in got[-1]:
            return got
    raise AssertionError(f"no {want} from the daemon; got {got}")


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_socket_activation_and_notify(short_dir, abstract):
    activate = need("systemd-socket-activate")
    need_lookupd()
    R.require()
    sock_path = os.path.join(short_dir, "act.sock")
    port = free_port()
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"lookupd-test-{os.getpid()}-{time.monotonic_ns()}"
        notify.bind("\0" + name)
        notify_env = "@" + name
    else:
        notify_env = os.path.join(short_dir, "notify")
        notify.bind(notify_env)
    proc = subprocess.Popen(
        [activate, "-l", sock_path, "-l", f"127.0.0.1:{port}", "--fdname=lookupd:lookupd-tcp",
         "-E", f"NOTIFY_SOCKET={notify_env}", "-E", "WATCHDOG_USEC=200000", "-E", f"PYTHONPATH={REPO}",
         LOOKUPD, "serve", "--log-dir", str(R.LOGS), "--socket", os.path.join(short_dir, "unused.sock")],
        cwd=short_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock_path):
            assert time.monotonic() < deadline and proc.poll() is None, "systemd-socket-activate did not listen"
            time.sleep(0.02)
        # systemd-socket-activate starts the daemon on the first connection
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(sock_path)
            assert ping(c)[:3] == [1, 1, None]
        states = receive_states(notify, "READY=1")
        with socket.create_connection(("127.0.0.1", port)) as c:
            assert ping(c)[3] == {"segment": 0, "offset": 89, "position": 13079}
        states += receive_states(notify, "WATCHDOG=1")
        assert not os.path.exists(os.path.join(short_dir, "unused.sock"))  # activated sockets replace --socket
        proc.send_signal(signal.SIGTERM)
        states += receive_states(notify, "STOPPING=1")
        assert proc.wait(20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
    assert any("READY=1" in s for s in states) and any("STOPPING=1" in s for s in states)
