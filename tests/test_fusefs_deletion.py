"""The mount while the broker deletes segments (issue 16): files open at the time read on,
deleted segments are ENOENT from then on, and an error the daemon answers never costs the
mount its connection. Real daemon, real mounts; segments are deleted the way Kafka's
retention does it: every file renamed to `<name>.deleted`, then removed."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading

import pytest

from lookupd.rpc.client import Client, RemoteError
from test_fusefs import lines, read, stem
from test_fusefs_helpers import Daemon, Mount, mounted, require_fuse, workdir
from test_fusefs_live import T0, Producer, gone, record_fields, segment_bases, wait_for


def delete_like_retention(part_dir: str, base: int, between=lambda: None) -> None:
    """Kafka's LocalLog.deleteSegmentFiles: rename the segment's files to .deleted, later remove them."""
    names = [n for n in os.listdir(part_dir) if n.startswith(stem(base) + ".")]
    for n in names:
        os.rename(os.path.join(part_dir, n), os.path.join(part_dir, n + ".deleted"))
    between()
    for n in names:
        os.remove(os.path.join(part_dir, n + ".deleted"))


def read_fd(fd: int, size: int = 1 << 30) -> bytes:
    out = b""
    while len(out) < size and (chunk := os.read(fd, min(4096, size - len(out)))):
        out += chunk
    return out


def opened_errno(path: str) -> int | None:
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as err:
        return err.errno
    return None


def test_files_open_when_retention_deletes_their_segment_read_on(tmp_path):
    logs = tmp_path / "logs"
    part = logs / "events-0"
    prod = Producer(str(part), segment_bytes=4096, index_interval_bytes=256)
    prod.batches(60)
    prod.writer.close()
    bases = segment_bases(str(part))
    oldest, second = bases[0], bases[1]
    with mounted([logs], "--ttl", "0.2") as (mnt, _):
        view = mnt.path("events", "0")
        records = os.path.join(view, stem(oldest) + ".records.jsonl")
        index_txt = os.path.join(view, stem(oldest) + ".index.txt")
        timeindex_txt = os.path.join(view, stem(oldest) + ".timeindex.txt")
        at_offset = os.path.join(view, "at-offset", f"{oldest + 3}.jsonl")
        at_time = os.path.join(view, "at-time", f"{T0 + 10 * (oldest + 7)}.jsonl")
        raw = os.path.join(view, stem(oldest) + ".log")
        before = {p: read(p) for p in (index_txt, timeindex_txt, raw)}
        assert before[index_txt] and before[timeindex_txt]
        fds = {p: os.open(p, os.O_RDONLY) for p in (records, index_txt, timeindex_txt, at_offset, at_time, raw)}
        try:
            started = read_fd(fds[records], 100)  # one producer running, the others not started yet
            got: dict[str, bytes] = {}

            def halfway():  # renamed, not yet removed: reads go on
                got[at_offset] = read_fd(fds[at_offset], 200)

            delete_like_retention(str(part), oldest, halfway)
            got[at_offset] += read_fd(fds[at_offset])
            got[records] = started + read_fd(fds[records])
            for p in (index_txt, timeindex_txt, at_time, raw):
                got[p] = read_fd(fds[p])
        finally:
            for fd in fds.values():
                os.close(fd)

        in_oldest = [r for r in prod.records if r["offset"] < second]
        assert [record_fields(json.loads(x)) for x in got[records].splitlines()] == in_oldest
        assert [record_fields(json.loads(x)) for x in got[at_offset].splitlines()] == \
            [r for r in prod.records if r["offset"] >= oldest + 3]
        assert [r["offset"] for r in map(json.loads, got[at_time].splitlines())] == \
            [r["offset"] for r in prod.records if r["offset"] >= oldest + 7]
        for p in (index_txt, timeindex_txt, raw):
            assert got[p] == before[p], p

        # From now on the segment is not there: ENOENT, never EIO.
        for name in (".records.jsonl", ".index.txt", ".timeindex.txt", ".log"):
            assert opened_errno(os.path.join(view, stem(oldest) + name)) == errno.ENOENT, name
        wait_for("the log start moves past it", lambda: gone(os.path.join(view, f"at-offset/{oldest + 3}.jsonl")))
        assert opened_errno(os.path.join(view, "at-offset", f"{oldest + 3}.jsonl")) == errno.ENOENT
        assert [r["offset"] for r in lines(os.path.join(view, "at-time", f"{T0}.jsonl"))] == \
            [r["offset"] for r in prod.records if r["offset"] >= second]
        assert "answering EIO" not in mnt.log and "Traceback" not in mnt.log


def test_lookups_into_a_segment_deleted_after_the_daemon_listed_it(tmp_path):
    """The daemon still lists the segment (no rescan yet) and has its files open: at-offset
    into it is ENOENT (below the log start), at-time answers from the next segment."""
    require_fuse()
    logs = tmp_path / "logs"
    part = logs / "events-0"
    prod = Producer(str(part), segment_bytes=4096, index_interval_bytes=256)
    prod.batches(60)
    prod.writer.close()
    oldest, second = segment_bases(str(part))[:2]
    with workdir() as d:
        daemon = Daemon([logs], d, rescan_s=3600)
        mount = Mount(daemon.sock, d, "--ttl", "3600")
        try:
            daemon.start()
            mount.start()
            view = mount.path("events", "0")
            at_time = os.path.join(view, "at-time", f"{T0 + 10 * (oldest + 7)}.jsonl")
            at_offset = os.path.join(view, "at-offset", f"{oldest + 3}.jsonl")
            assert lines(at_time)[0]["offset"] == oldest + 7  # the daemon has the segment open now
            assert lines(at_offset)[0]["offset"] == oldest + 3
            delete_like_retention(str(part), oldest)
            assert opened_errno(at_offset) == errno.ENOENT
            assert [r["offset"] for r in lines(at_time)] == [r["offset"] for r in prod.records if r["offset"] >= second]
            assert opened_errno(os.path.join(view, stem(oldest) + ".records.jsonl")) == errno.ENOENT
            assert opened_errno(os.path.join(view, stem(oldest) + ".index.txt")) == errno.ENOENT
            assert "answering EIO" not in mount.log and "Traceback" not in mount.log
        finally:
            mount.stop()
            daemon.stop()


def test_an_error_the_daemon_answers_keeps_the_connection(tmp_path):
    """A partition whose first segment the daemon cannot read answers UNAVAILABLE: the mount passes
    that on for that partition and stays connected, so lookups elsewhere never see EIO. (The daemon runs
    as root without the capabilities that bypass file permissions, and the files are mode 000.)"""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    require_fuse()
    logs = tmp_path / "logs"
    good = Producer(str(logs / "good-0"), segment_bytes=4096)
    good.batches(20)
    good.writer.close()
    bad = Producer(str(logs / "bad-0"), segment_bytes=4096)
    bad.batches(20)
    bad.writer.close()
    with workdir() as d:
        daemon = Daemon([logs], d)
        if os.getuid() == 0:  # root reads mode-000 files unless it lacks these capabilities
            daemon.cmd[:0] = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all", "--"]
        mnt = Mount(daemon.sock, d, "--ttl", "0.05")
        try:
            daemon.start()
            mnt.start()
            assert sorted(os.listdir(mnt.root)) == ["bad", "good"]
            for name in os.listdir(logs / "bad-0"):
                if name.startswith(stem(0)):
                    os.chmod(logs / "bad-0" / name, 0)
            with Client(daemon.sock) as c:
                def answered():
                    try:
                        c.call("segments", "bad", 0)
                    except RemoteError as err:
                        return err.code == "UNAVAILABLE"
                wait_for("the daemon answers UNAVAILABLE for bad-0", answered)
            hammer_both(mnt)
        finally:
            mnt.stop()
            daemon.stop()


def hammer_both(mnt) -> None:
    """Listings of bad/0 (which fail) and good/0 (which must not) at once, from three threads each."""
    errors: list = []
    good_view = mnt.path("good", "0")
    want = sorted(os.listdir(good_view))

    def hammer(path: str, expect_ok: bool):
        for _ in range(40):
            try:
                names = sorted(os.listdir(path))
                if expect_ok and names != want:
                    errors.append((path, names))
            except OSError as err:
                if expect_ok:
                    errors.append((path, err))
    threads = [threading.Thread(target=hammer, args=(mnt.path("bad", "0"), False)) for _ in range(3)]
    threads += [threading.Thread(target=hammer, args=(good_view, True)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with pytest.raises(OSError) as bad_read:
        os.listdir(mnt.path("bad", "0"))
    assert bad_read.value.errno == errno.EIO  # the daemon's reason is in the log
    assert "Permission denied" in mnt.log
    assert "lost the connection" not in mnt.log and "reconnected" not in mnt.log


def test_through_the_daemon_deleted_segments_end_views_cleanly(tmp_path):
    """Read through the daemon only (no local files): views of a deleted segment end, or go
    on with what the daemon still serves, without an error; new opens are ENOENT."""
    logs = tmp_path / "logs"
    part = logs / "events-0"
    prod = Producer(str(part), segment_bytes=4096, index_interval_bytes=256)
    prod.batches(60)
    prod.writer.close()
    oldest, second = segment_bases(str(part))[:2]
    with mounted([logs], "--ttl", "0.2", via_tcp=True) as (mnt, _):
        view = mnt.path("events", "0")
        records = os.path.join(view, stem(oldest) + ".records.jsonl")
        at_offset = os.path.join(view, "at-offset", f"{oldest + 3}.jsonl")
        fds = {p: os.open(p, os.O_RDONLY) for p in (records, at_offset)}
        try:
            delete_like_retention(str(part), oldest)
            wait_for("the daemon no longer lists it", lambda: stem(oldest) + ".log" not in os.listdir(view))
            got = {p: read_fd(fd) for p, fd in fds.items()}  # no OSError
        finally:
            for fd in fds.values():
                os.close(fd)
        by_offset = {r["offset"]: r for r in prod.records}
        for p, data in got.items():
            rows = [record_fields(json.loads(x)) for x in data.splitlines()]
            assert [by_offset[r["offset"]] for r in rows] == rows and rows == sorted(rows, key=lambda r: r["offset"])
        assert all(r["offset"] < second for r in map(json.loads, got[records].splitlines()))
        assert opened_errno(records) == errno.ENOENT
        wait_for("the log start moves past it", lambda: gone(at_offset))
        assert opened_errno(at_offset) == errno.ENOENT
        assert "answering EIO" not in mnt.log and "Traceback" not in mnt.log


def test_a_segment_replaced_under_its_name_never_reads_stale(tmp_path):
    """Rolled segments keep the kernel's page cache between opens, but only while the name
    still holds the same file: replaced (compaction's swap), truncated, or deleted and
    written again, the next open reads what is on disk now."""
    logs = tmp_path / "logs"
    part = logs / "events-0"
    prod = Producer(str(part), segment_bytes=4096, index_interval_bytes=256)
    prod.batches(60)
    prod.writer.close()
    rolled = segment_bases(str(part))[1]
    disk = str(part / (stem(rolled) + ".log"))
    with mounted([logs], "--ttl", "0.2") as (mnt, _):
        through = mnt.path("events", "0", stem(rolled) + ".log")
        original = read(disk)
        for _ in range(3):  # the second and third opens keep the cached pages
            assert read(through) == original

        swapped = bytes(reversed(original))  # same size, other bytes, another inode
        with open(disk + ".swap", "wb") as f:
            f.write(swapped)
        os.rename(disk + ".swap", disk)
        assert read(through) == swapped
        assert read(through) == swapped

        os.truncate(disk, len(swapped) // 2)  # the same inode, shorter
        wait_for("the new size is seen", lambda: os.stat(through).st_size == len(swapped) // 2)
        assert read(through) == swapped[:len(swapped) // 2]

        os.remove(disk)  # deleted and written again with the first bytes
        with open(disk, "wb") as f:
            f.write(original)
        wait_for("the new size is seen", lambda: os.stat(through).st_size == len(original))
        assert read(through) == original
        assert "Traceback" not in mnt.log
