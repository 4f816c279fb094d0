"""spark.readStream.format("kafka-segments") over a log that lookupd's writer appends to, rolls and
trims while the query runs: real local Spark, the real daemon as a subprocess.

What reached the sink is compared with what the test wrote. The stream reader's trigger logic
(rate limits, minOffsetsPerTrigger, lost partitions) is also driven directly, in this process,
against the same daemon, where many cases stay fast.
"""

from __future__ import annotations

import time

import pytest

from spark_fixtures import (LiveTopic, aborted_offsets, arrow_rows, live_log, ref_daemon,  # noqa: F401
                            reference_rows, spark)

import pyarrow as pa  # noqa: E402

from pyspark.errors import AnalysisException, StreamingQueryException  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from spark_client.datasource import KafkaSegmentsDataSource  # noqa: E402
from spark_client.errors import DataLossError, OptionError  # noqa: E402
from spark_client.options import parse_stream_options  # noqa: E402
from spark_client.stream import rate_limit  # noqa: E402
from lookupd.rpc.client import Client  # noqa: E402

QUERY_TIMEOUT_S = 60


def stream(spark, address, **options):
    return spark.readStream.format("kafka-segments").option("lookupd.address", address).options(**options).load()


class Batches:
    """A foreachBatch sink keeping what every micro-batch delivered: [(topic, partition, offset, key, value)]."""

    def __init__(self, on_batch=None):
        self.batches: list[list[tuple]] = []
        self.on_batch = on_batch

    def __call__(self, df, batch_id: int) -> None:
        rows = [tuple(r) for r in df.select("topic", "partition", "offset", "key", "value").collect()]
        self.batches.append(rows)
        if self.on_batch is not None:
            self.on_batch(batch_id)

    def records(self, topic: str) -> dict[int, list[tuple]]:
        out: dict[int, list[tuple]] = {}
        for rows in self.batches:
            for t, p, o, k, v in rows:
                if t == topic:
                    out.setdefault(p, []).append((o, bytes(k), bytes(v)))
        return out


def source(address, **options) -> KafkaSegmentsDataSource:
    return KafkaSegmentsDataSource({"lookupd.address": address, **options})


def reader(address, **options):
    ds = source(address, **options)
    return ds.streamReader(ds.schema())


# ---------------------------------------------------------------- live queries


def test_every_record_exactly_once_through_appends_rolls_and_a_new_partition(spark, live_log, tmp_path):
    root, address = live_log
    t = LiveTopic(root, address, "live")
    t.append(0, 40)
    t.wait_visible(0)
    sink = Batches()
    q = stream(spark, address, subscribe="live", startingOffsets="earliest").writeStream.foreachBatch(sink) \
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        q.processAllAvailable()
        for round in range(3):
            t.append(0, 30)
            if round == 1:
                t.roll(0)
                t.append(0, 10)
                t.add_partition(1)  # a partition that appears mid-stream is read from its first offset
                t.append(1, 25)
                t.wait_visible(1)
            t.wait_visible(0)
            q.processAllAvailable()
        progress = q.lastProgress["sources"][0]
    finally:
        q.stop()
        t.close()
    got = sink.records("live")
    assert sorted(got) == [0, 1]
    for p in (0, 1):
        assert sorted(got[p]) == t.records[p]  # every record written, once
    assert eval_json(progress["latestOffset"]) == {"live": {"0": 140, "1": 25}}
    assert eval_json(progress["endOffset"]) == {"live": {"0": 140, "1": 25}}


def eval_json(text):
    import json

    return json.loads(text) if isinstance(text, str) else text


def test_a_restarted_query_resumes_from_its_checkpoint(spark, live_log, tmp_path):
    root, address = live_log
    t = LiveTopic(root, address, "resume", partitions=2)
    for p in (0, 1):
        t.append(p, 30)
        t.wait_visible(p)
    checkpoint = str(tmp_path / "ck")
    sink = Batches()
    df = stream(spark, address, subscribe="resume")  # latest by default: only what comes after the start
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    try:
        q.processAllAvailable()
        t.append(0, 20)
        t.wait_visible(0)
        q.processAllAvailable()
    finally:
        q.stop()
    first = sink.records("resume")
    assert sorted(first[0]) == t.records[0][30:] and 1 not in first
    for p in (0, 1):  # written while no query runs
        t.append(p, 15)
        t.wait_visible(p)
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
        t.close()
    got = sink.records("resume")
    assert sorted(got[0]) == t.records[0][30:]
    assert sorted(got[1]) == t.records[1][30:]


@pytest.mark.parametrize("fail", [True, False])
def test_retention_deleting_unread_segments(spark, live_log, tmp_path, fail):
    root, address = live_log
    name = f"retention-{str(fail).lower()}"
    t = LiveTopic(root, address, name, segment_bytes=1024)
    t.append(0, 30)
    t.wait_visible(0)
    sink = Batches()
    q = stream(spark, address, subscribe=name, startingOffsets="earliest", failOnDataLoss=str(fail).lower()) \
        .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        q.processAllAvailable()
        read = len(t.records[0])
        t.append(0, 100)
        log_start = t.delete_oldest(0, 6)
        assert log_start > read  # unread records are gone
        t.wait_visible(0, log_start)
        if fail:
            with pytest.raises(StreamingQueryException) as info:
                q.processAllAvailable()
            assert "Some data may have been lost" in str(info.value)
            assert f"starting offset for {name}-0 was {read} but the log starts at {log_start}" in str(info.value)
        else:
            q.processAllAvailable()
    finally:
        q.stop()
        t.close()
    got = sorted(sink.records(name)[0])
    expected = t.records[0][:read] + ([] if fail else [r for r in t.records[0] if r[0] >= log_start])
    assert got == expected


def test_max_offsets_per_trigger(spark, live_log, tmp_path):
    root, address = live_log
    t = LiveTopic(root, address, "rate", partitions=2)
    t.append(0, 150)
    t.append(1, 50)
    for p in (0, 1):
        t.wait_visible(p)
    sink = Batches()
    q = stream(spark, address, subscribe="rate", startingOffsets="earliest", maxOffsetsPerTrigger="40") \
        .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
        t.close()
    sizes = [len(b) for b in sink.batches if b]
    assert len(sizes) >= 5 and max(sizes) <= 40
    first = sink.batches[0]
    assert sum(1 for r in first if r[1] == 0) == 30 and sum(1 for r in first if r[1] == 1) == 10  # by backlog
    got = sink.records("rate")
    assert sorted(got[0]) == t.records[0] and sorted(got[1]) == t.records[1]


def test_available_now_stops_at_the_offsets_present_when_it_started(spark, live_log, tmp_path):
    root, address = live_log
    t = LiveTopic(root, address, "avail")
    t.append(0, 100)
    t.wait_visible(0)

    def append_more(batch_id: int) -> None:  # more records arrive while the query runs
        t.append(0, 20)
        t.wait_visible(0)

    sink = Batches(append_more)
    q = stream(spark, address, subscribe="avail", startingOffsets="earliest", maxOffsetsPerTrigger="30") \
        .writeStream.foreachBatch(sink).trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S), "an AvailableNow query stops by itself"
    finally:
        q.stop()
        t.close()
    assert [len(b) for b in sink.batches] == [30, 30, 30, 10]
    assert sorted(sink.records("avail")[0]) == t.records[0][:100]
    assert len(t.records[0]) == 180


def test_trigger_once_reads_everything_in_one_batch(spark, live_log, tmp_path):
    root, address = live_log
    t = LiveTopic(root, address, "once")
    t.append(0, 60)
    t.wait_visible(0)
    t.close()
    sink = Batches()
    q = stream(spark, address, subscribe="once", startingOffsets="earliest", maxOffsetsPerTrigger="10") \
        .writeStream.foreachBatch(sink).trigger(once=True).option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        q.stop()
    assert [len(b) for b in sink.batches] == [60]  # Spark ignores the read limit with Trigger.Once


def test_ending_options_are_refused_for_streams(spark, live_log):
    root, address = live_log
    q = None
    with pytest.raises((AnalysisException, StreamingQueryException), match="ending offset not valid in streaming"):
        q = stream(spark, address, subscribe="live", endingOffsets="latest").writeStream.format("memory") \
            .queryName("refused").start()
        q.processAllAvailable()
    if q is not None:
        q.stop()


# ---------------------------------------------------------------- the stream reader, without Spark


def test_stream_options():
    options = {"lookupd.address": "/x.sock", "subscribe": "t"}
    assert parse_stream_options(options).starting.kind == "latest"
    assert parse_stream_options({**options, "startingOffsets": '{"t": {"0": -1}}'}).starting.kind == "offsets"
    o = parse_stream_options({**options, "maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "5",
                              "maxTriggerDelay": "30s"})
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (10, 5, 30_000)
    assert parse_stream_options(options).max_trigger_delay_ms == 15 * 60_000
    for key, message in [("endingOffsets", "ending offset not valid in streaming queries"),
                         ("endingTimestamp", "ending timestamp not valid in streaming queries"),
                         ("endingOffsetsByTimestamp", "ending timestamp not valid in streaming queries")]:
        with pytest.raises(OptionError, match=message):
            parse_stream_options({**options, key: "1"})
    with pytest.raises(OptionError, match="maxTriggerDelay must be a time"):
        parse_stream_options({**options, "maxTriggerDelay": "soon"})
    # load() cannot tell a stream from a batch read: a stream's start passes it, a batch read refuses it when planned
    ds = source("/x.sock", subscribe="t", startingOffsets="latest")
    assert ds.schema().fieldNames()[0] == "key"
    with pytest.raises(OptionError, match="starting offset can't be latest for batch queries"):
        ds.reader(ds.schema())


def test_rate_limit_shares_by_backlog():
    begin = {("a", 0): 0, ("a", 1): 100, ("b", 0): 5}
    end = {("a", 0): 300, ("a", 1): 200, ("b", 0): 6, ("c", 0): 9}
    # backlogs 300, 100, 1 of 401: shares 74.8 -> 74, 24.9 -> 24, 0.25 -> 1; c has no start: all of it
    assert rate_limit(begin, end, 100) == {("a", 0): 74, ("a", 1): 124, ("b", 0): 6, ("c", 0): 9}
    assert rate_limit(begin, end, 10_000) == end
    assert rate_limit(end, end, 10) == end


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(live_log):
    root, address = live_log
    t = LiveTopic(root, address, "minrows")
    t.append(0, 10)
    t.wait_visible(0)
    r = reader(address, subscribe="minrows", startingOffsets="earliest", minOffsetsPerTrigger="25",
               maxTriggerDelay="1s")
    start = r.initialOffset()
    assert start == {"minrows": {"0": 0}}
    assert isinstance(r.getDefaultReadLimit(), ReadMinRows)
    assert r.latestOffset(start, r.getDefaultReadLimit()) == start  # 10 new < 25: wait
    assert r.latestOffset(start, ReadAllAvailable()) == {"minrows": {"0": 10}}  # the engine's limit rules
    t.append(0, 20)
    t.wait_visible(0)
    assert r.latestOffset(start, r.getDefaultReadLimit()) == {"minrows": {"0": 30}}  # 30 >= 25
    assert r.initialOffset() == start  # Spark asks again when it plans the first micro-batch
    later = {"minrows": {"0": 30}}
    t.append(0, 5)
    t.wait_visible(0)
    assert r.latestOffset(later, r.getDefaultReadLimit()) == later
    time.sleep(1.1)  # maxTriggerDelay passed: a trigger with fewer records
    assert r.latestOffset(later, r.getDefaultReadLimit()) == {"minrows": {"0": 35}}
    assert r.reportLatestOffset() == {"minrows": {"0": 35}}
    t.close()
    capped = reader(address, subscribe="minrows", startingOffsets="earliest", maxOffsetsPerTrigger="8")
    assert capped.getDefaultReadLimit() == ReadMaxRows(8)
    assert capped.latestOffset(start, capped.getDefaultReadLimit()) == {"minrows": {"0": 8}}


def test_starting_timestamp_and_topics_that_appear_later(live_log):
    root, address = live_log
    t = LiveTopic(root, address, "pattern-a")
    t.append(0, 30)  # timestamps 1_767_225_600_000 + offset
    t.wait_visible(0)
    r = reader(address, subscribePattern="pattern-.*", startingTimestamp=str(1_767_225_600_000 + 12))
    start = r.initialOffset()
    assert start == {"pattern-a": {"0": 12}}
    u = LiveTopic(root, address, "pattern-b")
    u.append(0, 7)
    u.wait_visible(0)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"pattern-a": {"0": 30}, "pattern-b": {"0": 7}}
    assert [(s.topic, s.start, s.end) for s in r.partitions(start, end)] == [("pattern-a", 12, 30), ("pattern-b", 0, 7)]
    with pytest.raises(OptionError, match="No offset matched from request of topic-partition pattern-a-0"):
        reader(address, subscribe="pattern-a", startingTimestamp=str(1_767_225_700_000)).initialOffset()
    late = reader(address, subscribe="pattern-a", startingTimestamp=str(1_767_225_700_000),
                  startingOffsetsByTimestampStrategy="latest")
    assert late.initialOffset() == {"pattern-a": {"0": 30}}
    assert reader(address, subscribe="pattern-c").initialOffset() == {}  # a topic that does not exist yet
    t.close()
    u.close()


def test_read_committed_micro_batch(ref_daemon):
    r = reader(ref_daemon, subscribe="txn", startingOffsets="earliest", isolationLevel="read_committed",
               includeHeaders="true", maxBytesPerSplit="20000")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    splits = r.partitions(start, end)
    assert len(splits) > 1
    rows = arrow_rows(pa.Table.from_batches([b for s in splits for b in r.read(s)], r.settings.arrow_schema))
    aborted = aborted_offsets("txn-0")
    assert rows == [row for row in reference_rows("txn-0") if row[0] not in aborted]


def test_lost_partitions_and_offsets_fail_or_are_skipped(live_log):
    root, address = live_log
    t = LiveTopic(root, address, "lost")
    t.append(0, 20)
    t.wait_visible(0)
    t.close()
    strict = reader(address, subscribe="lost")
    gone = {"lost": {"0": 20, "9": 4}}
    with pytest.raises(DataLossError, match=r"\[lost-9\] are gone"):
        strict.partitions(gone, {"lost": {"0": 20}})
    with pytest.raises(DataLossError, match="lost-0's offset was changed from 20 to 12"):
        strict.partitions({"lost": {"0": 20}}, {"lost": {"0": 12}})
    lenient = reader(address, subscribe="lost", failOnDataLoss="false")
    assert lenient.partitions(gone, {"lost": {"0": 20}}) == []
    splits = lenient.partitions({"lost": {"0": 3}, "lost9": {"0": 0}}, {"lost": {"0": 20}, "lost9": {"0": 5}})
    assert [(s.topic, s.start, s.end) for s in splits] == [("lost", 3, 20)]


# ---------------------------------------------------------------- the example


def test_follow_example_counts_every_record_appended_while_it_runs(spark, live_log):
    from spark_client.examples import follow

    root, address = live_log
    t = LiveTopic(root, address, "follow", partitions=2)
    for p in (0, 1):
        t.append(p, 10)  # before the start: not counted (latest)
        t.wait_visible(p)
    t.close()
    args = follow.parse_args(["--topic", "follow", "--address", address, "--seconds", "4", "--trigger", "1",
                              "--append-to", root, "--rate", "80"])
    lines = []
    counts = follow.run(args, spark, report=lines.append)
    assert lines and all(line.startswith("micro-batch ") for line in lines)
    assert {topic for _, topic in counts} == {"follow"}
    now = time.time() * 1000
    assert all(now - 120_000 < minute <= now for minute, _ in counts)  # stamped when appended
    with Client(address) as c:
        ends = [p["log_end_offset"] for p in c.partitions() if p["topic"] == "follow"]
    assert sum(counts.values()) == sum(ends) - 20 > 0
