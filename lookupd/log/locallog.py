"""A partition's segments on local disk (Kafka's LocalLog/UnifiedLog, read side).

Opening a partition lists its directory and nothing else: `LogSegment` objects are made
on first use, so a partition of 100,000 segments costs one sorted array of base offsets
until something is looked up in it.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import threading
from typing import Callable, Iterator, TypeVar

import numpy as np

from ..format.batch import parse_header, whole_batches
from ..errors import INT64_MAX, CorruptDataError, InvalidArgument, OffsetOutOfRange, Unavailable, check_int64
from ..format.names import LOG_SUFFIX, OFFSET_DIGITS, SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX, parse_segment_file
from . import bulk
from .segment import LOCATE_BATCH, LOCATE_CEILING, LOCATE_ENTRY, LOCATE_READ, LogSegment
from .segmentlist import (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP,
                          MAX_TIMESTAMP, BatchLocation, IndexPoint, OffsetAndTimestamp, ReadResult, SegmentList,
                          TimeIndexPoint, _check_mode, _check_timestamp, _find_batch, _log_start)
from .txnindex import AbortedTxn


log = logging.getLogger(__name__)

# A NamedTuple from a native answer of the right length: tuple.__new__ skips _make's length check
# (a tenth of a microsecond, on every lookup).
_tuple = tuple.__new__

# A partition directory's files named by a base offset, by suffix without its dot: the `.log`, and the others
_LOG = LOG_SUFFIX[1:]
_OTHER_SEGMENT_FILES = frozenset(s[1:] for s in SEGMENT_SUFFIXES + (SNAPSHOT_SUFFIX,) if s != LOG_SUFFIX)


class ListingChanges:
    """How many times any partition's segment listing has been replaced in this process (LocalLog.refresh
    counts each, after the new listing is in place): a reader that derived something from many
    partitions' listings compares one number rather than each listing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def bump(self) -> None:
        with self._lock:  # (two partitions rolling at once must count twice)
            self.count += 1


LISTING_CHANGES = ListingChanges()


def scan_segments(directory: str) -> tuple[list[int], frozenset[str]]:
    """Sorted base offsets of the segments (those with a `.log`) in a partition directory, and the names of
    segment files that are symbolic links or not regular files: never read (lookupd.log.fileio), and a
    segment whose `.log` is one is not listed. The file type comes with the directory entry (no stat)."""
    bases = []
    refused = []
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            stem, _, suffix = name.partition(".")
            if len(stem) == OFFSET_DIGITS and stem.isascii() and stem.isdigit():
                if suffix == _LOG or suffix in _OTHER_SEGMENT_FILES:
                    if not entry.is_file(follow_symlinks=False):
                        refused.append(name)
                    elif suffix == _LOG:
                        bases.append(int(stem))
                    continue
            parse_segment_file(name)  # debug-logs what is skipped and why
    bases.sort()
    return bases, frozenset(refused)


def list_segments(directory: str) -> list[int]:
    """Sorted base offsets of the segments in a partition directory (`scan_segments`)."""
    return scan_segments(directory)[0]


def _warn_refused(directory: str, names: frozenset[str]) -> None:
    for name in sorted(names):
        what = "its segment is not served" if name.endswith(LOG_SUFFIX) else "the segment is answered without it"
        log.warning("%s is a symbolic link or not a regular file: not read, %s (files in a log dir must be "
                    "regular files)", os.path.join(directory, name), what)


T = TypeVar("T")
_ATTEMPTS = 3


def _one_listing(method: Callable[..., T]) -> Callable[..., T]:
    """Run a query against one SegmentList; if a segment's files vanished meanwhile (the
    broker deleted it after our last listing), list the directory again and rerun.
    (The first try is outside the retry loop: a loop costs a sixth of a lookup.)"""
    @functools.wraps(method)
    def run(self: "LocalLog", *args, **kwargs) -> T:
        try:
            return method(self, SegmentList(self, self._bases), *args, **kwargs)
        except FileNotFoundError:
            pass  # retried below, outside this handler
        for _ in range(_ATTEMPTS - 1):
            _relist(self)
            try:
                return method(self, SegmentList(self, self._bases), *args, **kwargs)
            except FileNotFoundError:
                pass
        _relist(self)
        raise Unavailable(f"segments of {self.topic}-{self.partition} kept disappearing while being read "
                          f"(the broker is deleting them); retry")
    return run


_NO_ARG = object()  # a lookup's second argument, not given


def _fast_path(reference: str) -> Callable[[Callable[..., T | None]], Callable[..., T]]:
    """A lookup of one or two positional arguments answered by its fast path (the decorated function),
    or, where that gives None, by the method named `reference`, the answer of record. A segment deleted
    while the fast path read it is the reference path's too: it lists the directory again.
    (Two named parameters, not *args: a call through *args costs a lookup a sixth of its time.)"""
    def wrap(fast: Callable[..., T | None]) -> Callable[..., T]:
        @functools.wraps(fast)
        def method(self: "LocalLog", first, second=_NO_ARG) -> T:
            try:
                found = fast(self, first) if second is _NO_ARG else fast(self, first, second)
            except FileNotFoundError:
                found = None
            if found is not None:
                return found
            answer = getattr(self, reference)
            return answer(first) if second is _NO_ARG else answer(first, second)
        return method
    return wrap


def _relist(log: "LocalLog") -> None:
    """List the partition directory again after a segment vanished; Unavailable if the partition is gone."""
    try:
        log.refresh()
    except FileNotFoundError:
        raise Unavailable(f"partition {log.topic}-{log.partition} was deleted while being read") from None


class LocalLog:
    """Read-only view of one partition directory."""

    # Why the remote tier's segments of this partition are unknown (its listing failed and none succeeded
    # before), None otherwise: an offset below the local log start is then UNAVAILABLE, not out of range.
    remote_error: Exception | None = None

    def __init__(self, directory: str | os.PathLike, topic: str, partition: int, cache=None, *,
                 log_start_offset: int | None = None):
        self.dir = os.fspath(directory)
        self.topic = topic
        self.partition = partition
        self._cache = cache
        self.checkpointed_log_start = log_start_offset
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._refused: frozenset[str] = frozenset()  # segment files not read, as last listed (warned once)
        # (listing, running maximum of its rolled segments' largest timestamps, as far as computed);
        # replaced whole, never changed in place, so threads share it without a lock
        self._largest: tuple[list[int] | None, list[int]] = (None, [])
        self._segments: dict[int, LogSegment] = {}
        self.refresh()

    def __repr__(self) -> str:
        return f"LocalLog({self.topic}-{self.partition}, {len(self._bases)} segments)"

    @property
    def local_dir(self) -> str | None:
        """The partition directory on this host (a TieredLog's is None when it is only in the bucket)."""
        return self.dir

    # ------------------------------------------------------------- segments

    def refresh(self) -> bool:
        """Re-list the directory: pick up rolled and new segments, release deleted ones and reopen
        replaced ones (a name that now names another file, as after the cleaner's swap).

        Returns whether anything changed. Raises FileNotFoundError if the directory is gone.
        Segments changing role (rolled, newly active) are told so after the lock is released:
        that remaps their indexes, which may take a while on a slow disk.
        """
        bases = self._list_bases()
        replaced = {b for b, seg in list(self._segments.items()) if seg.replaced()}
        with self._lock:
            if bases == self._bases and not replaced:
                return False
            old_last = self._bases[-1] if self._bases else None
            gone = set(self._bases).difference(bases) | replaced
            self._bases = bases
            LISTING_CHANGES.bump()
            released = [self._segments.pop(b) for b in gone if b in self._segments]
            rolled = self._segments.get(old_last) if old_last is not None and bases and bases[-1] != old_last else None
            active = self._segments.get(bases[-1]) if bases else None
        if rolled is not None:
            rolled.set_live(False)
        if active is not None:
            active.set_live(True)
        for seg in released:
            log.debug("released %s segment %s", "replaced" if seg.base_offset in replaced else "deleted", seg)
            seg.close()
        return True

    def refresh_dir(self) -> bool:
        """`refresh` of the directory alone (a TieredLog's refresh lists the bucket too; a rescan that saw the
        directory change lists the bucket on its own schedule)."""
        return LocalLog.refresh(self)

    def _list_bases(self) -> list[int]:
        """Sorted base offsets of the segments (a TieredLog adds the remote ones below); a file that is not
        a regular one is named in a warning once, and left out."""
        bases, refused = scan_segments(self.dir)
        if refused != self._refused:
            _warn_refused(self.dir, refused - self._refused)
            self._refused = refused
        return bases

    def _new_segment(self, base_offset: int, live: bool) -> LogSegment:
        return LogSegment.open(self.dir, base_offset, self._cache, live=live)

    def local_log_start(self, v: SegmentList) -> int:
        """SegmentList.local_log_start_offset's answer: every segment is local here."""
        return v.log_start_offset

    def highest_remote_offset(self, v: SegmentList) -> int:
        return -1

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
        """The segment at `base_offset` (made on first use; one not in the listing is not kept)."""
        seg = self._segments.get(base_offset)
        if seg is None:
            with self._lock:
                seg = self._segments.get(base_offset)
                if seg is None:
                    bases = self._bases
                    seg = self._new_segment(base_offset, bool(bases) and base_offset == bases[-1])
                    i = bisect.bisect_left(bases, base_offset)
                    if i < len(bases) and bases[i] == base_offset:
                        self._segments[base_offset] = seg
        return seg

    def segments(self, start: int = 0) -> Iterator[LogSegment]:
        """Segments in offset order from list position `start`."""
        return SegmentList(self, self._bases).segments(start)

    @property
    def log_start_offset(self) -> int:
        """First segment's base offset, or the broker's checkpointed log start if higher."""
        return SegmentList(self, self._bases).log_start_offset

    @property
    @_one_listing
    def log_end_offset(self, v: SegmentList) -> int:
        """One past the last offset in the log (the active segment's next offset)."""
        return v.log_end_offset

    def offset_range(self) -> tuple[int, int]:
        """(log start offset, log end offset) of one listing: both ends at once (a group's lag needs both,
        for each of its partitions: SegmentList's answers, without making one unless a segment vanished)."""
        bases = self._bases
        if bases:
            try:
                return _log_start(bases, self.checkpointed_log_start), self.segment(bases[-1]).read_next_offset()
            except FileNotFoundError:
                pass
        return self._offset_range()

    @_one_listing
    def _offset_range(self, v: SegmentList) -> tuple[int, int]:
        return v.log_start_offset, v.log_end_offset

    def _check_offset(self, offset: object, what: str = "offset") -> int:
        if type(offset) is int and 0 <= offset <= INT64_MAX:  # the usual case, without check_int64's call
            return offset
        offset = check_int64(offset, what)
        if offset < 0:
            raise InvalidArgument(f"{what} {offset} is negative")
        return offset

    def _check_in_range(self, v: SegmentList, offset: int) -> int:
        """Offsets a fetch may start at: [log start, log end]; returns the log end offset."""
        start, end = v.log_start_offset, v.log_end_offset
        if not start <= offset <= end:
            if offset < start and self.remote_error is not None:
                raise Unavailable(f"offset {offset} of {self.topic}-{self.partition} may be in the remote tier, "
                                  f"which cannot be listed now ({self.remote_error}); retry")
            raise OffsetOutOfRange(f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                                   f"the log holds [{start}, {end})")
        return end

    # ------------------------------------------------------------- index-level lookups

    @_fast_path("lookup_offset_reference")
    def lookup_offset(self, offset: int, mode: str = "floor") -> IndexPoint | None:
        """Floor or ceiling over the partition's index points: each segment start (position 0)
        and every offset-index entry. In a segment already open, one native call (a ceiling past the
        segment's last entry, in the next segment, is the reference path's)."""
        if type(offset) is int and 0 <= offset <= INT64_MAX and (mode == "floor" or mode == "ceiling"):
            bases = self._bases
            i = bisect.bisect_right(bases, offset) - 1
            seg = self._segments.get(bases[i]) if i >= 0 else None
            if seg is not None:
                if mode == "ceiling" and offset <= seg.base_offset:
                    return IndexPoint(seg.base_offset, seg.base_offset, 0)
                found = seg.locate(LOCATE_ENTRY if mode == "floor" else LOCATE_CEILING, offset)
                if found is not None:
                    return _tuple(IndexPoint, found)
        return None

    @_one_listing
    def lookup_offset_reference(self, v: SegmentList, offset: int, mode: str = "floor") -> IndexPoint | None:
        """`lookup_offset` as Kafka answers it, step by step: the answer of record, which the fast path must equal."""
        offset = self._check_offset(offset)
        _check_mode(mode)
        i = v.floor_slot(offset)
        bases = v.bases
        if mode == "floor":
            if i < 0:
                return None
            seg = v.segment(bases[i])
            o, p = seg.offset_index_lookup(offset)
            return IndexPoint(seg.base_offset, o, p)
        if i < 0:
            return IndexPoint(bases[0], bases[0], 0) if bases else None
        seg = v.segment(bases[i])
        if offset <= seg.base_offset:
            return IndexPoint(seg.base_offset, seg.base_offset, 0)
        found = seg.indexes.offset.ceiling_entry(offset, limit=seg.size())
        if found is not None:
            return IndexPoint(seg.base_offset, *found)
        return IndexPoint(bases[i + 1], bases[i + 1], 0) if i + 1 < len(bases) else None

    def _timestamp_segment(self, v: SegmentList, timestamp: int) -> int:
        """List position of the first segment whose largest timestamp >= target (ListOffsets), -1 if none.

        Rolled segments are searched by bisection over the running maximum of their largest timestamps
        (the first segment at or past a target is where that maximum first reaches it), kept with
        the listing it was computed for and extended only as far as a target needs; the active
        segment, still growing, is asked each time."""
        bases = v.bases
        listing, running = self._largest
        if listing is not bases:
            running = []
        rolled = len(bases) - 1
        if len(running) < rolled and (not running or running[-1] < timestamp):
            running = list(running)  # extended on a copy, then published whole: readers never see it change
            while len(running) < rolled and (not running or running[-1] < timestamp):
                ts = v.segment(bases[len(running)]).largest_timestamp()  # may read the disk: no lock held
                running.append(max(running[-1], ts) if running else ts)
            self._largest = (bases, running)
        i = bisect.bisect_left(running, timestamp)
        if i < len(running):
            return i
        if bases and v.segment(bases[-1]).largest_timestamp() >= timestamp:
            return len(bases) - 1
        return -1

    @_fast_path("lookup_timestamp_reference")
    def lookup_timestamp(self, timestamp: int, mode: str = "floor") -> TimeIndexPoint | None:
        """Time-index-level floor or ceiling, in the segment ListOffsets would search. A floor in a
        segment already open is two native calls (three in the active segment)."""
        if mode == "floor" and type(timestamp) is int and 0 <= timestamp <= INT64_MAX:
            found = self._fast_time_segment(timestamp)
            found = found.time_point_fast(timestamp) if found is not None else None
            if found is not None:
                return _tuple(TimeIndexPoint, found)
        return None

    def _fast_time_segment(self, timestamp: int) -> LogSegment | None:
        """The open segment ListOffsets would search for `timestamp` (an int in [0, int64 max]), None
        when there is none or it is not open."""
        listing, running = self._largest
        if running and listing is self._bases and running[-1] >= timestamp:
            # _timestamp_segment's answer without its call: the running maximum computed so far
            # already reaches the target, so its bisection is the answer.
            return self._segments.get(listing[bisect.bisect_left(running, timestamp)])
        v = SegmentList(self, self._bases)
        i = self._timestamp_segment(v, timestamp)
        return self._segments.get(v.bases[i]) if i >= 0 else None

    @_one_listing
    def lookup_timestamp_reference(self, v: SegmentList, timestamp: int, mode: str = "floor") -> TimeIndexPoint | None:
        """`lookup_timestamp` as Kafka answers it, step by step: the answer of record, which the fast path must equal."""
        timestamp = _check_timestamp(timestamp)
        _check_mode(mode)
        i = self._timestamp_segment(v, timestamp)
        if i < 0:
            return None
        if mode == "floor":
            seg = v.segment(v.bases[i])
            size = seg.size()
            ts, o = seg.time_index_lookup(timestamp, size)
            return TimeIndexPoint(seg.base_offset, ts, o, seg.offset_index_lookup(o, size)[1])
        for seg in v.segments(i):
            size = seg.size()
            found = seg.indexes.time.ceiling_entry(timestamp, limit=seg.time_index_limit(size))
            if found is not None:
                ts, o = found
                return TimeIndexPoint(seg.base_offset, ts, o, seg.offset_index_lookup(o, size)[1])
        return None

    # ------------------------------------------------------------- exact answers

    @_fast_path("resolve_offset_reference")
    def resolve_offset(self, offset: int) -> BatchLocation | None:
        """The batch holding `offset` (or the first after it, across segments); None at the log end.
        In a segment already open, when the batch is in it, one native call."""
        seg = self._fast_segment(offset)
        found = seg.locate(LOCATE_BATCH, offset) if seg is not None else None
        return _tuple(BatchLocation, found) if found is not None else None

    def _fast_segment(self, offset: object) -> LogSegment | None:
        """The open segment holding `offset` when the native path may answer for it: an int in
        [log start, log end). None leaves the call, its checks and errors, to the reference path.
        An offset below the active segment's base offset is below the log end offset, so only an
        offset in the active segment needs the log end, which is cached by the `.log`'s size."""
        bases = self._bases  # one snapshot of the listing (SegmentList's rule), read without making one
        if type(offset) is not int or not bases or \
                not _log_start(bases, self.checkpointed_log_start) <= offset <= INT64_MAX:
            return None
        i = bisect.bisect_right(bases, offset) - 1
        seg = self._segments.get(bases[i])
        if seg is None or (i == len(bases) - 1 and offset >= seg.read_next_offset()):
            return None
        return seg

    @_one_listing
    def resolve_offset_reference(self, v: SegmentList, offset: int) -> BatchLocation | None:
        """`resolve_offset` as Kafka answers it, step by step: the answer of record, which the fast path must equal."""
        offset = self._check_offset(offset)
        end = self._check_in_range(v, offset)
        if offset == end:
            return None
        return _find_batch(v, offset, v.floor_slot(offset))

    @_fast_path("offset_for_timestamp_reference")
    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first record with timestamp >= target; -2 earliest, -1 latest, -3 max.
        In a segment already open, when the first batch opened holds the record, a few native calls
        and the scan of that batch."""
        if type(timestamp) is int and 0 <= timestamp <= INT64_MAX:
            seg = self._fast_time_segment(timestamp)
            found = None if seg is None else seg.find_by_timestamp_fast(
                timestamp, _log_start(self._bases, self.checkpointed_log_start))  # log_start_offset's rule, inline
            if found is not None:
                return _tuple(OffsetAndTimestamp, found)
        return None

    @_one_listing
    def offset_for_timestamp_reference(self, v: SegmentList, timestamp: int) -> OffsetAndTimestamp | None:
        """`offset_for_timestamp` as Kafka answers it, step by step: the answer of record, which the fast path must equal."""
        timestamp = _check_timestamp(timestamp, lowest=LATEST_TIERED_TIMESTAMP)
        return self._offset_for_timestamp(v, timestamp)

    def _offset_for_timestamp(self, v: SegmentList, timestamp: int) -> OffsetAndTimestamp | None:
        bases = v.bases
        if timestamp == EARLIEST_TIMESTAMP:
            return _batch_at(v, v.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            active = v.active
            if active is None:
                return OffsetAndTimestamp(v.log_start_offset, -1, v.log_start_offset, 0)
            return OffsetAndTimestamp(active.read_next_offset(), -1, active.base_offset, active.size())
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp(v)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return _batch_at(v, v.local_log_start_offset)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            highest = v.highest_remote_offset
            return _batch_at(v, highest) if highest >= 0 else OffsetAndTimestamp(-1, -1, -1, -1)
        i = self._timestamp_segment(v, timestamp)
        if i < 0:
            return None
        seg = v.segment(bases[i])
        found = seg.find_offset_by_timestamp(timestamp, v.log_start_offset)
        if found is None:
            return None
        return OffsetAndTimestamp(found.offset, found.timestamp, seg.base_offset, found.position, found.leader_epoch)

    def _max_timestamp(self, v: SegmentList) -> OffsetAndTimestamp | None:
        """ListOffsets MAX_TIMESTAMP: the first record carrying the largest timestamp."""
        from ..format.records import offset_of_max_timestamp

        best, best_seg = None, None
        for seg in v.segments():
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

    @_one_listing
    def aborted_transactions(self, v: SegmentList, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound), collected as the fetch path does."""
        start_offset = self._check_offset(start_offset, "start offset")
        upper_bound_offset = self._check_offset(upper_bound_offset, "end offset")
        if upper_bound_offset < start_offset:
            raise InvalidArgument(f"end offset {upper_bound_offset} is before start offset {start_offset}")
        out: list[AbortedTxn] = []
        for seg in v.segments(v.floor_slot(start_offset)):
            txns, complete = seg.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(txns)
            if complete:
                break
        return out

    @_fast_path("read_reference")
    def read(self, offset: int, max_bytes: int) -> ReadResult | None:
        """Whole batches from the one holding `offset`: at most `max_bytes`, but at least one batch.
        In a segment already open, when the batch is in it, one native call finds and reads it."""
        if type(max_bytes) is not int or not 0 <= max_bytes <= INT64_MAX:
            return None
        seg = self._fast_segment(offset)
        found = seg.locate(LOCATE_READ, offset, max_bytes) if seg is not None else None
        if found is None:
            return None
        _, position, records = found
        whole, next_offset = whole_batches(records, position, seg.log.path)
        return _tuple(ReadResult, (seg.base_offset, position, next_offset if whole else offset, records[:whole]))

    @_one_listing
    def read_reference(self, v: SegmentList, offset: int, max_bytes: int) -> ReadResult:
        """`read` as Kafka answers it, step by step: the answer of record, which the fast path must equal."""
        offset = self._check_offset(offset)
        max_bytes = check_int64(max_bytes, "max_bytes")
        if max_bytes < 0:
            raise InvalidArgument(f"max_bytes {max_bytes} is negative")
        end = self._check_in_range(v, offset)
        if offset < end:
            for seg in v.segments(v.floor_slot(offset)):
                fetched = seg.read(offset, max_bytes, min_one_message=True)
                if fetched is None:
                    continue
                whole, next_offset = whole_batches(fetched.records, fetched.position, seg.log.path)
                return ReadResult(seg.base_offset, fetched.position, next_offset if whole else offset,
                                  fetched.records[:whole])
        active = v.active
        if active is None:
            return ReadResult(offset, 0, offset, b"")
        return ReadResult(active.base_offset, active.size(), end, b"")

    # ------------------------------------------------------------- listings

    @_one_listing
    def info(self, v: SegmentList) -> dict:
        """The partition's listing. When its log end offset cannot be read (corrupt data, an I/O error),
        that is null and `error` says why ("CODE: message"): one partition never fails a listing of all."""
        out = {"topic": self.topic, "partition": self.partition, "log_dir": os.path.dirname(self.dir),
               "segments": len(v), "log_start_offset": v.log_start_offset}
        try:
            out["log_end_offset"] = v.log_end_offset
            out["local_log_start_offset"] = v.local_log_start_offset
        except FileNotFoundError:
            raise  # a segment deleted meanwhile: listed again (_one_listing)
        except (CorruptDataError, OSError) as err:
            out["log_end_offset"] = out["local_log_start_offset"] = None
            out["error"] = f"{getattr(err, 'code', Unavailable.code)}: {err}"
        return out

    @_one_listing
    def segments_info(self, v: SegmentList) -> list[dict]:
        return [seg.info() for seg in v.segments()]

    # ------------------------------------------------------------- columnar many-lookups (lookupd.log.bulk)

    @_one_listing
    def lookup_offsets(self, v: SegmentList, offsets, mode: str = "floor") -> dict[str, np.ndarray]:
        """Vectorised `lookup_offset`: arrays segment, offset, position (-1 where nothing matches)."""
        return bulk.lookup_offsets(v, offsets, mode)

    @_one_listing
    def resolve_offsets(self, v: SegmentList, offsets) -> dict[str, np.ndarray]:
        """Vectorised `resolve_offset` (out-of-range targets give -1 rather than an error)."""
        return bulk.resolve_offsets(v, offsets)

    @_one_listing
    def offsets_for_timestamps(self, v: SegmentList, timestamps) -> dict[str, np.ndarray]:
        """Vectorised `offset_for_timestamp`: arrays offset, timestamp, segment, position (-1 where none)."""
        return bulk.offsets_for_timestamps(v, timestamps)


def _batch_at(v: SegmentList, offset: int) -> OffsetAndTimestamp:
    """ListOffsets' answer for a special target that names an offset: it, with the segment and position
    of the batch holding it (the first segment at position 0 past the end)."""
    bases = v.bases
    loc = _find_batch(v, offset, v.floor_slot(offset)) if bases and offset < v.log_end_offset else None
    seg = loc.segment if loc else (bases[0] if bases else offset)
    return OffsetAndTimestamp(offset, -1, seg, loc.position if loc else 0)
