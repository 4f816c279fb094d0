"""Checking a segment's indexes against its `.log` (`--index-sanity-check`, `--verify-index-only`, recover).

Kafka's sanity checks only look at the ends of an index. Here every entry is also checked
against the batches it points at: an offset-index entry must sit on a batch boundary and
name an offset at or after that batch's last offset; a time-index entry must name a batch's
last offset, and a rolled segment's time index must end with its max timestamp.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..format.batch import ensure_valid, parse_header
from ..errors import CorruptDataError, CorruptRecordError
from ..format.names import LOG_SUFFIX, TXN_INDEX_SUFFIX
from ..log.segment import LogSegment
from ..log.txnindex import AbortedTxn


@dataclass
class SegmentScan:
    """What one pass over a segment's batch headers found."""

    positions: np.ndarray  # batch start positions, ascending
    last_offsets: np.ndarray  # each batch's last offset
    first_offsets: np.ndarray  # each batch's base offset (a legacy wrapper's: its last, the first being unknown)
    max_timestamp: int = -1
    max_timestamp_offset: int = -1  # the last offset of the first batch with max_timestamp (Kafka's shallow offset)
    valid_bytes: int = 0
    problems: list[str] = field(default_factory=list)


def scan_segment(seg: LogSegment, *, check_crc: bool = False, on_batch=None) -> SegmentScan:
    """Walk every batch header; a cut-off or corrupt tail ends the walk and is reported.

    `on_batch(header, data)` is called for each batch (`data` is the whole batch when
    `check_crc` or the batch is a control batch, else None).
    """
    positions, lasts, firsts = [], [], []
    max_ts, max_ts_offset, valid, problems = -1, -1, 0, []
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
            firsts.append(header.base_offset if header.magic >= 2 else header.last_offset)
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, header.last_offset
            valid = pos + batch_size
    except CorruptRecordError as err:
        problems.append(str(err))
    return SegmentScan(np.array(positions, np.int64), np.array(lasts, np.int64), np.array(firsts, np.int64), max_ts,
                       max_ts_offset, valid, problems)


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


# ---------------------------------------------------------------------------- what Kafka's recovery checks too
# (`lookupd verify`, lookupd.tools.verifycmd; each takes what one pass over the segment's batches found)

MAX_RELATIVE_OFFSET = (1 << 31) - 1  # an index stores offsets relative to the segment's base, as an int32


def offset_problems(seg: LogSegment, scan: SegmentScan, previous_last: int | None) -> list[str]:
    """The batches' offsets as LogSegment.recover checks them (ensureOffsetInRange): at or after the segment's
    base offset and within an int32 of it; and in order, after the last offset of the segment before
    (`previous_last`, None for the first). The first such batch is reported: every later one would be too."""
    last = previous_last
    for pos, first, end in zip(scan.positions.tolist(), scan.first_offsets.tolist(), scan.last_offsets.tolist()):
        where = f"{seg.log.path} at byte {pos}: batch of offsets {first}..{end}"
        if end < first:
            return [f"{where} ends before it starts"]
        if first < seg.base_offset or end - seg.base_offset > MAX_RELATIVE_OFFSET:
            return [f"{where} is outside the segment's range {seg.base_offset}.."
                    f"{seg.base_offset + MAX_RELATIVE_OFFSET} (relative offsets are 32-bit)"]
        if last is not None and first <= last:
            return [f"{where} does not come after offset {last}, the last before it"]
        last = end
    return []


def missing_index_files(seg: LogSegment, aborted: int) -> list[str]:
    """The index files a rolled segment should have and has not: `.index` and `.timeindex` always, a
    `.txnindex` where aborted transactions end in the segment (Kafka creates it with its first entry)."""
    out = [f"{os.path.basename(p)} is missing" for p in (seg.offset_index.path, seg.time_index.path)
           if not os.path.exists(p)]
    txn_path = seg.log.path[:-len(LOG_SUFFIX)] + TXN_INDEX_SUFFIX
    if aborted and not os.path.exists(txn_path):
        out.append(f"{os.path.basename(txn_path)} is missing ({aborted} aborted transactions end in this segment)")
    return out


def time_index_last_entry(seg: LogSegment, scan: SegmentScan) -> list[str]:
    """A rolled segment's last time-index entry is (max timestamp, last offset of the first batch holding it), as
    LogSegment.onBecomeInactiveSegment leaves it; index_problems checks the timestamp, this the offset."""
    if seg.live or scan.max_timestamp < 0:
        return []
    stamps, offsets = seg.time_index.entries_array(limit=seg.time_index_limit(seg.size()))
    if len(stamps) and stamps[-1] == scan.max_timestamp and offsets[-1] != scan.max_timestamp_offset:
        return [f"{seg.time_index.path}: last entry (timestamp {scan.max_timestamp}, offset {int(offsets[-1])}): the "
                f"first batch with the segment's max timestamp ends at offset {scan.max_timestamp_offset}"]
    return []


def txn_index_problems(seg: LogSegment, aborted: list[AbortedTxn]) -> list[str]:
    """The `.txnindex` against the ABORT markers in the segment: the entries Kafka writes for them, in order
    (`aborted`, from replaying the partition's batches up to here: lookupd.tools.producerstate)."""
    if not os.path.exists(seg.txn_index.path):
        return []  # missing_index_files says whether it should be there
    try:
        seg.txn_index.sanity_check()
        entries = seg.txn_index.entries()
    except CorruptDataError as err:
        return [str(err)]
    have = [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                       int(e["last_stable_offset"])) for e in entries]
    if have == aborted:
        return []
    slot = next((i for i, (a, b) in enumerate(zip(have, aborted)) if a != b), min(len(have), len(aborted)))
    if slot < len(have) and slot < len(aborted):
        why = f"entry {slot} is {_txn(have[slot])}, the markers say {_txn(aborted[slot])}"
    elif slot < len(have):
        why = f"entry {slot} ({_txn(have[slot])}) has no ABORT marker in the segment"
    else:
        why = f"{len(aborted) - slot} aborted transactions end in the segment with no entry, the first {_txn(aborted[slot])}"
    return [f"{seg.txn_index.path}: {len(have)} entries where the markers make {len(aborted)}: {why}"]


def _txn(t: AbortedTxn) -> str:
    return (f"producer {t.producer_id} offsets {t.first_offset}..{t.last_offset} "
            f"last stable offset {t.last_stable_offset}")


def rebuild_reasons(seg: LogSegment, scan: SegmentScan, aborted: list[AbortedTxn] | None) -> list[str]:
    """Why a rolled segment's indexes must be rebuilt: what `lookupd recover` rebuilds for and `lookupd verify`
    reports. A missing index file, else every problem of the offset, time and transaction indexes (`aborted`:
    the ABORT markers' entries, None when the batches before the segment could not all be replayed)."""
    missing = missing_index_files(seg, len(aborted or ()))
    if missing:
        return missing
    txn = txn_index_problems(seg, aborted) if aborted is not None else []
    return index_problems(seg, scan) + time_index_last_entry(seg, scan) + txn
