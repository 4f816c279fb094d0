"""Segment files that are symbolic links (or not regular files) are never read: not by the daemon,
not through a root `--allow-other` mount, whoever reads it. A log dir is writable by the broker's
account; a link there named like a segment file must not hand out a file only root can read."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import reference as R
from lookupd.log.logmanager import LogManager
from lookupd.rpc.client import Client
from test_fusefs_helpers import Daemon, Mount, require_fuse, workdir

FIRST = "00000000000000000000"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def as_nobody(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, *cmd], capture_output=True, timeout=30)


@pytest.fixture
def hostile_logs(tmp_path):
    """Log dir with: evil-0, whose only segment's `.log` and `.index` link to root-only (0600) copies of
    plain-0's first segment files; plain-0, a real copy whose first `.index` is such a link; fifo-0,
    whose `.log` is a FIFO. Returns (log dir, the secret files)."""
    R.require()
    secret = tmp_path / "secret"
    secret.mkdir()
    src = R.log_dir("plain-0")
    for suffix in ("log", "index"):
        shutil.copyfile(src / f"{FIRST}.{suffix}", secret / f"s.{suffix}")
        os.chmod(secret / f"s.{suffix}", 0o600)
    logs = tmp_path / "logs"
    evil = logs / "evil-0"
    evil.mkdir(parents=True)
    os.symlink(secret / "s.log", evil / f"{FIRST}.log")
    os.symlink(secret / "s.index", evil / f"{FIRST}.index")
    shutil.copytree(src, logs / "plain-0")
    os.unlink(logs / "plain-0" / f"{FIRST}.index")
    os.symlink(secret / "s.index", logs / "plain-0" / f"{FIRST}.index")
    (logs / "fifo-0").mkdir()
    os.mkfifo(logs / "fifo-0" / f"{FIRST}.log")
    return logs, secret


def expected_plain(method: str, *args):
    manager = LogManager([R.LOGS])
    try:
        return getattr(manager.get("plain", 0), method)(*args)
    finally:
        manager.close()


def test_in_process_listing_skips_links_and_answers_from_the_log(hostile_logs, caplog):
    logs, _ = hostile_logs
    with caplog.at_level("WARNING", logger="lookupd"):
        manager = LogManager([logs])
    try:
        assert manager.get("evil", 0).base_offsets == []
        assert manager.get("fifo", 0).base_offsets == []
        plain = manager.get("plain", 0)
        assert plain.base_offsets == sorted(int(p.name[:20]) for p in R.log_dir("plain-0").glob("*.log"))
        for offset in (0, 5, 100, 230, 231, 4000):
            assert plain.resolve_offset(offset) == expected_plain("resolve_offset", offset)
            assert plain.read(offset, 1000) == expected_plain("read", offset, 1000)
        assert plain.segments_info()[1:] == expected_plain("segments_info")[1:]
    finally:
        manager.close()
    warned = caplog.text
    assert f"evil-0/{FIRST}.log is a symbolic link" in warned and "not served" in warned
    assert f"evil-0/{FIRST}.index is a symbolic link" in warned
    assert f"plain-0/{FIRST}.index is a symbolic link" in warned
    assert f"fifo-0/{FIRST}.log is a symbolic link or not a regular file" in warned


def test_daemon_and_allow_other_mount_never_serve_a_linked_file(hostile_logs):
    """Through the daemon and through a root `--allow-other` mount read as `nobody`: the linked files are
    not listed, not readable (raw or decoded), and each is named in a warning; the rest is served."""
    require_fuse()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to read the mount as another user")
    logs, secret = hostile_logs
    if os.getuid() != 0:
        pytest.skip("the attack is on a root mount read by another user: run as root")
    with workdir() as d:
        os.chmod(d, 0o755)  # nobody must reach the mount point
        daemon = Daemon([logs], d)
        mount = Mount(daemon.sock, d, "--log-dir", str(logs), "--allow-other")
        try:
            daemon.start()
            mount.start()
            assert as_nobody("cat", str(secret / "s.log")).returncode != 0  # the user really is nobody

            with Client(daemon.sock, timeout=10) as c:
                parts = {(p["topic"], p["partition"]): p for p in c.call("partitions")}
                assert parts[("evil", 0)]["segments"] == 0 and parts[("fifo", 0)]["segments"] == 0
                assert c.call("segments", "evil", 0) == []
                assert c.call("read", "evil", 0, 0, 1 << 20)["records"] == b""
                want = expected_plain("resolve_offset", 100)
                assert c.call("resolve_offset", "plain", 0, 100) == dict(zip(want._fields, want))
                assert c.call("read", "plain", 0, 0, 1 << 20)["records"] == expected_plain("read", 0, 1 << 20).records

            evil = mount.path("evil", "0")
            listed = as_nobody("ls", "-a", evil)
            assert listed.returncode == 0, listed.stderr
            assert FIRST not in listed.stdout.decode()
            for name in ("log", "index", "records.jsonl", "index.txt"):
                got = as_nobody("cat", os.path.join(evil, f"{FIRST}.{name}"))
                assert got.returncode != 0 and got.stdout == b"", (name, got.stdout[:100])

            plain = mount.path("plain", "0")
            listed = as_nobody("ls", plain).stdout.decode().split()
            assert f"{FIRST}.log" in listed and f"{FIRST}.index" not in listed and f"{FIRST}.index.txt" not in listed
            assert f"{FIRST}.timeindex" in listed
            for name in ("index", "index.txt"):
                got = as_nobody("cat", os.path.join(plain, f"{FIRST}.{name}"))
                assert got.returncode != 0 and got.stdout == b"", name
            got = as_nobody("cat", os.path.join(plain, f"{FIRST}.log"))
            assert got.returncode == 0 and got.stdout == (R.log_dir("plain-0") / f"{FIRST}.log").read_bytes(), mount.log
        finally:
            mount.stop()
            daemon.stop()
        with open(daemon.log_path) as f:
            daemon_log = f.read()
        assert f"evil-0/{FIRST}.log is a symbolic link" in daemon_log
        assert f"plain-0/{FIRST}.index is a symbolic link" in daemon_log
        assert f"plain-0/{FIRST}.index is a symbolic link" in mount.log
