"""Planning and reading splits against real daemons, without Spark: bounds, splits, data loss, routing.

The planner and the split reader are what the data source runs in the driver and in each
task; here they run in the test process so that many cases stay fast. Expectations come from
Kafka's reference answers, or from what the test wrote with lookupd's writer.
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

import reference as R
from spark_fixtures import (aborted_offsets, arrow_rows, core_rows, list_offsets, ref_daemon,  # noqa: F401
                            reference_rows, trimmed_records, unreachable_socket, written_daemon, written_dir)

from lookupd.errors import Unavailable
from spark_client.datasource import KafkaSegmentsDataSource
from spark_client.errors import OptionError
from spark_client.options import parse_options
from spark_client.errors import DataLossError
from spark_client.planner import plan
from spark_client.reader import ReadSettings, read_split
from spark_client.routing import Daemons
from spark_client.schema import arrow_schema, kafka_schema
from spark_client.splits import Split

REF_PARTITIONS = ["plain-0", "compressed-0", "ooo-time-0", "txn-0", "bigbase-0", "logappend-0", "closed-0"]


def splits_for(address, **options) -> list[Split]:
    o = parse_options({"lookupd.address": address, **options})
    with Daemons() as daemons:
        return plan(o, daemons)


def read(address, splits=None, **options) -> list[tuple]:
    """Every row of the read, as spark_fixtures.arrow_rows gives them (sorted by offset)."""
    o = parse_options({"lookupd.address": address, "includeHeaders": "true", **options})
    splits = splits_for(address, includeHeaders="true", **options) if splits is None else splits
    settings = ReadSettings(read_committed=o.read_committed, include_headers=True, read_from=o.read_from,
                            fail_on_data_loss=o.fail_on_data_loss, token=None,
                            arrow_schema=arrow_schema(kafka_schema(True)))
    batches = [b for s in splits for b in read_split(s, settings)]
    return arrow_rows(pa.Table.from_batches(batches, settings.arrow_schema))


def topic(partition: str) -> str:
    return partition.rsplit("-", 1)[0]


def offsets_json(partition: str, offset: int) -> str:
    return '{"%s": {"0": %d}}' % (topic(partition), offset)


# ---------------------------------------------------------------- bounds


def bound_offsets(partition: str) -> list[int]:
    """Batch starts and ends, offsets inside batches, and gaps (bigbase), from the reference batches."""
    batches = R.batches(partition)
    picks = [batches[0]["base_offset"], batches[1]["base_offset"] + 1, batches[len(batches) // 3]["last_offset"],
             batches[len(batches) // 2]["last_offset"] + 1, batches[-2]["base_offset"] + 1, batches[-1]["last_offset"]]
    return sorted(set(picks))


@pytest.mark.parametrize("partition", REF_PARTITIONS)
def test_offset_bounds_start_and_stop_where_asked(ref_daemon, partition):
    expected = reference_rows(partition)
    picks = bound_offsets(partition)
    for start, end in [(picks[0], picks[2]), (picks[1], picks[3]), (picks[2], picks[-1]), (picks[3], picks[4])]:
        rows = read(ref_daemon, assign='{"%s": [0]}' % topic(partition), startingOffsets=offsets_json(partition, start),
                    endingOffsets=offsets_json(partition, end))
        assert rows == [r for r in expected if start <= r[0] < end], (start, end)


def bound_timestamps(partition: str) -> list[int]:
    batches = R.batches(partition)
    stamps = sorted({b["max_timestamp"] for b in batches})
    picks = [stamps[0] - 1, stamps[len(stamps) // 4], stamps[len(stamps) // 2] + 1, stamps[-1] - 1, stamps[-1],
             batches[len(batches) // 3]["base_timestamp"]]
    return sorted(set(picks))


@pytest.mark.parametrize("partition", REF_PARTITIONS)
def test_timestamp_bounds_follow_list_offsets(ref_daemon, partition):
    """startingOffsetsByTimestamp / endingOffsetsByTimestamp resolve as Kafka's ListOffsets; an end
    timestamp that matches nothing reads to the end, as in Spark."""
    expected = reference_rows(partition)
    log_end = R.batches(partition)[-1]["last_offset"] + 1
    picks = bound_timestamps(partition)
    for a, b in zip(picks, picks[1:] + [picks[-1] + 10**9]):
        start, end = list_offsets(partition, a), list_offsets(partition, b)
        end = log_end if end is None else end
        if start is None or start > end:
            continue  # refusals: test_starting_timestamp_without_a_match, test_resolved_start_after_end_is_refused
        by_ts = '{"%s": {"0": %d}}'
        rows = read(ref_daemon, subscribe=topic(partition), startingOffsetsByTimestamp=by_ts % (topic(partition), a),
                    endingOffsetsByTimestamp=by_ts % (topic(partition), b))
        assert rows == [r for r in expected if start <= r[0] < end], (a, b, start, end)


def test_global_timestamps_apply_to_every_partition(written_daemon, written_dir):
    from spark_fixtures import core_rows

    t0, t1 = 1_767_225_600_000 + 3 * 3_600_000, 1_767_225_600_000 + 9 * 3_600_000
    rows = read(written_daemon, subscribe="orders", startingTimestamp=str(t0), endingTimestamp=str(t1))
    expected = []
    for p in range(3):
        part = core_rows(written_dir, "orders", p)
        start = next(r[0] for r in part if r[1] >= t0)  # sample timestamps only go forward, by up to a minute late
        end = next(r[0] for r in part if r[1] >= t1)
        expected += [r for r in part if start <= r[0] < end]
    assert rows == sorted(expected) and len(rows) > 500


def test_starting_timestamp_without_a_match(ref_daemon):
    late = str(R.batches("plain-0")[-1]["max_timestamp"] + 1)
    with pytest.raises(OptionError, match="No offset matched from request of topic-partition plain-0 and timestamp"):
        splits_for(ref_daemon, subscribe="plain", startingTimestamp=late)
    assert read(ref_daemon, subscribe="plain", startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == []


def test_resolved_start_after_end_is_refused(ref_daemon):
    batches = R.batches("plain-0")
    with pytest.raises(OptionError, match="The resolved start offset 4000 is greater than the resolved end offset"):
        splits_for(ref_daemon, subscribe="plain", startingOffsets=offsets_json("plain-0", 4000),
                   endingTimestamp=str(batches[3]["max_timestamp"]))


def test_read_committed_drops_exactly_the_aborted_records(ref_daemon):
    expected = reference_rows("txn-0")
    aborted = aborted_offsets("txn-0")
    assert aborted and len(aborted) < len(expected)
    assert read(ref_daemon, subscribe="txn") == expected  # control records never appear
    committed = read(ref_daemon, subscribe="txn", isolationLevel="read_committed", maxBytesPerSplit="5000")
    assert committed == [r for r in expected if r[0] not in aborted]


def test_large_partition_of_single_record_batches(ref_daemon):
    """large-0's answers list its 200,025 batches (one CreateTime record each), not records."""
    rows = read(ref_daemon, subscribe="large", minPartitions="3")
    assert [(r[0], r[1], r[2]) for r in rows] == [(b["base_offset"], b["max_timestamp"], 0)
                                                  for b in R.batches("large-0")]


def test_empty_partition_and_empty_ranges_plan_no_split(ref_daemon):
    assert splits_for(ref_daemon, subscribe="empty") == []
    assert splits_for(ref_daemon, subscribe="plain", startingOffsets=offsets_json("plain-0", 10),
                      endingOffsets=offsets_json("plain-0", 10)) == []


# ---------------------------------------------------------------- splits


@pytest.mark.parametrize("read_from", ["auto", "daemon"])
def test_many_small_splits_neither_repeat_nor_lose_records(ref_daemon, read_from):
    options = dict(subscribePattern="plain|compressed|txn|bigbase|logappend", maxBytesPerSplit="3000",
                   maxRecordsPerPartition="70", minPartitions="40")
    splits = splits_for(ref_daemon, **options)
    by_partition = {}
    for s in splits:
        by_partition.setdefault(s.topic, []).append(s)
    for name, parts in by_partition.items():
        # Cuts are estimated assuming offsets spread evenly over a segment's bytes: bigbase's gap of
        # 100,000,000 offsets inside one segment leaves its dense start in one split.
        assert len(parts) > (5 if name == "bigbase" else 20), name
        for a, b in zip(parts, parts[1:]):  # contiguous: offsets, and bytes end to end
            assert a.end == b.start and a.stop == (b.pieces[0].first_base, a.stop[1])
            assert (a.pieces[-1].segment, a.pieces[-1].end) == (b.pieces[0].segment, b.pieces[0].start) or \
                b.pieces[0].start == 0
        expected = reference_rows(f"{name}-0")
        got = [r for r in read(ref_daemon, splits=parts, **options, **{"lookupd.readFrom": read_from})]
        assert got == expected, name


def test_legacy_messages_as_short_as_a_header_are_read_from_the_files(tmp_path):
    """v0 messages with no key or value are 26 bytes, one short of a v2 header's offset fields: the
    local reader's order checks must still read them, at the end of every piece (files only)."""
    from lookupd.format.builder import build_legacy
    from lookupd.tools.writer import LogWriter
    from spark_client.examples.with_daemon import running_daemon

    w = LogWriter(str(tmp_path / "legacy-0"))
    for base in range(0, 30, 3):
        w.append(build_legacy([(-1, None, None, ())] * 3, magic=0, base_offset=base))
    w.close()
    sock = os.path.join(os.path.dirname(unreachable_socket()), "legacy.sock")
    with running_daemon([str(tmp_path)], sock):
        options = {"subscribe": "legacy", "maxBytesPerSplit": "100", "lookupd.readFrom": "files"}
        assert len(splits_for(sock, **options)) > 5
        assert read(sock, **options) == core_rows(str(tmp_path), "legacy", 0)


def test_min_partitions_splits_large_partitions_in_proportion(written_daemon):
    sizes = {}
    for s in splits_for(written_daemon, subscribe="orders,clicks,payments", minPartitions="20",
                        maxBytesPerSplit=str(1 << 30)):
        sizes.setdefault(s.topic, []).append(s.bytes)
    assert 15 <= sum(len(v) for v in sizes.values()) <= 25
    assert all(len(v) >= 2 for v in sizes.values())


def test_a_file_that_is_not_the_planned_one_is_read_through_the_daemon(ref_daemon):
    """Another broker's replica at the same path looks like another segment's bytes: the reader
    notices at the first batch and reads the split through the daemon instead."""
    [split] = splits_for(ref_daemon, subscribe="plain")
    other = R.log_dir("plain-0") / sorted(f for f in os.listdir(R.log_dir("plain-0")) if f.endswith(".log"))[-1]
    split.pieces = tuple(p.__class__(p.segment, str(other), p.start, p.end, p.first_base) for p in split.pieces)
    assert read(ref_daemon, splits=[split], subscribe="plain") == reference_rows("plain-0")
    with pytest.raises(FileNotFoundError, match="is not the segment the read was planned on"):
        read(ref_daemon, splits=[split], subscribe="plain", **{"lookupd.readFrom": "files"})


# ---------------------------------------------------------------- data loss


def test_offsets_below_the_log_start_fail_or_start_at_the_log_start(written_daemon, trimmed_records):
    with Daemons() as d:
        log_start = next(p for p in d.client(written_daemon).partitions() if p["topic"] == "trimmed")["log_start_offset"]
    assert log_start > 0
    with pytest.raises(DataLossError, match=f"starting offset for trimmed-0 was 0 but the log starts at {log_start}"):
        splits_for(written_daemon, subscribe="trimmed", startingOffsets='{"trimmed": {"0": 0}}')
    rows = read(written_daemon, subscribe="trimmed", startingOffsets='{"trimmed": {"0": 0}}', failOnDataLoss="false")
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [r for r in trimmed_records if r[0] >= log_start]


def test_offsets_past_the_log_end_fail_or_stop_at_the_log_end(ref_daemon):
    with pytest.raises(DataLossError, match="ending offset for plain-0 is 6000 but the log ends at 5000"):
        splits_for(ref_daemon, subscribe="plain", endingOffsets=offsets_json("plain-0", 6000))
    rows = read(ref_daemon, subscribe="plain", startingOffsets=offsets_json("plain-0", 4990),
                endingOffsets=offsets_json("plain-0", 6000), failOnDataLoss="false")
    assert [r[0] for r in rows] == list(range(4990, 5000))


# ---------------------------------------------------------------- partitions and routing


def test_partition_selection_errors_name_what_is_missing(ref_daemon):
    with pytest.raises(Exception, match=f"partition plain-3 is not served by lookupd at {ref_daemon}"):
        splits_for(ref_daemon, assign='{"plain": [0, 3]}')
    with pytest.raises(OptionError, match="topic\\(s\\) nosuch not found"):
        splits_for(ref_daemon, subscribe="plain,nosuch")
    with pytest.raises(OptionError, match="you must specify all TopicPartitions"):
        splits_for(ref_daemon, subscribePattern="plain|closed", startingOffsets=offsets_json("plain-0", 5))
    assert {s.topic for s in splits_for(ref_daemon, subscribePattern="c.*")} == {"compressed", "closed"}


def test_tcp_daemon_with_a_token(tmp_path):
    """HOST:PORT addresses, and lookupd.tokenFile for a daemon that wants `auth` first."""
    import socket

    from lookupd.rpc.client import RemoteError
    from spark_client.examples.with_daemon import running_daemon

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "lookupd.toml"
    config.write_text(f'tcp = "127.0.0.1:{port}"\nauth_token_file = "{token}"\n')
    sock = os.path.join(os.path.dirname(unreachable_socket()), "tcp.sock")
    with running_daemon([str(R.LOGS)], sock, config=str(config)):
        address = f"127.0.0.1:{port}"
        with pytest.raises(RemoteError, match="UNAUTHORIZED"):
            splits_for(address, subscribe="closed")
        # The data source's own reader, run here without Spark: it reads the token file when it is made.
        source = KafkaSegmentsDataSource({"lookupd.address": address, "subscribe": "closed", "includeHeaders": "true",
                                          "lookupd.tokenFile": str(token), "lookupd.readFrom": "daemon",
                                          "maxBytesPerSplit": "9000"})
        reader = source.reader(source.schema())
        splits = reader.partitions()
        assert len(splits) > 3 and {s.address for s in splits} == {address}
        table = pa.Table.from_batches([b for s in splits for b in reader.read(s)], reader.settings.arrow_schema)
        assert arrow_rows(table) == reference_rows("closed-0")


def test_unreachable_daemon_fails_planning_naming_the_address():
    with pytest.raises(Unavailable, match=f"cannot reach lookupd at {unreachable_socket()}"):
        splits_for(unreachable_socket(), subscribe="plain")


def test_address_map_routes_partitions_to_their_daemons(ref_daemon, written_daemon, tmp_path):
    from spark_client.examples.with_daemon import running_daemon

    spec = '{"ref-host": "%s", "written-host": "%s"}' % (ref_daemon, written_daemon)
    routed = {s.topic: s.address for s in splits_for(spec, subscribePattern="plain|orders")}
    assert routed == {"plain": ref_daemon, "orders": written_daemon}
    # A lagging replica of closed-0 (its last segment missing) on a third daemon: the longer copy wins unless pinned.
    replica = tmp_path / "closed-0"
    shutil.copytree(R.log_dir("closed-0"), replica)
    last = sorted(os.listdir(replica))[-1].split(".")[0]
    for name in os.listdir(replica):
        if name.startswith(last):
            os.remove(replica / name)
    sock = os.path.join(os.path.dirname(ref_daemon), "replica.sock")
    with running_daemon([str(tmp_path)], sock):
        spec = '{"a": "%s", "b": "%s"}' % (sock, ref_daemon)
        assert {s.address for s in splits_for(spec, subscribe="closed")} == {ref_daemon}
        pinned = '{"a": "%s", "b": "%s", "closed-0": "%s"}' % (sock, ref_daemon, sock)
        splits = splits_for(pinned, subscribe="closed")
        assert {s.address for s in splits} == {sock}
        assert read(pinned, splits=splits, subscribe="closed") == \
            [r for r in reference_rows("closed-0") if r[0] < int(last)]
        with pytest.raises(OptionError, match=f"pins plain-0 to {sock}, but the daemon there does not serve it"):
            splits_for('{"a": "%s", "plain-0": "%s"}' % (ref_daemon, sock), subscribe="plain")


def test_a_start_deleted_since_the_partition_was_listed_is_judged_against_the_log_start_now(written_daemon):
    """Planning with a listing taken before retention ran (a stream's latest offsets, say): the loss is
    reported with the log start as it is now, or skipped to it, not as a range no batch holds."""
    from dataclasses import replace

    from spark_client.planner import resolve_range
    from spark_client.routing import discover

    with Daemons() as d:
        info = next(i for i in discover(written_daemon, d).values() if i.topic == "trimmed")
        first_base = d.client(written_daemon).segments("trimmed", 0)[0]["base_offset"]
        assert first_base > 0
        stale = replace(info, log_start_offset=0)
        with pytest.raises(DataLossError, match=f"starting offset for trimmed-0 was 0 but the log starts at {first_base}"):
            resolve_range(parse_options({"subscribe": "trimmed", "lookupd.address": written_daemon}), d, stale, 0,
                          info.log_end_offset)
        got = resolve_range(parse_options({"subscribe": "trimmed", "failOnDataLoss": "false",
                                           "lookupd.address": written_daemon}), d, stale, 0,
                            info.log_end_offset)
        assert got is not None and got.segments[0].base_offset == first_base
