"""A partition's columnar many-lookups (`LocalLog.lookup_offsets`, `resolve_offsets`,
`offsets_for_timestamps`): many targets against one listing, answered as arrays, each target as the
single lookup answers it. Corrupt data fails the rows that met it (an `error` column), not the call.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError, InvalidArgument
from .segmentlist import (LATEST_TIERED_TIMESTAMP, BatchLocation, OffsetAndTimestamp, SegmentList, _check_mode,
                          _check_timestamp, _find_batch)


def lookup_offsets(v: SegmentList, offsets, mode: str = "floor") -> dict[str, np.ndarray]:
    """Vectorised `lookup_offset`: arrays segment, offset, position (-1 where nothing matches)."""
    _check_mode(mode)
    t = int64_array(offsets, "offsets")
    n = len(t)
    seg_out = np.full(n, -1, np.int64)
    off_out = np.full(n, -1, np.int64)
    pos_out = np.full(n, -1, np.int64)
    bases = np.asarray(v.bases, dtype=np.int64)
    if n == 0 or len(bases) == 0:
        return {"segment": seg_out, "offset": off_out, "position": pos_out}
    slot = np.searchsorted(bases, t, side="right") - 1
    ceiling = mode == "ceiling"
    if ceiling:
        below = slot < 0
        seg_out[below], off_out[below], pos_out[below] = bases[0], bases[0], 0
    errors = _RowErrors(n)
    for s in np.unique(slot[slot >= 0]):
        mask = slot == s
        seg = v.segment(int(bases[s]))
        try:
            o, p = seg.indexes.offset.lookup_many(t[mask], limit=seg.size(), ceiling=ceiling)
        except CorruptDataError as err:  # this segment's rows say so; the others are answered
            errors.add(np.flatnonzero(mask), err)
            continue
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
    return errors.attach({"segment": seg_out, "offset": off_out, "position": pos_out})


def resolve_offsets(v: SegmentList, offsets) -> dict[str, np.ndarray]:
    """Vectorised `resolve_offset` (out-of-range targets give -1 rather than an error).

    Targets are resolved in sorted order: each scan starts where the previous answer
    was, and a target inside the batch just found costs nothing.
    """
    t = int64_array(offsets, "offsets")
    n = len(t)
    out = {k: np.full(n, -1, np.int64) for k in BatchLocation._fields}
    bases = np.asarray(v.bases, dtype=np.int64)
    if n == 0 or len(bases) == 0:
        return out
    start, end = v.log_start_offset, v.log_end_offset
    slot = np.searchsorted(bases, t, side="right") - 1
    prev: BatchLocation | None = None
    errors = _RowErrors(n)
    for k in np.argsort(t, kind="stable"):
        target = int(t[k])
        if not start <= target < end:
            continue
        if prev is None or target > prev.last_offset:
            try:
                prev = _find_batch(v, target, int(slot[k]), prev)
            except CorruptDataError as err:  # this row says so; the others are answered
                errors.add([k], err)
                prev = None
                continue
            if prev is None:
                continue
        for field, value in zip(BatchLocation._fields, prev):
            out[field][k] = value
    return errors.attach(out)


def offsets_for_timestamps(v: SegmentList, timestamps) -> dict[str, np.ndarray]:
    """Vectorised `offset_for_timestamp`: arrays offset, timestamp, segment, position (-1 where none)."""
    t = int64_array(timestamps, "timestamps")
    if len(t) and int(t.min()) < LATEST_TIERED_TIMESTAMP:
        _check_timestamp(int(t.min()), "timestamps: a value", LATEST_TIERED_TIMESTAMP)
    n = len(t)
    out = {k: np.full(n, -1, np.int64) for k in ("offset", "timestamp", "segment", "position")}
    if n == 0:
        return out
    bases = v.bases
    largest = np.maximum.accumulate(np.array([seg.largest_timestamp() for seg in v.segments()], dtype=np.int64)) \
        if bases else np.empty(0, np.int64)
    start = v.log_start_offset
    errors = _RowErrors(n)
    for k in np.argsort(t, kind="stable"):
        ts = int(t[k])
        r = None
        try:
            if ts >= 0:
                i = int(np.searchsorted(largest, ts, side="left"))
                if i < len(bases):
                    seg = v.segment(bases[i])
                    found = seg.find_offset_by_timestamp(ts, start)
                    if found is not None:
                        r = OffsetAndTimestamp(found.offset, found.timestamp, seg.base_offset, found.position)
            elif ts >= LATEST_TIERED_TIMESTAMP:
                r = v.log._offset_for_timestamp(v, ts)
        except CorruptDataError as err:  # this row says so; the others are answered
            errors.add([k], err)
            continue
        if r is not None:
            out["offset"][k], out["timestamp"][k], out["segment"][k], out["position"][k] = r[:4]
    return errors.attach(out)


class _RowErrors:
    """Per-row errors of a columnar call: corrupt data fails the rows that met it, not the call.
    Attached as an `error` column (a message, or None) only when some row failed."""

    def __init__(self, n: int):
        self.n = n
        self.messages: dict[int, str] = {}

    def add(self, rows, err: Exception) -> None:
        for row in rows:
            self.messages[int(row)] = f"{getattr(err, 'code', 'CORRUPT_DATA')}: {err}"

    def attach(self, columns: dict) -> dict:
        if self.messages:
            error = [None] * self.n
            for row, message in self.messages.items():
                error[row] = message
            columns["error"] = error
        return columns


def int64_array(values, what: str) -> np.ndarray:
    """A flat list (or 1-d integer array) of int64 values as an array; InvalidArgument naming what
    was wrong otherwise (floats, bools, strings and nested lists are refused, not converted)."""
    if isinstance(values, np.ndarray):
        arr = values
    elif isinstance(values, (list, tuple)):
        if not values:
            return np.empty(0, np.int64)
        try:
            arr = np.asarray(values)
        except (ValueError, OverflowError):
            raise InvalidArgument(f"{what} must be a flat array of integers") from None
    else:
        raise InvalidArgument(f"{what} must be an array of integers, got {type(values).__name__}")
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (arr.dtype.kind == "u" and len(arr) and int(arr.max()) >= 1 << 63):
        kinds = {type(v).__name__ for v in values if isinstance(v, bool) or not isinstance(v, (int, np.integer))} \
            if arr.dtype.kind not in "iu" else set()
        why = f"found {', '.join(sorted(kinds))}" if kinds else "a value is outside the int64 range"
        raise InvalidArgument(f"{what} must be a flat array of int64 integers: {why}")
    return arr.astype(np.int64, copy=False)
