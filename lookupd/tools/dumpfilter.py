"""What `lookupd dump --offsets A..B --times T1..T2` keeps: batches, records and index entries.

Both ranges include their ends, and either end may be left out (`100..`, `..2026-01-02`); `--offsets N`
is the one offset N. Times are those of `lookupd query` (lookupd.format.times), "now" read once.

- A batch line is kept when the batch's offsets meet A..B and the timestamp it shows (its max
  timestamp, as kafka-dump-log prints it) is within T1..T2.
- With --print-data, each record within both ranges is kept, after its batch's line (a batch line then
  shows wherever one of its records is kept).
- Index entries are kept when their offset is within A..B and, in a time index, their timestamp within
  T1..T2; with --times, the offset index's entries (which have no timestamp) are left out. Files of
  segments whose base offset is past B are skipped, and a segment's walk stops at its first batch past B.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ..errors import InvalidArgument
from ..format.batch import BatchHeader
from ..format.records import Record
from ..format.times import GRAMMAR, parse_time

SEPARATOR = ".."


class Bounds(NamedTuple):
    """low <= value <= high; None: that side open."""

    low: int | None = None
    high: int | None = None

    def holds(self, value: int) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def meets(self, first: int | None, last: int) -> bool:
        """Whether first..last (first None: unknown) overlaps the bounds."""
        return (self.low is None or last >= self.low) and (self.high is None or first is None or first <= self.high)

    def mask(self, values: np.ndarray) -> np.ndarray:
        keep = np.ones(len(values), bool)
        if self.low is not None:
            keep &= values >= self.low
        if self.high is not None:
            keep &= values <= self.high
        return keep


def _split(flag: str, text: str, parse) -> Bounds:
    low, sep, high = text.partition(SEPARATOR)
    if not sep:
        value = parse(low)
        return Bounds(value, value)
    if not low and not high:
        raise InvalidArgument(f"{flag} {text!r}: give at least one end of A..B")
    bounds = Bounds(parse(low) if low else None, parse(high) if high else None)
    if bounds.low is not None and bounds.high is not None and bounds.low > bounds.high:
        raise InvalidArgument(f"{flag} {text!r}: the range ends before it starts")
    return bounds


def parse_offsets(text: str) -> Bounds:
    def offset(part: str) -> int:
        if not part.isascii() or not part.isdigit():
            raise InvalidArgument(f"--offsets {text!r}: {part!r} is not an offset; give A..B, A.. or ..B "
                                  f"(offsets are integers >= 0)")
        return int(part)
    return _split("--offsets", text, offset)


def parse_times(text: str, now_ms: int | None = None) -> Bounds:
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms

    def when(part: str) -> int:
        try:
            value = parse_time(part, now)
        except InvalidArgument as err:
            raise InvalidArgument(f"--times {text!r}: {err}") from None
        if value < 0:
            raise InvalidArgument(f"--times {text!r}: {part} is a ListOffsets word, not a time; give {GRAMMAR}")
        return value
    return _split("--times", text, when)


class DumpFilter(NamedTuple):
    offsets: Bounds = Bounds()
    times: Bounds = Bounds()

    @classmethod
    def from_args(cls, offsets: str | None, times: str | None) -> "DumpFilter | None":
        """The filter the flags ask for; None when neither is given (everything is dumped)."""
        if offsets is None and times is None:
            return None
        return cls(parse_offsets(offsets) if offsets is not None else Bounds(),
                   parse_times(times) if times is not None else Bounds())

    @staticmethod
    def _first(h: BatchHeader) -> int | None:
        return h.base_offset if h.magic >= 2 else None  # a legacy wrapper's first inner offset is not in its header

    def batch(self, h: BatchHeader) -> bool:
        """Whether a batch line is kept (without --print-data)."""
        return self.offsets.meets(self._first(h), h.last_offset) and self.times.holds(h.max_timestamp)

    def may_hold(self, h: BatchHeader) -> bool:
        """Whether a batch may hold a kept record (its max timestamp bounds every record's from above)."""
        return self.offsets.meets(self._first(h), h.last_offset) and \
            (self.times.low is None or h.max_timestamp >= self.times.low)

    def index_entries(self, keys: np.ndarray, values: np.ndarray, *, time_index: bool) -> np.ndarray:
        """Which entries to keep: an offset index's (offset, position) or a time index's (timestamp, offset)."""
        if time_index:
            return self.offsets.mask(values) & self.times.mask(keys)
        if self.times != Bounds():
            return np.zeros(len(keys), bool)
        return self.offsets.mask(keys)

    def record(self, r: Record) -> bool:
        return self.offsets.holds(r.offset) and self.times.holds(r.timestamp)

    def past(self, first_offset: int | None) -> bool:
        """Whether a batch or segment starting at `first_offset` and everything after it are past B."""
        return self.offsets.high is not None and first_offset is not None and first_offset > self.offsets.high

    def past_batch(self, h: BatchHeader) -> bool:
        return self.past(self._first(h))
