"""Tiered storage, the object-store half: S3 clients on ranged GETs, a sequential read through
RemoteSegmentData against plain ranged GETs of the same objects, and what a cold index fetch costs.

Against a real S3 server on this machine (SeaweedFS `weed mini`, started here), so the network is the
loopback: the figures show client and decoding overhead, not a WAN. The segment is Kafka-written
(the reference corpus's large-0, 14.8 MB), uploaded in the tiered-storage plugin's layout in 4 MiB chunks.

Run: python bench/bench_remote.py [--quick] [--json OUT]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

CHUNK = 4 * 1024 * 1024   # the plugin's usual chunk.size
STEP = 1024 * 1024        # how much each read asks for (a Kafka fetch's max.partition.fetch.bytes)
VARIANTS = {"plain": {}, "zstd+encrypted": {"compression": True, "encryption": True}}


def _segment():
    import reference as R

    d = R.log_dir("large-0")
    return d, 0


def _clients(server, bucket: str, key: str):
    """name -> get(start, end) for each candidate client, all with the test credentials from the env."""
    import boto3
    import botocore.config
    import pyarrow.fs as pafs

    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    b3 = boto3.client("s3", endpoint_url=server.endpoint_url,
                      config=botocore.config.Config(s3={"addressing_style": "path"}, max_pool_connections=16))
    fs = pafs.S3FileSystem(endpoint_override=server.endpoint_url, scheme="http", region="us-east-1")
    f = fs.open_input_file(f"{bucket}/{key}")
    return {
        "obstore": lambda a, b: store.get_range_buffer(key, a, b),
        "boto3": lambda a, b: b3.get_object(Bucket=bucket, Key=key, Range=f"bytes={a}-{b - 1}")["Body"].read(),
        "pyarrow": lambda a, b: f.read_at(b - a, a),
    }


def client_figures(server, bucket: str, key: str, size: int, times: int) -> list[Figure]:
    """MB/s of sequential ranged GETs of `size`-byte ranges per client, interleaved to share the noise."""
    clients = _clients(server, bucket, key)
    out = []
    for rng in (64 * 1024, CHUNK):
        n = min(size // rng, 64)
        values = {name: [] for name in clients}
        for _ in range(times + 1):
            for name, get in clients.items():
                t0 = time.perf_counter()
                for i in range(n):
                    get(i * rng, (i + 1) * rng)
                values[name].append(n * rng / (time.perf_counter() - t0) / 1e6)
        for name, v in values.items():
            out.append(Figure(f"S3 client {name}, sequential ranged GETs of {rng // 1024} KiB", "MB/s", v[1:],
                              group="remote-clients", params={"client": name, "range": rng},
                              higher_is_better=True))
    return out


def sequential_figures(server, bucket: str, up, key, times: int, variant: str) -> list[Figure]:
    """A whole-segment sequential read through RemoteSegmentData (cold cache) against plain ranged GETs
    of the same `.log` object, chunk by chunk with one GET ahead (the read path's reader + read-ahead)."""
    from lookupd.log.remote import segmentdata
    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.diskcache import DiskCache
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    keyring = Keyring({key.key_id: key.pem_path} if key else {})  # one per daemon: its PEM is loaded once
    original = up.segment.stat().st_size
    obj_size = store.size(up.log_key)
    ours, plain = [], []
    for rep in range(times + 1):
        cache_dir = tempfile.mkdtemp(prefix="lookupd-bench-cache-")
        try:
            cache = DiskCache(cache_dir, 10 ** 9)
            seg = segmentdata.open_segment(store, up.log_key, keyring, cache)
            t0 = time.perf_counter()
            position = 0
            while position < seg.size:
                position += len(seg.read(position, STEP, sequential=True))
            ours.append(original / (time.perf_counter() - t0) / 1e6)
            cache.flush()
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        t0 = time.perf_counter()
        ranges = [(a, min(a + CHUNK, obj_size)) for a in range(0, obj_size, CHUNK)]
        with ThreadPoolExecutor(2) as pool:
            for _ in pool.map(lambda r: store.get_range_buffer(up.log_key, *r), ranges):
                pass
        plain.append(original / (time.perf_counter() - t0) / 1e6)
    params = {"variant": variant, "segment_bytes": original, "object_bytes": obj_size, "chunk": CHUNK}
    decode = []
    if seg.manifest.compression or seg.manifest.encryption:
        blobs = [bytes(store.get_range_buffer(up.log_key, *seg.manifest.chunk_index.transformed_span(i, i)))
                 for i in range(seg.manifest.chunk_index.chunk_count)]
        for _ in range(times + 1):
            t0 = time.perf_counter()
            for i, blob in enumerate(blobs):
                seg._decode(i, memoryview(blob))
            decode.append(original / (time.perf_counter() - t0) / 1e6)
        decode = [Figure(f"remote sequential read, {variant}, decoding only (one thread, in memory)", "MB/s",
                         decode[1:], group="remote-read", params={**params, "path": "decode only"},
                         higher_is_better=True)]
    return decode + [Figure(f"remote sequential read, {variant}, through RemoteSegmentData", "MB/s", ours[1:],
                   group="remote-read", params={**params, "path": "lookupd"}, higher_is_better=True),
            Figure(f"remote sequential read, {variant}, plain ranged GETs", "MB/s", plain[1:],
                   group="remote-read", params={**params, "path": "plain GETs"}, higher_is_better=True)]


def cold_index_figures(server, bucket: str, up, key, variant: str) -> list[Figure]:
    """Cold: the manifest, the offset and time indexes, then the chunk a lookup lands in: GETs and bytes."""
    from lookupd.log.remote import segmentdata
    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.diskcache import DiskCache
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    cache_dir = tempfile.mkdtemp(prefix="lookupd-bench-cache-")
    try:
        seg = segmentdata.open_segment(store, up.log_key, Keyring({key.key_id: key.pem_path} if key else {}),
                                       DiskCache(cache_dir, 10 ** 9))
        seg.index_paths(["offset", "timestamp"])
        seg.read(seg.size // 2, 16 * 1024)  # the batch the index entry points at
        return [Figure(f"cold index fetch + one batch read, {variant}: GETs", "GETs", [store.requests],
                       group="remote-cold", params={"variant": variant}),
                Figure(f"cold index fetch + one batch read, {variant}: bytes fetched", "bytes",
                       [store.bytes_fetched], group="remote-cold", params={"variant": variant})]
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def run(quick: bool) -> list[Figure]:
    import s3server
    import tiered_writer as W

    times = 3 if quick else 7
    server = s3server.start_server()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID=s3server.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=s3server.SECRET_KEY,
                      AWS_REGION=s3server.REGION)
    keydir = tempfile.mkdtemp(prefix="lookupd-bench-keys-")
    figures: list[Figure] = []
    try:
        key = W.TestKey.create(keydir)
        partition_dir, base = _segment()
        client = server.client()
        for variant, kw in VARIANTS.items():
            bucket = server.bucket()
            opts = W.Options(chunk_size=CHUNK, compression=kw.get("compression", False),
                             encryption=key if kw.get("encryption") else None)
            up = W.upload_segment(client, bucket, partition_dir, base, topic="large", partition=0,
                                  topic_id=W.kafka_uuid(), opts=opts)
            if variant == "plain":
                figures += client_figures(server, bucket, up.log_key, up.segment.stat().st_size, times)
            figures += sequential_figures(server, bucket, up, key if opts.encryption else None, times, variant)
            figures += cold_index_figures(server, bucket, up, key if opts.encryption else None, variant)
    finally:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)
        shutil.rmtree(keydir, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    out = []
    for variant in VARIANTS:
        out.append(ratio(f"remote sequential read vs plain ranged GETs, {variant}", figures,
                         f"remote sequential read, {variant}, through RemoteSegmentData",
                         f"remote sequential read, {variant}, plain ranged GETs",
                         "MB/s of a whole-segment read through RemoteSegmentData over plain ranged GETs of the "
                         "same object with the same client, two in flight (target: at least 0.8)"))
    for size in (64, CHUNK // 1024):
        out.append(ratio(f"S3 client obstore vs boto3, {size} KiB ranged GETs", figures,
                         f"S3 client obstore, sequential ranged GETs of {size} KiB",
                         f"S3 client boto3, sequential ranged GETs of {size} KiB",
                         "MB/s of obstore (lookupd's client) over boto3 (above 1: faster)"))
    return out


if __name__ == "__main__":
    common.main(run, __doc__)
