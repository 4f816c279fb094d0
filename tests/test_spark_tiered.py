"""The `kafka-segments` source over both tiers: remote segments read by the executors straight from the
bucket (the real S3 server of lookupd/tools/s3local.py), local ones as before, in a real local Spark session.

The property: a partition partly or fully tiered gives the same rows as the same partition fully local,
whatever the options. Remote pieces need no daemon; a segment deleted by retention mid-read is data
loss as Spark's Kafka source reports it; a store fault is a clear error.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pytest

import reference as R
from lookupd.tools import s3local
from faultproxy import FaultProxy
from lookupd.tools.tieredwriter import write_partition_metadata
from s3server import s3_server  # noqa: F401 - fixture
from spark_fixtures import LiveTopic, arrow_rows, spark, spark_rows  # noqa: F401
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, WrappingKey, kafka_uuid, local_segments, upload_partition

from lookupd.errors import Unauthorized
from spark_client.errors import DataLossError, PartitionUnreadable
from spark_client.examples.with_daemon import running_daemon
from spark_client.options import parse_options
from spark_client.planner import plan
from spark_client.reader import read_split
from spark_client.routing import Daemons

from test_spark_stream import Batches, stream  # noqa: E402

import pyarrow as pa  # noqa: E402

# Spark's Python workers inherit the environment of the JVM, started once per test process, maybe before
# the s3_server fixture sets the test credentials: set them now, at collection (the same values).
os.environ.setdefault("AWS_ACCESS_KEY_ID", s3local.ACCESS_KEY)
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", s3local.SECRET_KEY)
os.environ.setdefault("AWS_REGION", s3local.REGION)

SMALL_SPLIT = 64 << 10  # maxBytesPerSplit: splits end and begin inside segments of both tiers


def _config(path: str, t, keys: dict[str, str] | None = None, extra: str = "") -> str:
    with open(path, "w") as f:
        f.write(f'{extra}[remote]\nbucket = "{t.config.bucket}"\nendpoint_url = "{t.config.endpoint_url}"\n'
                f'cache_dir = "{t.config.cache_dir}"\n')
        if keys:
            f.write("[remote.encryption.keys]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in keys.items()))
    return path


def _broken(root: str) -> str:
    """A log dir whose broken-0's active segment is corrupt: the daemon lists it with an `error`."""
    broken = os.path.join(root, "broken-0")
    shutil.copytree(R.log_dir("plain-0"), broken)
    last = R.batches("plain-0")[-1]
    log = os.path.join(broken, sorted(f for f in os.listdir(broken) if f.endswith(".log"))[-1])
    with open(log, "r+b") as f:
        f.seek(last["position"] + 8)
        f.write((5).to_bytes(4, "big"))  # a batch size below any batch's
    return root


@pytest.fixture(scope="module")
def tiers(s3_server):  # noqa: F811
    """txn-0 partly tiered (compressed, encrypted chunks) and compressed-0 fully tiered (only in the bucket),
    each served by its own daemon with a [remote] table; and one daemon over both partitions fully local
    (and a broken partition)."""
    R.require()
    with ExitStack() as stack:
        root = tempfile.mkdtemp(prefix="lkst", dir="/tmp")  # short: socket paths
        stack.callback(shutil.rmtree, root, True)
        key = WrappingKey.create(root)
        part = tier_partition(Path(root, "a"), R.log_dir("txn-0"), s3_server, cut=8,
                              opts=Options(compression=True, encryption=key, chunk_size=8192))
        full = tier_partition(Path(root, "b"), R.log_dir("compressed-0"), s3_server, cut=0,
                              opts=Options(variable_index=True), drop_local_dir=True)
        socks = {name: os.path.join(root, f"{name}.sock") for name in ("local", "part", "full")}
        keys = {key.key_id: key.pem_path}
        stack.enter_context(running_daemon([str(part.local_dir), str(full.local_dir), _broken(os.path.join(root, "x"))],
                                           socks["local"]))
        stack.enter_context(running_daemon([str(part.tiered_dir)], socks["part"],
                                           config=_config(os.path.join(root, "part.toml"), part, keys)))
        stack.enter_context(running_daemon([str(full.tiered_dir)], socks["full"],
                                           config=_config(os.path.join(root, "full.toml"), full)))
        yield dict(part=part, full=full, socks=socks, keys=keys, root=root)


def _tiered_address(tiers) -> str:
    return json.dumps({"part": tiers["socks"]["part"], "full": tiers["socks"]["full"]})


def _load(spark, address, **options):
    return spark.read.format("kafka-segments").option("lookupd.address", address).options(**options).load()


def _splits(address, **options):
    opts = parse_options({"lookupd.address": address, **options})
    with Daemons() as daemons:
        return plan(opts, daemons)


def _read(splits, **options) -> list[tuple]:
    from spark_client.datasource import read_settings
    from spark_client.schema import kafka_schema

    opts = parse_options({"lookupd.address": "unused", "subscribe": "x", **options})
    settings = read_settings(opts, kafka_schema(opts.include_headers))
    batches = [b for s in splits for b in read_split(s, settings)]
    return arrow_rows(pa.Table.from_batches(batches, schema=settings.arrow_schema)) if batches else []


@pytest.mark.parametrize("options", [
    {},
    {"kafka.isolation.level": "read_committed", "includeHeaders": "true"},
])
def test_rows_of_tiered_topics_equal_the_same_topics_local(spark, tiers, options):  # noqa: F811
    """Batch reads of a partly and a fully tiered topic, splits cut across both tiers, and from a timestamp
    and an offset inside the remote tier: the rows of the same topics read fully local."""
    keys = json.dumps(tiers["keys"])
    ts = {t: {"0": _record(f"{t}-0", 1 / 3)["timestamp"]} for t in ("txn", "compressed")}
    for extra in ({}, {"startingOffsetsByTimestamp": json.dumps(ts)}):
        common = dict(subscribe="txn,compressed", maxBytesPerSplit=str(SMALL_SPLIT), **options, **extra)
        want = spark_rows(_load(spark, tiers["socks"]["local"], **common))
        got = spark_rows(_load(spark, _tiered_address(tiers), **common,
                               **{"lookupd.remote.encryption.keys": keys}))
        assert len(want) > 1000 and got == want, extra


def _record(partition: str, at: float) -> dict:
    """The reference record `at` of the way through the partition."""
    records = R.answers(partition)["records"]
    return records[int(len(records) * at)]


def test_remote_pieces_are_read_from_the_bucket_without_a_daemon(tiers):
    """Splits of the fully tiered topic, read with their daemon address pointing at nothing: every piece is
    remote, read by ranged GETs, and the rows are the local copy's (offset range cut inside segments)."""
    splits = _splits(tiers["socks"]["full"], subscribe="compressed", maxBytesPerSplit=str(SMALL_SPLIT),
                     startingOffsets=json.dumps({"compressed": {"0": 123}}))
    assert len(splits) > 3 and all(p.key is not None and p.path.startswith("s3://") for s in splits for p in s.pieces)
    nowhere = os.path.join(tiers["root"], "nobody.sock")
    got = _read([_moved(s, nowhere) for s in splits])
    want = _read(_splits(tiers["socks"]["local"], subscribe="compressed",
                         startingOffsets=json.dumps({"compressed": {"0": 123}})))
    assert got == want and got[0][0] == 123


def _moved(split, address):
    split.address = address
    return split


def test_a_remote_segment_deleted_by_retention_mid_read_is_data_loss(s3_server, tmp_path):  # noqa: F811
    """Planned, then retention deletes the first remote segment: with failOnDataLoss the read fails naming
    the offsets; without, its records are skipped and every other record read once."""
    R.require()
    t = tier_partition(tmp_path / "t", R.log_dir("plain-0"), s3_server, cut=4)
    root = tempfile.mkdtemp(prefix="lkdl", dir="/tmp")
    try:
        conf = _config(os.path.join(root, "c.toml"), t)
        with running_daemon([str(t.tiered_dir)], os.path.join(root, "a.sock"), config=conf):
            splits = _splits(os.path.join(root, "a.sock"), subscribe="plain", maxBytesPerSplit=str(SMALL_SPLIT))
        gone = t.uploaded[0]
        client = s3_server.client()
        for k in (gone.manifest_key, gone.log_key, gone.indexes_key):
            client.delete_object(Bucket=t.config.bucket, Key=k)
        # The daemon's next listing no longer has the segment (a new daemon lists the bucket now).
        with running_daemon([str(t.tiered_dir)], os.path.join(root, "b.sock"), config=conf):
            moved = [_moved(s, os.path.join(root, "b.sock")) for s in splits]
            with pytest.raises(DataLossError, match="plain-0"):
                _read(moved)
            got = _read(moved, failOnDataLoss="false")
    finally:
        shutil.rmtree(root, True)
    lost_end = t.uploaded[1].facts.base_offset
    want = [r for r in _read(_splits_local(t, root_prefix="lkdm")) if r[0] >= lost_end]
    assert got == want and len(want) > 100


def _splits_local(t, root_prefix: str):
    root = tempfile.mkdtemp(prefix=root_prefix, dir="/tmp")
    try:
        with running_daemon([str(t.local_dir)], os.path.join(root, "l.sock")):
            splits = _splits(os.path.join(root, "l.sock"), subscribe=t.topic)
            return [_moved(s, os.path.join(root, "nobody.sock")) for s in splits]  # local files only
    finally:
        shutil.rmtree(root, True)


def test_a_store_fault_is_a_clear_error(tiers):
    """The bucket refusing the executors' GETs (403, through a fault proxy named by
    lookupd.remote.endpoint_url): the read fails with UNAUTHORIZED naming the object."""
    with FaultProxy(tiers["full"].config.endpoint_url) as proxy:
        proxy.inject("GET", r"\.log$", "403")
        splits = _splits(tiers["socks"]["full"], subscribe="compressed",
                         **{"lookupd.remote.endpoint_url": proxy.url})
        assert splits[0].remote.endpoint_url == proxy.url
        with pytest.raises(Unauthorized, match=r"compressed-.*\.log"):
            _read(splits[:1])


def test_a_partition_the_daemon_cannot_read_is_a_clear_error_when_read(tiers):
    """broken-0 is listed with an `error`: reading it names it; reading other topics ignores it."""
    with pytest.raises(PartitionUnreadable, match="broken-0 cannot be read.*CORRUPT_DATA"):
        _splits(tiers["socks"]["local"], subscribe="broken")
    with pytest.raises(PartitionUnreadable, match="broken-0"):
        _splits(tiers["socks"]["local"], subscribePattern="b.*")
    assert _splits(tiers["socks"]["local"], subscribe="txn")


def test_a_stream_from_earliest_walks_from_the_bucket_into_local_segments(spark, s3_server, tmp_path):  # noqa: F811
    """A topic whose rolled segments are in the bucket: a query from `earliest` reads them, then the local
    ones, then what is appended while it runs: every record exactly once."""
    root = tempfile.mkdtemp(prefix="lkwk", dir="/tmp")
    try:
        t = LiveTopic(root, os.path.join(root, "d.sock"), "walk")
        t.append(0, 600)
        part = Path(root, "walk-0")
        topic_id = kafka_uuid()
        write_partition_metadata(part, topic_id)
        bucket = s3_server.bucket()
        rolled = local_segments(part)[:-1]
        upload_partition(s3_server.client(), bucket, part, topic_id=topic_id, segments=rolled[:-2])
        for base in rolled[:-2]:  # local retention, after the upload
            for suffix in (".log", ".index", ".timeindex"):
                os.remove(os.path.join(part, f"{base:020d}{suffix}"))
        conf = os.path.join(root, "d.toml")
        with open(conf, "w") as f:
            f.write(f'rescan_interval_s = 0.2\n[remote]\nbucket = "{bucket}"\n'
                    f'endpoint_url = "{s3_server.endpoint_url}"\ncache_dir = "{root}/cache"\n')
        with running_daemon([root], t.address, config=conf):
            t.wait_visible(0)
            sink = Batches()
            q = stream(spark, t.address, subscribe="walk", startingOffsets="earliest", maxOffsetsPerTrigger="250") \
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()
            try:
                q.processAllAvailable()
                for _ in range(2):
                    t.append(0, 100)
                    t.wait_visible(0)
                    q.processAllAvailable()
            finally:
                q.stop()
            assert q.exception() is None
        t.close()
        got = sink.records("walk")[0]
        assert [r[0] for r in got] == [r[0] for r in t.records[0]] and len(got) == 800
        assert got == t.records[0] and len(sink.batches) >= 4
    finally:
        shutil.rmtree(root, True)

