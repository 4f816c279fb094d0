"""The generated files: records as JSON lines, index entries as text lines, partition.json.

Records are rendered by `lookupd.format.render.record_lines` (natively from columns, the
bytes `record_json` gives), the form `lookupd dump --json` prints, one batch at a time (CRC
checked first: a corrupt batch is an error, not lines).
Rendered batches are kept in a bounded LRU cache keyed by partition, segment, position
and CRC, so a file read twice, or two readers of one segment, decode each batch once.
Index entries are the ones lookupd treats as valid (an active segment's preallocated
zero tail is not listed), as `lookupd dump` prints them.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from lookupd.format.batch import COMPRESSION_MASK, BatchHeader, ensure_valid
from lookupd.format import render as json_lines
from lookupd.format.wire import ValueDecoder
from lookupd.log.segment import LogSegment

from .catalog import PartitionInfo, Segments
from .sources import Cursor, DaemonSource, LocalSource
from .stream import Pieces

LINES_PER_PIECE = 4096


class Rendered(json_lines.JsonLines):
    """One batch as JSON lines (offsets, line starts, bytes), sliced by offset for the views."""

    __slots__ = ()

    def between(self, first: int | None, end: int | None) -> tuple[bytes, bool]:
        """Lines of the records with first <= offset < end, and whether a record at or past `end` was seen."""
        i = 0 if first is None else bisect.bisect_left(self.offsets, first)
        j = len(self.offsets) if end is None else bisect.bisect_left(self.offsets, end)
        return self.data[self.starts[i]:self.starts[max(i, j)]], j < len(self.offsets)


def render(header: BatchHeader, data: memoryview, where: str, decoder: ValueDecoder | None = None) -> Rendered:
    ensure_valid(header, data, where)
    return Rendered(*json_lines.record_lines(header, data, where, decoder=decoder))


class RenderCache:
    """Rendered batches, least recently used dropped first beyond `max_bytes`."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, Rendered] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple, header: BatchHeader, data: memoryview, where: str,
            decoder: ValueDecoder | None = None) -> Rendered:
        if decoder is not None:  # rendered with these schemas: another registry state renders again
            key = (*key, decoder.registry.end_offset)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        rendered = render(header, data, where, decoder)
        with self._lock:
            if key not in self._items:
                self._items[key] = rendered
                self._bytes += len(rendered.data)
                while self._bytes > self.max_bytes and len(self._items) > 1:
                    self._bytes -= len(self._items.popitem(last=False)[1].data)
        return rendered


def record_lines(source: LocalSource | DaemonSource, cache: RenderCache, first: int | None, end: int | None,
                 follow: bool, cursor: Cursor, *, decoder: ValueDecoder | None = None) -> Pieces:
    """Producer: JSON lines of the records with first <= offset < end, from the batch at `cursor`
    to the end of its segment, or of the partition if `follow`; with a `decoder`, keys and values in
    Confluent's wire format decoded (lookupd.format.render.decoded_field)."""
    part = source.part
    for header, data, after in source.batches(cursor, follow):
        if first is not None and header.last_offset < first:
            yield b"", after
            continue
        key = (part.topic, part.partition, after.segment, header.position, header.crc)
        piece, past_end = cache.get(key, header, data, source.log_name(after.segment), decoder).between(first, end)
        yield piece, after
        if past_end or end is not None and header.last_offset >= end - 1:
            return


def key_lines(sources: list, starts: list[Cursor], key: bytes, cursor: tuple[int, Cursor], *,
              decoder: ValueDecoder | None = None) -> Pieces:
    """Producer: JSON lines (as `.records.jsonl` has them) of every record whose key is `key`, partition
    after partition, each in offset order, from `cursor` = (partition number in `sources`, batch).
    Found lines come out as soon as their batch is scanned, so `head -1` stops at the first match.
    An uncompressed batch whose bytes do not contain the key at all is passed over undecoded."""
    i, at = cursor
    while i < len(sources):
        source = sources[i]
        for header, data, after in source.batches(at, True):
            if header.attributes & COMPRESSION_MASK == 0 and key not in bytes(data):
                yield b"", (i, after)
                continue
            where = source.log_name(after.segment)
            ensure_valid(header, data, where)
            yield json_lines.record_lines(header, data, where, key=key, decoder=decoder).data, (i, after)
        i += 1
        if i < len(sources):
            at = starts[i]


_INDEX_LINES = {
    "index": "offset: %d position: %d\n",
    "timeindex": "timestamp: %d offset: %d\n",
    "txnindex": "version: %d producerId: %d firstOffset: %d lastOffset: %d lastStableOffset: %d\n",
}


def _index_columns(seg: LogSegment, suffix: str) -> tuple[list, Exception | None]:
    if suffix == "index":
        return seg.offset_index.entries_array(limit=seg.size()), seg.offset_index.fault
    if suffix == "timeindex":
        return seg.time_index.entries_array(limit=seg.time_index_limit(seg.size())), seg.time_index.fault
    e = seg.txn_index.entries()
    return [e[f] for f in ("version", "producer_id", "first_offset", "last_offset", "last_stable_offset")], None


class IndexEntries(NamedTuple):
    """A segment index's valid entries, read when its view is opened, and the fault that ends them."""

    suffix: str
    columns: list
    fault: Exception | None


def read_index(directory: str, base_offset: int, suffix: str, active: bool) -> IndexEntries:
    """The entries of the segment's `.index`, `.timeindex` or `.txnindex`, read now: an open
    view keeps them when retention deletes the segment (FileNotFoundError when it is gone already)."""
    seg = LogSegment.open(directory, base_offset, live=active)
    try:
        return segment_index(seg, suffix)
    finally:
        seg.close()


def segment_index(seg: LogSegment, suffix: str) -> IndexEntries:
    """read_index of an open segment (a remote one's indexes: fetched into the cache and mapped)."""
    columns, fault = _index_columns(seg, suffix)
    columns = [np.array(c) for c in columns]  # copies: nothing left pointing into the index file
    return IndexEntries(suffix, columns, fault)


def index_lines(entries: IndexEntries, cursor: int) -> Pieces:
    """Producer: one line per valid entry, from entry number `cursor`; a corrupt index ends
    with its error after the valid entries."""
    fmt = _INDEX_LINES[entries.suffix]
    count = len(entries.columns[0])
    for i in range(cursor, count, LINES_PER_PIECE):
        rows = zip(*(c[i:i + LINES_PER_PIECE].tolist() for c in entries.columns))
        yield "".join(fmt % row for row in rows).encode("ascii"), i + LINES_PER_PIECE
    if entries.fault is not None:
        raise entries.fault


def partition_json(part: PartitionInfo, segments: Segments) -> bytes:
    """partition.json: log start and end offsets, and each segment's offset range, size and time range.

    A segment's `end_offset` (exclusive) is the next segment's base offset, or the log end
    offset. Its `time_range` [from, to] holds the timestamps for which ListOffsets (and
    at-time/) search this segment: after every earlier segment's largest timestamp, up to
    its own; null when an earlier segment already reaches further.
    """
    rows, reached = [], -1
    for seg, nxt in zip(segments.list, [*segments.list[1:], None]):
        largest = seg.largest_timestamp
        rows.append({
            "base_offset": seg.base_offset,
            "end_offset": nxt.base_offset if nxt is not None else max(part.log_end_offset, seg.base_offset),
            "size": seg.size, "active": seg.active, "largest_timestamp": largest,
            "time_range": [reached + 1, largest] if largest > reached else None,
            "offset_index_entries": seg.offset_index_entries, "time_index_entries": seg.time_index_entries,
        })
        reached = max(reached, largest)
    doc = {"topic": part.topic, "partition": part.partition, "log_start_offset": part.log_start_offset,
           "log_end_offset": part.log_end_offset, "log_dir": part.log_dir,
           "read_from": "local files" if part.local_dir else "lookupd", "segments": rows}
    return (json.dumps(doc, indent=2) + "\n").encode()
