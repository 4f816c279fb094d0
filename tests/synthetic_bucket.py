"""Test and bench support: many uploads at once in the plugin's layout, and the objects a hostile or broken
uploader could put beside them (tests/test_hostile_bucket.py, bench/bench_hostile.py).

`put_objects` PUTs many objects concurrently (obstore's async client: about 1,000 a second against `weed mini`
on 2 cores, where boto3 one at a time does 300). `synthetic_segments` writes uploads whose manifests carry
their metadata (offsets, timestamps, epochs) over tiny `.log` objects: enough for a listing and for the
answers that come from the listing (`partitions`), not for reading their records. `local_tail` writes a
local partition starting at a given offset, so that thousands of remote segments fit below it.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os

import zstandard

from remote_metadata_writer import copied, write_metadata_topic

from lookupd.format.builder import build_batch
from lookupd.log.tiered.layout import RemotePartition, SegmentKeys
from lookupd.log.remote.manifest import MAX_CHUNKS, MAX_MANIFEST_BYTES
from lookupd.tools.tieredwriter import (encode_chunk_sizes, kafka_uuid, write_leader_epoch_checkpoint,
                                       write_partition_metadata)
from lookupd.tools.writer import LogWriter

TIMESTAMP0 = 1_700_000_000_000
FAKE_LOG = b"\0" * 64  # a synthetic upload's `.log` object (its records are never read)


def put_objects(endpoint: str, bucket: str, objects: dict[str, bytes], in_flight: int = 64) -> None:
    """PUT every key -> body, `in_flight` at a time, with the credentials in the environment."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=endpoint, region="us-east-1", client_options={"allow_http": True})

    refused = []  # keys obstore cannot represent (a newline, say): put with boto3, which takes any

    async def put_all() -> None:
        gate = asyncio.Semaphore(in_flight)

        async def one(key: str, body: bytes) -> None:
            async with gate:
                try:
                    await obstore.put_async(store, key, body)
                except ValueError:
                    refused.append(key)

        await asyncio.gather(*(one(k, v) for k, v in objects.items()))

    asyncio.run(put_all())
    if refused:
        import boto3
        import botocore.config

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              config=botocore.config.Config(s3={"addressing_style": "path"}))
        for key in refused:
            client.put_object(Bucket=bucket, Key=key, Body=objects[key])


def index_entries(**sizes: int) -> dict:
    """segmentIndexes with the given sizes (default 0), laid end to end; the transaction index absent."""
    out, position = {}, 0
    for name in ("offset", "timestamp", "producerSnapshot", "leaderEpoch"):
        size = sizes.get(name, 0)
        out[name] = {"position": position, "size": size}
        position += size
    out["transaction"] = None
    return out


def fixed_manifest(file_size: int, chunk_size: int = 4096, transformed: int | None = None,
                   metadata: dict | None = None) -> dict:
    """A manifest of an untransformed segment in fixed chunks (`transformed`: the chunks' stored size)."""
    last = file_size - (file_size - 1) // chunk_size * chunk_size if file_size else 0
    doc = {"version": "1", "compression": False, "segmentIndexes": index_entries(),
           "chunkIndex": {"type": "fixed", "originalChunkSize": chunk_size, "originalFileSize": file_size,
                          "transformedChunkSize": transformed or chunk_size, "finalTransformedChunkSize": last}}
    if metadata is not None:
        doc["remoteLogSegmentMetadata"] = metadata
    return doc


def variable_manifest(sizes: list[int], chunk_size: int, file_size: int, compression: bool = True) -> dict:
    packed = zstandard.ZstdCompressor(write_content_size=True).compress(encode_chunk_sizes(sizes))
    return {"version": "1", "compression": compression, "segmentIndexes": index_entries(),
            "chunkIndex": {"type": "variable", "originalChunkSize": chunk_size, "originalFileSize": file_size,
                           "transformedChunks": base64.b64encode(packed).decode()}}


def metadata(keys: SegmentKeys, end_offset: int, max_timestamp: int, epochs: dict[int, int]) -> dict:
    """remoteLogSegmentMetadata as the plugin writes it."""
    p = keys.partition
    return {"remoteLogSegmentId": {"topicIdPartition": {"topicId": p.topic_id, "topicPartition": {
                "topic": p.topic, "partition": p.partition}}, "id": keys.segment_id},
            "startOffset": keys.start_offset, "endOffset": end_offset, "maxTimestampMs": max_timestamp,
            "brokerId": 0, "eventTimestampMs": TIMESTAMP0, "segmentLeaderEpochs": {str(e): o for e, o in epochs.items()}}


def upload_objects(keys: SegmentKeys, manifest: bytes | dict, log: bytes = FAKE_LOG, indexes: bytes = b"") -> dict:
    """The three objects of one upload, key -> body."""
    body = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return {keys.log: log, keys.indexes: indexes, keys.manifest: body}


def synthetic_segments(rp: RemotePartition, count: int, span: int, prefix: str = "",
                       epoch: int = 0) -> tuple[list[SegmentKeys], dict[str, bytes], list[bytes]]:
    """`count` uploads of `span` offsets each from offset 0, one a second apart in time: their keys, their
    objects (for put_objects) and the `__remote_log_metadata` records a broker would have written of them."""
    keys, objects, events = [], {}, []
    for i in range(count):
        k = SegmentKeys(i * span, kafka_uuid(), rp, prefix)
        end, ts = (i + 1) * span - 1, TIMESTAMP0 + i * 1000
        objects.update(upload_objects(k, fixed_manifest(len(FAKE_LOG), metadata=metadata(k, end, ts, {epoch: k.start_offset}))))
        events += copied(rp.topic, rp.topic_id, rp.partition, k.segment_id, start_offset=k.start_offset,
                         end_offset=end, max_timestamp=ts, leader_epochs=[(epoch, k.start_offset)], size=len(FAKE_LOG))
        keys.append(k)
    return keys, objects, events


def local_tail(log_dir: str | os.PathLike, topic: str, partition: int, base_offset: int, *, topic_id: str,
               records: int = 200, epoch: int = 0, events: list[bytes] | None = None) -> str:
    """A local partition `<topic>-<partition>` whose records start at `base_offset` (two segments, the
    second active), with its topic id and a leader-epoch checkpoint from offset 0; `events`: written to
    `__remote_log_metadata-0` beside it. Returns the partition directory."""
    directory = os.path.join(os.fspath(log_dir), f"{topic}-{partition}")
    writer = LogWriter(directory)
    for i in range(records):
        offset = base_offset + i
        if i == records // 2:
            writer.roll(offset)
        writer.append(build_batch([(TIMESTAMP0 + offset, b"k%d" % offset, b"v%d" % offset, ())], base_offset=offset,
                                  partition_leader_epoch=epoch))
    writer.close()
    write_partition_metadata(directory, topic_id)
    write_leader_epoch_checkpoint(directory, [(epoch, 0)])
    if events:
        write_metadata_topic(log_dir, events, per_batch=200)
    return directory


# ------------------------------------------------------------------------- the objects of issue #39's table


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=True).compress(data)


def deep_json() -> bytes:  # row 1
    return b"[" * 100_000


def huge_integer() -> bytes:  # row 1
    doc = fixed_manifest(len(FAKE_LOG))
    return json.dumps(doc).replace('"originalFileSize": 64', '"originalFileSize": ' + "9" * 5000).encode()


def tiny_chunks() -> tuple[bytes, bytes]:  # row 3: 1-byte chunks (more of them than MAX_CHUNKS, too)
    size = MAX_CHUNKS + 1
    return json.dumps(fixed_manifest(size, chunk_size=1)).encode(), b"x" * size


@functools.lru_cache(maxsize=1)
def bomb_chunk() -> tuple[bytes, bytes]:  # row 4: a small zstd chunk that declares 64 MiB
    chunk = _zstd(bytes(64 << 20))
    return json.dumps(variable_manifest([len(chunk)], 64 << 20, 64 << 20)).encode(), chunk


def past_int64(keys: SegmentKeys) -> bytes:  # row 5
    doc = fixed_manifest(len(FAKE_LOG), metadata=metadata(keys, 2 ** 63, 2 ** 64, {0: keys.start_offset}))
    return json.dumps(doc).encode()


def many_chunk_sizes() -> bytes:  # row 7: 2 KB declaring 10.5 million chunk sizes
    count = 10_500_000
    raw = count.to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\1" + bytes(count - 1) + (1).to_bytes(4, "big")
    doc = variable_manifest([], 1024, 1024 * 1000)  # the chunk index says 1,000 chunks; the list declares more
    doc["chunkIndex"]["transformedChunks"] = base64.b64encode(_zstd(raw)).decode()
    return json.dumps(doc).encode()


def big_manifest() -> bytes:  # row 11 (2 MiB: above MAX_MANIFEST_BYTES as 256 MiB is)
    return b" " * (2 * MAX_MANIFEST_BYTES) + json.dumps(fixed_manifest(len(FAKE_LOG))).encode()


MANIFESTS = {"deep JSON": deep_json, "a 5,000-digit integer": huge_integer, "1-byte chunks": tiny_chunks,
             "a zstd bomb chunk": bomb_chunk, "offsets past int64": past_int64,
             "10.5 million chunk sizes": many_chunk_sizes, "a 2 MiB manifest": big_manifest}


def alone(topic: str = "rogue") -> RemotePartition:
    """A partition directory of a topic only in the bucket (a new topic id each time)."""
    return RemotePartition(topic, 0, kafka_uuid())


def upload_of(kind: str, keys: SegmentKeys) -> dict[str, bytes]:
    """The objects of an upload at `keys` whose manifest is MANIFESTS[kind]."""
    made = MANIFESTS[kind](keys) if kind == "offsets past int64" else MANIFESTS[kind]()
    manifest, log = made if isinstance(made, tuple) else (made, FAKE_LOG)
    return upload_objects(keys, manifest, log)
