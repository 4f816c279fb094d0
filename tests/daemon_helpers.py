"""Shared by the daemon tests: short socket paths, an in-process daemon, a raw msgpack-rpc peer."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import asynccontextmanager

import msgpack
import pytest
import trio

import reference as R

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def short_dir():
    """A private dir with a short path: Unix socket paths are limited to 107 bytes."""
    d = tempfile.mkdtemp(prefix="lkd", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def copy_partition(name: str, dest_root: str) -> str:
    dest = os.path.join(dest_root, name)
    shutil.copytree(R.log_dir(name), dest)
    os.chmod(dest, 0o755)
    for f in os.listdir(dest):
        os.chmod(os.path.join(dest, f), 0o644)
    return dest


@asynccontextmanager
async def running(sock_path: str, log_dirs=None, **settings):
    """A Daemon serving in this trio run (no signal handling); stopped and cleaned up on exit."""
    from lookupd.daemon.config import Config
    from lookupd.daemon.listeners import close_listeners
    from lookupd.daemon.main import build, nofile_limit
    from lookupd.daemon.server import Daemon

    cfg = Config(log_dirs=[str(d) for d in (log_dirs or [R.require() / "logs"])], socket=sock_path, **settings)
    cfg.check()
    manager, listeners, token = build(cfg)
    daemon = Daemon(cfg, manager, listeners, token=token, fd_limit=nofile_limit())
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.serve)
            try:
                yield daemon
            finally:
                daemon.stop()
    finally:
        close_listeners(listeners)
        manager.close()


class RawPeer:
    """A msgpack-rpc peer over a trio stream, with nothing of lookupd's client in it."""

    def __init__(self, stream: trio.abc.Stream):
        self.stream = stream
        self.unpacker = msgpack.Unpacker(raw=False)
        self.next_id = 0

    @classmethod
    async def unix(cls, path: str) -> "RawPeer":
        return cls(await trio.open_unix_socket(path))

    async def send_bytes(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def request(self, method: str, *params, msgid: int | None = None) -> int:
        if msgid is None:
            self.next_id += 1
            msgid = self.next_id
        await self.send_bytes(msgpack.packb([0, msgid, method, list(params)], use_bin_type=True))
        return msgid

    async def recv(self):
        """The next message, or None at end of stream."""
        while True:
            try:
                return self.unpacker.unpack()
            except msgpack.OutOfData:
                pass
            try:
                data = await self.stream.receive_some(1 << 20)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.unpacker.feed(data)

    async def call(self, method: str, *params):
        """(error, result) of one request, assuming nothing else is in flight."""
        msgid = await self.request(method, *params)
        msg = await self.recv()
        assert msg is not None and msg[:2] == [1, msgid], msg
        return msg[2], msg[3]

    async def aclose(self) -> None:
        await self.stream.aclose()


def blocking_call(sock_path: str, method: str, *params, timeout: float = 30):
    """One request over a plain blocking socket (for threads and processes)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    try:
        s.sendall(msgpack.packb([0, 1, method, list(params)], use_bin_type=True))
        u = msgpack.Unpacker(raw=False)
        while True:
            data = s.recv(1 << 20)
            assert data, "connection closed"
            u.feed(data)
            for msg in u:
                return msg[2], msg[3]
    finally:
        s.close()


class DaemonProcess(subprocess.Popen):
    """A daemon subprocess whose stderr a thread drains as it comes: an unread pipe fills at 64 KiB and then
    stalls the daemon's logging, and with it the daemon."""

    def __init__(self, args: list[str], **kwargs) -> None:
        super().__init__(args, stderr=subprocess.PIPE, text=True, **kwargs)
        self.stderr_lines: list[str] = []
        self._drain = threading.Thread(target=self.stderr_lines.extend, args=(self.stderr,), daemon=True)
        self._drain.start()

    def stderr_text(self) -> str:
        """Everything the daemon wrote to stderr; complete once it has exited."""
        if self.poll() is not None:
            self._drain.join(10)
        return "".join(self.stderr_lines)


def start_daemon(args: list[str], cwd: str, sock: str, **kwargs) -> DaemonProcess:
    """`python -m lookupd serve ARGS` in `cwd`, returned once `sock` accepts connections."""
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = DaemonProcess([sys.executable, "-m", "lookupd", "serve", *args], cwd=cwd, env=env,
                         stdout=subprocess.DEVNULL, **kwargs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode}: {proc.stderr_text()}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(sock)
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("daemon did not start listening within 30 s")


def stop_daemon(proc: DaemonProcess) -> tuple[int, str]:
    """SIGTERM, then (exit code, stderr)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, proc.stderr_text()


def retention_delete(part_dir: str, base_offset: int) -> None:
    """Delete a segment the way a broker's retention does: rename its files to .deleted, then remove them."""
    stem = os.path.join(part_dir, f"{base_offset:020d}")
    suffixes = (".log", ".index", ".timeindex", ".txnindex")
    for suffix in suffixes:
        if os.path.exists(stem + suffix):
            os.rename(stem + suffix, stem + suffix + ".deleted")
    for suffix in suffixes:
        if os.path.exists(stem + suffix + ".deleted"):
            os.remove(stem + suffix + ".deleted")
