"""Files that change between planning a read and reading it, through real local Spark and the real
daemon: the log cleaner swapping in a compacted segment, a truncation of the log's end, and
retention deleting a split's start.

Spark plans a DataFrame's splits once (a batch read when its plan is first executed, a micro-batch
before its sink runs), so a change made after a first action, or inside foreachBatch, lands
between planning and reading. Answers must be those of the files as they are read: each split
exactly its own offsets, and lost offsets handled as Spark's Kafka source handles them
(failOnDataLoss).
"""

from __future__ import annotations

import os
import time

import pytest

from spark_fixtures import LiveTopic, live_log, spark  # noqa: F401

from pyspark.errors import PythonException, StreamingQueryException  # noqa: E402

from spark_client.datasource import KafkaSegmentsDataSource  # noqa: E402
from spark_client.errors import DataLossError  # noqa: E402

LOSS = "Some data may have been lost"


def load(spark, address, **options):
    return spark.read.format("kafka-segments").option("lookupd.address", address).options(**options).load()


def offsets_and_keys(df) -> list[tuple[int, bytes]]:
    """(offset, key) of every row, in the order Spark returns them (splits in order). `df` itself is
    collected: a derived DataFrame (a select) would be planned anew."""
    return [(r["offset"], bytes(r["key"])) for r in df.collect()]


def test_a_cleaner_swap_after_planning_reads_each_offset_once(spark, live_log):
    """Splits planned on segment 0, which the cleaner then swaps for a compacted copy that still starts at
    the planned base offset: the local bytes no longer hold the planned batches, and the first split's
    bytes hold later splits' offsets. Every split must return its own offsets only, once each, as reading
    everything through the daemon does."""
    root, address = live_log
    t = LiveTopic(root, address, "swapped", segment_bytes=1 << 20)
    t.append(0, 10, per_batch=10)  # keys of its own: this first batch survives cleaning
    t.append(0, 60, keys=20)  # updates of 20 keys; the next segment updates half of them again
    t.roll(0)
    t.append(0, 10, keys=10)
    t.wait_visible(0)
    df = load(spark, address, subscribe="swapped", maxBytesPerSplit="1024")
    before = offsets_and_keys(df)  # the first action plans the splits, and reads them
    assert [o for o, _ in before] == list(range(80))
    t.compact(0, 0)
    cleaned_size = os.path.getsize(t.segment_path(0, 0))
    _wait_until(lambda: _segment_sizes(address, "swapped")[0] == cleaned_size)

    got = offsets_and_keys(df)  # the same splits, read again from the swapped files
    through_daemon = offsets_and_keys(load(spark, address, subscribe="swapped", **{"lookupd.readFrom": "daemon"}))
    offsets = [o for o, _ in got]
    assert len(offsets) == len(set(offsets)), "an offset read twice"
    assert offsets == sorted(offsets)
    assert got == through_daemon == [(o, k) for o, k, _ in t.records[0]]
    t.close()


def _segment_sizes(address: str, topic: str) -> dict[int, int]:
    from lookupd.rpc.client import Client

    with Client(address) as c:
        return {s["base_offset"]: s["size"] for s in c.segments(topic, 0)}


def _wait_until(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the daemon did not pick up the change")
        time.sleep(0.05)


# Splits of 50 offsets over [0, 200): a truncation at 150 ends the log exactly at the last split's
# start; one at 120 ends it inside the third split, below the last split's start.
TRUNCATIONS = [pytest.param(True, 150, id="failOnDataLoss-at-a-split-start"),
               pytest.param(False, 120, id="no-failOnDataLoss-below-a-split-start")]


def _truncated_topic(live_log, name: str) -> LiveTopic:
    root, address = live_log
    t = LiveTopic(root, address, name, segment_bytes=1 << 20)
    t.append(0, 200)
    t.wait_visible(0)
    ds = KafkaSegmentsDataSource({"lookupd.address": address, "subscribe": name, "maxRecordsPerPartition": "50"})
    assert [(s.start, s.end) for s in ds.reader(ds.schema()).partitions()] == [(0, 50), (50, 100), (100, 150),
                                                                               (150, 200)]
    return t


def _check_loss(name: str, message: str) -> None:
    """The last split, [150, 200), finds the log ending at its start."""
    assert LOSS in message
    assert f"Could not read records in offset [150, 200) for topic partition {name}-0" in message


@pytest.mark.parametrize("fail,cut", TRUNCATIONS)
def test_a_truncation_after_planning_a_batch_read(spark, live_log, fail, cut):
    """failOnDataLoss true: the lost offsets fail the job, naming them; false: the job reads what is left,
    skipping the lost offsets with a warning, as Spark's Kafka source does."""
    name = f"truncated-batch-{str(fail).lower()}"
    t = _truncated_topic(live_log, name)
    df = load(spark, live_log[1], subscribe=name, maxRecordsPerPartition="50", failOnDataLoss=str(fail).lower())
    assert [o for o, _ in offsets_and_keys(df)] == list(range(200))  # the first action plans the splits
    t.truncate(0, cut)
    t.wait_visible(0)
    if fail:
        with pytest.raises(PythonException) as info:
            offsets_and_keys(df)
        _check_loss(name, str(info.value))
    else:
        assert offsets_and_keys(df) == [(o, k) for o, k, _ in t.records[0]]
    t.close()


@pytest.mark.parametrize("fail,cut", TRUNCATIONS)
def test_a_truncation_after_planning_a_micro_batch(spark, live_log, tmp_path, fail, cut):
    """As in a batch read: a micro-batch's splits are planned before its sink runs, and the truncation
    comes then."""
    name = f"truncated-stream-{str(fail).lower()}"
    t = _truncated_topic(live_log, name)
    delivered: list[list[tuple]] = []

    def sink(df, batch_id: int) -> None:
        if batch_id == 0:  # planned already: the micro-batch's splits are fixed
            t.truncate(0, cut)
            t.wait_visible(0)
        delivered.append(offsets_and_keys(df))

    q = spark.readStream.format("kafka-segments").option("lookupd.address", live_log[1]) \
        .options(subscribe=name, startingOffsets="earliest", maxRecordsPerPartition="50",
                 failOnDataLoss=str(fail).lower()) \
        .load().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        if fail:
            with pytest.raises(StreamingQueryException) as info:
                q.processAllAvailable()
            _check_loss(name, str(info.value))
            assert delivered == []
        else:
            q.processAllAvailable()
            assert [row for rows in delivered for row in rows] == [(o, k) for o, k, _ in t.records[0]]
    finally:
        q.stop()
        t.close()


@pytest.mark.parametrize("fail", [True, False])
def test_retention_after_planning_below_a_split(live_log, fail):
    """Retention deletes the first split's start after planning (the split reader alone, no Spark): with
    failOnDataLoss the split fails naming its offsets; without, it reads from the new log start on."""
    root, address = live_log
    name = f"retained-{str(fail).lower()}"
    t = LiveTopic(root, address, name, segment_bytes=1024)
    t.append(0, 100)
    t.wait_visible(0)
    ds = KafkaSegmentsDataSource({"lookupd.address": address, "subscribe": name, "maxRecordsPerPartition": "50",
                                  "failOnDataLoss": str(fail).lower()})
    reader = ds.reader(ds.schema())
    splits = reader.partitions()
    assert [(s.start, s.end) for s in splits] == [(0, 50), (50, 100)]
    log_start = t.delete_oldest(0, 2)
    assert 0 < log_start < 50
    t.wait_visible(0, log_start)
    if fail:
        with pytest.raises(DataLossError, match=rf"Could not read records in offset \[0, 50\) for topic partition "
                                                rf"{name}-0: the log now holds offsets \[{log_start}, 100\)"):
            list(reader.read(splits[0]))
    else:
        offsets = [o for s in splits for b in reader.read(s) for o in b.column("offset").to_pylist()]
        assert offsets == list(range(log_start, 100))
    t.close()
