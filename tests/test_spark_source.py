"""spark.read.format("kafka-segments") in a local Spark session against lookupd daemon subprocesses.

Rows are compared with Kafka's reference records (key and value bytes, offsets, timestamps as
Kafka reports them, timestamp types, headers) and with what lookupd's writer wrote.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import reference as R
from spark_fixtures import (aborted_offsets, arrow_rows, core_rows, list_offsets, ref_daemon,  # noqa: F401
                            reference_rows, spark, spark_rows, unreachable_socket, written_daemon, written_dir)

from pyspark.errors import AnalysisException  # noqa: E402
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField,  # noqa: E402
                               StructType, TimestampType)

REF_WITH_RECORDS = ["plain-0", "compressed-0", "ooo-time-0", "txn-0", "bigbase-0", "logappend-0", "closed-0"]


def load(spark, address, **options):
    return spark.read.format("kafka-segments").option("lookupd.address", address).options(**options).load()


def by_topic(df) -> dict[str, list[tuple]]:
    table = df.toArrow()
    out = {}
    for name in set(table["topic"].to_pylist()):
        out[name] = arrow_rows(table.filter(pa.compute.equal(table["topic"], name)))
    return out


def test_schema_is_sparks_kafka_schema(spark, ref_daemon):
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
              StructField("partition", IntegerType()), StructField("offset", LongType()),
              StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]
    assert load(spark, ref_daemon, subscribe="plain").schema == StructType(fields)
    headers = StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                           StructField("value", BinaryType())])))
    assert load(spark, ref_daemon, subscribe="plain", includeHeaders="true").schema == StructType(fields + [headers])
    assert all(f.nullable for f in load(spark, ref_daemon, subscribe="plain").schema.fields)


def test_every_reference_record(spark, ref_daemon):
    topics = [p.rsplit("-", 1)[0] for p in REF_WITH_RECORDS]
    df = load(spark, ref_daemon, subscribe=",".join(topics), includeHeaders="true", minPartitions="10")
    got = by_topic(df)
    assert sorted(got) == sorted(topics)
    for partition in REF_WITH_RECORDS:
        assert got[partition.rsplit("-", 1)[0]] == reference_rows(partition), partition


def test_written_topics_and_partition_columns(spark, written_daemon, written_dir):
    df = load(spark, written_daemon, subscribe="orders,clicks,payments", includeHeaders="true")
    table = df.select("topic", "partition").toArrow()
    pairs = set(zip(table["topic"].to_pylist(), table["partition"].to_pylist()))
    assert pairs == {("orders", 0), ("orders", 1), ("orders", 2), ("clicks", 0), ("payments", 0)}
    orders1 = load(spark, written_daemon, assign='{"orders": [1]}', includeHeaders="true")
    assert spark_rows(orders1) == core_rows(written_dir, "orders", 1)
    clicks = spark_rows(load(spark, written_daemon, subscribe="clicks"))
    assert {r[2] for r in clicks} == {1}  # LogAppendTime
    assert [r[:5] for r in clicks] == [r[:5] for r in core_rows(written_dir, "clicks", 0)]


def test_timestamp_bounds(spark, ref_daemon):
    stamps = sorted(b["max_timestamp"] for b in R.batches("ooo-time-0"))
    a, b = stamps[len(stamps) // 5], stamps[len(stamps) * 3 // 4]
    df = load(spark, ref_daemon, subscribe="ooo-time", startingTimestamp=str(a), endingTimestamp=str(b),
              includeHeaders="true")
    start, end = list_offsets("ooo-time-0", a), list_offsets("ooo-time-0", b)
    assert spark_rows(df) == [r for r in reference_rows("ooo-time-0") if start <= r[0] < end]


def test_read_committed(spark, ref_daemon):
    df = load(spark, ref_daemon, subscribe="txn", **{"kafka.isolation.level": "read_committed"},
              includeHeaders="true", maxBytesPerSplit="20000")
    aborted = aborted_offsets("txn-0")
    assert spark_rows(df) == [r for r in reference_rows("txn-0") if r[0] not in aborted]


def test_many_splits_in_spark_neither_repeat_nor_lose_records(spark, written_daemon, written_dir):
    df = load(spark, written_daemon, subscribe="orders", maxBytesPerSplit="12000", maxRecordsPerPartition="300",
              includeHeaders="true")
    assert df.rdd.getNumPartitions() > 20
    expected = sorted(r for p in range(3) for r in core_rows(written_dir, "orders", p))
    assert spark_rows(df) == expected


def test_an_empty_partition_reads_as_no_rows(spark, ref_daemon):
    assert load(spark, ref_daemon, subscribe="empty").count() == 0


def test_reads_through_the_daemon(spark, ref_daemon):
    df = load(spark, ref_daemon, subscribe="compressed", includeHeaders="true", maxBytesPerSplit="50000",
              **{"lookupd.readFrom": "daemon"})
    assert spark_rows(df) == reference_rows("compressed-0")


@pytest.mark.parametrize("options, message", [
    ({"subscribe": None}, "One of the following options must be specified for Kafka source"),
    ({"assign": '{"plain":[0]}'}, "Only one of the following options can be specified for Kafka source"),
    ({"endingOffsets": '{"plain":{"0":-2}}'}, "ending offset for plain-0 can't be earliest for batch queries"),
    ({"isolationLevel": "snapshot"}, "isolationLevel must be one of read_uncommitted, read_committed"),
])
def test_rejected_options_fail_at_load(spark, ref_daemon, options, message):
    reader = spark.read.format("kafka-segments").option("lookupd.address", ref_daemon).option("subscribe", "plain")
    for k, v in options.items():
        reader = reader.option(k, v) if v is not None else reader
    if options.get("subscribe", "") is None:
        reader = spark.read.format("kafka-segments").option("lookupd.address", ref_daemon)
    with pytest.raises(AnalysisException, match=message):
        reader.load()


def test_a_latest_start_fails_a_batch_read_when_planned(spark, ref_daemon):
    """load() cannot tell a batch read from a stream, for which `latest` is right (spark_client.datasource)."""
    df = load(spark, ref_daemon, subscribe="plain", startingOffsets="latest")
    with pytest.raises(AnalysisException, match="starting offset can't be latest for batch queries on Kafka"):
        df.count()


def test_a_custom_schema_is_refused(spark, ref_daemon):
    with pytest.raises(AnalysisException, match="Kafka source has a fixed schema and cannot be set with a custom one"):
        spark.read.format("kafka-segments").schema("value binary").option("lookupd.address", ref_daemon) \
            .option("subscribe", "plain").load().collect()


def test_unreachable_daemon_fails_the_job_naming_the_address(spark):
    df = load(spark, unreachable_socket(), subscribe="plain")  # options are fine: load() succeeds
    with pytest.raises(AnalysisException) as info:
        df.count()
    assert f"cannot reach lookupd at {unreachable_socket()}" in str(info.value)
