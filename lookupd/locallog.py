"""A partition's segments on local disk (Kafka's LocalLog/UnifiedLog, read side).

Opening a partition lists its directory and nothing else: `LogSegment` objects are made
on first use, so a partition of 100,000 segments costs one sorted array of base offsets
until something is looked up in it.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from typing import Iterator, NamedTuple

import numpy as np

from .batch import parse_header
from .errors import InvalidArgument, OffsetOutOfRange, check_int64
from .names import parse_segment_file
from .segment import LogSegment
from .txnindex import AbortedTxn

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class IndexPoint(NamedTuple):
    segment: int
    offset: int
    position: int


class TimeIndexPoint(NamedTuple):
    segment: int
    timestamp: int
    offset: int
    position: int


class BatchLocation(NamedTuple):
    segment: int
    base_offset: int
    last_offset: int
    position: int
    size: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    segment: int
    position: int
    leader_epoch: int | None = None


class ReadResult(NamedTuple):
    segment: int
    position: int
    next_offset: int
    records: bytes


_OTHER_SEGMENT_FILES = frozenset(("index", "timeindex", "txnindex", "snapshot"))


def list_segments(directory: str) -> list[int]:
    """Sorted base offsets of the segments (those with a `.log`) in a partition directory."""
    bases = []
    for name in os.listdir(directory):
        stem, _, suffix = name.partition(".")
        if len(stem) == 20 and stem.isdigit():
            if suffix == "log":
                bases.append(int(stem))
                continue
            if suffix in _OTHER_SEGMENT_FILES:
                continue
        parse_segment_file(name)  # debug-logs what is skipped and why
    bases.sort()
    return bases


class LocalLog:
    """Read-only view of one partition directory."""

    def __init__(self, directory: str | os.PathLike, topic: str, partition: int, cache=None, *,
                 log_start_offset: int | None = None):
        self.dir = os.fspath(directory)
        self.topic = topic
        self.partition = partition
        self._cache = cache
        self.checkpointed_log_start = log_start_offset
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._segments: dict[int, LogSegment] = {}
        self.refresh()

    def __repr__(self) -> str:
        return f"LocalLog({self.topic}-{self.partition}, {len(self._bases)} segments)"

    # ------------------------------------------------------------- segments

    def refresh(self) -> bool:
        """Re-list the directory: pick up rolled and new segments, release deleted ones.

        Returns whether anything changed. Raises FileNotFoundError if the directory is gone.
        """
        bases = list_segments(self.dir)
        with self._lock:
            if bases == self._bases:
                return False
            old_last = self._bases[-1] if self._bases else None
            gone = set(self._bases).difference(bases)
            self._bases = bases
            released = [self._segments.pop(b) for b in gone if b in self._segments]
            if old_last is not None and old_last in self._segments and bases and bases[-1] != old_last:
                self._segments[old_last].set_live(False)
            if bases and bases[-1] in self._segments:
                self._segments[bases[-1]].set_live(True)
        for seg in released:
            log.debug("released deleted segment %s", seg)
            seg.close()
        return True

    def close(self) -> None:
        with self._lock:
            segs = list(self._segments.values())
            self._segments.clear()
        for seg in segs:
            seg.close()

    @property
    def base_offsets(self) -> list[int]:
        return self._bases

    def segment(self, base_offset: int) -> LogSegment:
        seg = self._segments.get(base_offset)
        if seg is None:
            with self._lock:
                seg = self._segments.get(base_offset)
                if seg is None:
                    bases = self._bases
                    seg = LogSegment(self.dir, base_offset, self._cache, live=bool(bases) and base_offset == bases[-1])
                    self._segments[base_offset] = seg
        return seg

    def segments(self, start: int = 0) -> Iterator[LogSegment]:
        """Segments in offset order from list position `start`."""
        bases = self._bases
        for b in bases[start:]:
            yield self.segment(b)

    def _floor_slot(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    @property
    def active_segment(self) -> LogSegment | None:
        bases = self._bases
        return self.segment(bases[-1]) if bases else None

    # ------------------------------------------------------------- offsets

    @property
    def log_start_offset(self) -> int:
        """First segment's base offset, or the broker's checkpointed log start if higher."""
        bases = self._bases
        first = bases[0] if bases else 0
        cp = self.checkpointed_log_start
        return max(first, cp) if cp is not None else first

    @property
    def log_end_offset(self) -> int:
        """One past the last offset in the log (the active segment's next offset)."""
        active = self.active_segment
        return active.read_next_offset() if active is not None else self.log_start_offset

    def _check_offset(self, offset: object, what: str = "offset") -> int:
        offset = check_int64(offset, what)
        if offset < 0:
            raise InvalidArgument(f"{what} {offset} is negative")
        return offset

    def _check_in_range(self, offset: int) -> int:
        """Offsets a fetch may start at: [log start, log end]; returns the log end offset."""
        start, end = self.log_start_offset, self.log_end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRange(f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                                   f"the log holds [{start}, {end})")
        return end

    # ------------------------------------------------------------- index-level lookups

    def lookup_offset(self, offset: int, mode: str = "floor") -> IndexPoint | None:
        """Floor or ceiling over the partition's index points: each segment start (position 0)
        and every offset-index entry."""
        offset = self._check_offset(offset)
        i = self._floor_slot(offset)
        bases = self._bases
        if mode == "floor":
            if i < 0:
                return None
            seg = self.segment(bases[i])
            o, p = seg.offset_index_lookup(offset)
            return IndexPoint(seg.base_offset, o, p)
        if mode != "ceiling":
            raise InvalidArgument(f"mode must be 'floor' or 'ceiling', got {mode!r}")
        if i < 0:
            return IndexPoint(bases[0], bases[0], 0) if bases else None
        seg = self.segment(bases[i])
        if offset <= seg.base_offset:
            return IndexPoint(seg.base_offset, seg.base_offset, 0)
        slot = seg.offset_index.ceiling_slot(offset, limit=seg.size())
        if slot >= 0:
            o, p = seg.offset_index.entry(slot, limit=seg.size())
            return IndexPoint(seg.base_offset, o, p)
        return IndexPoint(bases[i + 1], bases[i + 1], 0) if i + 1 < len(bases) else None

    def _timestamp_segment(self, timestamp: int) -> int:
        """List position of the first segment whose largest timestamp >= target (ListOffsets), -1 if none."""
        for i, b in enumerate(self._bases):
            if self.segment(b).largest_timestamp() >= timestamp:
                return i
        return -1

    def lookup_timestamp(self, timestamp: int, mode: str = "floor") -> TimeIndexPoint | None:
        """Time-index-level floor or ceiling, in the segment ListOffsets would search."""
        timestamp = check_int64(timestamp, "timestamp")
        if mode not in ("floor", "ceiling"):
            raise InvalidArgument(f"mode must be 'floor' or 'ceiling', got {mode!r}")
        i = self._timestamp_segment(timestamp)
        if i < 0:
            return None
        if mode == "floor":
            seg = self.segment(self._bases[i])
            size = seg.size()
            ts, o = seg.time_index_lookup(timestamp, size)
            return TimeIndexPoint(seg.base_offset, ts, o, seg.offset_index_lookup(o, size)[1])
        for seg in self.segments(i):
            size = seg.size()
            limit = seg.time_index_limit(size)
            slot = seg.time_index.ceiling_slot(timestamp, limit=limit)
            if slot >= 0:
                ts, o = seg.time_index.entry(slot, limit=limit)
                return TimeIndexPoint(seg.base_offset, ts, o, seg.offset_index_lookup(o, size)[1])
        return None

    # ------------------------------------------------------------- exact answers

    def resolve_offset(self, offset: int) -> BatchLocation | None:
        """The batch holding `offset` (or the first after it, across segments); None at the log end."""
        offset = self._check_offset(offset)
        end = self._check_in_range(offset)
        if offset == end:
            return None
        return self._find_batch(offset, self._floor_slot(offset))

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first record with timestamp >= target; -2 earliest, -1 latest, -3 max."""
        timestamp = check_int64(timestamp, "timestamp")
        bases = self._bases
        if timestamp == EARLIEST_TIMESTAMP:
            start = self.log_start_offset
            loc = self.resolve_offset(start) if bases else None
            seg = loc.segment if loc else (bases[0] if bases else start)
            return OffsetAndTimestamp(start, -1, seg, loc.position if loc else 0)
        if timestamp == LATEST_TIMESTAMP:
            active = self.active_segment
            if active is None:
                return OffsetAndTimestamp(self.log_start_offset, -1, self.log_start_offset, 0)
            return OffsetAndTimestamp(active.read_next_offset(), -1, active.base_offset, active.size())
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp()
        if timestamp < 0:
            raise InvalidArgument(f"timestamp {timestamp} is negative and not one of -1 (latest), "
                                  f"-2 (earliest) or -3 (max timestamp)")
        i = self._timestamp_segment(timestamp)
        if i < 0:
            return None
        seg = self.segment(bases[i])
        found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
        if found is None:
            return None
        return OffsetAndTimestamp(found.offset, found.timestamp, seg.base_offset, found.position, found.leader_epoch)

    def _max_timestamp(self) -> OffsetAndTimestamp | None:
        """ListOffsets MAX_TIMESTAMP: the first record carrying the largest timestamp."""
        from .records import offset_of_max_timestamp

        best, best_seg = None, None
        for seg in self.segments():
            ts = seg.max_timestamp_so_far()
            if best is None or ts[0] > best[0]:
                best, best_seg = ts, seg
        if best_seg is None:
            return None
        size = best_seg.size()
        start = best_seg.offset_index_lookup(best[1], size)[1]
        for buf, off, pos, batch_size in best_seg.log.frames(start, size):
            header = parse_header(buf, off, pos, best_seg.log.path)
            if header.max_timestamp == best[0]:
                data = best_seg.log.read(pos, batch_size)
                offset = offset_of_max_timestamp(header, data)
                if offset is None:
                    return None
                return OffsetAndTimestamp(offset, header.max_timestamp, best_seg.base_offset, pos,
                                          header.partition_leader_epoch_or_none)
        return None

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound), collected as the fetch path does."""
        start_offset = self._check_offset(start_offset, "start offset")
        upper_bound_offset = self._check_offset(upper_bound_offset, "end offset")
        if upper_bound_offset < start_offset:
            raise InvalidArgument(f"end offset {upper_bound_offset} is before start offset {start_offset}")
        out: list[AbortedTxn] = []
        for seg in self.segments(max(self._floor_slot(start_offset), 0)):
            txns, complete = seg.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(txns)
            if complete:
                break
        return out

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one holding `offset`: at most `max_bytes`, but at least one batch."""
        offset = self._check_offset(offset)
        max_bytes = check_int64(max_bytes, "max_bytes")
        if max_bytes < 0:
            raise InvalidArgument(f"max_bytes {max_bytes} is negative")
        end = self._check_in_range(offset)
        i = max(self._floor_slot(offset), 0)
        if offset < end:
            for seg in self.segments(i):
                fetched = seg.read(offset, max_bytes, min_one_message=True)
                if fetched is None:
                    continue
                whole, next_offset = _whole_batches(fetched.records, seg)
                return ReadResult(seg.base_offset, fetched.position, next_offset if whole else offset, fetched.records[:whole])
        active = self.active_segment
        if active is None:
            return ReadResult(offset, 0, offset, b"")
        return ReadResult(active.base_offset, active.size(), end, b"")

    # ------------------------------------------------------------- listings

    def info(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "log_dir": os.path.dirname(self.dir),
                "segments": len(self._bases), "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset}

    def segments_info(self) -> list[dict]:
        return [seg.info() for seg in self.segments()]

    # ------------------------------------------------------------- columnar many-lookups

    def lookup_offsets(self, offsets, mode: str = "floor") -> dict[str, np.ndarray]:
        """Vectorised `lookup_offset`: arrays segment, offset, position (-1 where nothing matches)."""
        if mode not in ("floor", "ceiling"):
            raise InvalidArgument(f"mode must be 'floor' or 'ceiling', got {mode!r}")
        t = _int64_array(offsets, "offsets")
        n = len(t)
        seg_out = np.full(n, -1, np.int64)
        off_out = np.full(n, -1, np.int64)
        pos_out = np.full(n, -1, np.int64)
        bases = np.asarray(self._bases, dtype=np.int64)
        if n == 0 or len(bases) == 0:
            return {"segment": seg_out, "offset": off_out, "position": pos_out}
        slot = np.searchsorted(bases, t, side="right") - 1
        ceiling = mode == "ceiling"
        if ceiling:
            below = slot < 0
            seg_out[below], off_out[below], pos_out[below] = bases[0], bases[0], 0
        for s in np.unique(slot[slot >= 0]):
            mask = slot == s
            seg = self.segment(int(bases[s]))
            o, p = seg.offset_index.lookup_many(t[mask], limit=seg.size(), ceiling=ceiling)
            if ceiling:
                at_start = t[mask] <= seg.base_offset
                o[at_start], p[at_start] = seg.base_offset, 0
                missing = o < 0
                if s + 1 < len(bases):
                    o[missing], p[missing] = bases[s + 1], 0
                    segs = np.where(missing, bases[s + 1], seg.base_offset)
                else:
                    segs = np.where(missing, -1, seg.base_offset)
            else:
                segs = np.full(len(o), seg.base_offset, np.int64)
            seg_out[mask], off_out[mask], pos_out[mask] = segs, o, p
        return {"segment": seg_out, "offset": off_out, "position": pos_out}

    def resolve_offsets(self, offsets) -> dict[str, np.ndarray]:
        """Vectorised `resolve_offset` (out-of-range targets give -1 rather than an error).

        Targets are resolved in sorted order: each scan starts where the previous answer
        was, and a target inside the batch just found costs nothing.
        """
        t = _int64_array(offsets, "offsets")
        n = len(t)
        out = {k: np.full(n, -1, np.int64) for k in BatchLocation._fields}
        bases = np.asarray(self._bases, dtype=np.int64)
        if n == 0 or len(bases) == 0:
            return out
        start, end = self.log_start_offset, self.log_end_offset
        slot = np.searchsorted(bases, t, side="right") - 1
        prev: BatchLocation | None = None
        for k in np.argsort(t, kind="stable"):
            target = int(t[k])
            if not start <= target < end:
                continue
            if prev is None or target > prev.last_offset:
                prev = self._find_batch(target, int(slot[k]), prev)
                if prev is None:
                    continue
            for field, value in zip(BatchLocation._fields, prev):
                out[field][k] = value
        return out

    def _find_batch(self, target: int, slot: int, hint: BatchLocation | None = None) -> BatchLocation | None:
        """translateOffset from the floor segment on, starting at `hint` when it is in the same segment."""
        for seg in self.segments(max(slot, 0)):
            from_pos = hint.position if hint is not None and hint.segment == seg.base_offset else 0
            found = seg.translate_offset(target, from_pos)
            if found is not None:
                return BatchLocation(seg.base_offset, found.base_offset, found.offset, found.position, found.size)
        return None

    def offsets_for_timestamps(self, timestamps) -> dict[str, np.ndarray]:
        """Vectorised `offset_for_timestamp`: arrays offset, timestamp, segment, position (-1 where none)."""
        t = _int64_array(timestamps, "timestamps")
        n = len(t)
        out = {k: np.full(n, -1, np.int64) for k in ("offset", "timestamp", "segment", "position")}
        if n == 0:
            return out
        bases = self._bases
        largest = np.maximum.accumulate(np.array([self.segment(b).largest_timestamp() for b in bases], dtype=np.int64)) \
            if bases else np.empty(0, np.int64)
        start = self.log_start_offset
        for k in np.argsort(t, kind="stable"):
            ts = int(t[k])
            if ts < 0:
                r = self.offset_for_timestamp(ts) if ts >= MAX_TIMESTAMP else None
            else:
                i = int(np.searchsorted(largest, ts, side="left"))
                r = None
                if i < len(bases):
                    seg = self.segment(bases[i])
                    found = seg.find_offset_by_timestamp(ts, start)
                    if found is not None:
                        r = OffsetAndTimestamp(found.offset, found.timestamp, seg.base_offset, found.position)
            if r is not None:
                out["offset"][k], out["timestamp"][k], out["segment"][k], out["position"][k] = r[:4]
        return out


def _int64_array(values, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        raise InvalidArgument(f"{what} must be a list of int64 integers") from None
    if arr.ndim != 1:
        raise InvalidArgument(f"{what} must be a flat list")
    return arr


def _whole_batches(data: bytes, seg: LogSegment) -> tuple[int, int]:
    """(bytes of whole batches at the front of `data`, next offset after them)."""
    from .batch import frame_size, last_offset_at

    pos, next_offset = 0, -1
    while True:
        size = frame_size(data, pos, len(data), pos, seg.log.path)
        if size is None:
            return pos, next_offset
        next_offset = last_offset_at(data, pos) + 1
        pos += size
