"""Partitions and log dirs: laziness, names on disk, a broker writing underneath, bad arguments."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from lookupd.format.builder import build_batch
from lookupd.log.cache import IndexCache
from lookupd.errors import InvalidArgument, OffsetOutOfRange, UnknownPartition
from lookupd.log.logmanager import LogManager
from lookupd.tools.writer import LogWriter


def write(directory, batches=50, per_batch=10, segment_bytes=4096, start_ts=1_000_000):
    w = LogWriter(str(directory), segment_bytes=segment_bytes, index_interval_bytes=256)
    offset = 0
    for b in range(batches):
        recs = [(start_ts + offset + i, f"k{offset + i}".encode(), b"v" * 40, ()) for i in range(per_batch)]
        w.append(build_batch(recs, base_offset=offset))
        offset += per_batch
    return w, offset


def test_opening_a_log_dir_maps_nothing(tmp_path):
    for p in range(3):
        w, _ = write(tmp_path / f"t-{p}", batches=40)
        w.close()
    cache = IndexCache()
    lm = LogManager([tmp_path], cache)
    assert [(l.topic, l.partition) for l in lm.logs()] == [("t", 0), ("t", 1), ("t", 2)]
    assert lm.segment_count > 3
    assert cache.open_count == 0 and cache.lazy_loads == 0
    assert all(not l._segments for l in lm.logs())  # no LogSegment made yet
    lm.get("t", 1).lookup_offset(100)
    assert 0 < cache.open_count <= 2 and len(lm.get("t", 1)._segments) == 1
    lm.close()
    assert cache.open_count == 0


def test_names_on_disk(tmp_path, caplog):
    w, _ = write(tmp_path / "good.topic_1-0", batches=5)
    w.close()
    d = tmp_path / "good.topic_1-0"
    (d / "123.log").write_bytes(b"")  # not 20 digits
    (d / "00000000000000000000.log.deleted").write_bytes(b"")
    (d / "00000000000000000007.log.swap").write_bytes(b"")
    (d / "00000000000000000000.snapshot").write_bytes(b"")
    (d / "leader-epoch-checkpoint").write_text("0\n0\n")
    (tmp_path / "old-0.abc123-delete").mkdir()
    (tmp_path / "moving-0.abc123-future").mkdir()
    (tmp_path / "no_partition_number").mkdir()
    (tmp_path / "bad name!-0").mkdir()
    (tmp_path / "good.topic_1-1\n").mkdir()  # a trailing newline is no partition 1 of good.topic_1
    (d / "00000000000000000005.log\n").write_bytes(b"")
    (d / "0000000000000000000\u00b2.log").write_bytes(b"")  # isdigit() but not a base offset
    (d / "0000000000000000000\u0663.index").write_bytes(b"")  # an Arabic-Indic digit
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n2\ngood.topic_1 \u00b2 5\ngood.topic_1 0 \u0663\n")
    with caplog.at_level(logging.DEBUG, logger="lookupd"):
        lm = LogManager([tmp_path])
        assert [(l.topic, l.partition) for l in lm.logs()] == [("good.topic_1", 0)]
        assert lm.get("good.topic_1", 0).base_offsets == [0]
    text = caplog.text
    assert "123.log" in text and "00000000000000000000.log.deleted" in text and "being deleted or rewritten" in text
    assert "old-0.abc123-delete" in text and "being deleted or moved" in text
    for topic in ("../etc", "", ".", "..", "a/b", "x" * 250, "bad name!", None, 5, "good.topic_1\n", "\u0663"):
        with pytest.raises(InvalidArgument):
            lm.get(topic, 0)
    for part in (-1, 1 << 31, "0", 1.5, True):
        with pytest.raises(InvalidArgument):
            lm.get("good.topic_1", part)
    with pytest.raises(UnknownPartition, match="good.topic_1-7 is not in the log dirs"):
        lm.get("good.topic_1", 7)


def test_offsets_and_timestamps_out_of_range(tmp_path):
    w, end = write(tmp_path / "t-0", batches=10)
    w.close()
    log = LogManager([tmp_path]).get("t", 0)
    for bad in (1 << 63, -(1 << 63) - 1, "12", 1.0, None):
        with pytest.raises(InvalidArgument):
            log.lookup_offset(bad)
        with pytest.raises(InvalidArgument):
            log.offset_for_timestamp(bad)
    with pytest.raises(InvalidArgument, match="negative"):
        log.resolve_offset(-5)
    with pytest.raises(InvalidArgument, match="not one of -1"):
        log.offset_for_timestamp(-7)
    with pytest.raises(OffsetOutOfRange, match=rf"holds \[0, {end}\)"):
        log.resolve_offset(end + 1)
    with pytest.raises(InvalidArgument, match="mode"):
        log.lookup_offset(3, "nearest")
    with pytest.raises(InvalidArgument, match="int64"):
        log.resolve_offsets([1, 1 << 64])
    assert log.resolve_offset(end) is None
    assert log.read(end, 100).records == b""


def test_a_broker_appending_rolling_and_deleting(tmp_path):
    """Appends are seen at once; rolled segments after a refresh; deleted ones are released."""
    w, end = write(tmp_path / "t-0", batches=5, segment_bytes=1 << 20)
    lm = LogManager([tmp_path])
    log = lm.get("t", 0)
    assert log.log_end_offset == end
    before = log.lookup_offset(end - 1)
    for b in range(20):  # the broker keeps appending to the active segment
        w.append(build_batch([(2_000_000 + b, b"k", b"v" * 100, ())] * 3, base_offset=end))
        end += 3
        assert log.log_end_offset == end
        assert log.resolve_offset(end - 1).last_offset == end - 1
    after = log.lookup_offset(end - 1)
    assert after.offset > before.offset  # new index entries were picked up without a refresh
    assert log.offset_for_timestamp(2_000_019).offset == end - 3
    rolled_at = end
    w.roll()
    w.append(build_batch([(3_000_000, b"k", b"v", ())], base_offset=end))
    end += 1
    lm.refresh()
    assert log.base_offsets == [0, rolled_at] and log.log_end_offset == end
    assert log.resolve_offset(end - 1).segment == rolled_at
    first = log.segment(0)
    assert log.lookup_offset(10).segment == 0 and first.offset_index.is_open and first.log._file.is_open
    for suffix in (".log", ".index", ".timeindex"):
        os.remove(tmp_path / "t-0" / f"{0:020d}{suffix}")
    lm.refresh()
    assert log.base_offsets == [rolled_at]
    assert not first.offset_index.is_open and not first.log._file.is_open
    assert log.log_start_offset == log.base_offsets[0]
    with pytest.raises(OffsetOutOfRange):
        log.resolve_offset(0)
    w.close()


def test_log_start_offset_checkpoint(tmp_path):
    w, end = write(tmp_path / "t-0", batches=10)
    w.close()
    (tmp_path / "log-start-offset-checkpoint").write_text(f"0\n1\nt 0 {end // 2}\n")
    log = LogManager([tmp_path]).get("t", 0)
    assert log.log_start_offset == end // 2
    assert log.offset_for_timestamp(-2).offset == end // 2
    with pytest.raises(OffsetOutOfRange):
        log.resolve_offset(end // 2 - 1)


def test_a_rescan_that_cannot_list_keeps_the_last_listing(tmp_path):
    """EMFILE while listing a log dir is a passing shortage: every partition stays served; a log
    dir that is gone is a real change and its partitions go."""
    import resource

    for p in range(2):
        write(tmp_path / f"t-{p}", batches=5)[0].close()
    lm = LogManager([tmp_path])
    assert len(lm.logs()) == 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        with pytest.raises(OSError):
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        lm.refresh()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [(l.topic, l.partition) for l in lm.logs()] == [("t", 0), ("t", 1)]
    assert lm.get("t", 1).lookup_offset(20) is not None
    os.rename(tmp_path, str(tmp_path) + "-gone")
    lm.refresh()
    assert lm.logs() == []
    lm.close()


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_persisting_state_is_warned_of_once_and_again_when_it_changes(tmp_path, caplog):
    """Issue 44: a partition in two log dirs was warned of at every rescan (eight times in eight seconds)."""
    for d in ("a", "b"):
        write(tmp_path / d / "t-0", batches=2)[0].close()
    with caplog.at_level(logging.WARNING, logger="lookupd"):
        lm = LogManager([tmp_path / "a", tmp_path / "b"])
        for _ in range(5):
            lm.refresh()
        twice = f"t-0 is in two log dirs ({tmp_path / 'a' / 't-0'}, {tmp_path / 'b' / 't-0'}); serving the first"
        assert _warnings(caplog) == [twice]
        shutil.rmtree(tmp_path / "b" / "t-0")
        lm.refresh()
        lm.refresh()
        write(tmp_path / "b" / "t-0", batches=2)[0].close()  # back again: a change, said again
        lm.refresh()
        lm.refresh()
        assert _warnings(caplog) == [twice, twice]
        lm.close()


def test_a_log_dir_one_level_off_names_where_the_partitions_are(tmp_path, caplog):
    """Issue 44: the parent of the log dirs, or a partition dir, served 0 partitions without a word."""
    for d in ("kafka-logs-a", "kafka-logs-b"):
        write(tmp_path / "data" / d / "t-0", batches=2)[0].close()
    (tmp_path / "data" / "notes").mkdir()
    (tmp_path / "empty").mkdir()
    data, part = tmp_path / "data", tmp_path / "data" / "kafka-logs-a" / "t-0"
    with caplog.at_level(logging.WARNING, logger="lookupd"):
        for d in (data, part, tmp_path / "empty"):
            lm = LogManager([d])
            lm.refresh()
            assert lm.logs() == []
            lm.close()
    assert _warnings(caplog) == [
        f"log dir {data} holds no partition directories (<topic>-<partition>), but {data / 'kafka-logs-a'} and "
        f"{data / 'kafka-logs-b'} in it do: give them as the log dir",
        f"log dir {part} holds no partition directories (<topic>-<partition>): it is a partition directory; give "
        f"its parent {data / 'kafka-logs-a'} as the log dir"]  # an empty log dir is a new broker's: no word


def test_columnar_targets_are_checked_alike_in_process_and_through_the_daemon(tmp_path):
    """One int64-array check: a float, a bool or a nested list is refused, not converted."""
    write(tmp_path / "t-0", batches=5)[0].close()
    lm = LogManager([tmp_path])
    llog = lm.get("t", 0)
    for bad in ([1.5], [True], [[1]], ["1"], [1 << 63], 5):
        with pytest.raises(InvalidArgument, match="offsets must be"):
            llog.resolve_offsets(bad)
    assert llog.resolve_offsets([0, 10])["base_offset"].tolist() == [0, 10]
    lm.close()
