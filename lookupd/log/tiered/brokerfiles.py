"""What the broker's own files say about tiered segments (read side): a partition's topic id
(`partition.metadata`), its leader-epoch lineage (`leader-epoch-checkpoint`) and the events of
`__remote_log_metadata` (Kafka's RemoteLogMetadataSerde over the message schemas in
storage/src/main/resources/message/), folded into each remote segment's current state.
"""

from __future__ import annotations

import base64
import os
import struct
import threading
from typing import Iterable, NamedTuple

from ...errors import CorruptDataError
from ...format.batch import parse_header, whole_frames
from ...format.names import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA
from ...format.records import decode_batch

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"

# RemoteLogSegmentState.id()
COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED = range(4)
# RemotePartitionDeleteState.id()
DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, DELETE_PARTITION_FINISHED = range(3)

# AbstractApiMessageSerde's frame version (the only one Kafka reads) and the api keys of the four schemas.
FRAME_VERSION = 1
SEGMENT_METADATA, SEGMENT_UPDATE, PARTITION_DELETE, SEGMENT_SNAPSHOT = range(4)
# Kafka reads versions 0-1 of each; a newer one may add fields we would misread.
MAX_VERSION = 1

_I8, _I32, _I64 = struct.Struct(">b"), struct.Struct(">i"), struct.Struct(">q")


def uuid_text(raw: bytes) -> str:
    """Kafka's Uuid.toString: base64url of the 16 bytes, without padding (22 characters)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_bytes(text: str) -> bytes:
    """Uuid.fromString: the 16 bytes of a 22-character base64url id; ValueError otherwise."""
    if len(text) != 22:
        raise ValueError(f"a Kafka id has 22 characters, {text!r} has {len(text)}")
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16 or uuid_text(raw) != text:
        raise ValueError(f"{text!r} is not a base64url Kafka id")
    return raw


def read_topic_id(partition_dir: str | os.PathLike) -> str | None:
    """The topic id in the partition's `partition.metadata` (`version: 0\\ntopic_id: <id>`), None without
    the file; CorruptDataError naming the file when it says anything else."""
    path = os.path.join(os.fspath(partition_dir), PARTITION_METADATA)
    try:
        with open(path, "rb") as f:
            text = f.read(4096).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":  # PartitionMetadataFile reads lines: a final newline is harmless
        lines.pop()
    if len(lines) != 2 or lines[0] != "version: 0" or not lines[1].startswith("topic_id: "):
        raise CorruptDataError(path, 0, "expected 'version: 0' then 'topic_id: <id>' (Kafka's partition.metadata)")
    topic_id = lines[1][len("topic_id: "):]
    try:
        uuid_bytes(topic_id)
    except ValueError as err:
        raise CorruptDataError(path, len(lines[0]) + 11, str(err)) from None
    return topic_id


def read_leader_epoch_checkpoint(partition_dir: str | os.PathLike) -> list[tuple[int, int]]:
    """(leader epoch, start offset) entries of the partition's `leader-epoch-checkpoint` (version 0:
    a count line, then `epoch offset` lines), in file order; [] without the file or for a malformed
    one (it only breaks ties between uploads here, as the broker's cache would)."""
    path = os.path.join(os.fspath(partition_dir), LEADER_EPOCH_CHECKPOINT)
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    if len(lines) < 2 or lines[0].strip() != "0" or not lines[1].strip().isdigit():
        return []
    out = []
    for line in lines[2:2 + int(lines[1])]:
        parts = line.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            return []
        out.append((int(parts[0]), int(parts[1])))
    return out


# ----------------------------------------------------------------- __remote_log_metadata events


class SegmentMetadata(NamedTuple):
    """RemoteLogSegmentMetadataRecord (api key 0): a segment as its upload began, and its state then."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp: int
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset), ascending
    size: int
    state: int


class SegmentUpdate(NamedTuple):
    """RemoteLogSegmentMetadataUpdateRecord (api key 1): a segment's new state."""

    topic_id: str
    partition: int
    segment_id: str
    state: int


class PartitionDelete(NamedTuple):
    """RemotePartitionDeleteMetadataRecord (api key 2): the whole partition's remote data is being deleted."""

    topic_id: str
    partition: int
    state: int


class _Malformed(Exception):
    pass


class _Reader:
    """Kafka's flexible-version message reading: varints, compact strings, arrays and bytes, tagged fields."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Malformed(f"needs {n} bytes at byte {self.pos}, {len(self.data) - self.pos} remain")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        pos = self.pos
        if pos < len(self.data) and self.data[pos] < 0x80:  # one byte: every count and tag in these messages
            self.pos = pos + 1
            return self.data[pos]
        value = shift = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise _Malformed(f"unsigned varint longer than 5 bytes at byte {self.pos}")

    def _fixed(self, st: struct.Struct) -> int:
        pos = self.pos
        if pos + st.size > len(self.data):
            self.take(st.size)  # raises, saying how much is missing
        self.pos = pos + st.size
        return st.unpack_from(self.data, pos)[0]

    def int8(self) -> int:
        return self._fixed(_I8)

    def int32(self) -> int:
        return self._fixed(_I32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def uuid(self) -> str:
        return uuid_text(self.take(16))

    def string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise _Malformed(f"null string at byte {self.pos}")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed(f"a string that is not UTF-8 before byte {self.pos}") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n)

    def count(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise _Malformed(f"null array at byte {self.pos}")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        out = {}
        if self.pos < len(self.data) and self.data[self.pos] == 0:  # none: nearly always
            self.pos += 1
            return out
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out


def _topic_id_partition(r: _Reader) -> tuple[str, str, int]:
    name, topic_id, partition = r.string(), r.uuid(), r.int32()
    r.tagged_fields()
    return name, topic_id, partition


def _segment_id(r: _Reader) -> tuple[str, str, int, str]:
    topic, topic_id, partition = _topic_id_partition(r)
    segment_id = r.uuid()
    r.tagged_fields()
    return topic, topic_id, partition, segment_id


def _leader_epochs(r: _Reader) -> tuple[tuple[int, int], ...]:
    out = []
    for _ in range(r.count()):
        epoch, offset = r.int32(), r.int64()
        r.tagged_fields()
        out.append((epoch, offset))
    return tuple(out)


def decode_event(value: bytes) -> SegmentMetadata | SegmentUpdate | PartitionDelete | None:
    """One `__remote_log_metadata` record value (RemoteLogMetadataSerde: frame version, api key and
    version as unsigned varints, then the message). None for a snapshot record (api key 3, which only
    Kafka's snapshot files hold). ValueError saying what is wrong otherwise."""
    r = _Reader(value)
    try:
        frame = r.uvarint()
        if frame != FRAME_VERSION:
            raise _Malformed(f"frame version {frame}, Kafka writes {FRAME_VERSION}")
        api_key, version = r.uvarint(), r.uvarint()
        if version > MAX_VERSION:
            raise _Malformed(f"version {version} of api key {api_key} is newer than this reader knows "
                             f"(0-{MAX_VERSION})")
        if api_key == SEGMENT_METADATA:
            topic, topic_id, partition, segment_id = _segment_id(r)
            start, end, _broker = r.int64(), r.int64(), r.int32()
            max_ts, _event_ts = r.int64(), r.int64()
            epochs = _leader_epochs(r)
            size = r.int32()
            r.nullable_bytes()  # custom metadata
            state = r.int8()
            r.tagged_fields()
            event = SegmentMetadata(topic, topic_id, partition, segment_id, start, end, max_ts, epochs, size, state)
        elif api_key == SEGMENT_UPDATE:
            _topic, topic_id, partition, segment_id = _segment_id(r)
            r.int32(), r.int64()  # broker id, event timestamp
            r.nullable_bytes()
            state = r.int8()
            r.tagged_fields()
            event = SegmentUpdate(topic_id, partition, segment_id, state)
        elif api_key == PARTITION_DELETE:
            _topic, topic_id, partition = _topic_id_partition(r)
            r.int32(), r.int64()
            state = r.int8()
            r.tagged_fields()
            event = PartitionDelete(topic_id, partition, state)
        elif api_key == SEGMENT_SNAPSHOT:
            return None
        else:
            raise _Malformed(f"unknown api key {api_key}")
        if r.pos != len(value):
            raise _Malformed(f"{len(value) - r.pos} bytes left after the message")
        return event
    except _Malformed as err:
        raise ValueError(f"not a remote log metadata record: {err}") from None


class RemoteLogMetadata:
    """Every remote segment's state as the events read so far leave it (RemoteLogMetadataCache's fold).
    Thread-safe: events are applied while other threads ask for a partition's segments."""

    def __init__(self) -> None:
        self._segments: dict[tuple[str, int], dict[str, SegmentMetadata]] = {}
        self._deleted: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def apply(self, event: SegmentMetadata | SegmentUpdate | PartitionDelete) -> None:
        with self._lock:
            self._apply(event)

    def _apply(self, event: SegmentMetadata | SegmentUpdate | PartitionDelete) -> None:
        if isinstance(event, SegmentMetadata):
            self._segments.setdefault((event.topic_id, event.partition), {})[event.segment_id] = event
        elif isinstance(event, SegmentUpdate):
            known = self._segments.get((event.topic_id, event.partition), {}).get(event.segment_id)
            if known is not None:  # an update for a segment never announced is ignored, as Kafka's cache does
                self._segments[(event.topic_id, event.partition)][event.segment_id] = known._replace(state=event.state)
        else:
            self._deleted.add((event.topic_id, event.partition))

    def finished(self, topic_id: str, partition: int) -> dict[str, SegmentMetadata]:
        """Segments copied and not being deleted, by segment id ({} once the partition's deletion began)."""
        with self._lock:
            if (topic_id, partition) in self._deleted:
                return {}
            return {sid: m for sid, m in self._segments.get((topic_id, partition), {}).items()
                    if m.state == COPY_SEGMENT_FINISHED}


def fold_events(values: Iterable[tuple[str, int, bytes | None]], state: RemoteLogMetadata | None = None
                ) -> RemoteLogMetadata:
    """The state after the given record values, as (where, offset, value), applied to `state` (default: a new
    one): a value that is not a remote log metadata record is CorruptDataError naming where it is."""
    state = RemoteLogMetadata() if state is None else state
    for where, offset, value in values:
        if value is None:
            continue
        try:
            event = decode_event(value)
        except ValueError as err:
            raise CorruptDataError(where, None, f"record at offset {offset}: {err}") from None
        if event is not None:
            state.apply(event)
    return state



# One read of the metadata topic: a few thousand events (they are about 200 bytes each).
_READ_BYTES = 1 << 20


def _metadata_logs(logs: Iterable) -> list:
    return [llog for llog in logs if llog.topic == REMOTE_LOG_METADATA_TOPIC]


def _values(llog, offset: int, end: int):
    """(where, offset, value) of the metadata partition's records in [offset, end), through the log layer's own
    reads and record decoder."""
    while offset < end:
        got = llog.read(offset, _READ_BYTES)
        if not got.records:
            break
        for off, size in whole_frames(got.records, got.position):
            header = parse_header(got.records, off, got.position + off)
            if header.is_control:
                continue
            for record in decode_batch(header, memoryview(got.records)[off:off + size]):
                if record.offset >= offset:
                    yield llog.dir, record.offset, record.value
        offset = got.next_offset


def read_remote_log_metadata(logs: Iterable) -> RemoteLogMetadata | None:
    """Fold every record of the `__remote_log_metadata` partitions among `logs` (LocalLog objects); None
    when there is none (then every segment with a manifest counts)."""
    metadata_logs = _metadata_logs(logs)
    if not metadata_logs:
        return None
    state = RemoteLogMetadata()
    for llog in metadata_logs:
        fold_events(_values(llog, llog.log_start_offset, llog.log_end_offset), state)
    return state


class MetadataReader:
    """read_remote_log_metadata kept up to date between calls: each call folds only the records appended since
    the last one (a listing of 50,000 uploads is 100,000 records: decoding them all again at each relist would
    cost seconds). From scratch when the metadata partitions are other ones than last time, or one was cut
    back (deleted and made again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: RemoteLogMetadata | None = None
        self._read_to: dict[object, int] = {}  # metadata partition's LocalLog -> the offset read up to

    def read(self, logs: Iterable) -> RemoteLogMetadata | None:
        metadata_logs = _metadata_logs(logs)
        with self._lock:
            if not metadata_logs:
                self._state, self._read_to = None, {}
                return None
            ends = {llog: llog.log_end_offset for llog in metadata_logs}
            if self._state is None or set(ends) != set(self._read_to) or \
                    any(end < self._read_to[llog] for llog, end in ends.items()):
                state, read_to = RemoteLogMetadata(), {llog: llog.log_start_offset for llog in metadata_logs}
            else:
                state, read_to = self._state, dict(self._read_to)
            for llog, end in ends.items():
                fold_events(_values(llog, read_to[llog], end), state)
                read_to[llog] = max(read_to[llog], end)
            self._state, self._read_to = state, read_to
            return state
