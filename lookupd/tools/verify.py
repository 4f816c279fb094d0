"""Checking a segment's indexes against its `.log` (`--index-sanity-check`, `--verify-index-only`, recover).

Kafka's sanity checks only look at the ends of an index. Here every entry is also checked
against the batches it points at: an offset-index entry must sit on a batch boundary and
name an offset at or after that batch's last offset; a time-index entry must name a batch's
last offset, and a rolled segment's time index must end with its max timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format.batch import ensure_valid, parse_header
from ..errors import CorruptDataError, CorruptRecordError
from ..log.segment import LogSegment


@dataclass
class SegmentScan:
    """What one pass over a segment's batch headers found."""

    positions: np.ndarray  # batch start positions, ascending
    last_offsets: np.ndarray  # each batch's last offset
    max_timestamp: int = -1
    valid_bytes: int = 0
    problems: list[str] = field(default_factory=list)


def scan_segment(seg: LogSegment, *, check_crc: bool = False, on_batch=None) -> SegmentScan:
    """Walk every batch header; a cut-off or corrupt tail ends the walk and is reported.

    `on_batch(header, data)` is called for each batch (`data` is the whole batch when
    `check_crc` or the batch is a control batch, else None).
    """
    positions, lasts = [], []
    max_ts, valid, problems = -1, 0, []
    size = seg.size()
    try:
        for buf, off, pos, batch_size in seg.log.frames(0, size, strict=not seg.live):
            header = parse_header(buf, off, pos, seg.log.path)
            data = None
            if check_crc or header.is_control:
                data = buf[off:off + batch_size] if off + batch_size <= len(buf) else seg.log.read(pos, batch_size)
                if check_crc:
                    ensure_valid(header, data, seg.log.path)
            if on_batch is not None:
                on_batch(header, data)
            positions.append(pos)
            lasts.append(header.last_offset)
            max_ts = max(max_ts, header.max_timestamp)
            valid = pos + batch_size
    except CorruptRecordError as err:
        problems.append(str(err))
    return SegmentScan(np.array(positions, np.int64), np.array(lasts, np.int64), max_ts, valid, problems)


def index_problems(seg: LogSegment, scan: SegmentScan) -> list[str]:
    """Everything wrong with the segment's offset and time indexes, as messages naming file and entry."""
    out = []
    size = seg.size()
    try:
        seg.offset_index.sanity_check(limit=size)
    except CorruptDataError as err:
        out.append(str(err))
    try:
        seg.time_index.sanity_check(limit=seg.time_index_limit(size))
    except CorruptDataError as err:
        out.append(str(err))
    if out:
        return out
    offsets, positions = seg.offset_index.entries_array(limit=size)
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
            out.append(f"{seg.offset_index.path}: entry {i} (offset {int(offsets[i])}, position {int(positions[i])}): "
                       f"position {int(positions[i])} {what}")
    stamps, toffsets = seg.time_index.entries_array(limit=seg.time_index_limit(size))
    if len(stamps):
        known = np.isin(toffsets, scan.last_offsets)
        if not known.all():
            i = int(np.argmax(~known))
            out.append(f"{seg.time_index.path}: entry {i} (timestamp {int(stamps[i])}, offset {int(toffsets[i])}): "
                       f"offset {int(toffsets[i])} is not the last offset of any batch in the segment")
        if stamps[-1] > scan.max_timestamp:
            out.append(f"{seg.time_index.path}: last entry's timestamp {int(stamps[-1])} is above the segment's "
                       f"max timestamp {scan.max_timestamp}")
    if not seg.live and scan.max_timestamp >= 0 and (not len(stamps) or stamps[-1] != scan.max_timestamp):
        out.append(f"{seg.time_index.path}: a rolled segment's time index must end with its max timestamp "
                   f"{scan.max_timestamp}, it ends with {int(stamps[-1]) if len(stamps) else 'no entry'}")
    return out
