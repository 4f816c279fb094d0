"""Cutting a partition's offset range into splits at batch boundaries. Pure arithmetic, no I/O.

A partition range [start, end) covers whole batches: from the batch holding `start` through
the batch holding `end` (records outside the range are dropped when read). Its bytes run
over consecutive segments. A split is a run of whole batches between two cuts, each cut
being the first byte of a batch, so every batch, and so every record, belongs to exactly one
split. The cuts are chosen by bytes (`maxBytesPerSplit`, `minPartitions`) and by offsets
(`maxRecordsPerPartition`): a target byte or offset is turned into an estimated offset here,
the daemon says which batch holds it, and that batch's start is the cut.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import NamedTuple

from lookupd.format.batch import LOG_OVERHEAD, RECORD_OVERHEAD_V0
from lookupd.format.names import LOG_SUFFIX, segment_file_name
from pyspark.sql.datasource import InputPartition

from .remote import BucketLocation
from .routing import PartitionInfo

SMALLEST_BATCH = LOG_OVERHEAD + RECORD_OVERHEAD_V0  # bytes of the smallest possible batch (a v0 message)


class Batch(NamedTuple):
    """A batch's place (the daemon's resolve_offset answer)."""

    segment: int
    base_offset: int
    last_offset: int
    position: int
    size: int


class Segment(NamedTuple):
    """A segment in a range: base offset, size at planning, base offset of its first batch (-1: none), and
    for a remote segment its `.log` object's key in the bucket (None: a local segment)."""

    base_offset: int
    size: int
    first_batch: int
    key: str | None = None


@dataclass(frozen=True)
class Piece:
    """Whole batches in one segment file: bytes [start, end), the first one with base offset first_base.
    A remote segment's piece has its `.log` object's key, and its `s3://` URL as path."""

    segment: int
    path: str
    start: int
    end: int
    first_base: int
    key: str | None = None


class Split(InputPartition):
    """One Spark task's share of a partition (picklable; see the module doc).

    Records come from the batches of `pieces`, or, read through the daemon, from the batches
    from offset `start` up to the batch `stop` (base and last offset of the next split's first
    batch; None for the last split). Either way only records with start <= offset < end are
    kept: the next split starts at `end`, so no record is read by two splits, however the files
    changed since planning.
    """

    def __init__(self, info: PartitionInfo, start: int, end: int, pieces: tuple[Piece, ...],
                 stop: tuple[int, int] | None, aborted: tuple[tuple[int, int, int], ...],
                 remote: BucketLocation | None = None):
        super().__init__((info.topic, info.partition, start, end))
        self.topic = info.topic
        self.partition = info.partition
        self.address = info.address
        self.start, self.end = start, end
        self.pieces = pieces
        self.stop = stop
        self.aborted = aborted  # (producer id, first offset, last offset) of aborted transactions
        self.remote = remote  # where remote pieces are read from (None: through the daemon)

    def __repr__(self) -> str:
        return f"Split({self.topic}-{self.partition} [{self.start}, {self.end}), {self.bytes} bytes)"

    @property
    def bytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)


@dataclass(frozen=True)
class PartitionRange:
    """A partition's resolved range: offsets [start, end) and the bytes that hold them."""

    info: PartitionInfo
    start: int
    end: int
    first: Batch  # the batch holding `start`
    segments: tuple[Segment, ...]  # from first.segment to the last segment read
    end_position: int  # bytes of the last segment that are read
    aborted: tuple[tuple[int, int, int], ...]
    remote: BucketLocation | None = None

    def spans(self) -> list[tuple[int, int]]:
        """Byte span [lo, hi) read in each segment."""
        last = len(self.segments) - 1
        return [(self.first.position if i == 0 else 0, self.end_position if i == last else s.size)
                for i, s in enumerate(self.segments)]

    @property
    def bytes(self) -> int:
        return sum(hi - lo for lo, hi in self.spans())

    def path(self, seg: Segment) -> str:
        if seg.key is not None:
            return self.remote.url(seg.key) if self.remote is not None else f"remote segment {seg.key}"
        return os.path.join(self.info.log_dir, f"{self.info.topic}-{self.info.partition}",
                            segment_file_name(seg.base_offset, LOG_SUFFIX))


def part_counts(sizes: list[int], min_partitions: int | None) -> list[int]:
    """Splits per range for `minPartitions`, as Spark's KafkaOffsetRangeCalculator divides them
    (here by bytes: large ranges get more splits, in proportion; small ones stay whole)."""
    if not min_partitions or len(sizes) >= min_partitions:
        return [1] * len(sizes)
    total = sum(sizes)

    def count(size: int, of: int, parts: int) -> int:
        return max(math.floor(size / of * parts + 0.5), 1) if of else 1  # Scala's math.round

    whole = [count(s, total, min_partitions) == 1 for s in sizes]
    split_total = total - sum(s for s, w in zip(sizes, whole) if w)
    split_min = max(min_partitions - sum(whole), 1)
    return [1 if w else count(s, split_total, split_min) for s, w in zip(sizes, whole)]


def cut_targets(r: PartitionRange, byte_parts: int, max_bytes: int, max_records: int | None) -> list[int]:
    """Estimated offsets at which to cut `r`: evenly by bytes into max(byte_parts, bytes / max_bytes)
    pieces, and by offsets so that none spans more than max_records offsets."""
    targets = []
    spans = r.spans()
    total = sum(hi - lo for lo, hi in spans)
    n = max(byte_parts, -(-total // max_bytes))
    for k in range(1, n):
        targets.append(_offset_at(r, spans, total * k // n))
    if max_records:
        count = r.end - r.start
        n = min(-(-count // max_records), total // SMALLEST_BATCH)  # offsets may have gaps: no more cuts than batches
        targets.extend(r.start + count * k // n for k in range(1, n))
    return sorted(set(targets))


def _offset_at(r: PartitionRange, spans: list[tuple[int, int]], byte: int) -> int:
    """The offset about `byte` bytes into the range, assuming offsets evenly spread in each segment."""
    segs = r.segments
    for i, (lo, hi) in enumerate(spans):
        if byte < hi - lo or i == len(spans) - 1:
            first = r.start if i == 0 else segs[i].base_offset
            after = segs[i + 1].base_offset if i + 1 < len(segs) else r.end
            return first + (after - first) * min(byte, hi - lo) // max(hi - lo, 1)
        byte -= hi - lo
    raise AssertionError("unreachable: the last span takes any remainder")


def build_splits(r: PartitionRange, cuts: list[Batch]) -> list[Split]:
    """Splits of `r` between consecutive cuts (batches the daemon resolved for cut_targets)."""
    order = {s.base_offset: i for i, s in enumerate(r.segments)}
    first_key = (0, r.first.position)
    end_key = (len(r.segments) - 1, r.end_position)
    inner = sorted({c for c in cuts if c.segment in order and c.base_offset < r.end
                    and first_key < (order[c.segment], c.position) < end_key},
                   key=lambda c: (order[c.segment], c.position))
    bounds = [r.first, *inner]
    splits = []
    for k, a in enumerate(bounds):
        b = bounds[k + 1] if k + 1 < len(bounds) else None
        ia = order[a.segment]
        ib, b_pos = (order[b.segment], b.position) if b else end_key
        pieces = []
        for i in range(ia, ib + 1):
            seg = r.segments[i]
            lo = a.position if i == ia else 0
            hi = b_pos if i == ib else (r.end_position if i == len(r.segments) - 1 else seg.size)
            if hi > lo:
                pieces.append(Piece(seg.base_offset, r.path(seg), lo, hi,
                                    a.base_offset if i == ia else seg.first_batch, seg.key))
        start = r.start if k == 0 else a.base_offset
        end = b.base_offset if b else r.end
        aborted = tuple(t for t in r.aborted if t[2] >= start and t[1] < end)
        splits.append(Split(r.info, start, end, tuple(pieces),
                            (b.base_offset, b.last_offset) if b else None, aborted, r.remote))
    return splits
