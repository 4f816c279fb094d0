"""Shared by the fusefs tests (no tests here): a real `lookupd serve` and a real `fusefs mount`,
each a subprocess, and a context manager that always takes both down, mount first, even
when the test fails: no mount is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

FUSERMOUNT = shutil.which("fusermount") or shutil.which("fusermount3")


def require_fuse() -> None:
    """Skip unless this machine can mount FUSE file systems the way fusefs does (libfuse 3)."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse: FUSE is not available on this machine")
    if FUSERMOUNT is None:
        pytest.skip("fusermount not found: install the fuse3 package")
    if ctypes.util.find_library("fuse3") is None:
        pytest.skip("libfuse3.so.3 not found (fusefs needs it): install the fuse3 package")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, ready, proc: subprocess.Popen, log_path: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}: {open(log_path).read()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not ready after {timeout} s: {open(log_path).read()[-2000:]}")
        time.sleep(0.05)


class Daemon:
    """`lookupd serve` on a Unix socket (and TCP if asked); `stop` and `start` again at will."""

    def __init__(self, log_dirs: list, workdir: str, *, tcp_port: int | None = None, rescan_s: float = 0.2,
                 token: str | None = None):
        self.sock = os.path.join(workdir, "lookupd.sock")
        self.log_path = os.path.join(workdir, "lookupd.log")
        self.tcp = f"127.0.0.1:{tcp_port}" if tcp_port else None
        self.token_file = os.path.join(workdir, "token")
        self.token = token
        config = os.path.join(workdir, "lookupd.toml")
        with open(config, "w") as f:
            f.write(f"rescan_interval_s = {rescan_s}\n")
            if token:
                f.write(f'auth_token_file = "{self.token_file}"\n')
        if token:
            with open(os.open(self.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(token)
        self.cmd = [sys.executable, "-m", "lookupd", "serve", "--config", config, "--socket", self.sock]
        for d in log_dirs:
            self.cmd += ["--log-dir", str(d)]
        if self.tcp:
            self.cmd += ["--tcp", self.tcp]
        self.proc: subprocess.Popen | None = None

    def _answers(self) -> bool:
        from lookupd.rpc.client import Client
        from lookupd.errors import LookupdError

        try:
            with Client(self.tcp or self.sock, timeout=2, token=self.token) as c:
                return c.call("ping") == "pong"
        except LookupdError:
            return False

    def start(self) -> "Daemon":
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log)
        _wait("lookupd serve", self._answers, self.proc, self.log_path)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Mount:
    """`fusefs mount --foreground` as a subprocess; stopped with SIGTERM (as systemd does)."""

    def __init__(self, address: str, workdir: str, *extra: str):
        self.root = os.path.join(workdir, "mnt")
        os.makedirs(self.root, exist_ok=True)
        self.log_path = os.path.join(workdir, "fusefs.log")
        self.cmd = [sys.executable, "-m", "fusefs", "mount", self.root, "--socket", address, "--foreground", *extra]
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Mount":
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log)
        _wait("fusefs mount", lambda: os.path.ismount(self.root), self.proc, self.log_path)
        return self

    @property
    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def stop(self) -> int | None:
        """SIGTERM, then make sure nothing stays mounted; returns the process's exit status."""
        status = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                status = self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        unmount(self.root)
        return status


def mounted_at(path: str) -> bool:
    """Whether /proc/self/mounts lists `path` (a dead or stuck mount cannot be stat'ed)."""
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def unmount(path: str) -> None:
    """Lazy-unmount `path` if anything is still mounted there."""
    if mounted_at(path):
        subprocess.run([FUSERMOUNT, "-u", "-z", path], capture_output=True)


@contextlib.contextmanager
def workdir():
    """A private dir with a short path (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="fz", dir="/tmp")
    try:
        yield d
    finally:
        unmount(os.path.join(d, "mnt"))
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def mounted(log_dirs: list, *mount_args: str, via_tcp: bool = False):
    """A daemon serving `log_dirs` and a mount of it (through the daemon's TCP port if
    `via_tcp`, so that the mount reads everything through the daemon): yields (mount, daemon)."""
    require_fuse()
    with workdir() as d:
        daemon = Daemon(log_dirs, d, tcp_port=free_port() if via_tcp else None)
        mount = Mount(daemon.tcp if via_tcp else daemon.sock, d, *mount_args)
        try:
            daemon.start()
            mount.start()
            yield mount, daemon
        finally:
            mount.stop()
            daemon.stop()
