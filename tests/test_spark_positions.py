"""resolve_positions in Spark: each row's answer equals the daemon's resolve_offset / offset_for_timestamp
answer for it, and the batch Kafka's reference lists for it."""

from __future__ import annotations

import bisect
import datetime as dt
import functools

import pytest

import reference as R

pytest.importorskip("pandas", reason="resolve_positions runs mapInArrow, which needs pandas >= 2.2 "
                                     "(pip install 'pyspark[sql]'); pandas is not installed")

from spark_fixtures import ref_daemon, spark, unreachable_socket  # noqa: F401

from lookupd.rpc.client import Client, RemoteError  # noqa: E402
from lookupd.errors import Unavailable  # noqa: E402
from spark_client import resolve_positions  # noqa: E402

PARTITIONS = ["plain-0", "compressed-0", "txn-0", "bigbase-0", "logappend-0", "large-0"]
BATCH = ("segment", "base_offset", "last_offset", "position", "size")


def offset_targets(partition: str) -> list[int]:
    batches = _batches(partition)[0]
    picks = {batches[0]["base_offset"] - 1, batches[-1]["last_offset"] + 1, batches[-1]["last_offset"] + 50}
    for b in batches[:: max(len(batches) // 60, 1)]:
        picks.update((b["base_offset"], b["last_offset"], b["last_offset"] + 1))
    return sorted(p for p in picks if p >= 0)


@functools.lru_cache(maxsize=None)
def _batches(partition: str) -> tuple[list[dict], list[int]]:
    batches = R.batches(partition)
    return batches, [b["last_offset"] for b in batches]


def reference_batch(partition: str, offset: int) -> tuple | None:
    """The first batch whose last offset reaches `offset` (Kafka's translateOffset across segments)."""
    batches, lasts = _batches(partition)
    i = bisect.bisect_left(lasts, offset)
    if offset < batches[0]["base_offset"] or i == len(batches):
        return None  # out of range
    b = batches[i]
    return b["segment"], b["base_offset"], b["last_offset"], b["position"], b["size_in_bytes"]


def single(client: Client, method: str, *params):
    try:
        return client.call(method, *params)
    except RemoteError as err:
        assert err.code == "OFFSET_OUT_OF_RANGE"
        return None


def test_offsets(spark, ref_daemon):
    rows = [(p.rsplit("-", 1)[0], 0, o) for p in PARTITIONS for o in offset_targets(p)]
    df = spark.createDataFrame(rows, "topic string, partition int, offset long").repartition(3)
    got = resolve_positions(df, ref_daemon).collect()
    assert len(got) == len(rows)
    with Client(ref_daemon) as client:
        for r in got:
            answer = single(client, "resolve_offset", r["topic"], r["partition"], r["offset"])
            expected = None if answer is None else tuple(answer[k] for k in BATCH)
            values = tuple(r[k] for k in BATCH)
            assert values == (expected or (None,) * 5), r
            assert expected == reference_batch(f"{r['topic']}-0", r["offset"]), r


def test_timestamps_as_milliseconds_and_as_timestamps(spark, ref_daemon):
    targets = {}
    for p in ["plain-0", "ooo-time-0", "logappend-0"]:
        stamps = sorted(b["max_timestamp"] for b in R.batches(p))
        targets[p.rsplit("-", 1)[0]] = [-2, -1, 0, stamps[0] - 1, stamps[len(stamps) // 3], stamps[-1], stamps[-1] + 1]
    rows = [(t, 0, ts) for t, stamps in targets.items() for ts in stamps]
    df = spark.createDataFrame(rows, "topic string, partition int, timestamp long")
    got = resolve_positions(df, ref_daemon).collect()
    with Client(ref_daemon) as client:
        for r in got:
            answer = client.offset_for_timestamp(r["topic"], 0, r["timestamp"])
            if answer is None:
                assert r["offset"] is None and r["segment"] is None, r
                continue
            assert (r["offset"], r["segment"], r["position"]) == \
                (answer["offset"], answer["segment"], answer["position"]), r
            assert r["offset_timestamp"] == (answer["timestamp"] if answer["timestamp"] >= 0 else None), r
            batch = single(client, "resolve_offset", r["topic"], 0, answer["offset"])
            assert (r["base_offset"], r["last_offset"]) == \
                ((batch["base_offset"], batch["last_offset"]) if batch else (None, None)), r
    # The same instants as a timestamp column (epoch milliseconds from it).
    real = [(t, p, dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc)) for t, p, ts in rows if ts >= 0]
    as_ts = spark.createDataFrame(real, "topic string, partition int, timestamp timestamp")
    by_time = {(r["topic"], int(r["timestamp"].timestamp() * 1000 + 0.5)): r["offset"]
               for r in resolve_positions(as_ts, ref_daemon).collect()}
    assert by_time == {(r["topic"], r["timestamp"]): r["offset"] for r in got if r["timestamp"] >= 0}


def test_input_checks_and_unreachable_daemon(spark, ref_daemon):
    df = spark.createDataFrame([("plain", 0, 5)], "topic string, partition int, offset long")
    with pytest.raises(Unavailable, match=f"cannot reach lookupd at {unreachable_socket()}"):
        resolve_positions(df, unreachable_socket())
    with pytest.raises(ValueError, match="needs columns topic, partition and timestamp"):
        resolve_positions(df.drop("offset"), ref_daemon)
    with pytest.raises(ValueError, match="df already has segment"):
        resolve_positions(df.withColumn("segment", df["offset"]), ref_daemon)
