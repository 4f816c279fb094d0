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


def _unit_commands() -> dict[str, str]:
    """The shipped units' commands of ours: unit name -> ExecStart's program."""
    out = {}
    for name in ("lookupd.service", "fusefs.service"):
        with open(os.path.join(UNITS, name)) as f:
            out[name] = next(line.split("=", 1)[1].split()[0] for line in f if line.startswith("ExecStart="))
    return out


def test_make_install_puts_the_commands_where_the_units_run_them():
    """`make install`: the package in its own virtualenv, its commands linked into BINDIR, by default the
    directory the units run them from."""
    r = subprocess.run(["make", "--no-print-directory", "-n", "install"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "/opt/kafka-lookupd/bin/pip install --quiet .\n" in r.stdout, r.stdout
    for unit, program in _unit_commands().items():
        name = os.path.basename(program)
        assert f"/opt/kafka-lookupd/bin/{name}" in r.stdout and os.path.dirname(program) == "/usr/local/bin", unit
        assert "ln -sf /opt/kafka-lookupd/bin/lookupd /opt/kafka-lookupd/bin/fusefs /usr/local/bin/" in r.stdout


def test_units_verify_after_make_install(short_dir):
    """The shipped units pass `systemd-analyze verify` once `make install` has linked the commands (here this
    test's virtualenv stands for the installed package, and a private dir for /usr/local/bin)."""
    verify = need("systemd-analyze")
    need_lookupd()
    bindir = os.path.join(short_dir, "bin")
    r = subprocess.run(["make", "--no-print-directory", "install-commands", f"INSTALL_DIR={sys.prefix}",
                        f"BINDIR={bindir}"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for program in _unit_commands().values():
        installed = os.path.join(bindir, os.path.basename(program))
        assert subprocess.run([installed, "--help"], capture_output=True, timeout=60).returncode == 0, installed
    units = []
    for name in ("lookupd.service", "lookupd.socket", "fusefs.service"):
        with open(os.path.join(UNITS, name)) as f:
            text = f.read().replace("/usr/local/bin/", bindir + "/")
        units.append(os.path.join(short_dir, name))
        with open(units[-1], "w") as f:
            f.write(text)
    r = subprocess.run([verify, "verify", *units], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "lookupd" not in r.stderr and "fusefs" not in r.stderr, r.stderr  # no warnings about our units


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
