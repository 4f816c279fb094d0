"""Uploads local Kafka partitions in the Aiven tiered-storage plugin's layout, as its RemoteStorageManager
would: the writing side of lookupd/log/remote (which only reads), for `lookupd demo-data --tiered` and the
tests. It writes only into the bucket it is given, never into a log dir.

Per segment: `<prefix><topic>-<topicId>/<partition>/<20-digit offset>-<segmentId>.log` (the segment in
chunks, each optionally zstd-compressed then AES-256-GCM encrypted with a 12-byte IV in front), `.indexes`
(offset, time, producer-snapshot, leader-epoch and optional transaction indexes, each AES-GCM encrypted as
one chunk when encryption is on), and `.rsm-manifest` last. The data key is wrapped with RSA-OAEP
(SHA3-512, MGF1-SHA3-512, empty label), written here independently of lookupd's decoder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import zstandard
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lookupd.format.batch import max_timestamp_at, parse_header, whole_frames
from lookupd.format.names import (INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, PARTITION_METADATA,
                                  SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, filename_prefix, parse_segment_file)

H_LEN = 64


# -- key wrapping (RFC 8017 §7.1.1, SHA3-512) -----------------------------------------------------------------

def _mgf1(seed: bytes, length: int, digest=hashlib.sha3_512) -> bytes:
    out = b""
    for counter in range(-(-length // H_LEN)):
        out += digest(seed + struct.pack(">I", counter)).digest()
    return out[:length]


def oaep_wrap(public_key: rsa.RSAPublicKey, message: bytes, seed: bytes | None = None,
              mgf_digest=hashlib.sha3_512) -> bytes:
    """RSAES-OAEP-ENCRYPT with SHA3-512 and MGF1-SHA3-512, empty label (`mgf_digest`: another 64-byte
    digest for MGF1, for tests that a decoder really uses SHA3-512 there)."""
    n, e = public_key.public_numbers().n, public_key.public_numbers().e
    k = (n.bit_length() + 7) // 8
    if len(message) > k - 2 * H_LEN - 2:
        raise ValueError("message too long")
    db = hashlib.sha3_512(b"").digest() + b"\0" * (k - len(message) - 2 * H_LEN - 2) + b"\1" + message
    seed = os.urandom(H_LEN) if seed is None else seed
    masked_db = bytes(a ^ b for a, b in zip(db, _mgf1(seed, k - H_LEN - 1, mgf_digest)))
    masked_seed = bytes(a ^ b for a, b in zip(seed, _mgf1(masked_db, H_LEN, mgf_digest)))
    em = b"\0" + masked_seed + masked_db
    return pow(int.from_bytes(em, "big"), e, n).to_bytes(k, "big")


@dataclass
class WrappingKey:
    """An RSA key pair for wrapping data keys; `pem_path` is what [remote.encryption.keys] names."""

    key_id: str
    pem_path: str
    private_key: rsa.RSAPrivateKey

    @classmethod
    def create(cls, directory: str | os.PathLike, key_id: str = "key-1", bits: int = 2048) -> WrappingKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        path = os.path.join(directory, f"{key_id}.pem")
        with open(path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        return cls(key_id, path, key)


# -- chunk sizes (ChunkSizesBinaryCodec.encode) -----------------------------------------------------------------

def encode_chunk_sizes(values: list[int]) -> bytes:
    if len(values) <= 1:
        return struct.pack(f">i{len(values)}i", len(values), *values)
    base = min(values[:-1])
    width = max(max(1, ((v - base).bit_length() + 7) // 8) for v in values[:-1])
    body = b"".join((v - base).to_bytes(width, "big") for v in values[:-1])
    return struct.pack(">iib", len(values), base, width) + body + struct.pack(">i", values[-1])


def kafka_uuid(raw: bytes | None = None) -> str:
    """A Kafka Uuid in its 22-character base64url form."""
    raw = uuid.uuid4().bytes if raw is None else raw
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# -- a segment's facts ------------------------------------------------------------------------------------

@dataclass
class SegmentFacts:
    base_offset: int
    end_offset: int         # the last offset in the segment
    max_timestamp: int
    leader_epochs: dict[int, int]  # epoch -> first offset in the segment


def segment_facts(log_path: Path, base_offset: int) -> SegmentFacts:
    data = log_path.read_bytes()
    end, max_ts, epochs = base_offset - 1, -1, {}
    for pos, _size in whole_frames(data, path=log_path):
        h = parse_header(data, pos, path=log_path)
        end = max(end, h.last_offset)
        max_ts = max(max_ts, max_timestamp_at(data, pos))
        epoch = h.partition_leader_epoch if h.magic >= 2 else 0
        if epoch >= 0 and epoch not in epochs:
            epochs[epoch] = h.base_offset
    return SegmentFacts(base_offset, end, max_ts, epochs or {0: base_offset})


def checkpoint_bytes(epochs: dict[int, int]) -> bytes:
    """A leader-epoch checkpoint (version 0) holding `epochs`, as the plugin's leader-epoch index."""
    lines = ["0", str(len(epochs))] + [f"{e} {o}" for e, o in sorted(epochs.items())]
    return ("\n".join(lines) + "\n").encode()


# -- what the broker leaves beside the bucket ---------------------------------------------------------------

def write_partition_metadata(partition_dir: str | os.PathLike, topic_id: str) -> None:
    """`partition.metadata` exactly as PartitionMetadataFile writes it (no final newline)."""
    with open(os.path.join(os.fspath(partition_dir), PARTITION_METADATA), "w") as f:
        f.write(f"version: 0\ntopic_id: {topic_id}")


def write_leader_epoch_checkpoint(partition_dir: str | os.PathLike, entries: Iterable[tuple[int, int]]) -> None:
    """`leader-epoch-checkpoint`: version 0, the count, then `epoch start-offset` lines."""
    entries = list(entries)
    with open(os.path.join(os.fspath(partition_dir), LEADER_EPOCH_CHECKPOINT), "w") as f:
        f.write(f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries))


# -- the upload -------------------------------------------------------------------------------------------

@dataclass
class Options:
    chunk_size: int = 4096
    compression: bool = False
    encryption: WrappingKey | None = None
    variable_index: bool = False   # forced on by compression, as in the plugin
    with_metadata: bool = True     # remoteLogSegmentMetadata (plugin releases since Sept 2023)
    prefix: str = ""


@dataclass
class Uploaded:
    log_key: str
    indexes_key: str
    manifest_key: str
    segment: Path
    manifest: dict
    facts: SegmentFacts
    indexes: dict[str, bytes] = field(default_factory=dict)  # kind -> original index bytes


def _encrypt(aes: AESGCM, aad: bytes, data: bytes) -> bytes:
    iv = os.urandom(12)
    return iv + aes.encrypt(iv, data, aad)


def transform_chunks(data: bytes, opts: Options, aes: AESGCM | None, aad: bytes) -> tuple[list[bytes], dict]:
    """The `.log` object's chunks and the manifest's chunkIndex."""
    chunks = []
    for start in range(0, len(data), opts.chunk_size):
        chunk = data[start:start + opts.chunk_size]
        if opts.compression:
            chunk = zstandard.ZstdCompressor(write_content_size=True).compress(chunk)
        if aes is not None:
            chunk = _encrypt(aes, aad, chunk)
        chunks.append(chunk)
    index = {"originalChunkSize": opts.chunk_size, "originalFileSize": len(data)}
    if opts.compression or opts.variable_index:
        packed = zstandard.ZstdCompressor(write_content_size=True).compress(
            encode_chunk_sizes([len(c) for c in chunks]))
        index = {"type": "variable", **index, "transformedChunks": base64.b64encode(packed).decode()}
    else:
        overhead = 28 if aes is not None else 0
        final = len(chunks[-1]) if chunks else 0
        index = {"type": "fixed", **index, "transformedChunkSize": opts.chunk_size + overhead,
                 "finalTransformedChunkSize": final}
    return chunks, index


def upload_segment(client, bucket: str, partition_dir: Path, base_offset: int, *, topic: str, partition: int,
                   topic_id: str, opts: Options, epochs: dict[int, int] | None = None,
                   segment_id: str | None = None) -> Uploaded:
    """Upload one local segment (its .log and indexes) in the plugin's layout; the manifest goes last."""
    stem = filename_prefix(base_offset)
    log_path = partition_dir / f"{stem}{LOG_SUFFIX}"
    data = log_path.read_bytes()
    facts = segment_facts(log_path, base_offset)
    segment_id = segment_id or kafka_uuid()
    epochs = epochs if epochs is not None else facts.leader_epochs  # the leader-epoch index and the metadata
    main = f"{opts.prefix}{topic}-{topic_id}/{partition}/{stem}-{segment_id}"
    aes, aad, enc = None, b"", None
    if opts.encryption is not None:
        data_key, aad = os.urandom(32), os.urandom(32)
        aes = AESGCM(data_key)
        wrapped = oaep_wrap(opts.encryption.private_key.public_key(), data_key)
        enc = {"dataKey": f"{opts.encryption.key_id}:{base64.b64encode(wrapped).decode()}",
               "aad": base64.b64encode(aad).decode()}

    chunks, chunk_index = transform_chunks(data, opts, aes, aad)
    client.put_object(Bucket=bucket, Key=f"{main}.log", Body=b"".join(chunks))

    def local(suffix: str) -> bytes | None:
        p = partition_dir / f"{stem}{suffix}"
        return p.read_bytes() if p.exists() else None

    originals = {"offset": local(INDEX_SUFFIX) or b"", "timestamp": local(TIME_INDEX_SUFFIX) or b"",
                 "producer_snapshot": local(SNAPSHOT_SUFFIX) or b"",
                 "leader_epoch": checkpoint_bytes(epochs),
                 "transaction": local(TXN_INDEX_SUFFIX)}
    names = {"offset": "offset", "timestamp": "timestamp", "producer_snapshot": "producerSnapshot",
             "leader_epoch": "leaderEpoch", "transaction": "transaction"}
    segment_indexes, parts, position = {}, [], 0
    for kind, raw in originals.items():
        if raw is None:
            segment_indexes[names[kind]] = None
            continue
        stored = _encrypt(aes, aad, raw) if aes is not None and raw else raw
        segment_indexes[names[kind]] = {"position": position, "size": len(stored)}
        parts.append(stored)
        position += len(stored)
    client.put_object(Bucket=bucket, Key=f"{main}.indexes", Body=b"".join(parts))

    manifest = {"version": "1", "chunkIndex": chunk_index, "segmentIndexes": segment_indexes,
                "compression": opts.compression}
    if enc is not None:
        manifest["encryption"] = enc
    if opts.with_metadata:
        manifest["remoteLogSegmentMetadata"] = {
            "remoteLogSegmentId": {"topicIdPartition": {"topicId": topic_id, "topicPartition": {
                "topic": topic, "partition": partition}}, "id": segment_id},
            "startOffset": base_offset, "endOffset": facts.end_offset, "maxTimestampMs": facts.max_timestamp,
            "brokerId": 0, "eventTimestampMs": 1_700_000_000_000,
            "segmentLeaderEpochs": {str(e): o for e, o in sorted(epochs.items())}}
    client.put_object(Bucket=bucket, Key=f"{main}.rsm-manifest", Body=json.dumps(manifest).encode())
    return Uploaded(f"{main}.log", f"{main}.indexes", f"{main}.rsm-manifest", log_path, manifest, facts,
                    {k: v for k, v in originals.items() if v is not None})


def local_segments(partition_dir: Path) -> list[int]:
    found = (parse_segment_file(p.name) for p in partition_dir.iterdir())
    return sorted(base for base, suffix in filter(None, found) if suffix == LOG_SUFFIX)


def topic_id_of(partition_dir: Path) -> str | None:
    """The topic id in `partition.metadata` (`version: 0\\ntopic_id: <id>`), None without one."""
    p = partition_dir / PARTITION_METADATA
    if not p.exists():
        return None
    for line in p.read_text().splitlines():
        if line.startswith("topic_id:"):
            return line.split(":", 1)[1].strip()
    return None


def upload_partition(client, bucket: str, partition_dir: str | os.PathLike, *, topic: str | None = None,
                     partition: int | None = None, topic_id: str | None = None,
                     segments: list[int] | None = None, opts: Options | None = None) -> list[Uploaded]:
    """Upload a partition's segments (default: every rolled one, i.e. all but the active last)."""
    partition_dir = Path(partition_dir)
    name_topic, _, name_partition = partition_dir.name.rpartition("-")
    topic = topic if topic is not None else name_topic
    partition = partition if partition is not None else int(name_partition)
    topic_id = topic_id or topic_id_of(partition_dir) or kafka_uuid(hashlib.sha256(topic.encode()).digest()[:16])
    bases = local_segments(partition_dir)
    chosen = segments if segments is not None else bases[:-1]
    return [upload_segment(client, bucket, partition_dir, b, topic=topic, partition=partition, topic_id=topic_id,
                           opts=opts or Options()) for b in chosen]
