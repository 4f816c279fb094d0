"""A partition's listing as one call sees it (SegmentList), and the answers of its lookups: what the single
lookups (lookupd.log.locallog) and the columnar many-lookups (lookupd.log.bulk) share.
"""

from __future__ import annotations

import bisect
from typing import Iterator, NamedTuple, Protocol

from ..errors import INT64_MAX, InvalidArgument, check_int64
from .segment import LogSegment

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-1005: the local log start offset
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the highest offset in remote storage (-1 when none)


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


class Segments(Protocol):
    """The partition a SegmentList is a snapshot of (a LocalLog, or a TieredLog with remote segments below)."""

    checkpointed_log_start: int | None

    def segment(self, base_offset: int) -> LogSegment: ...

    def local_log_start(self, v: SegmentList) -> int: ...

    def highest_remote_offset(self, v: SegmentList) -> int: ...


class SegmentList:
    """The partition's segments as one call sees them: an immutable snapshot of the listing.

    A rescan may replace the listing while a call runs (the broker rolled or deleted a
    segment); a call that read it twice could range-check against one list and pick a
    segment from the other. Each call takes one snapshot and answers from it alone.
    """

    __slots__ = ("log", "bases")

    def __init__(self, log: Segments, bases: list[int]):
        self.log = log
        self.bases = bases

    def __len__(self) -> int:
        return len(self.bases)

    def segment(self, base_offset: int) -> LogSegment:
        return self.log.segment(base_offset)

    def segments(self, start: int = 0) -> Iterator[LogSegment]:
        """Segments in offset order from list position `start`."""
        for b in self.bases[max(start, 0):]:
            yield self.log.segment(b)

    def floor_slot(self, offset: int) -> int:
        """List position of the segment holding `offset` (greatest base <= offset), -1 if none."""
        return bisect.bisect_right(self.bases, offset) - 1

    @property
    def active(self) -> LogSegment | None:
        return self.log.segment(self.bases[-1]) if self.bases else None

    @property
    def log_start_offset(self) -> int:
        """First segment's base offset, or the broker's checkpointed log start if higher."""
        return _log_start(self.bases, self.log.checkpointed_log_start)

    @property
    def log_end_offset(self) -> int:
        """One past the last offset in the log (the active segment's next offset)."""
        active = self.active
        return active.read_next_offset() if active is not None else self.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """UnifiedLog.localLogStartOffset: the first offset on local disk (the log start without a remote tier)."""
        return self.log.local_log_start(self)

    @property
    def highest_remote_offset(self) -> int:
        """UnifiedLog.highestOffsetInRemoteStorage: -1 without a remote tier."""
        return self.log.highest_remote_offset(self)


def _find_batch(v: SegmentList, target: int, slot: int, hint: BatchLocation | None = None) -> BatchLocation | None:
    """translateOffset from the floor segment on, starting at `hint` when it is in the same segment."""
    bases = v.bases
    for i in range(max(slot, 0), len(bases)):  # v.segments(slot), without a generator: this is every exact lookup
        seg = v.segment(bases[i])
        from_pos = hint.position if hint is not None and hint.segment == seg.base_offset else 0
        found = seg.translate_offset(target, from_pos)
        if found is not None:
            return BatchLocation(seg.base_offset, found.base_offset, found.offset, found.position, found.size)
    return None


def _check_mode(mode: object) -> None:
    if mode not in ("floor", "ceiling"):
        got = repr(mode[:40]) if isinstance(mode, str) else type(mode).__name__
        raise InvalidArgument(f"mode must be 'floor' or 'ceiling', got {got}")


def _check_timestamp(value: object, what: str = "timestamp", lowest: int = MAX_TIMESTAMP) -> int:
    """A target timestamp: an int64 >= 0, or ListOffsets' -1 (latest), -2 (earliest), -3 (max timestamp)
    and, where `lowest` is LATEST_TIERED_TIMESTAMP (ListOffsets itself), KIP-1005's -4 (earliest local)
    and -5 (latest tiered)."""
    if type(value) is int and lowest <= value <= INT64_MAX:  # the usual case, without check_int64's call
        return value
    value = check_int64(value, what)
    if value < lowest:
        special = "-1 (latest), -2 (earliest) or -3 (max timestamp)" if lowest == MAX_TIMESTAMP else \
            "-1 (latest), -2 (earliest), -3 (max timestamp), -4 (earliest local) or -5 (latest tiered)"
        raise InvalidArgument(f"{what} {value} is negative and not one of {special}")
    return value


def _log_start(bases: list[int], checkpointed: int | None) -> int:
    """The log start offset of a listing: its first base offset, or the broker's checkpointed log start
    if higher (0 for an empty listing)."""
    first = bases[0] if bases else 0
    return max(first, checkpointed) if checkpointed is not None else first
