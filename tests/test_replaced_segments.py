"""Segments replaced in place: Kafka's log cleaner swaps a rewritten segment in under the same name,
and a topic can be deleted and created again. Answers must come from the files now on disk."""

from __future__ import annotations

import os
import shutil

import pytest

import reference as R
from lookupd.format.batch import LOG_OVERHEAD
from lookupd.format.names import segment_file_name
from lookupd.log.logmanager import LogManager

SUFFIXES = (".log", ".index", ".timeindex")


def _deleted_fds() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            out.append(target)
    return out


def _answers(lm: LogManager, offsets, timestamps) -> list:
    llog = lm.get("plain", 0)
    return ([llog.resolve_offset(o) for o in offsets] + [llog.lookup_offset(o, "floor") for o in offsets]
            + [llog.offset_for_timestamp(t) for t in timestamps] + [llog.read(offsets[0], 1).position])


def clean_segment(part_dir: str, base: int) -> None:
    """Kafka's cleaner, step by step: write `.cleaned` (here: the segment without its first batch and
    with empty indexes), rename it to `.swap`, rename the old files to `.deleted`, then the `.swap`
    files to the real names. The `.deleted` files are left for the caller (Kafka deletes them later)."""
    stem = os.path.join(part_dir, segment_file_name(base, ""))
    with open(stem + ".log", "rb") as f:
        data = f.read()
    first = LOG_OVERHEAD + int.from_bytes(data[8:12], "big")
    for suffix, content in ((".log", data[first:]), (".index", b""), (".timeindex", b"")):
        with open(stem + suffix + ".cleaned", "wb") as f:
            f.write(content)
        os.rename(stem + suffix + ".cleaned", stem + suffix + ".swap")
    for suffix in SUFFIXES:
        os.rename(stem + suffix, stem + suffix + ".deleted")
    for suffix in SUFFIXES:
        os.rename(stem + suffix + ".swap", stem + suffix)


@pytest.fixture
def plain(tmp_path):
    shutil.copytree(R.log_dir("plain-0"), tmp_path / "plain-0")
    return tmp_path


def test_after_the_cleaners_swap_answers_come_from_the_new_files(plain):
    part = str(plain / "plain-0")
    lm = LogManager([str(plain)])
    llog = lm.get("plain", 0)
    loc = llog.resolve_offset(250)
    assert (loc.segment, loc.base_offset, loc.position) == (231, 250, 6430)  # the example
    offsets = [231, 250, 260, 300, 400]
    first = llog.offset_for_timestamp(0).timestamp
    timestamps = [first + d for d in (0, 5_000, 50_000)]
    before = _answers(lm, offsets, timestamps)

    clean_segment(part, 231)
    lm.refresh()
    fresh = LogManager([str(plain)])
    after = _answers(lm, offsets, timestamps)
    assert after == _answers(fresh, offsets, timestamps)
    assert after != before
    assert lm.get("plain", 0).resolve_offset(250).position == 0  # the batch of 250 now starts the file

    deleted_before = len(_deleted_fds())
    for name in os.listdir(part):  # Kafka's asynchronous delete of the old files
        if name.endswith(".deleted"):
            os.unlink(os.path.join(part, name))
    lm.refresh()
    assert _answers(lm, offsets, timestamps) == after
    assert len(_deleted_fds()) <= deleted_before and not [t for t in _deleted_fds() if part in t], _deleted_fds()
    fresh.close()
    lm.close()


def test_deleted_segment_files_hold_no_descriptors_after_a_rescan(plain):
    part = str(plain / "plain-0")
    lm = LogManager([str(plain)])
    llog = lm.get("plain", 0)
    for o in range(0, 5000, 97):  # open every segment's files
        llog.resolve_offset(o)
    first = llog.base_offsets[0]
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        path = os.path.join(part, segment_file_name(first, suffix))
        if os.path.exists(path):
            os.unlink(path)
    clean_segment(part, llog.base_offsets[1])
    for name in os.listdir(part):
        if name.endswith(".deleted"):
            os.unlink(os.path.join(part, name))
    lm.refresh()
    llog.resolve_offset(llog.base_offsets[0])
    assert not [t for t in _deleted_fds() if part in t], _deleted_fds()
    lm.close()


def test_a_topic_deleted_and_created_again_is_a_new_partition(plain):
    part = plain / "plain-0"
    lm = LogManager([str(plain)])
    old = lm.get("plain", 0).resolve_offset(250)
    shutil.rmtree(part)
    shutil.copytree(R.log_dir("plain-0"), part)  # the same name and segments, other bytes
    clean_segment(str(part), 231)
    for name in os.listdir(part):
        if name.endswith(".deleted"):
            os.unlink(part / name)
    lm.refresh()
    fresh = LogManager([str(plain)])
    for o in (0, 10, 100, 250):
        try:
            want = fresh.get("plain", 0).resolve_offset(o)
        except Exception as err:  # noqa: BLE001 - the same error either way
            want = repr(err)
        try:
            got = lm.get("plain", 0).resolve_offset(o)
        except Exception as err:  # noqa: BLE001
            got = repr(err)
        assert got == want
    assert lm.get("plain", 0).resolve_offset(250) != old
    fresh.close()
    lm.close()


@pytest.mark.trio
async def test_the_daemon_answers_from_the_swapped_files_within_a_rescan(plain):
    import tempfile

    import trio

    from daemon_helpers import RawPeer, running

    sock_dir = tempfile.mkdtemp(prefix="lkd", dir="/tmp")
    try:
        sock = os.path.join(sock_dir, "d.sock")
        async with running(sock, [str(plain)], rescan_interval_s=0.2):
            peer = await RawPeer.unix(sock)
            err, loc = await peer.call("resolve_offset", "plain", 0, 250)
            assert err is None and loc["position"] == 6430
            _, old_read = await peer.call("read", "plain", 0, 250, 1)
            clean_segment(str(plain / "plain-0"), 231)
            await trio.sleep(0.6)  # more than one rescan interval
            err, loc = await peer.call("resolve_offset", "plain", 0, 250)
            _, new_read = await peer.call("read", "plain", 0, 250, 1)
        fresh = LogManager([str(plain)])
        want = fresh.get("plain", 0).resolve_offset(250)
        assert loc == want._asdict() and loc["position"] == 0
        assert new_read == fresh.get("plain", 0).read(250, 1)._asdict() != old_read
        fresh.close()
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)



@pytest.mark.parametrize("read_from", ["auto", "daemon"])
def test_a_spark_read_planned_before_the_swap_reads_the_files_after_it(plain, read_from):
    """The splits were planned on the old segment; the cleaner swaps it in before the tasks read. The
    split reader notices that the local bytes are not as planned and reads through the daemon, which
    (after a rescan) answers from the new files: the records are those the files now hold."""
    import tempfile
    import time

    import pyarrow as pa

    from spark_client.examples.with_daemon import running_daemon
    from spark_client.options import parse_options
    from spark_client.planner import plan
    from spark_client.reader import ReadSettings, read_split
    from spark_client.routing import Daemons
    from spark_client.schema import arrow_schema, kafka_schema
    from spark_fixtures import arrow_rows, core_rows

    sock_dir = tempfile.mkdtemp(prefix="lkd", dir="/tmp")
    try:
        sock = os.path.join(sock_dir, "d.sock")
        with running_daemon([str(plain)], sock):
            o = parse_options({"lookupd.address": sock, "subscribe": "plain", "includeHeaders": "true",
                               "lookupd.readFrom": read_from})
            with Daemons() as daemons:
                splits = plan(o, daemons)
            clean_segment(str(plain / "plain-0"), 231)
            for name in os.listdir(plain / "plain-0"):
                if name.endswith(".deleted"):
                    os.unlink(plain / "plain-0" / name)
            time.sleep(1.5)  # more than the daemon's rescan interval
            settings = ReadSettings(read_committed=False, include_headers=True, read_from=o.read_from,
                                    fail_on_data_loss=True, token=None, arrow_schema=arrow_schema(kafka_schema(True)))
            batches = [b for s in splits for b in read_split(s, settings)]
        got = arrow_rows(pa.Table.from_batches(batches, settings.arrow_schema))
        want = core_rows(str(plain), "plain", 0)
        assert got == want
        assert 231 not in {row[0] for row in got}  # the cleaned batch's record is gone
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
