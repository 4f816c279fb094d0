"""The kafka-segments Spark source reading a fully tiered topic from the bucket against the same topic
read from local segments, in the same run (issue 33's target: at least 0.8x the local records/s).

A topic of PARTITIONS partitions is written with lookupd's writer into SEGMENT_BYTES segments; one copy
stays local, the other has every segment uploaded in the plugin's layout (lookupd/tools/tieredwriter.py, the
plugin's default 4 MiB chunks) and deleted locally, leaving an empty active segment: its records are only
in the bucket. The S3 server is SeaweedFS on loopback (lookupd/tools/s3local.py); the executors read the
remote pieces themselves, by ranged GETs, with the credentials from the environment.

Run: python bench/bench_spark_tiered.py [--quick] [--json OUT]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import common  # noqa: E402
from common import Figure, ratio, repeat  # noqa: E402

TOPIC = "tiered"
PARTITIONS = 4
SEGMENT_BYTES = 16 << 20  # several segments per partition, so splits cross segment boundaries
CHUNK_BYTES = 4 << 20     # the plugin's default chunk.size
RECORDS_PER_BATCH = 100
VALUE_BYTES = 100
AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


def _write(root: str, records: int) -> None:
    """TOPIC's partitions, each rolled at the end (an empty active segment), like a demo topic's records."""
    from lookupd.format.builder import build_batch
    from lookupd.tools.writer import LogWriter

    for p in range(PARTITIONS):
        w = LogWriter(os.path.join(root, f"{TOPIC}-{p}"), segment_bytes=SEGMENT_BYTES)
        for base in range(0, records // PARTITIONS, RECORDS_PER_BATCH):
            w.append(build_batch([(1_767_225_600_000 + base + i, f"key-{base + i}".encode(),
                                   (b"%08d" % (base + i)) * (VALUE_BYTES // 8), ())
                                  for i in range(RECORDS_PER_BATCH)], base_offset=base))
        w.roll()
        w.close()


def _tier(root: str, server) -> dict:
    """Upload every rolled segment of the copy in `root` and delete it locally; the [remote] settings."""
    from lookupd.tools.tieredwriter import write_partition_metadata
    from lookupd.tools.tieredwriter import Options, kafka_uuid, local_segments, upload_partition

    bucket = server.bucket()
    for p in range(PARTITIONS):
        part = Path(root, f"{TOPIC}-{p}")
        topic_id = kafka_uuid()
        write_partition_metadata(part, topic_id)
        rolled = local_segments(part)[:-1]
        upload_partition(server.client(), bucket, part, topic_id=topic_id, segments=rolled,
                         opts=Options(chunk_size=CHUNK_BYTES))
        for base in rolled:
            for path in part.glob(f"{base:020d}.*"):
                path.unlink()
    return {"bucket": bucket, "endpoint_url": server.endpoint_url}


def reads(spark, local: str, tiered: str, records: int, times: int) -> list[Figure]:
    def source(address: str) -> float:
        def one() -> float:
            df = spark.read.format("kafka-segments").option("lookupd.address", address).option("subscribe", TOPIC) \
                .option("minPartitions", "8").load()
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return records / (time.perf_counter() - t0)
        return one

    params = {"records": records, "partitions": PARTITIONS, "segment_bytes": SEGMENT_BYTES, "chunk_bytes": CHUNK_BYTES}
    source(tiered)()  # the first read of each starts the Python workers and their S3 clients
    source(local)()
    return [
        Figure("kafka-segments source, fully tiered topic (S3 on loopback), local[2]", "records/s",
               repeat(source(tiered), times), group="spark-tiered-read", params=params, higher_is_better=True),
        Figure("kafka-segments source, the same topic local, local[2]", "records/s",
               repeat(source(local), times), group="spark-tiered-read", params=params, higher_is_better=True),
    ]


def _session():
    """bench_spark's local[2] session, the test credentials set for the executors' Python workers too (the
    JVM may have been started by an earlier suite, without them in its environment)."""
    from pyspark.sql import SparkSession

    import spark_client

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master("local[2]").appName("bench_spark_tiered").config("spark.ui.enabled", "false")
    for k in AWS_ENV:
        builder = builder.config(f"spark.executorEnv.{k}", os.environ[k])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_client.register(spark)
    return spark


def run(quick: bool = False) -> list[Figure]:
    from lookupd.tools.s3local import running_server

    from spark_client.examples.with_daemon import running_daemon

    records, times = (40_000, 2) if quick else (1_000_000, 3)
    root = tempfile.mkdtemp(prefix="lkbst", dir=os.environ.get("BENCH_DIR", "/tmp"))
    # The credentials are in the environment before Spark starts: its Python workers inherit the JVM's
    # environment (the standard AWS chain).
    try:
        with running_server() as server:
            local, tiered = os.path.join(root, "local"), os.path.join(root, "tiered")
            _write(local, records)
            shutil.copytree(local, tiered)
            remote = _tier(tiered, server)
            conf = os.path.join(root, "tiered.toml")
            with open(conf, "w") as f:
                f.write(f'[remote]\nbucket = "{remote["bucket"]}"\nendpoint_url = "{remote["endpoint_url"]}"\n'
                        f'cache_dir = "{root}/daemon-cache"\n')
            socks = {name: os.path.join(root, f"{name}.sock") for name in ("local", "tiered")}
            with running_daemon([local], socks["local"]), running_daemon([tiered], socks["tiered"], config=conf):
                spark = _session()
                try:
                    return reads(spark, socks["local"], socks["tiered"], records, times)
                finally:
                    spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ratios(figures: list[Figure]) -> list[dict | None]:
    return [ratio("spark tiered vs local read", figures,
                  "kafka-segments source, fully tiered topic (S3 on loopback), local[2]",
                  "kafka-segments source, the same topic local, local[2]",
                  "records/s of the Spark source reading a fully tiered topic from the bucket over the same topic "
                  "local (target 0.8)")]



if __name__ == "__main__":
    common.main(run, __doc__)
