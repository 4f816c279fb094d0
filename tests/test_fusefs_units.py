"""The FUSE view's parts that need no mount: path parsing, the lazily generated file, record slicing."""

from __future__ import annotations

import ctypes
import errno
import os
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusefs import tree
from fusefs.binding import FuseOSError, _fill, c_stat, fill_dir, fill_stat, set_st_attrs
from fusefs.catalog import Catalog, SegmentInfo, TTLCache
from fusefs.daemon import DaemonLink
from fusefs.listing import RACY_NS, Listings, local_entries
from fusefs.ops import KafkaFS
from fusefs.stream import CHECKPOINT, Stream
from fusefs.views import render
from mfusepy import fuse_fill_dir_t
from lookupd.format.batch import parse_header
from lookupd.format.builder import build_batch


def refused(path: str) -> int:
    with pytest.raises(FuseOSError) as e:
        tree.parse(path)
    return e.value.errno


def test_paths_name_nodes():
    assert tree.parse("/") == tree.Root()
    assert tree.parse("/orders") == tree.Topic("orders")
    assert tree.parse("/orders/12") == tree.Partition("orders", 12)
    assert tree.parse("/orders/0/00000000000000001234.log") == tree.SegmentFile("orders", 0, 1234, "log")
    view = tree.parse("/orders/0/00000000000000001234.timeindex.txt")
    assert view == tree.SegmentFile("orders", 0, 1234, "timeindex.txt") and not view.raw
    assert view.disk_suffix == "timeindex"
    assert tree.parse("/orders/0/partition.json") == tree.PartitionJson("orders", 0)
    assert tree.parse("/orders/0/at-time") == tree.NavDir("orders", 0, "at-time")
    assert tree.parse("/orders/0/at-offset/42.jsonl") == tree.AtOffset("orders", 0, 42, None)
    assert tree.parse("/orders/0/at-offset/42-42.jsonl") == tree.AtOffset("orders", 0, 42, 42)
    assert tree.parse("/orders/0/at-time/1767225600000.jsonl") == tree.AtTime("orders", 0, 1767225600000, None)
    day = tree.AtTime("orders", 0, 1767225600000, 1767312000000)
    assert tree.parse("/orders/0/at-time/2026-01-01--2026-01-02T00:00:00Z.jsonl") == day
    assert tree.parse("/orders/0/at-time/2026-01-01T01:00:00+01:00--1767312000000.jsonl") == day


def test_times():
    assert tree.parse_time("2026-01-01T00:00:00.250Z") == 1767225600250
    assert tree.parse_time("2026-01-01T00:00:00.250") == 1767225600250  # no zone: UTC
    assert tree.parse_time("0") == 0
    assert tree.parse_time("1970-01-01") == 0


@pytest.mark.parametrize("path, code", [
    ("/orders/00", errno.ENOENT), ("/orders/+1", errno.ENOENT), ("/orders/2147483648", errno.ENOENT),
    ("/ord ers", errno.ENOENT), ("/..", errno.ENOENT), ("/" + "t" * 250, errno.ENOENT),
    ("/orders/0/1234.log", errno.ENOENT), ("/orders/0/00000000000000001234.logx", errno.ENOENT),
    ("/orders/0/99999999999999999999.log", errno.ENOENT), ("/orders/0/at-offset", None),
    ("/orders/0/at-offset/x.jsonl", errno.ENOENT), ("/orders/0/at-offset/4-2.jsonl", errno.EINVAL),
    ("/orders/0/at-offset/9223372036854775808.jsonl", errno.EINVAL),
    ("/orders/0/at-offset/1-99999999999999999999.jsonl", errno.EINVAL),
    ("/orders/0/at-offset/1.jsonl/x", errno.ENOENT), ("/orders/0/partition.json/x", errno.ENOENT),
    ("/orders/0/at-time/2026-02-30.jsonl", errno.ENOENT), ("/orders/0/at-time/1969-12-31.jsonl", errno.EINVAL),
    ("/orders/0/at-time/2--1.jsonl", errno.EINVAL), ("/orders/0/at-time/1--.jsonl", errno.ENOENT),
    ("/orders/0/at-time/\u0661\u0662.jsonl", errno.ENOENT), ("/orders/0/other", errno.ENOENT),
])
def test_names_that_cannot_be(path, code):
    if code is None:
        tree.parse(path)
    else:
        assert refused(path) == code


def test_listing_names():
    """A segment lists its files on disk, then the views made from them."""
    on_disk = {"00000000000000000007.log": 3, "00000000000000000007.timeindex": 12}
    refused: list = []
    entries = local_entries([SegmentInfo(7, 3, False, 5, 0, 1)],
                            lambda name: os.stat_result((0,) * 6 + (on_disk[name],) + (0,) * 3) if name in on_disk else None,
                            lambda size, blocks, mtime_ns: (size, mtime_ns), refused.append)
    assert entries == [("00000000000000000007.log", (3, 5_000_000)), ("00000000000000000007.timeindex", (12, 5_000_000)),
                       ("00000000000000000007.records.jsonl", (0, 5_000_000)),
                       ("00000000000000000007.timeindex.txt", (0, 5_000_000))]
    assert refused == []


def numbered(cursor: int):
    """A producer of lines "0\\n", "1\\n", ... up to 399999, in pieces of 1000 lines."""
    for start in range(cursor, 400_000, 1000):
        yield "".join(f"{i}\n" for i in range(start, start + 1000)).encode(), start + 1000


WHOLE = b"".join(piece for piece, _ in numbered(0))


def test_stream_reads_like_a_file():
    s = Stream(numbered, 0)
    assert s.read(10, 0) == WHOLE[:10]
    got, pos = b"", 0
    while chunk := s.read(131072, pos):
        got += chunk
        pos += len(chunk)
    assert got == WHOLE and len(WHOLE) > 2 * CHECKPOINT
    for offset, size in ((5, 100), (len(WHOLE) - 7, 100), (CHECKPOINT + 3, 5000), (0, 1), (len(WHOLE) + 5, 10)):
        assert s.read(size, offset) == WHOLE[offset:offset + size]
    s.close()


def test_stream_answers_reads_at_random_offsets():
    """Reads forward, backward, across pieces and checkpoints, with empty pieces in between, all read true."""
    def gappy(cursor: int):
        for piece, after in numbered(cursor):
            yield b"", after
            yield piece, after

    rnd = random.Random(7)
    s = Stream(gappy, 0)
    pos = 0
    for _ in range(300):
        pos = rnd.choice([pos, pos + rnd.randrange(200_000), rnd.randrange(len(WHOLE) + 10), max(0, pos - 300_000)])
        size = rnd.choice([1, 4096, 131072, rnd.randrange(1, 400_000)])
        assert s.read(size, pos) == WHOLE[pos:pos + size]
        pos += size
    s.close()


def test_a_resumable_stream_grows_with_its_source():
    """A view of a growing source: a read past the end, or grow(), picks up what was appended, from the
    cursor after the last piece; the size grow() gives never shrinks. A stream not resumable ends."""
    source = [b"a\n", b"b\n"]

    def lines(cursor: int):
        for i in range(cursor, len(source)):
            yield source[i], i + 1

    s, fixed = Stream(lines, 0, resumable=True), Stream(lines, 0)
    assert s.grow() == 0  # nothing read yet: nothing made
    assert s.read(100, 0) == b"a\nb\n" and fixed.read(100, 0) == b"a\nb\n"
    assert s.grow() == 4
    source.append(b"c\n")
    assert s.grow() == 6 and s.read(100, 4) == b"c\n"
    source.append(b"d\n")
    assert s.read(100, 6) == b"d\n" and fixed.read(100, 4) == b""
    assert s.grow() == 8 and s.read(100, 0) == b"a\nb\nc\nd\n"


def test_stream_error_with_nothing_to_give_fails_the_read():
    def broken(cursor: int):
        raise OSError(errno.EIO, "corrupt")
        yield

    with pytest.raises(OSError):
        Stream(broken, 0).read(10, 0)


def test_stream_restarts_from_a_checkpoint_after_an_error():
    starts = []
    fail = {"at": 150_000}

    def flaky(cursor: int):
        starts.append(cursor)
        for piece, after in numbered(cursor):
            if after > fail["at"]:
                fail["at"] = 10**9
                raise OSError(errno.EIO, "daemon went away")
            yield piece, after

    s = Stream(flaky, 0)
    sound = s.read(len(WHOLE), 0)  # a short read: what was made before the error
    assert 0 < len(sound) < len(WHOLE) and WHOLE.startswith(sound)
    assert s.read(len(WHOLE), len(sound)) == WHOLE[len(sound):]  # the producer runs again
    assert s.read(len(WHOLE), 0) == WHOLE
    s.read(10, len(WHOLE) - 10)
    behind = CHECKPOINT + 100_000
    assert s.read(10, behind) == WHOLE[behind:behind + 10]
    assert starts[0] == 0 and starts[-1] > 0  # the backward read resumed from a checkpoint, not from 0


def test_rendered_batch_slices_by_offset():
    batch = build_batch([(1000 + i, b"k%d" % i, b"v", ()) for i in range(5)], base_offset=10,
                        offsets=[10, 11, 13, 14, 17])
    r = render(parse_header(batch), memoryview(batch), "test")
    every = r.data.splitlines(keepends=True)
    assert r.between(None, None) == (r.data, False)
    assert r.between(12, None) == (b"".join(every[2:]), False)
    assert r.between(11, 14) == (b"".join(every[1:3]), True)
    assert r.between(18, None) == (b"", False)
    assert r.between(15, 16) == (b"", True)


def test_listings_refresh_in_the_background_and_forget_failures():
    cache = TTLCache(0.05)
    answers = iter([1, 2, OSError(errno.ECONNREFUSED, "daemon down"), 4])

    def fetch():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert cache.get("k", fetch) == 1 and cache.get("k", fetch) == 1
    time.sleep(0.06)
    assert cache.get("k", fetch) == 1  # stale: answered at once, refreshed behind
    deadline = time.monotonic() + 5
    while cache.get("k", fetch) != 2:
        assert time.monotonic() < deadline
    time.sleep(0.06)
    while (got := cache.get("k", fetch)) == 2:  # stale until the refresh behind it fails and drops it
        assert time.monotonic() < deadline
    assert got == 4  # then fetched by the caller


def test_a_slow_listing_is_asked_for_less_often():
    cache = TTLCache(0.01)
    fetched = []

    def slow():
        fetched.append(time.sleep(0.05))
        return len(fetched)

    assert cache.get("k", slow) == 1
    time.sleep(0.1)
    assert cache.get("k", slow) == 1 and len(fetched) == 1  # fresh for 10x the 50 ms it took, not the 10 ms TTL


def test_the_class_refuses_writes_whatever_the_mount_options():
    fs = KafkaFS(Catalog(DaemonLink("/nonexistent.sock"), log_dirs=[], same_host=True))
    for call in (lambda: fs.utimens("/x", (0, 0)), lambda: fs.setxattr("/x", "user.a", b"1", 0),
                 lambda: fs.removexattr("/x", "user.a"), lambda: fs.write("/x", b"1", 0, None),
                 lambda: fs.create("/x", 0o644), lambda: fs.truncate("/x", 0), lambda: fs.mkdir("/x", 0o755),
                 lambda: fs.unlink("/x"), lambda: fs.rename("/x", "/y"), lambda: fs.chmod("/x", 0o777),
                 lambda: fs.chown("/x", 0, 0)):
        with pytest.raises(FuseOSError) as e:
            call()
        assert e.value.errno == errno.EROFS


needs_fill = pytest.mark.skipif(_fill is None and os.environ.get("CI") is None,
                                reason="the C extension fusefs._fill is not built here")

ATTRS = st.fixed_dictionaries({}, optional={
    "st_mode": st.integers(0, 2**32 - 1), "st_nlink": st.integers(0, 2**63 - 1),
    "st_uid": st.integers(0, 2**32 - 1), "st_gid": st.integers(0, 2**32 - 1),
    "st_size": st.integers(-2**63, 2**63 - 1), "st_blksize": st.integers(-2**63, 2**63 - 1),
    "st_blocks": st.integers(-2**63, 2**63 - 1), "st_atime": st.integers(-2**62, 2**62),
    "st_mtime": st.integers(-2**62, 2**62), "st_ctime": st.integers(-2**62, 2**62)})


@needs_fill
@given(ATTRS)
def test_fill_stat_writes_what_set_st_attrs_does(attrs):
    """The one-pack `struct stat` of listings and getattr, in Python and in C (fusefs._fill), against
    mfusepy's field-by-field reference."""
    want = c_stat()
    set_st_attrs(want, attrs, use_ns=True)
    for fill in (fill_stat, lambda s, a: _fill.fill_stat(ctypes.addressof(s), a)):
        got = c_stat()
        ctypes.memset(ctypes.byref(got), 0xA5, ctypes.sizeof(got))  # every byte not written must come out zero
        fill(got, attrs)
        assert bytes(got) == bytes(want)


def _recorded_fill(fill, entries: list, start: int, plus: bool, room: int) -> tuple[int, list]:
    """What `fill` hands a filler whose buffer holds `room` entries: (next index, [(name, stat bytes, off, flags)])."""
    seen = []

    def filler(buf, name, stp, off, flags):
        seen.append((name, bytes(stp.contents) if stp else None, off, flags))
        return int(len(seen) > room)

    cb = fuse_fill_dir_t(filler)
    if fill is fill_dir:
        return fill(cb, None, entries, start, plus), seen
    return fill(ctypes.cast(cb, ctypes.c_void_p).value, 0, entries, start, plus), seen


@needs_fill
@given(st.lists(st.tuples(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                                  min_size=1, max_size=40), st.none() | ATTRS), max_size=30),
       st.integers(0, 32), st.booleans(), st.integers(0, 40))
def test_native_fill_dir_hands_libfuse_what_the_python_loop_does(entries, start, plus, room):
    assert _recorded_fill(_fill.fill_dir, entries, start, plus, room) == _recorded_fill(fill_dir, entries, start, plus,
                                                                                         room)


@needs_fill
def test_native_fill_refuses_what_is_not_a_listing():
    cb = fuse_fill_dir_t(lambda *a: 0)
    address = ctypes.cast(cb, ctypes.c_void_p).value
    for entries, error in (([("a",)], TypeError), ([(1, None)], TypeError), ([("a", {"st_size": 2**70})], OverflowError),
                           ([("a", {"st_size": "big"})], TypeError), ([("a", [])], TypeError)):
        with pytest.raises(error):
            _fill.fill_dir(address, 0, entries, 0, True)
    with pytest.raises(ValueError):
        _fill.fill_dir(0, 0, [], 0, True)


def _segment(base: int, active: bool = False) -> SegmentInfo:
    return SegmentInfo(base, 100, active, 1_700_000_000_000 + base, 0, 0)


def _write(path: str, size: int) -> None:
    with open(path, "wb") as f:
        f.write(b"x" * size)


def test_listing_snapshots_follow_the_directory(tmp_path):
    """Rolled segments' entries are reused while the directory is unchanged, made anew when a file is
    created, replaced (compaction's swap) or deleted in it, and not kept when taken right after a change;
    the active segment's are always fresh."""
    d = str(tmp_path)
    for base in (0, 10, 20):
        _write(os.path.join(d, f"{base:020d}.log"), 100 + base)
        _write(os.path.join(d, f"{base:020d}.index"), 8)
    segments = [_segment(0), _segment(10), _segment(20, active=True)]
    listings = Listings()
    attrs = lambda size, blocks, mtime: {"st_size": size, "st_mtime": mtime}  # noqa: E731

    def sizes() -> dict[str, int]:
        return {n: a["st_size"] for n, a in listings.entries(d, segments, attrs) if a is not None}

    def age() -> None:  # the directory's last change well in the past: a snapshot is kept
        os.utime(d, ns=(time.time_ns() - 10 * RACY_NS, time.time_ns() - 10 * RACY_NS))

    first = sizes()
    assert first[f"{0:020d}.log"] == 100 and first[f"{20:020d}.log"] == 120 and f"{0:020d}.records.jsonl" in first
    # taken within RACY_NS of the files' creation: not kept, so an in-place change shows
    _write(os.path.join(d, f"{0:020d}.log"), 5)
    assert sizes()[f"{0:020d}.log"] == 5
    age()
    assert sizes()[f"{0:020d}.log"] == 5  # kept from here on
    _write(os.path.join(d, f"{0:020d}.log"), 7)  # in place, which Kafka never does to a rolled segment
    _write(os.path.join(d, f"{20:020d}.log"), 150)  # the active segment grows
    assert sizes()[f"{0:020d}.log"] == 5 and sizes()[f"{20:020d}.log"] == 150
    # compaction's swap: a new file renamed over the old name changes the directory
    _write(os.path.join(d, "swap.tmp"), 42)
    os.rename(os.path.join(d, "swap.tmp"), os.path.join(d, f"{10:020d}.log"))
    assert sizes()[f"{10:020d}.log"] == 42
    age()
    os.unlink(os.path.join(d, f"{10:020d}.index"))  # retention
    assert f"{10:020d}.index" not in sizes() and f"{10:020d}.index.txt" not in sizes()
    age()
    segments = segments[1:]  # the daemon no longer lists segment 0
    assert f"{0:020d}.log" not in sizes()


@pytest.mark.parametrize("table, match", [
    ('[remote]\nbuckt = "b"\n', "unknown config key 'remote.buckt'"),
    ('[remote]\nbucket = "b"\ncache_bytes = "big"\n', "remote.cache_bytes .* must be a int"),
    ('remote = 3\n', "must be a table"),
    ('[remote]\nbucket = "b"\n[remote.encryption]\nkey = 1\n', r"\[remote.encryption.keys\]"),
    ('[remote]\nbucket = "b"\n[remote.encryption.keys]\nk = 1\n', "PEM file paths"),
    ('[remote]\nbucket = "b"\ncache_bytes = 0\n', "remote.cache_bytes must be at least 1"),
    ('[remote]\nbucket = "b"\nregion = 1\n', "remote.region .* must be a str"),
])
def test_the_mount_reads_the_remote_table_as_the_daemon_does(tmp_path, table, match):
    """`fusefs mount --config` refuses a bad [remote] table with the daemon's very words (one parser)."""
    from lookupd.daemon.config import Config
    from lookupd.errors import InvalidArgument

    from fusefs.tiers import load_config

    path = tmp_path / "lookupd.toml"
    path.write_text('log_dirs = ["/x"]\n' + table)
    with pytest.raises(InvalidArgument, match=match) as daemon:
        Config.load(str(path))
    with pytest.raises(InvalidArgument, match=match) as mount:
        load_config(str(path))
    assert str(mount.value) == str(daemon.value)


def test_the_mount_takes_the_remote_table_the_daemon_takes(tmp_path):
    from lookupd.daemon.config import Config
    from lookupd.errors import InvalidArgument

    from fusefs.tiers import load_config

    path = tmp_path / "lookupd.toml"
    path.write_text('log_dirs = ["/x"]\n[remote]\nbucket = "b"\nprefix = "p/"\ncache_dir = "/tmp/c"\n'
                    'cache_bytes = 1024\n[remote.encryption.keys]\n"key-1" = "/k.pem"\n')
    assert load_config(str(path)) == Config.load(str(path)).remote.remote_config()
    path.write_text('log_dirs = ["/x"]\n')
    with pytest.raises(InvalidArgument, match="no \\[remote\\] table with a bucket"):
        load_config(str(path))
