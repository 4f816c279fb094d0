"""A Kafka-compatible log writer for demo and test data (never used on a broker's files).

`IndexBuilder` holds the index-building rules of LogSegment.append/recover; `SegmentWriter`
writes one segment as a broker does (preallocated indexes written in place, trimmed when
the segment rolls); `LogWriter` appends batches to a partition, rolling segments by size or
full index, and records aborted transactions in the `.txnindex`. Written files read back
through the same reader and, for the same batches and settings, are byte-identical to what
Kafka writes.
"""

from __future__ import annotations

import os
import struct
from ..format.batch import BatchHeader, parse_header, whole_frames
from ..format.names import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_file_name
from .producerstate import TransactionTracker
from ..log.txnindex import AbortedTxn

DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_MAX_INDEX_SIZE = 10 << 20
_INT32_MAX = (1 << 31) - 1
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_ABORTED = struct.Struct(">hqqqq")


def encode_aborted_txn(txn: AbortedTxn) -> bytes:
    return _ABORTED.pack(0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


class IndexBuilder:
    """Index entries of one segment, by Kafka's rules.

    An offset-index entry is added when more than `index_interval_bytes` were appended since
    the last one (checked before counting the new bytes, so the first append is never
    indexed); it maps the append's largest offset to its start position. A time-index entry
    (max timestamp so far, offset of the first batch holding it) is added alongside when the
    max timestamp grew, and once more when the segment rolls.
    """

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE):
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_offset_entries = max_index_size // 8
        self.max_time_entries = max_index_size // 12
        self.offset_entries: list[tuple[int, int]] = []  # (relative offset, position)
        self.time_entries: list[tuple[int, int]] = []  # (timestamp, relative offset)
        self.max_timestamp = -1
        self.shallow_offset_of_max_timestamp = base_offset
        self._bytes_since_last_entry = 0

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset} (relative offset overflow)")
        return rel

    @property
    def offset_index_full(self) -> bool:
        return len(self.offset_entries) >= self.max_offset_entries

    @property
    def time_index_full(self) -> bool:
        return len(self.time_entries) >= self.max_time_entries - 1  # one slot kept for the roll entry

    def append(self, largest_offset: int, largest_timestamp: int, shallow_offset: int, position: int,
               size: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """Account for appended bytes; returns the (offset entry, time entry) added, if any."""
        self.relative(largest_offset)
        if largest_timestamp > self.max_timestamp:
            self.max_timestamp, self.shallow_offset_of_max_timestamp = largest_timestamp, shallow_offset
        added_offset = added_time = None
        if self._bytes_since_last_entry > self.index_interval_bytes:
            added_offset = (self.relative(largest_offset), position)
            self.offset_entries.append(added_offset)
            added_time = self._maybe_time_entry()
            self._bytes_since_last_entry = 0
        self._bytes_since_last_entry += size
        return added_offset, added_time

    def _maybe_time_entry(self) -> tuple[int, int] | None:
        last_ts = self.time_entries[-1][0] if self.time_entries else -1
        if self.max_timestamp > last_ts:
            entry = (self.max_timestamp, self.relative(self.shallow_offset_of_max_timestamp))
            self.time_entries.append(entry)
            return entry
        return None

    def roll(self) -> tuple[int, int] | None:
        """The final time-index entry a segment gets when it becomes inactive (or closes)."""
        return self._maybe_time_entry()

    def offset_index_bytes(self) -> bytes:
        return b"".join(_OFFSET_ENTRY.pack(*e) for e in self.offset_entries)

    def time_index_bytes(self) -> bytes:
        return b"".join(_TIME_ENTRY.pack(*e) for e in self.time_entries)


def append_info(batches: list[BatchHeader]) -> tuple[int, int, int]:
    """(largest offset, largest timestamp, last offset of the first batch holding it) of one append."""
    largest_ts, shallow = -1, batches[0].last_offset
    for h in batches:
        if h.max_timestamp > largest_ts:
            largest_ts, shallow = h.max_timestamp, h.last_offset
    return batches[-1].last_offset, largest_ts, shallow


def split_batches(records: bytes) -> list[BatchHeader]:
    """Headers of the whole batches in `records`; anything else is a caller error."""
    out, whole = [], 0
    for off, size in whole_frames(records):
        out.append(parse_header(records, off))
        whole = off + size
    if whole < len(records):
        raise ValueError(f"records end with a partial batch at byte {whole}")
    if not out:
        raise ValueError("no batches to append")
    return out


class SegmentWriter:
    """Writes one segment: the `.log`, and its indexes preallocated and filled in place."""

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE):
        self.dir = directory
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.index = IndexBuilder(base_offset, index_interval_bytes, max_index_size)
        self._log = os.open(self._path(LOG_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.size = os.fstat(self._log).st_size
        # LazyIndex creates both index files, preallocated, on the segment's first use.
        self._oi = self._preallocated(INDEX_SUFFIX, max_index_size // 8 * 8)
        self._ti = self._preallocated(TIME_INDEX_SUFFIX, max_index_size // 12 * 12)
        self._txn: int | None = None
        self.closed = False

    def _path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_file_name(self.base_offset, suffix))

    def _preallocated(self, suffix: str, length: int) -> int:
        fd = os.open(self._path(suffix), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.ftruncate(fd, length)
        return fd

    def should_roll(self, records_size: int, last_offset: int, segment_bytes: int) -> bool:
        """LogSegment.shouldRoll without time-based rolling."""
        try:
            self.index.relative(last_offset)
            fits = True
        except ValueError:
            fits = False
        return (self.size > segment_bytes - records_size or self.index.offset_index_full
                or self.index.time_index_full or not fits)

    def append(self, records: bytes, batches: list[BatchHeader] | None = None) -> None:
        """Append whole batches (one producer request's worth) and index them."""
        batches = batches or split_batches(records)
        largest, largest_ts, shallow = append_info(batches)
        position = self.size
        os.write(self._log, records)
        self.size += len(records)
        offset_entry, time_entry = self.index.append(largest, largest_ts, shallow, position, len(records))
        if offset_entry is not None:
            os.pwrite(self._oi, _OFFSET_ENTRY.pack(*offset_entry), (len(self.index.offset_entries) - 1) * 8)
        if time_entry is not None:
            os.pwrite(self._ti, _TIME_ENTRY.pack(*time_entry), (len(self.index.time_entries) - 1) * 12)

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        if self._txn is None:
            self._txn = os.open(self._path(TXN_INDEX_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        os.write(self._txn, encode_aborted_txn(txn))

    def roll(self) -> None:
        """onBecomeInactiveSegment: add the max-timestamp entry and trim the indexes to their entries."""
        entry = self.index.roll()
        if entry is not None:
            os.pwrite(self._ti, _TIME_ENTRY.pack(*entry), (len(self.index.time_entries) - 1) * 12)
        os.ftruncate(self._oi, len(self.index.offset_entries) * 8)
        os.ftruncate(self._ti, len(self.index.time_entries) * 12)
        self.close()

    def flush(self) -> None:
        for fd in (self._log, self._oi, self._ti, self._txn):
            if fd is not None:
                os.fsync(fd)

    def close(self) -> None:
        """Release the files, leaving an active segment's indexes preallocated (a running broker's state)."""
        if self.closed:
            return
        self.closed = True
        for fd in (self._log, self._oi, self._ti, self._txn):
            if fd is not None:
                os.close(fd)


class LogWriter:
    """Appends batches to a partition directory the way a broker's log does."""

    def __init__(self, directory: str, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE):
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.transactions = TransactionTracker()
        self.segment: SegmentWriter | None = None
        self.next_offset = 0
        os.makedirs(directory, exist_ok=True)

    def _new_segment(self, base_offset: int) -> SegmentWriter:
        return SegmentWriter(self.dir, base_offset, index_interval_bytes=self.index_interval_bytes,
                             max_index_size=self.max_index_size)

    def append(self, records: bytes) -> list[BatchHeader]:
        """Append one request's batches (already carrying their final offsets); rolls first if needed."""
        batches = split_batches(records)
        first, last = batches[0].base_offset, batches[-1].last_offset
        if first < self.next_offset:
            raise ValueError(f"offset {first} is below the log end offset {self.next_offset}")
        if self.segment is None:
            self.segment = self._new_segment(first)
        elif self.segment.should_roll(len(records), last, self.segment_bytes):
            self.roll(first)
        self.segment.append(records, batches)
        for h in batches:
            marker = None
            if h.is_control:
                from ..format.records import control_record, decode_batch

                data = records[h.position:h.position + h.size]
                recs = decode_batch(h, data)
                marker = control_record(recs[0])[0] if recs else None
            aborted = self.transactions.observe(h, marker)
            if aborted is not None:
                self.segment.append_aborted_txn(aborted)
        self.next_offset = last + 1
        return batches

    def roll(self, base_offset: int | None = None) -> None:
        """Roll now: trim the active segment and start a new one at `base_offset` (the log end by default)."""
        base = self.next_offset if base_offset is None else base_offset
        if self.segment is not None:
            self.segment.roll()
        self.segment = self._new_segment(base)

    def close(self, *, trim_active: bool = False) -> None:
        """Stop writing. The active segment stays preallocated unless `trim_active` (a clean shutdown)."""
        if self.segment is not None:
            if trim_active:
                self.segment.roll()
            else:
                self.segment.flush()
                self.segment.close()
            self.segment = None
