"""A cold index on slow storage must not stall lookups on hot indexes.

The log dir is served through a small FUSE passthrough filesystem (its own process) whose
read() sleeps for one index file. While one client's lookup pages that index in (seconds),
other clients keep looking up in indexes that are already mapped, on the daemon's event loop.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

import reference as R
from daemon_helpers import RawPeer, short_dir, start_daemon, stop_daemon  # noqa: F401

SLOW_FILE = "large-0/00000000000000000000.index"
FUSERMOUNT = shutil.which("fusermount3") or shutil.which("fusermount")
DELAY_PER_READ = 0.25  # seconds; the 1.6 MB index takes ~13 reads of 128 KiB

FS = textwrap.dedent('''
    import errno, os, sys, time
    from mfusepy import FUSE, FuseOSError, Operations

    class SlowPassthrough(Operations):
        def __init__(self, root, slow, delay):
            self.root, self.slow, self.delay = root, slow, delay
        def _p(self, path):
            return os.path.join(self.root, path.lstrip("/"))
        def getattr(self, path, fh=None):
            try:
                st = os.lstat(self._p(path))
            except OSError as e:
                raise FuseOSError(e.errno)
            return {k: getattr(st, k) for k in ("st_mode", "st_size", "st_nlink", "st_uid", "st_gid",
                                                "st_atime", "st_mtime", "st_ctime")}
        def readdir(self, path, fh):
            return [".", ".."] + os.listdir(self._p(path))
        def open(self, path, flags):
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EROFS)
            return os.open(self._p(path), os.O_RDONLY)
        def read(self, path, size, offset, fh):
            if path.lstrip("/") == self.slow:
                time.sleep(self.delay)
            return os.pread(fh, size, offset)
        def release(self, path, fh):
            os.close(fh)
        def statfs(self, path):
            st = os.statvfs(self._p(path))
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    root, mnt, slow, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    FUSE(SlowPassthrough(root, slow, delay), mnt, foreground=True, ro=True, nothreads=False)
''')


@pytest.fixture
def slow_logs(short_dir):
    R.require()
    pytest.importorskip("mfusepy", reason="mfusepy is not installed (pip install mfusepy)")
    if not os.path.exists("/dev/fuse") or FUSERMOUNT is None:
        pytest.skip("FUSE is unavailable: needs /dev/fuse and fusermount3 (Debian package fuse3)")
    try:
        import mfusepy  # noqa: F401 - loads libfuse
    except OSError as err:
        pytest.skip(f"mfusepy cannot load libfuse ({err}): apt-get install fuse3")
    mnt = os.path.join(short_dir, "mnt")
    os.mkdir(mnt)
    script = os.path.join(short_dir, "slowfs.py")
    with open(script, "w") as f:
        f.write(FS)
    proc = subprocess.Popen([sys.executable, script, str(R.LOGS), mnt, SLOW_FILE, str(DELAY_PER_READ)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.skip(f"could not mount a FUSE filesystem here: {proc.communicate()[1].strip()[-300:]}")
        time.sleep(0.05)
    try:
        yield mnt
    finally:
        subprocess.run([FUSERMOUNT, "-u", "-z", mnt], capture_output=True)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.trio
async def test_hot_lookups_stay_fast_while_a_cold_index_pages_in(slow_logs, short_dir):
    import trio

    sock = os.path.join(short_dir, "d.sock")
    proc = await trio.to_thread.run_sync(start_daemon, ["--log-dir", slow_logs, "--socket", sock], short_dir, sock)
    try:
        hot = await RawPeer.unix(sock)
        hot_targets = [("plain", 0, 1000), ("compressed", 0, 2000), ("large", 0, 250000), ("txn", 0, 100)]
        for t, p, o in hot_targets:  # map these indexes (not slow) first
            err, _ = await hot.call("lookup_offset", t, p, o, "floor")
            assert err is None
        cold = await RawPeer.unix(sock)
        latencies: list[float] = []
        slow_took: list[float] = []

        async def cold_lookup():
            t0 = time.monotonic()
            err, got = await cold.call("lookup_offset", "large", 0, 123456, "floor")
            slow_took.append(time.monotonic() - t0)
            assert err is None and got["offset"] == 123456

        async with trio.open_nursery() as n:
            n.start_soon(cold_lookup)
            await trio.sleep(0.1)  # the cold lookup is paging its index in now
            i = 0
            while not slow_took:
                t, p, o = hot_targets[i % len(hot_targets)]
                t0 = time.monotonic()
                err, _ = await hot.call("lookup_offset", t, p, o + i % 50, "floor")
                latencies.append(time.monotonic() - t0)
                assert err is None
                i += 1
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99)]
        assert slow_took[0] > 1.0, f"the index was not slow to page in ({slow_took[0]:.2f} s): is it cached?"
        assert len(latencies) > 100
        assert p99 < 0.05, f"hot p99 {p99 * 1000:.1f} ms while a cold index paged in for {slow_took[0]:.1f} s"
    finally:
        code, stderr = await trio.to_thread.run_sync(stop_daemon, proc)
    assert code == 0, stderr
