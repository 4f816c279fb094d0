"""Spark jobs through lookupd: bulk position lookups vs one request per row; reading the sample data
with the kafka-segments source vs a single-process loop over the same files; streams: catching up
with Trigger.AvailableNow vs a batch read of the same data, and the latency from a batch being
appended to the log to its records reaching a streaming query's sink.

A local Spark session (local[2]: this machine's cores) and a `lookupd serve` subprocess over a
sample log dir (`lookupd demo-data --records 600000`: 1,050,000 records over three topics, as the issue
measured on 1,000,000; 20,000 with --quick). With fewer the read figures measure a Spark job's fixed
cost (planning, scheduling, about half a second here) more than reading: at 350,000 records the
source read 385,504 records/s, at 1,400,000 898,000 records/s, on this machine, same day.

Run: python bench/bench_spark.py [--quick] [--json OUT]
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
from common import Figure, ratio, repeat  # noqa: E402

from lookupd.tools.demo import generate  # noqa: E402
from lookupd.log.filerecords import FileRecords  # noqa: E402
from lookupd.format.records import decode_batch  # noqa: E402
from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.tools.writer import LogWriter  # noqa: E402
from spark_client.datasource import KafkaSegmentsDataSource  # noqa: E402

SOURCE_OPTIONS = {"subscribePattern": ".*", "minPartitions": "8"}


def spark_session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_client

    spark = (SparkSession.builder.master("local[2]").appName("bench_spark").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_client.register(spark)
    return spark


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _per_row(address: str):
    """mapPartitions function: one connection per task, one resolve_offset request per row."""
    def resolve(rows):
        from lookupd.rpc.client import Client

        with Client(address) as client:
            for r in rows:
                yield client.resolve_offset(r["topic"], r["partition"], r["offset"])
    return resolve


def positions(spark, address: str, partitions: list[dict], bulk_rows: int, per_row_rows: int,
              times: int) -> list[Figure]:
    """Rows of random in-range offsets: resolve_positions vs a request per row, both in Spark."""
    from spark_client import resolve_positions

    rng = random.Random(7)
    rows = []
    for _ in range(bulk_rows):
        p = rng.choice(partitions)
        rows.append((p["topic"], p["partition"], rng.randrange(p["log_start_offset"], p["log_end_offset"])))
    schema = "topic string, partition int, offset long"
    bulk = spark.createDataFrame(rows, schema).repartition(2).cache()
    few = spark.createDataFrame(rows[:per_row_rows], schema).repartition(2).cache()
    bulk.count(), few.count()

    def columnar() -> float:
        return bulk_rows / timed(lambda: resolve_positions(bulk, address).write.format("noop").mode("overwrite")
                                 .save())

    def one_by_one() -> float:
        return per_row_rows / timed(lambda: few.rdd.mapPartitions(_per_row(address)).count())

    params = {"rows": bulk_rows, "tasks": 2}
    return [
        Figure("resolve_positions (columnar requests per task)", "positions/s", repeat(columnar, times),
               group="spark-positions", params=params, higher_is_better=True),
        Figure("one resolve_offset request per row (mapPartitions)", "positions/s", repeat(one_by_one, times),
               group="spark-positions", params={**params, "rows": per_row_rows}, higher_is_better=True),
    ]


def reads(spark, address: str, log_dir: str, times: int) -> list[Figure]:
    """Every record of the sample: the data source in Spark (2 tasks at a time), its split reader
    alone in this process (what each task runs, without Spark), and a plain decode loop."""
    logs = [os.path.join(log_dir, d, f) for d in sorted(os.listdir(log_dir)) if os.path.isdir(os.path.join(log_dir, d))
            for f in sorted(os.listdir(os.path.join(log_dir, d))) if f.endswith(".log")]

    def loop() -> int:
        n = 0
        for path in logs:
            log_file = FileRecords(path)
            for h in log_file.batches():
                if not h.is_control:
                    n += len(decode_batch(h, log_file.read(h.position, h.size)))
            log_file.close()
        return n

    def aiokafka_loop() -> int:
        from aiokafka.record._crecords import DefaultRecordBatch

        n = 0
        for path in logs:
            log_file = FileRecords(path)
            for h in log_file.batches():
                if not h.is_control:
                    for r in DefaultRecordBatch(log_file.read(h.position, h.size)):
                        r.key, r.value, r.headers
                        n += 1
            log_file.close()
        return n

    records = loop()

    def load():
        return spark.read.format("kafka-segments").options(**SOURCE_OPTIONS).option("lookupd.address", address).load()

    df = load()

    def source() -> float:  # a new DataFrame each run: an action run again may reuse what the last one did
        return records / timed(lambda: load().write.format("noop").mode("overwrite").save())

    def split_reader() -> float:
        reader = KafkaSegmentsDataSource(SOURCE_OPTIONS | {"lookupd.address": address}).reader(df.schema)
        splits = reader.partitions()
        return records / timed(lambda: [b for s in splits for b in reader.read(s)])

    def single_process() -> float:
        return records / timed(loop)

    def single_process_aiokafka() -> float:
        return records / timed(aiokafka_loop)

    params = {"records": records, "bytes": sum(os.path.getsize(p) for p in logs)}
    return [
        Figure("kafka-segments source, local[2]", "records/s", repeat(source, times), group="spark-read",
               params=params, higher_is_better=True),
        Figure("kafka-segments split reader in one process, no Spark", "records/s", repeat(split_reader, times),
               group="spark-read", params=params, higher_is_better=True),
        Figure("single-process loop (FileRecords + decode_batch)", "records/s", repeat(single_process, times),
               group="spark-read", params=params, higher_is_better=True),
        Figure("single-process loop (FileRecords + aiokafka's Cython decoder)", "records/s",
               repeat(single_process_aiokafka, times), group="spark-read", params=params, higher_is_better=True),
    ]


def catch_up(spark, address: str, records: int, times: int) -> list[Figure]:
    """Every record of the sample through a stream with Trigger.AvailableNow (one micro-batch; a new
    checkpoint each time) into the noop sink, vs the batch read of the same records already measured."""
    def available_now() -> float:
        with tempfile.TemporaryDirectory(prefix="lkck") as ck:
            df = (spark.readStream.format("kafka-segments").options(**SOURCE_OPTIONS)
                  .option("lookupd.address", address).option("startingOffsets", "earliest").load())
            t0 = time.perf_counter()
            q = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", ck).start()
            q.awaitTermination()
            return records / (time.perf_counter() - t0)

    return [Figure("kafka-segments stream, Trigger.AvailableNow from earliest, local[2]", "records/s",
                   repeat(available_now, times), group="spark-read", params={"records": records},
                   higher_is_better=True)]


LATENCY_INTERVAL_S = 0.1  # one batch appended this often while the query runs
LATENCY_BATCH_RECORDS = 5


def latency(spark, address: str, log_dir: str, batches: int) -> list[Figure]:
    """A writer appends a batch every LATENCY_INTERVAL_S, its wall-clock time in each record's value; a
    stream with the default trigger (the next micro-batch as soon as the last ends) collects each
    micro-batch in foreachBatch; latency = time collected - time appended, per appended batch."""
    from lookupd.rpc.client import Client

    writer = LogWriter(os.path.join(log_dir, "latency-0"))
    writer.append(build_batch([(0, b"k", b"0", ())], base_offset=0))
    with Client(address) as client:  # the new partition shows after the daemon's rescan
        while not any(p["topic"] == "latency" for p in client.partitions()):
            time.sleep(0.05)
    seen: dict[bytes, float] = {}

    def sink(df, batch_id: int) -> None:
        values = [r["value"] for r in df.select("value").collect()]
        now = time.time()
        for v in values:
            seen.setdefault(bytes(v), now)

    q = (spark.readStream.format("kafka-segments").option("lookupd.address", address).option("subscribe", "latency")
         .load().writeStream.foreachBatch(sink).start())
    appended: list[bytes] = []
    try:
        q.processAllAvailable()
        for i in range(batches):
            stamp = repr(time.time()).encode()
            base = writer.next_offset
            writer.append(build_batch([(int(time.time() * 1000), b"k", stamp, ())] * LATENCY_BATCH_RECORDS,
                                      base_offset=base))
            appended.append(stamp)
            time.sleep(LATENCY_INTERVAL_S)
        deadline = time.monotonic() + 60
        while not all(s in seen for s in appended) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        q.stop()
        writer.close()
    lags = sorted((seen[s] - float(s)) * 1000 for s in appended if s in seen)
    if len(lags) < len(appended):
        raise RuntimeError(f"{len(appended) - len(lags)} appended batches never reached the sink")
    params = {"batches": batches, "interval_s": LATENCY_INTERVAL_S, "records_per_batch": LATENCY_BATCH_RECORDS}
    p99 = lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))]
    return [
        Figure("stream latency, append to sink, default trigger: p50", "ms", [statistics.median(lags)],
               group="spark-stream-latency", params=params),
        Figure("stream latency, append to sink, default trigger: p99", "ms", [p99],
               group="spark-stream-latency", params=params),
    ]


def run(quick: bool = False) -> list[Figure]:
    from lookupd.rpc.client import Client
    from spark_client.examples.with_daemon import running_daemon

    times = 2 if quick else 3
    with tempfile.TemporaryDirectory(prefix="lkbench", dir=os.environ.get("BENCH_DIR", "/tmp")) as d:
        log_dir = os.path.join(d, "data")
        generate(log_dir, records=20_000 if quick else 600_000)
        sock = os.path.join(d, "lookupd.sock")
        with running_daemon([log_dir], sock):
            with Client(sock) as client:
                partitions = client.partitions()
            spark = spark_session()
            try:
                figures = positions(spark, sock, partitions, 100_000 if quick else 1_000_000,
                                    10_000 if quick else 50_000, times)
                figures += reads(spark, sock, log_dir, times)
                figures += catch_up(spark, sock, int(figures[-1].params["records"]), times)
                figures += latency(spark, sock, log_dir, 50 if quick else 300)
            finally:
                spark.stop()
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    return [
        ratio("spark-positions-speedup", figures, "resolve_positions (columnar requests per task)",
              "one resolve_offset request per row (mapPartitions)",
              "positions per second resolved by resolve_positions over one request per row"),
        ratio("spark-read-speedup", figures, "kafka-segments source, local[2]",
              "single-process loop (FileRecords + decode_batch)",
              "records per second read by the Spark source over a single Python process"),
        ratio("spark source vs aiokafka in one process", figures, "kafka-segments source, local[2]",
              "single-process loop (FileRecords + aiokafka's Cython decoder)",
              "records/s of the Spark source on local[2] over aiokafka's decoder looping over the same batches in "
              "one process (target 0.6)"),
                ratio("spark-available-now-vs-batch", figures,
              "kafka-segments stream, Trigger.AvailableNow from earliest, local[2]", "kafka-segments source, local[2]",
              "records per second caught up by a stream with Trigger.AvailableNow over a batch read of the same data"),
    ]


if __name__ == "__main__":
    common.main(run, __doc__)
