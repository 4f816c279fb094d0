"""One log segment: its `.log` and its three indexes (Kafka's LogSegment, read side).

A segment is made of its parts, as Kafka's is: its records (FileRecords), its offset, time and transaction
indexes (SegmentIndexes) and where it comes from (SegmentOrigin: whether its files are still the ones it was
made of, what a listing says of it). A local segment and a remote one (lookupd.log.tiered.segment) differ only
in the parts they are given: `LogSegment.open` gives a partition directory's files.

The indexes only ever narrow down where to start reading; every exact answer comes from
scanning batch headers in the `.log`, as Kafka does. So a segment whose index is missing
or corrupt still answers correctly, from position 0 (and says so once in the log); only
the index-level lookups report the corruption.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple, Protocol

from ..format.batch import LOG_OVERHEAD, V2_HEADER_SIZE, parse_header
from ..format.records import find_timestamp, find_timestamp_fast
from ..errors import INT64_MAX, CorruptDataError, CorruptIndexError, CorruptRecordError, LookupdError
from .fileio import WouldBlock, mode as _nonblocking, regular_stat
from .filerecords import ZERO_HEADER, FileRecords, LogOffsetPosition
from .index import OffsetIndex, TimeIndex
from ..format.names import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_file_name
from .txnindex import AbortedTxn, TransactionIndex

from . import _accel

log = logging.getLogger(__name__)

# What `LogSegment.locate` finds (kinds of `_native.locate`).
LOCATE_ENTRY, LOCATE_BATCH, LOCATE_READ, LOCATE_TIME, LOCATE_CEILING = range(5)
TIER_LOCAL, TIER_REMOTE = "local", "remote"  # where a segment's bytes are (`tier` in listings)
# The most batch headers `next_fetch_offset` walks. From the offset index's entries (one every 4 KiB of log by
# default, index.interval.bytes) it walks at most about two intervals' worth: 1 or 2 batches of 16 KiB, a
# hundred of the smallest; without entries it gives up rather than read much of the segment.
NEXT_FETCH_WALK_BATCHES = 256


class TimestampAndOffset(NamedTuple):
    """A record found by timestamp, with the position of the batch holding it."""

    timestamp: int
    offset: int
    leader_epoch: int | None
    position: int


class FetchData(NamedTuple):
    """LogSegment.read's answer: bytes from `position`, possibly ending mid-batch (as Kafka's slice)."""

    offset: int  # the fetch offset asked for
    position: int
    records: bytes
    first_entry_incomplete: bool


class SegmentIndexes(Protocol):
    """A segment's three indexes (Kafka's LazyIndex<OffsetIndex>, LazyIndex<TimeIndex> and TransactionIndex):
    each opened or fetched on first use."""

    @property
    def offset(self) -> OffsetIndex: ...

    @property
    def time(self) -> TimeIndex: ...

    @property
    def txn(self) -> TransactionIndex: ...

    def close(self) -> None: ...


class SegmentOrigin(Protocol):
    """Where a segment comes from: its tier, the directory (or bucket prefix) it is in, whether it may still
    grow, and whether its files are still the ones it was made of."""

    tier: str
    dir: str
    may_grow: bool              # a local segment may be the active one; an upload never grows
    max_timestamp: int | None   # the largest timestamp a listing recorded (None: read it from the segment)

    def replaced(self) -> bool: ...

    def mtime_ms(self) -> int | None: ...  # the `.log`'s modification time, when it has one

    def describe(self) -> dict: ...         # what the segment's listing adds (an upload: its object key)


class LocalIndexes:
    """The three index files of a local segment (each maps its file on first use)."""

    __slots__ = ("offset", "time", "txn")

    def __init__(self, directory: str, base_offset: int, cache=None):
        self.offset = OffsetIndex(os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX)), base_offset,
                                  cache)
        self.time = TimeIndex(os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX)), base_offset,
                              cache)
        self.txn = TransactionIndex(os.path.join(directory, segment_file_name(base_offset, TXN_INDEX_SUFFIX)),
                                    base_offset, cache)

    def close(self) -> None:
        self.offset.close()
        self.time.close()
        self.txn.close()


class LocalFiles:
    """A segment's files in a partition directory. Its identity is its files, not their names: Kafka's cleaner
    renames a rewritten `.log` (and indexes) over the old names; `replaced()` compares against the files the
    segment was made of to notice."""

    tier = TIER_LOCAL
    may_grow = True
    max_timestamp = None

    def __init__(self, directory: str, paths: tuple[str, ...]):
        self.dir = directory
        self._paths = paths  # the `.log` first
        self._identity = self._ids()

    def _ids(self) -> tuple:
        ids = []
        for path in self._paths:
            try:
                st = os.lstat(path)  # a symbolic link put in a file's place is another file
                ids.append((st.st_dev, st.st_ino))
            except FileNotFoundError:
                ids.append(None)
        return tuple(ids)

    def replaced(self) -> bool:
        """Whether any of the segment's names now names another file than when it was made (the cleaner's
        swap, a deletion, a re-created topic)."""
        return self._ids() != self._identity

    def mtime_ms(self) -> int:
        return int(regular_stat(self._paths[0]).st_mtime * 1000)

    def describe(self) -> dict:
        return {}


class LogSegment:
    """Read-only view of one segment, made of its parts; `live` marks the active (last) segment of its partition."""

    def __init__(self, base_offset: int, log: FileRecords, indexes: SegmentIndexes, origin: SegmentOrigin, *,
                 live: bool = False):
        self.base_offset = base_offset
        self.log = log
        self.indexes = indexes
        self.origin = origin
        self.tier = origin.tier
        self.dir = origin.dir
        self.live = False
        if origin.may_grow:
            # What a lookup's limit is now, asked when a rolled index holds entries past the one it was given.
            indexes.offset.set_limit_source(self.size)
            indexes.time.set_limit_source(lambda: self.time_index_limit(self.size()))
        self._warned: set[str] = set()
        self._cached_end: tuple[int, int] | None = None  # (log size, data end): the active segment's `_data_end`
        self._cached_next_offset: tuple[int, int] | None = None  # (data end, next offset)
        self._cached_max_ts: tuple[int, tuple[int, int]] | None = None  # (data end, (timestamp, offset))
        self.set_live(live)

    @classmethod
    def open(cls, directory: str | os.PathLike, base_offset: int, cache=None, *, live: bool = False) -> LogSegment:
        """The segment at `base_offset` in a partition directory: its `.log` and index files there."""
        d = os.fspath(directory)
        log = FileRecords(os.path.join(d, segment_file_name(base_offset, LOG_SUFFIX)), cache)
        indexes = LocalIndexes(d, base_offset, cache)
        origin = LocalFiles(d, (log.path, indexes.offset.path, indexes.time.path, indexes.txn.path))
        return cls(base_offset, log, indexes, origin, live=live)

    def __repr__(self) -> str:
        return f"LogSegment({self.log.path!r}, live={self.live})"

    @property
    def offset_index(self) -> OffsetIndex:
        return self.indexes.offset

    @property
    def time_index(self) -> TimeIndex:
        return self.indexes.time

    @property
    def txn_index(self) -> TransactionIndex:
        return self.indexes.txn

    def set_live(self, live: bool) -> None:
        """The active segment may still grow: indexes follow appends and the tail may be mid-write,
        and its offset index may hold stale entries a follower's truncation left (checked against
        the `.log` with `holds_batch`). A segment that never grows (an upload) stays rolled."""
        if not self.origin.may_grow:
            return
        self.live = live
        self.indexes.offset.set_live(live, self.holds_batch)
        self.indexes.time.set_live(live)

    def holds_batch(self, offset: int, position: int) -> bool:
        """Whether a batch holding `offset` starts at `position` of the `.log` (an index entry's claim)."""
        try:
            buf = self.log.read(position, V2_HEADER_SIZE)
            header = parse_header(buf, 0, position, self.log.path)
        except (CorruptRecordError, OSError):
            return False
        return header.base_offset <= offset <= header.last_offset

    def replaced(self) -> bool:
        """Whether the segment's files are no longer the ones it was made of (its maps and handles are stale)."""
        return self.origin.replaced()

    def close(self) -> None:
        """Release descriptors and maps (readers still using them finish first)."""
        self.log.close()
        self.indexes.close()

    def size(self) -> int:
        """Where the segment's data ends: the `.log`'s size, or for the active segment of a preallocated
        log (log.preallocate=true) where its zero-filled tail starts (`_data_end`)."""
        file_size = self.log.size()
        if not self.live:
            return file_size
        kept = self._cached_end
        if kept is not None and kept[0] == file_size == kept[1]:
            return file_size  # not preallocated: _data_end's first test, without its call
        return self._data_end(file_size)

    def _peek_size(self) -> int:
        """`size()`, without opening a rolled segment's `.log` (a stat of its path)."""
        return self.size() if self.live else self.log.peek_size()

    def _data_end(self, size: int) -> int:
        """The active segment's data end for a `.log` of `size` bytes. As Kafka's recovery does (the first
        invalid batch ends the log), an all-zero batch header ends the data: the broker appends into a
        preallocated file without changing its size. Kept while the size is the same and the header at
        the kept end is still zero (the broker's next append is there); else found again by walking the
        batch sizes from the kept end or the last offset-index entry."""
        kept = self._cached_end
        if kept is not None and kept[0] == size:
            end = kept[1]
            if end == size or self.log.read(end, LOG_OVERHEAD) == ZERO_HEADER:
                return end
            start = end  # appended to: a batch starts there
        else:
            start = self._start_position(INT64_MAX, size)
        end = self.log.data_end(start, size)
        self._cached_end = (size, end)
        return end

    # ------------------------------------------------------------- index access

    def _degraded(self, err: CorruptIndexError) -> None:
        if err.path not in self._warned:
            self._warned.add(err.path)
            log.warning("%s; answering from a scan of the log instead", err)

    def offset_index_lookup(self, offset: int, log_size: int | None = None) -> tuple[int, int]:
        """OffsetIndex.lookup over the valid entries (those inside the `.log`)."""
        return self.indexes.offset.lookup(offset, limit=self.size() if log_size is None else log_size)

    def time_index_limit(self, log_size: int) -> int | None:
        """Bound on live time-index entries: the broker writes the offset-index entry first."""
        if not self.live:
            return None
        return self.indexes.offset.last_offset(limit=log_size)

    def time_index_lookup(self, timestamp: int, log_size: int | None = None) -> tuple[int, int]:
        """TimeIndex.lookup over the valid entries."""
        size = self.size() if log_size is None else log_size
        return self.indexes.time.lookup(timestamp, limit=self.time_index_limit(size))

    def _start_position(self, offset: int, log_size: int) -> int:
        try:
            return self.indexes.offset.lookup(offset, limit=log_size)[1]
        except CorruptIndexError as err:
            self._degraded(err)
            return 0

    def _time_floor(self, timestamp: int, log_size: int) -> tuple[int, int]:
        try:
            return self.time_index_lookup(timestamp, log_size)
        except CorruptIndexError as err:
            self._degraded(err)
            return -1, self.base_offset

    # ------------------------------------------------------------- one native call

    def locate(self, kind: int, offset: int, extra: int = 0) -> tuple | None:
        """A lookup in this segment in one native call (`_accel.locate`: index entry, header walk, read),
        for an offset in [0, int64 max]. By kind, as the Python path would answer:
        LOCATE_ENTRY and LOCATE_CEILING: (base offset, entry offset, position) of the floor entry
        (`offset_index_lookup`) or of the least entry >= offset (`ceiling_entry`);
        LOCATE_BATCH: (base offset, batch base offset, last offset, position, size) (`translate_offset`);
        LOCATE_READ: (base offset, position, bytes) (`read` with min_one_message, max_size `extra`);
        LOCATE_TIME: (base offset, position, batch bytes) of the batch `find_offset_by_timestamp`
        opens first from `offset` for timestamp `extra`.
        None when the Python path must answer: no native code, an index not mapped or in doubt,
        anything the walk leaves to the reference walk."""
        index = self.indexes.offset
        st = index.native_view()
        if st is None:
            return None
        fd = self.log.handle().fd
        if fd is None:  # a `.log` read from the bucket: the native paths read a local descriptor
            return None
        found = _accel.locate(kind, st.mapping.mm, st.entries, index.warm_entries, self.live, fd,
                              self.base_offset, offset, extra, _nonblocking.on)
        if found is False:
            raise WouldBlock()
        if kind == LOCATE_READ and self.live and found is not None:
            return self._within_data(found)
        return found

    def _within_data(self, found: tuple) -> tuple | None:
        """A LOCATE_READ answer of the active segment cut at its data end (the native walk ends at a zero
        header, but reads `extra` bytes past the batch it found, into a preallocated tail). Bytes before
        the data end last found are data (a zero tail only ever starts later) and need no look at the file."""
        base, position, data = found
        kept = self._cached_end
        if kept is not None and position + len(data) <= kept[1]:
            return found
        end = self.size()
        if position >= end:
            return None
        return found if position + len(data) <= end else (base, position, data[:end - position])

    def _time_floor_fast(self, timestamp: int) -> tuple[int, int] | None:
        """`_time_floor` in one native call (two in the active segment), None when the Python path must
        answer (and, for a corrupt index, degrade or report it as it does)."""
        if not 0 <= timestamp <= INT64_MAX:
            return None
        try:
            limit = self.time_index_limit(self.size()) if self.live else None
            return self.indexes.time.lookup_fast(timestamp, limit)
        except CorruptIndexError:
            return None

    def _locate_by_time(self, kind: int, timestamp: int, starting_offset: int = 0) -> tuple | None:
        """A rolled segment's time-index floor and `locate`'s work from it in one native call
        (`_accel.locate_time`; kind LOCATE_ENTRY or LOCATE_TIME, timestamp in [0, int64 max]); None when
        the two-step path must answer: the active segment, no native code, an index not mapped or in doubt."""
        if self.live or not (0 <= timestamp <= INT64_MAX and 0 <= starting_offset <= INT64_MAX):
            return None
        indexes = self.indexes
        tst = indexes.time.native_view()
        st = indexes.offset.native_view() if tst is not None else None
        if st is None:
            return None
        fd = self.log.handle().fd
        if fd is None:  # a `.log` read from the bucket
            return None
        found = _accel.locate_time(kind, tst.mapping.mm, tst.entries, indexes.time.warm_entries, st.mapping.mm,
                                   st.entries, indexes.offset.warm_entries, fd, self.base_offset, timestamp,
                                   starting_offset, _nonblocking.on)
        if found is False:
            raise WouldBlock()
        return found

    def time_point_fast(self, timestamp: int) -> tuple[int, int, int, int] | None:
        """(base offset, timestamp, offset, position) of the time index's floor entry and the offset index's
        entry for its offset, as LocalLog.lookup_timestamp answers, from native calls; None when the
        Python path must answer."""
        found = self._locate_by_time(LOCATE_ENTRY, timestamp)
        if found is not None:
            return found
        floor = self._time_floor_fast(timestamp)
        if floor is None:
            return None
        entry = self.locate(LOCATE_ENTRY, floor[1])
        return None if entry is None else (self.base_offset, floor[0], floor[1], entry[2])

    def find_by_timestamp_fast(self, timestamp: int, starting_offset: int) -> tuple | None:
        """`find_offset_by_timestamp` when the first batch it opens holds the answer, as (offset,
        timestamp, base offset, position, leader epoch), from native calls and the scan of that
        batch; None when the Python path must answer."""
        found = self._locate_by_time(LOCATE_TIME, timestamp, starting_offset)
        if found is None:
            floor = self._time_floor_fast(timestamp)
            if floor is None:
                return None
            found = self.locate(LOCATE_TIME, max(floor[1], starting_offset), timestamp)
            if found is None:
                return None
        _, position, data = found
        hit = find_timestamp_fast(data, timestamp, starting_offset)
        if hit is not None:
            return hit[1], hit[0], self.base_offset, position, hit[2]
        header = parse_header(data, 0, position, self.log.path)
        hit = find_timestamp(header, data, timestamp, starting_offset, path=self.log.path)
        if hit is None:
            return None
        return hit[1], hit[0], self.base_offset, position, header.partition_leader_epoch_or_none

    # ------------------------------------------------------------- exact answers

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """LogSegment.translateOffset: the first batch whose last offset >= `offset`, or None."""
        size = self.size()
        start = max(self._start_position(offset, size), starting_position)
        return self.log.search_for_offset_with_size(offset, start, strict=not self.live, end=size)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """LogSegment.findOffsetByTimestamp: first record with timestamp >= target and offset >= start."""
        size = self.size()
        floor = self._time_floor(timestamp, size)
        position = self._start_position(max(floor[1], starting_offset), size)
        while (batch := self.log.find_batch(timestamp, position, size, by_timestamp=True, strict=not self.live)):
            buf, off, pos, batch_size = batch
            data = buf[off:off + batch_size] if off + batch_size <= len(buf) else self.log.read(pos, batch_size)
            header = parse_header(data, 0, pos, self.log.path)
            found = find_timestamp(header, data, timestamp, starting_offset, path=self.log.path)
            if found is not None:
                return TimestampAndOffset(found[0], found[1], header.partition_leader_epoch_or_none, pos)
            position = pos + batch_size
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> FetchData | None:
        """LogSegment.read: bytes from the batch holding `start_offset`, None past the end."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from {self.log.path}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        adjusted = max(max_size, found.size) if min_one_message else max_size
        if adjusted == 0:
            return FetchData(start_offset, found.position, b"", False)
        limit = self.size() if max_position is None else max_position
        fetch_size = min(limit - found.position, adjusted)
        return FetchData(start_offset, found.position, self.log.read(found.position, fetch_size), adjusted < found.size)

    def next_fetch_offset(self, position: int, end: int) -> int | None:
        """The offset a consumer fetches next once it has read this segment's bytes [position, end), `position`
        being a batch's: one past the last offset of the last batch whole in them (a consumer drops the batch
        a size limit cut off, and asks for it again). The header walk starts at the offset index's entry before
        the last one at or before `end` (`entry_before_position`), else at `position`; None when no batch is
        whole, or when more than NEXT_FETCH_WALK_BATCHES headers would have to be read to tell."""
        start = position
        try:
            entry = self.indexes.offset.entry_before_position(end)
            if entry is not None:
                start = max(start, entry[1])
        except CorruptIndexError:
            pass  # the walk from `position` alone, within its bound
        found = self.log.last_batch(start, end=end, most=NEXT_FETCH_WALK_BATCHES)
        return found[0] + 1 if found is not None else None

    def read_next_offset(self) -> int:
        """LogSegment.readNextOffset: one past the last offset in the segment (base offset if empty)."""
        size = self.size()
        cached = self._cached_next_offset
        if cached is not None and cached[0] == size:
            return cached[1]
        try:
            last = self.indexes.offset.last_offset(limit=size)
        except CorruptIndexError as err:
            self._degraded(err)
            last = self.base_offset
        found = self.translate_offset(last)
        nxt = self.base_offset
        if found is not None:
            tail = self.log.last_batch(found.position, end=size)
            if tail is not None:
                nxt = tail[0] + 1
        self._cached_next_offset = (size, nxt)
        return nxt

    def max_timestamp_so_far(self, size: int | None = None) -> tuple[int, int]:
        """(max timestamp, offset) of the segment, (-1, base offset) when it has no timestamps;
        `size`: the `.log`'s size if the caller has just taken it.

        A rolled segment's time index ends with exactly this entry (added when it rolled); the
        active segment's does not yet, so the batches after its last entry are scanned too
        (LogSegment.readLargestTimestamp).
        """
        size = self._peek_size() if size is None else size
        cached = self._cached_max_ts
        if cached is not None and cached[0] == size:
            return cached[1]
        peeked = None if self.live else self.indexes.time.peek_last_entry()
        if peeked is not None:
            self._cached_max_ts = (size, peeked)
            return peeked
        try:
            entry = self.indexes.time.last_entry(limit=self.time_index_limit(size))
            start = self.indexes.offset.lookup(entry[1], limit=size)[1] if self.live else None
        except CorruptIndexError as err:
            self._degraded(err)
            entry, start = (-1, self.base_offset), 0
        if start is not None:
            ts, offset, _ = self.log.largest_timestamp_after(start, end=size)
            if ts > entry[0]:
                entry = (ts, offset)
        self._cached_max_ts = (size, entry)
        return entry

    def largest_timestamp(self, size: int | None = None) -> int:
        """LogSegment.largestTimestamp: what the segment's listing recorded (an upload's
        RemoteLogSegmentMetadata.maxTimestampMs, LogSegment.largestTimestamp at upload time: nothing read),
        else the max timestamp, or the `.log` mtime (ms) when there is none and it has one (`size`: as for
        max_timestamp_so_far)."""
        known = self.origin.max_timestamp
        if known is not None:
            return known
        ts = self.max_timestamp_so_far(size)[0]
        if ts >= 0:
            return ts
        mtime = self.origin.mtime_ms()
        return ts if mtime is None else mtime

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        return self.indexes.txn.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def info(self) -> dict:
        """Summary for listings: counts of valid index entries, size, largest timestamp. For a segment whose
        files cannot be read (an upload's corrupt manifest, say), what is known with `error` saying why
        ("CODE: message"): one segment never fails a listing of all."""
        try:
            out = self._info()
        except CorruptDataError as err:
            out = {"base_offset": self.base_offset, "size": -1, "active": False, "offset_index_entries": -1,
                   "time_index_entries": -1, "largest_timestamp": -1, "error": f"{err.code}: {err}"}
        out["tier"] = self.tier
        out.update(self.origin.describe())
        return out

    def _info(self) -> dict:
        size = self._peek_size()
        # A rolled segment's trimmed indexes are counted from their sizes, without mapping them.
        oi = None if self.live else self.indexes.offset.peek_entries()
        ti = None if self.live else self.indexes.time.peek_entries()
        try:
            oi = self.indexes.offset.valid_entries(limit=size) if oi is None else oi
        except LookupdError:
            oi = -1
        try:
            ti = self.indexes.time.valid_entries(limit=self.time_index_limit(size)) if ti is None else ti
        except LookupdError:
            ti = -1
        try:
            largest = self.largest_timestamp(size)
        except LookupdError:
            largest = -1
        return {"base_offset": self.base_offset, "size": size, "active": self.live,
                "offset_index_entries": oi, "time_index_entries": ti, "largest_timestamp": largest}
