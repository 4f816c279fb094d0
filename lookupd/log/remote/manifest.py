"""The segment manifest (`.rsm-manifest`): JSON, version "1", as the plugin's SegmentManifestV1 writes it.

It says how the `.log` object is chunked (chunkIndex, fixed or variable), where each index sits in the
`.indexes` object (segmentIndexes), whether chunks are zstd-compressed, and, when encrypted, the wrapped
AES data key and the AAD. Anything that breaks the format is a CorruptDataError naming the object key.

A manifest comes from the bucket, which anyone who can write under the prefix controls: its size, nesting,
integers, chunk sizes and chunk count are bounded (the limits below, each with its reason) before anything
is sized from them, so a hostile one costs one CORRUPT_DATA, never memory or time out of proportion.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import struct
from array import array
from dataclasses import dataclass

import zstandard

from ...errors import INT64_MAX, INT64_MIN, CorruptDataError

INT32_MAX = 2 ** 31 - 1                   # the plugin keeps sizes and positions in Java ints
# A smaller chunk is refused (in a segment of more than one): reading a chunk costs a cache entry, a future and
# a place in a GET plan, a few hundred bytes and tens of microseconds of Python, so below 1 KiB the bookkeeping
# outweighs the bytes (1-byte chunks made one 1 MiB read take a minute and gigabytes). The plugin's docs start
# chunk.size at 4 MiB.
MIN_CHUNK_BYTES = 1024
# A segment of more chunks is refused: each chunk read costs a cache entry, a future and a place in a GET plan
# (hundreds of bytes, microseconds of Python), so one read or one manifest stays within a few MiB and well
# under a second. 65,536 chunks are a 2 GiB segment (Kafka's largest) in 32 KiB chunks, or a 1 GiB one (its
# default) in 16 KiB chunks; the plugin's docs start chunk.size at 4 MiB.
MAX_CHUNKS = 65_536
# A bigger chunk is refused: a chunk is decoded (and cached) whole, and its declared size is what a decoder
# allocates, so one stays within the memory one ranged GET may take (chunks.MAX_GET_BYTES). The plugin
# accepts chunk.size up to 1 GiB, but recommends starting at 4 MiB: this is 8 times that.
MAX_CHUNK_BYTES = 32 * 1024 * 1024
# What the plugin's transforms may add to a chunk: zstd's worst case (1/256 of it, plus frame and block
# headers) and AES-GCM's 12-byte IV and 16-byte tag. A transformed chunk larger than that is not the plugin's.
TRANSFORM_SLACK_BYTES = 1024
# The decoded chunk-size list of MAX_CHUNKS chunks: count, base and width, then at most 4 bytes a chunk.
MAX_CHUNK_SIZES_BYTES = 9 + 4 * MAX_CHUNKS
# The largest manifest: the chunk-size list above, zstd'd and base64'd (4/3), is at most about 350 KB; the rest
# of a manifest is well under 4 KB. Checked before the body is read (the listing's size, the GET's length).
MAX_MANIFEST_BYTES = 1024 * 1024
# JSON nesting: the plugin's deepest value is 5 levels down (remoteLogSegmentMetadata.remoteLogSegmentId.
# topicIdPartition.topicPartition.topic); its JSON holds about a dozen objects. Checked before parsing, so a
# body of nested brackets costs a scan of its bytes, not a recursion.
MAX_JSON_DEPTH = 8
MAX_JSON_CONTAINERS = 64
# An index of a segment is fetched whole into memory: a bigger one is refused. A 2 GiB segment (Kafka's largest)
# indexed every 512 bytes has a 32 MiB offset index (8 bytes an entry); at Kafka's default index.interval.bytes
# (4 KiB) its indexes are 4 and 6 MiB.
MAX_INDEX_BYTES = 32 * 1024 * 1024
# Leader epochs of one segment: one per leader change during the segment's life; more is a broken upload
# (and would be kept per segment by every listing).
MAX_LEADER_EPOCHS = 4096

# Our index kinds -> the manifest's segmentIndexes names, in the order the `.indexes` object joins them.
INDEX_KINDS = {
    "offset": "offset",
    "timestamp": "timestamp",
    "producer_snapshot": "producerSnapshot",
    "leader_epoch": "leaderEpoch",
    "transaction": "transaction",
}


@dataclass(frozen=True)
class ChunkIndex:
    """Where each chunk of the original segment is, before and after the transforms.

    Chunk i covers original bytes [i * chunk_size, min((i+1) * chunk_size, file_size)) and transformed
    bytes [transformed_start(i), transformed_start(i + 1)) of the `.log` object. A fixed index is kept as
    its two sizes (nothing per chunk, whatever the manifest claims); a variable one as the chunks' starts.
    """

    chunk_size: int            # originalChunkSize
    file_size: int             # originalFileSize: the segment's size
    chunk_count: int
    fixed: tuple[int, int] | None = None   # (transformedChunkSize, finalTransformedChunkSize)
    starts: array | None = None            # variable: chunk_count + 1 starts, the last the object's size

    def transformed_start(self, i: int) -> int:
        """Where chunk i starts in the `.log` object (i == chunk_count: where the last one ends)."""
        if self.starts is not None:
            return self.starts[i]
        size, final = self.fixed
        return i * size if i < self.chunk_count else (self.chunk_count - 1) * size + final if i else 0

    def original_span(self, i: int) -> tuple[int, int]:
        """[start, end) of chunk i in the original segment."""
        start = i * self.chunk_size
        return start, min(start + self.chunk_size, self.file_size)

    def transformed_span(self, first: int, last: int) -> tuple[int, int]:
        """[start, end) of chunks first..last (inclusive) in the `.log` object."""
        return self.transformed_start(first), self.transformed_start(last + 1)

    def chunks_for(self, position: int, size: int) -> range:
        """The chunks holding original bytes [position, position + size), clipped to the segment."""
        end = min(position + size, self.file_size)
        if position >= end:
            return range(0)
        return range(position // self.chunk_size, (end - 1) // self.chunk_size + 1)

    def chunk_at_transformed(self, position: int) -> int:
        """The chunk whose transformed bytes hold `position` (for naming a corrupt byte's chunk)."""
        if self.starts is not None:
            return max(0, bisect.bisect_right(self.starts, position) - 1)
        return min(position // max(self.fixed[0], 1), max(self.chunk_count - 1, 0))


@dataclass(frozen=True)
class Encryption:
    key_id: str          # which RSA key pair wrapped the data key (the dataKey's prefix)
    wrapped_key: bytes   # the AES-256 data key, RSA-OAEP (SHA3-512) wrapped
    aad: bytes           # additional authenticated data of every AES-GCM chunk


@dataclass(frozen=True)
class SegmentMetadata:
    """remoteLogSegmentMetadata, written by plugin releases since Sept 2023 (older manifests lack it)."""

    topic: str
    partition: int
    topic_id: str
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: dict[int, int]  # leader epoch -> its first offset in the segment


@dataclass(frozen=True)
class Manifest:
    key: str                                         # the manifest's object key, for error messages
    chunk_index: ChunkIndex
    indexes: dict[str, tuple[int, int] | None]       # kind -> (position, size) in `.indexes`; None: absent
    compression: bool
    encryption: Encryption | None
    metadata: SegmentMetadata | None


class _Bad(Exception):
    """A format fault inside the JSON; turned into CorruptDataError with the key at the top."""


def parse_manifest(data: bytes, key: str) -> Manifest:
    """Parse a version "1" manifest; CorruptDataError naming `key` when it is not one."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise CorruptDataError(key, None, too_big(len(data)))
    try:
        _check_shape(data)
        doc = json.loads(data)
    except _Bad as e:
        raise CorruptDataError(key, None, f"manifest: {e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptDataError(key, getattr(e, "pos", getattr(e, "start", None)),
                               f"manifest is not JSON: {e}") from None
    except (ValueError, RecursionError) as e:  # an integer of thousands of digits, say
        raise CorruptDataError(key, None, f"manifest is not the plugin's JSON: {e}") from None
    try:
        return _manifest(doc, key)
    except _Bad as e:
        raise CorruptDataError(key, None, f"manifest: {e}") from None


def too_big(size: int) -> str:
    """Why a manifest of `size` bytes is not read."""
    return f"manifest of {size} bytes exceeds {MAX_MANIFEST_BYTES} (MAX_MANIFEST_BYTES): not the plugin's"


_BRACKETS = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)


def _check_shape(data: bytes) -> None:
    """_Bad when the JSON nests deeper than MAX_JSON_DEPTH or holds more than MAX_JSON_CONTAINERS arrays and
    objects: counted on its bytes outside strings (escaped backslashes and quotes dropped, then every other
    quote-delimited part), in linear time, before any parser recurses into it."""
    text = bytes(data).replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(text.split(b'"')[0::2]).translate(None, _NOT_BRACKETS)
    if len(brackets) > 2 * MAX_JSON_CONTAINERS:
        raise _Bad(f"{len(brackets)} brackets: more than the {MAX_JSON_CONTAINERS} arrays and objects "
                   "(MAX_JSON_CONTAINERS) a manifest may hold")
    depth = 0
    for b in brackets:
        depth += _BRACKETS[b]
        if depth > MAX_JSON_DEPTH:
            raise _Bad(f"JSON nested deeper than {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)")


def _manifest(doc: object, key: str) -> Manifest:
    if not isinstance(doc, dict):
        raise _Bad("not a JSON object")
    if doc.get("version") != "1":
        raise _Bad(f"version {doc.get('version')!r} is not supported (only \"1\")")
    if "segmentIndexes" not in doc:
        raise _Bad("no segmentIndexes: this manifest comes from a pre-release plugin build (before 2023-11), "
                   "whose format is not supported; copy the segment again with a released plugin version")
    compression = _field(doc, "compression", bool)
    chunk_index = _chunk_index(_field(doc, "chunkIndex", dict))
    if compression and doc["chunkIndex"].get("type") != "variable":
        raise _Bad("a compressed segment must have a variable chunk index")
    enc = doc.get("encryption")
    meta = doc.get("remoteLogSegmentMetadata")
    return Manifest(key, chunk_index, _indexes(_field(doc, "segmentIndexes", dict)), compression,
                    None if enc is None else _encryption(enc), None if meta is None else _metadata(meta))


def _field(obj: dict, name: str, kind: type, where: str = ""):
    value = obj.get(name)
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise _Bad(f"{where}{name} must be {kind.__name__}, got {value!r:.80}")
    return value


def _int32(obj: dict, name: str, where: str, minimum: int = 0) -> int:
    value = _field(obj, name, int, where)
    if not minimum <= value <= INT32_MAX:
        raise _Bad(f"{where}{name} {value} is outside [{minimum}, {INT32_MAX}]")
    return value


def max_transformed(chunk_size: int) -> int:
    """The most bytes the plugin's transforms may turn a chunk of `chunk_size` bytes into."""
    return chunk_size + chunk_size // 256 + TRANSFORM_SLACK_BYTES


def _chunk_index(ci: dict) -> ChunkIndex:
    w = "chunkIndex."
    chunk_size = _int32(ci, "originalChunkSize", w, 1)
    file_size = _int32(ci, "originalFileSize", w)
    if chunk_size > MAX_CHUNK_BYTES:
        raise _Bad(f"{w}originalChunkSize {chunk_size} is above {MAX_CHUNK_BYTES} (MAX_CHUNK_BYTES): chunks this "
                   "big are not read")
    count = -(-file_size // chunk_size)
    if chunk_size < MIN_CHUNK_BYTES and count > 1:
        raise _Bad(f"{w}originalChunkSize {chunk_size} is below {MIN_CHUNK_BYTES} (MIN_CHUNK_BYTES): chunks this "
                   "small are not read")
    if count > MAX_CHUNKS:
        raise _Bad(f"{file_size} bytes in chunks of {chunk_size} make {count} chunks, more than {MAX_CHUNKS} "
                   "(MAX_CHUNKS): segments of this many chunks are not read")
    most = max_transformed(chunk_size)
    kind = ci.get("type")
    if kind == "fixed":
        transformed = _int32(ci, "transformedChunkSize", w)
        final = _int32(ci, "finalTransformedChunkSize", w)
        if transformed > most or final > most:
            raise _Bad(f"{w}transformedChunkSize {transformed} or finalTransformedChunkSize {final} is above "
                       f"{most}, more than the transforms add to a chunk of {chunk_size}")
        return ChunkIndex(chunk_size, file_size, count, fixed=(transformed, final))
    if kind != "variable":
        raise _Bad(f"{w}type {kind!r} is neither \"fixed\" nor \"variable\"")
    sizes = _chunk_sizes(_field(ci, "transformedChunks", str, w))
    if len(sizes) != count:
        raise _Bad(f"{w}transformedChunks holds {len(sizes)} chunks, but {file_size} bytes in chunks of "
                   f"{chunk_size} make {count}")
    if sizes and max(sizes) > most:
        raise _Bad(f"{w}transformedChunks holds a chunk of {max(sizes)} bytes, more than the transforms add "
                   f"to a chunk of {chunk_size} ({most})")
    starts = array("q", [0])
    for size in sizes:
        starts.append(starts[-1] + size)
    return ChunkIndex(chunk_size, file_size, count, starts=starts)


def _chunk_sizes(text: str) -> list[int]:
    """The variable index's chunk sizes: base64 of zstd of ChunkSizesBinaryCodec's big-endian form.

    count:int32, then for count == 1 the value:int32; for count > 1 base:int32, width:int8, count - 1
    values of `width` bytes each added to base, and the last value in full as int32.
    """
    try:
        compressed = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise _Bad(f"chunkIndex.transformedChunks is not base64: {e}") from None
    try:
        params = zstandard.get_frame_parameters(compressed)
    except zstandard.ZstdError as e:
        raise _Bad(f"chunkIndex.transformedChunks is not a zstd frame: {e}") from None
    if not 0 <= params.content_size <= MAX_CHUNK_SIZES_BYTES:
        raise _Bad(f"chunkIndex.transformedChunks declares {params.content_size} bytes "
                   f"(at most {MAX_CHUNK_SIZES_BYTES}: MAX_CHUNKS sizes)")
    try:
        raw = zstandard.ZstdDecompressor().decompress(compressed, max_output_size=MAX_CHUNK_SIZES_BYTES)
    except zstandard.ZstdError as e:
        raise _Bad(f"chunkIndex.transformedChunks does not decompress: {e}") from None
    return decode_chunk_sizes(raw)


def decode_chunk_sizes(raw: bytes) -> list[int]:
    """ChunkSizesBinaryCodec.decode, bounded: _Bad on a short, long or negative encoding."""
    if len(raw) < 4:
        raise _Bad("chunk sizes: shorter than their count")
    (count,) = struct.unpack_from(">i", raw)
    if not 0 <= count <= MAX_CHUNKS:
        raise _Bad(f"chunk sizes: count {count} is outside [0, {MAX_CHUNKS}] (MAX_CHUNKS)")
    if count <= 1:
        expect = 4 + 4 * count
        if len(raw) != expect:
            raise _Bad(f"chunk sizes: {len(raw)} bytes for {count} values (expected {expect})")
        return list(struct.unpack_from(f">{count}i", raw, 4))
    if len(raw) < 9:
        raise _Bad("chunk sizes: cut off before the value width")
    base, width = struct.unpack_from(">ib", raw, 4)
    if not 1 <= width <= 4 or base < 0:
        raise _Bad(f"chunk sizes: base {base} or width {width} out of range")
    expect = 9 + (count - 1) * width + 4
    if len(raw) != expect:
        raise _Bad(f"chunk sizes: {len(raw)} bytes for {count} values of width {width} (expected {expect})")
    values = [base + int.from_bytes(raw[i:i + width], "big") for i in range(9, 9 + (count - 1) * width, width)]
    (last,) = struct.unpack_from(">i", raw, expect - 4)
    values.append(last)
    if any(v < 0 or v > INT32_MAX for v in values):
        raise _Bad("chunk sizes: a size is outside the int32 range")
    return values


def _indexes(si: dict) -> dict[str, tuple[int, int] | None]:
    out: dict[str, tuple[int, int] | None] = {}
    for kind, name in INDEX_KINDS.items():
        entry = si.get(name)
        if entry is None:
            if kind != "transaction":  # the only optional index (SegmentIndexesV1)
                raise _Bad(f"segmentIndexes.{name} is missing")
            out[kind] = None
            continue
        if not isinstance(entry, dict):
            raise _Bad(f"segmentIndexes.{name} must be an object")
        w = f"segmentIndexes.{name}."
        out[kind] = (_int32(entry, "position", w), _int32(entry, "size", w))
        if out[kind][1] > MAX_INDEX_BYTES:
            raise _Bad(f"{w}size {out[kind][1]} is above {MAX_INDEX_BYTES} (MAX_INDEX_BYTES): not read")
    return out


def _encryption(enc: object) -> Encryption:
    if not isinstance(enc, dict):
        raise _Bad("encryption must be an object")
    text = _field(enc, "dataKey", str, "encryption.")
    key_id, sep, wrapped = text.partition(":")
    if not sep or ":" in wrapped or not key_id.strip():
        raise _Bad("encryption.dataKey must be <keyId>:<base64 wrapped key>")
    try:
        wrapped_key = base64.b64decode(wrapped, validate=True)
        aad = base64.b64decode(_field(enc, "aad", str, "encryption."), validate=True)
    except binascii.Error as e:
        raise _Bad(f"encryption: bad base64: {e}") from None
    if not wrapped_key:
        raise _Bad("encryption.dataKey holds an empty wrapped key")
    return Encryption(key_id, wrapped_key, aad)


def _int64(obj: dict, name: str, where: str, minimum: int = INT64_MIN) -> int:
    value = _field(obj, name, int, where)
    if not minimum <= value <= INT64_MAX:
        raise _Bad(f"{where}{name} {value} is outside [{minimum}, {INT64_MAX}]")
    return value


def _metadata(meta: object) -> SegmentMetadata:
    w = "remoteLogSegmentMetadata."
    if not isinstance(meta, dict):
        raise _Bad(f"{w[:-1]} must be an object")
    seg_id = _field(meta, "remoteLogSegmentId", dict, w)
    tip = _field(seg_id, "topicIdPartition", dict, w + "remoteLogSegmentId.")
    tp = _field(tip, "topicPartition", dict, w + "topicIdPartition.")
    epochs = _field(meta, "segmentLeaderEpochs", dict, w)
    if len(epochs) > MAX_LEADER_EPOCHS:
        raise _Bad(f"{w}segmentLeaderEpochs holds {len(epochs)} epochs, more than {MAX_LEADER_EPOCHS} "
                   "(MAX_LEADER_EPOCHS)")
    leader_epochs = {}
    for k, v in epochs.items():
        if not (k.isascii() and k.isdigit() and len(k) <= 10 and int(k) <= INT32_MAX):
            raise _Bad(f"{w}segmentLeaderEpochs keys must be epochs (integers in [0, {INT32_MAX}]), got {k!r:.40}")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= INT64_MAX:
            raise _Bad(f"{w}segmentLeaderEpochs values must be offsets (integers in [0, {INT64_MAX}])")
        leader_epochs[int(k)] = v
    start = _int64(meta, "startOffset", w, 0)
    end = _int64(meta, "endOffset", w, 0)
    return SegmentMetadata(
        topic=_field(tp, "topic", str, w), partition=_int32(tp, "partition", w),
        topic_id=_field(tip, "topicId", str, w), segment_id=_field(seg_id, "id", str, w),
        start_offset=start, end_offset=end,
        max_timestamp_ms=_int64(meta, "maxTimestampMs", w), broker_id=_int32(meta, "brokerId", w, -INT32_MAX - 1),
        event_timestamp_ms=_int64(meta, "eventTimestampMs", w),
        segment_leader_epochs=dict(sorted(leader_epochs.items())))
