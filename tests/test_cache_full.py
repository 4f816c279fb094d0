"""cache_dir's filesystem full (issue 39, row 10): remote reads bypass the disk cache and answer as the local
partition does (they were 27/27 UNAVAILABLE), whether the disk filled while lookupd ran or before it started.
The filesystem is a small tmpfs this test mounts (as root) and unmounts."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess

import pytest

import reference as R
from s3server import s3_server  # noqa: F401 - fixture
from test_tiered import _compare
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options

from lookupd.daemon.service import Service
from lookupd.log.logmanager import LogManager
from lookupd.log.tiered.listing import RemoteTier


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(fs) -> None:
    """Write into `fs` until it has no byte left."""
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_a_full_cache_disk_costs_the_cache_not_the_answers(s3_server, tmp_path, small_fs):  # noqa: F811
    R.require()
    t = tier_partition(tmp_path, R.log_dir("txn-0"), s3_server, cut=4, opts=Options(chunk_size=2048))
    local = LogManager([t.local_dir])
    running = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config,
                                                                               cache_dir=str(small_fs / "a"))))
    try:
        _fill(small_fs)  # the disk fills while lookupd runs
        _compare(Service(local), Service(running), t.topic, "txn-0", 4)
        started = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config,
                                                                                   cache_dir=str(small_fs / "b"))))
        try:  # and lookupd starts on a full disk
            _compare(Service(local), Service(started), t.topic, "txn-0", 4)
        finally:
            started.close()
    finally:
        running.close()
        local.close()
