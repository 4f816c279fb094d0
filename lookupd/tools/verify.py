"""Checking segments against their `.log`: `dump --verify-index-only`, `recover` and `restore --verify` all
judge a segment with `check_segment`, so they agree on every damaged file: what verify reports about an
index is exactly what makes recover rebuild it, and what it reports about a `.log` is what recover reports
and leaves alone (lookupd never writes a `.log`).

The walk is LogSegment.recover's: batches are framed one after the other, and the first one that cannot be
(cut off, an impossible size, an unknown magic, a last offset the segment's relative offsets cannot hold,
offsets that do not increase) ends the valid prefix, as it ends Kafka's recovery. A batch whose CRC does not
match is reported with its file and byte but stays framed: Kafka would truncate the log there, lookupd leaves
the log as it is (and serves the batches after it), so the indexes keep describing every framed batch, and an
index is never emptied because one batch's bytes went bad.

Kafka's sanity checks only look at the ends of an index. Here every entry is also checked against the
batches it points at: an offset-index entry must sit on a batch boundary and name an offset at or after that
batch's last offset; a time-index entry must name a batch's last offset, and a rolled segment's time index
must end with its max timestamp, at the offset Kafka gives that entry. A rolled segment's missing `.index` or
`.timeindex` is a problem, and so is a missing `.txnindex` where aborted transactions end in it, or one whose
entries are not those its ABORT markers make (known only when the whole partition is replayed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from ..errors import CorruptDataError, CorruptRecordError
from ..format.batch import BatchHeader, compute_crc, parse_header
from ..format.records import control_record, decode_batch
from ..log.locallog import list_segments
from ..log.segment import TIER_LOCAL, LogSegment
from ..log.txnindex import AbortedTxn
from .producerstate import TransactionTracker
from .writer import DEFAULT_INDEX_INTERVAL_BYTES, IndexBuilder

RELATIVE_OFFSET_MAX = (1 << 31) - 1  # an index entry holds offset - base offset in 4 bytes (Kafka's int)
CORRUPT_BATCHES_SHOWN = 10  # corrupt batches named one by one in a segment; the rest are counted


@dataclass
class SegmentScan:
    """What one pass over a segment's batches found."""

    positions: np.ndarray  # start positions of the framed batches, ascending
    last_offsets: np.ndarray  # each framed batch's last offset
    max_timestamp: int = -1
    max_timestamp_offset: int = -1  # the last offset of the first batch with max_timestamp (Kafka's shallow offset)
    valid_bytes: int = 0  # where the last framed batch ends
    problems: list[str] = field(default_factory=list)  # the `.log`'s: corrupt batches, then what ended the walk


def scan_segment(seg: LogSegment, *, check_crc: bool | None = None,
                 on_batch: Callable[[BatchHeader, object, bool], None] | None = None) -> SegmentScan:
    """Frame every batch (LogSegment.recover's walk); a batch that cannot be framed ends the walk, a batch
    whose CRC does not match (checked in rolled segments unless `check_crc` says otherwise) is reported.

    `on_batch(header, data, sound)` is called for each framed batch: `data` is the whole batch when the CRC
    is checked or it is a control batch (else None), `sound` whether its CRC matched (True when unchecked).
    """
    if check_crc is None:
        check_crc = not seg.live
    positions, lasts = [], []
    max_ts, max_ts_offset, valid, problems, corrupt = -1, -1, 0, [], 0
    previous_last = None
    size = seg.size()
    try:
        for buf, off, pos, batch_size in seg.log.frames(0, size, strict=not seg.live):
            header = parse_header(buf, off, pos, seg.log.path)
            _check_offsets(seg, header, previous_last)
            data, sound = None, True
            if check_crc or header.is_control:
                data = buf[off:off + batch_size] if off + batch_size <= len(buf) else seg.log.read(pos, batch_size)
            if check_crc:
                computed = compute_crc(data, header.magic, header.size)
                sound = computed == header.crc
                if not sound:
                    corrupt += 1
                    if corrupt <= CORRUPT_BATCHES_SHOWN:
                        problems.append(str(CorruptRecordError(
                            seg.log.path, pos, f"record batch is corrupt (stored crc = {header.crc}, computed "
                                               f"crc = {computed})")))
            if on_batch is not None:
                on_batch(header, data, sound)
            positions.append(pos)
            lasts.append(header.last_offset)
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, header.last_offset
            previous_last = header.last_offset
            valid = pos + batch_size
    except CorruptRecordError as err:
        problems.append(str(err))
    if corrupt > CORRUPT_BATCHES_SHOWN:
        problems.append(f"{seg.log.path}: {corrupt - CORRUPT_BATCHES_SHOWN} more corrupt batches")
    return SegmentScan(np.array(positions, np.int64), np.array(lasts, np.int64), max_ts, max_ts_offset, valid,
                       problems)


def _check_offsets(seg: LogSegment, header: BatchHeader, previous_last: int | None) -> None:
    """CorruptRecordError unless the batch's offsets fit the segment (LogSegment.ensureOffsetInRange) and
    come after the previous batch's: an index could not hold them, nor a lookup find them."""
    if not 0 <= header.last_offset - seg.base_offset <= RELATIVE_OFFSET_MAX:
        raise CorruptRecordError(seg.log.path, header.position,
                                 f"the batch's last offset {header.last_offset} does not fit segment "
                                 f"{seg.base_offset} (relative offset overflow)")
    if previous_last is not None and header.base_offset <= previous_last:
        raise CorruptRecordError(seg.log.path, header.position,
                                 f"the batch starts at offset {header.base_offset}, not after the previous "
                                 f"batch's last offset {previous_last}")


def index_problems(seg: LogSegment, scan: SegmentScan) -> list[tuple[str, str]]:
    """Everything wrong with the segment's offset and time indexes: (the index's path, a message naming it
    and the entry)."""
    oi, ti = seg.offset_index, seg.time_index
    out = []
    size = seg.size()
    for index, limit in ((oi, size), (ti, seg.time_index_limit(size))):
        try:
            index.sanity_check(limit=limit)
        except CorruptDataError as err:
            out.append((index.path, str(err)))
    if out:
        return out
    offsets, positions = oi.entries_array(limit=size)
    if len(offsets):
        slot = np.searchsorted(scan.positions, positions)
        safe = np.minimum(slot, max(len(scan.positions) - 1, 0))
        on_boundary = (slot < len(scan.positions)) & (scan.positions[safe] == positions) if len(scan.positions) else \
            np.zeros(len(positions), bool)
        ok = on_boundary & (offsets >= scan.last_offsets[safe] if len(scan.positions) else False)
        if not ok.all():
            i = int(np.argmax(~ok))
            what = "is not the start of a batch" if not on_boundary[i] else \
                f"holds a batch ending at offset {int(scan.last_offsets[safe[i]])}, after the entry's offset"
            out.append((oi.path, f"{oi.path}: entry {i} (offset {int(offsets[i])}, position {int(positions[i])}): "
                                 f"position {int(positions[i])} {what}"))
    stamps, toffsets = ti.entries_array(limit=seg.time_index_limit(size))
    if len(stamps):
        known = np.isin(toffsets, scan.last_offsets)
        if not known.all():
            i = int(np.argmax(~known))
            out.append((ti.path, f"{ti.path}: entry {i} (timestamp {int(stamps[i])}, offset {int(toffsets[i])}): "
                                 f"offset {int(toffsets[i])} is not the last offset of any batch in the segment"))
        if stamps[-1] > scan.max_timestamp:
            out.append((ti.path, f"{ti.path}: last entry's timestamp {int(stamps[-1])} is above the segment's "
                                 f"max timestamp {scan.max_timestamp}"))
    if not seg.live and scan.max_timestamp >= 0 and (not len(stamps) or stamps[-1] != scan.max_timestamp):
        out.append((ti.path, f"{ti.path}: a rolled segment's time index must end with its max timestamp "
                             f"{scan.max_timestamp}, it ends with {int(stamps[-1]) if len(stamps) else 'no entry'}"))
    return out


def time_index_last_entry(seg: LogSegment, scan: SegmentScan) -> list[tuple[str, str]]:
    """A rolled segment's last time-index entry is (max timestamp, last offset of the first batch holding it), as
    LogSegment.onBecomeInactiveSegment leaves it: index_problems checks the timestamp, this the offset."""
    ti = seg.time_index
    stamps, offsets = ti.entries_array(limit=seg.time_index_limit(seg.size()))
    if scan.max_timestamp < 0 or not len(stamps) or stamps[-1] != scan.max_timestamp or \
            offsets[-1] == scan.max_timestamp_offset:
        return []
    return [(ti.path, f"{ti.path}: last entry (timestamp {scan.max_timestamp}, offset {int(offsets[-1])}): the first "
                      f"batch with the segment's max timestamp ends at offset {scan.max_timestamp_offset}")]


def txn_index_problems(seg: LogSegment, aborted: list[AbortedTxn]) -> list[tuple[str, str]]:
    """The `.txnindex` against the ABORT markers that end in the segment: the entries Kafka writes for them, in
    order (`aborted`, from the partition's batches replayed up to here). A missing file is _missing's."""
    txn = seg.txn_index
    if seg.tier != TIER_LOCAL or not os.path.lexists(txn.path):
        return []
    try:
        txn.sanity_check()
        have = [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                           int(e["last_stable_offset"])) for e in txn.entries()]
    except CorruptDataError as err:
        return [(txn.path, str(err))]
    if have == aborted:
        return []
    slot = next((i for i, (a, b) in enumerate(zip(have, aborted)) if a != b), min(len(have), len(aborted)))
    if slot < len(have) and slot < len(aborted):
        why = f"entry {slot} is {_txn(have[slot])}, the markers make it {_txn(aborted[slot])}"
    elif slot < len(have):
        why = f"entry {slot} ({_txn(have[slot])}) has no ABORT marker in the segment"
    else:
        why = f"the ABORT marker of {_txn(aborted[slot])} has no entry"
    return [(txn.path, f"{txn.path}: {len(have)} entries where the segment's ABORT markers make {len(aborted)}: "
                       f"{why}")]


def _txn(t: AbortedTxn) -> str:
    return (f"producer {t.producer_id}'s transaction {t.first_offset}..{t.last_offset} (last stable offset "
            f"{t.last_stable_offset})")


@dataclass
class SegmentCheck:
    """What verify and recover find in one segment."""

    base_offset: int
    live: bool
    log_path: str
    scan: SegmentScan  # its batches, and the `.log`'s problems (reported; never repaired)
    index_problems: list[tuple[str, str]]  # (file, message): a missing index (the `.log`'s), entries that
                                           # disagree with the log; recover rebuilds for these
    builder: IndexBuilder  # the offset and time indexes Kafka writes for the framed batches (rolled segments)
    aborted: list[AbortedTxn] | None  # the aborted transactions ending in it; None: the partition was not replayed
    size: int  # of its `.log` when judged

    def problems_by_file(self) -> dict[str, list[str]]:
        """Every problem found, by the file it belongs to (the `.log` has its batches' and its missing files')."""
        out: dict[str, list[str]] = {self.log_path: list(self.scan.problems)}
        for path, message in self.index_problems:
            if path == self.log_path:  # a missing file, named alone: here with its directory
                message = os.path.join(os.path.dirname(path), message)
            out.setdefault(path, []).append(message)
        return out

    @property
    def invalid_bytes(self) -> int:
        """Bytes after the last framed batch (a cut-off or unreadable tail)."""
        return self.size - self.scan.valid_bytes


def check_segment(seg: LogSegment, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                  tracker: TransactionTracker | None = None, progress=None) -> SegmentCheck:
    """Judge one segment: its batches, and its indexes against them. `tracker`: the partition's
    transactions replayed up to this segment (then a missing `.txnindex` is judged too)."""
    builder = IndexBuilder(seg.base_offset, index_interval_bytes)
    aborted: list[AbortedTxn] = []

    def on_batch(header: BatchHeader, data, sound: bool) -> None:
        if tracker is not None:
            marker = None
            if header.is_control and sound:
                try:
                    recs = decode_batch(header, data, path=seg.log.path)
                    marker = control_record(recs[0]).type if recs else None
                except CorruptRecordError:
                    marker = None  # not a marker Kafka could read either
            txn = tracker.observe(header, marker)
            if txn is not None:
                aborted.append(txn)
        builder.append(header.last_offset, header.max_timestamp, header.last_offset, header.position, header.size)
        if progress is not None:
            progress.advance(header.size)

    size = seg.size()
    scan = scan_segment(seg, on_batch=on_batch)
    if seg.live:
        problems = index_problems(seg, scan)
    else:
        builder.roll()
        problems = _missing(seg, len(aborted) if tracker is not None else None) or \
            index_problems(seg, scan) + time_index_last_entry(seg, scan) + \
            (txn_index_problems(seg, aborted) if tracker is not None else [])
    return SegmentCheck(seg.base_offset, seg.live, seg.log.path, scan, problems, builder,
                        aborted if tracker is not None else None, size)


def check_partition(directory: str, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                    progress=None) -> Iterator[SegmentCheck]:
    """check_segment for every segment of a partition directory, in offset order, its transactions replayed
    from the first segment (the `.txnindex` entries depend on every transaction open before)."""
    bases = list_segments(directory)
    tracker = TransactionTracker()
    for i, base in enumerate(bases):
        seg = LogSegment.open(directory, base, live=i == len(bases) - 1)
        try:
            check = check_segment(seg, index_interval_bytes=index_interval_bytes, tracker=tracker,
                                  progress=progress)
        finally:
            seg.close()
        yield check


def _missing(seg: LogSegment, aborted: int | None) -> list[tuple[str, str]]:
    """The index files a rolled local segment should have and has not: a `.txnindex` only where aborted
    transactions end in the segment (Kafka creates it with its first entry; `aborted` None: not known)."""
    if seg.tier != TIER_LOCAL:
        return []
    log_path = seg.log.path
    out = [(log_path, f"{os.path.basename(p)} is missing") for p in (seg.offset_index.path, seg.time_index.path)
           if not os.path.lexists(p)]
    txn_path = seg.txn_index.path
    if aborted and not os.path.lexists(txn_path):
        out.append((log_path, f"{os.path.basename(txn_path)} is missing ({aborted} aborted transactions end in "
                              "this segment)"))
    return out
