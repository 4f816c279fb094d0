"""Records of many batches as columns in Arrow's layout, decoded natively where the extension is built.

`ColumnBuilder.add(header, batch)` appends one batch's records; `arrays()` hands the columns
over as pyarrow arrays built on the builder's own buffers (`pa.Array.from_buffers`, no copy
of keys or values) and starts afresh. v2 batches are decoded by `lookupd.format._decode`
(C, one call per batch, no Python object per record); legacy messages, the rare records the
C decoder hands back (header keys that are not UTF-8, offsets past int64) and every batch
when the extension is missing go through the reference decoder, `records.decode_batch`,
which is also what reports a corrupt batch: the C decoder never explains a fault, so both
paths give the same records and the same errors. CRCs are the caller's to check
(`batch.ensure_valid`), as for `decode_batch`.
"""

from __future__ import annotations

import struct
from typing import Any

from .batch import CONTROL_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader, ensure_valid, frame_size, \
    parse_header
from .records import _v2_records, decode_batch, native_v2
from ..errors import INT64_MAX, INT64_MIN, CorruptRecordError

from . import _accel

NATIVE = _accel.NATIVE  # the C decoder is there (else the reference decoder fills the same columns)

# Column order of _decode.decode_v2 (see lookupd/format/_decode.c).
(OFFSET, TIMESTAMP, KEY_VALID, KEY_END, KEY_DATA, VALUE_VALID, VALUE_END, VALUE_DATA, HDR_END, HKEY_END, HKEY_DATA,
 HVAL_VALID, HVAL_END, HVAL_DATA) = range(14)
_ENDS = (KEY_END, VALUE_END, HDR_END, HKEY_END, HVAL_END)  # Arrow offsets: a leading 0, then one end per item
# Arrow's 32-bit offsets: flush before a data column could pass this (checked per batch).
MAX_DATA_BYTES = (1 << 31) - 1
_I32 = struct.Struct("=i")
_I64 = struct.Struct("=q")
# Per batch taken, six int64 (see _frames.c): file position, base offset, last offset, producer id, flags, records.
_FACTS = struct.Struct("=6q")
FLAG_TRANSACTIONAL, FLAG_LOG_APPEND_TIME = 1, 2


class ColumnBuilder:
    """Columns of the records added since the last `arrays()`: the C decoder's, or within
    `_accel.python_only()` the reference decoder's."""

    def __init__(self, include_headers: bool = True):
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self._cols = [bytearray() for _ in range(14)]
        for i in _ENDS:
            self._cols[i] += b"\0\0\0\0"
        self.count = 0
        self._facts = bytearray()

    @property
    def data_bytes(self) -> int:
        """Bytes in the largest data column (flush before MAX_DATA_BYTES)."""
        c = self._cols
        return max(len(c[KEY_DATA]), len(c[VALUE_DATA]), len(c[HKEY_DATA]), len(c[HVAL_DATA]))

    def add_frames(self, buf, position: int, path=None, start: int = 0, end: int | None = None) -> int:
        """Append the records of every whole batch in buf[start:end] (buf[0] is at file `position`), checking
        each batch's CRC; control batches are passed over. Returns where the whole batches end (a batch cut
        off at the end of the buffer is left for the caller). Raises CorruptRecordError, naming file and
        position, as `ensure_valid` and `decode_batch` do."""
        end = len(buf) if end is None else end
        pos = start
        native = NATIVE and not _accel.mode.python
        while pos < end:
            if native:
                if self.data_bytes + (end - pos) > MAX_DATA_BYTES:
                    raise OverflowError("columns full: call arrays() before adding more")
                pos = _accel.decode_frames(buf, pos, end, position, self.include_headers, self._facts, *self._cols)
                self.count = len(self._cols[OFFSET]) // 8
                if pos >= end:
                    break
            # One batch the walker left (legacy, compressed, or one to report): the reference path.
            size = frame_size(buf, pos, end, position + pos, path)
            if size is None:
                break
            header = parse_header(buf, pos, position + pos, path)
            batch = memoryview(buf)[pos:pos + size]
            ensure_valid(header, batch, path)
            if not (header.magic >= 2 and header.attributes & CONTROL_MASK):
                self.add(header, batch, path)
            pos += size
        return pos

    def add(self, header: BatchHeader, batch, path=None) -> int:
        """Append the records of the batch whose bytes (from its first byte) are `batch`; returns how many.
        The CRC is not checked here (`batch.ensure_valid`). Raises CorruptRecordError, naming the batch's
        position, for anything undecodable."""
        if not INT64_MIN <= header.last_offset <= INT64_MAX:
            raise CorruptRecordError(path, header.position, f"last offset {header.last_offset} is beyond the int64 range")
        if header.magic >= 2 and NATIVE and not _accel.mode.python:
            if header.record_count == 0:
                return 0
            records = _v2_records(header, batch, path)
            if len(records) + self.data_bytes > MAX_DATA_BYTES:
                raise OverflowError("columns full: call arrays() before adding this batch")
            if _accel.decode_v2(*native_v2(header, records), self.include_headers, *self._cols):
                return self._counted(header, header.record_count)
        return self._counted(header, self._append(decode_batch(header, batch, path=path), header, path))

    def _counted(self, header: BatchHeader, n: int) -> int:
        if n:
            self.count += n
            flags = (FLAG_TRANSACTIONAL if header.magic >= 2 and header.attributes & TRANSACTIONAL_MASK else 0) | \
                (FLAG_LOG_APPEND_TIME if header.attributes & TIMESTAMP_TYPE_MASK else 0)
            self._facts += _FACTS.pack(header.position, header.base_offset, header.last_offset, header.producer_id,
                                       flags, n)
        return n

    def facts(self) -> dict[str, Any]:
        """Per batch taken: position, base_offset, last_offset, producer_id, flags, records (numpy arrays)."""
        return _facts_of(self._facts)

    def aborted_mask(self, aborted: dict[int, list[tuple[int, int]]]) -> Any:
        """Per record, whether it is kept under read_committed: a transactional batch of producer P is
        dropped when an aborted transaction of P (first offset, ABORT marker offset) spans it. Computed
        per batch with numpy, then spread over the batch's records."""
        import numpy as np

        f = self.facts()
        keep = np.ones(len(f["records"]), bool)
        tx = (f["flags"] & FLAG_TRANSACTIONAL) != 0
        for pid, spans in aborted.items():
            mine = tx & (f["producer_id"] == pid)
            if not mine.any():
                continue
            firsts = np.asarray([s[0] for s in spans], np.int64)
            lasts = np.asarray([s[1] for s in spans], np.int64)
            base = f["base_offset"][mine]
            i = np.searchsorted(firsts, base, side="right") - 1
            dropped = (i >= 0) & (base <= lasts[np.maximum(i, 0)])
            keep[np.flatnonzero(mine)[dropped]] = False
        return np.repeat(keep, f["records"])

    def _append(self, records: list, header: BatchHeader, path) -> int:
        """The reference path: records from `decode_batch` into the same columns."""
        c = self._cols
        for r in records:
            if not (INT64_MIN <= r.offset <= INT64_MAX and INT64_MIN <= r.timestamp <= INT64_MAX):
                raise CorruptRecordError(path, header.position, f"record offset {r.offset} or timestamp "
                                                                f"{r.timestamp} is beyond the int64 range")
            c[OFFSET] += _I64.pack(r.offset)
            c[TIMESTAMP] += _I64.pack(r.timestamp)
            for valid, ends, data, v in ((KEY_VALID, KEY_END, KEY_DATA, r.key), (VALUE_VALID, VALUE_END, VALUE_DATA, r.value)):
                c[valid].append(v is not None)
                if v is not None:
                    c[data] += v
                c[ends] += _I32.pack(len(c[data]))
            if self.include_headers:
                for k, v in r.headers:
                    c[HKEY_DATA] += k.encode("utf-8")
                    c[HKEY_END] += _I32.pack(len(c[HKEY_DATA]))
                    c[HVAL_VALID].append(v is not None)
                    if v is not None:
                        c[HVAL_DATA] += v
                    c[HVAL_END] += _I32.pack(len(c[HVAL_DATA]))
                c[HDR_END] += _I32.pack(len(c[HKEY_END]) // 4 - 1)
        return len(records)

    def arrays(self, headers_type: Any = None) -> dict[str, Any]:
        """The columns as pyarrow arrays (offset, timestamp in ms, timestamp_type, key, value, and headers
        with `headers_type`, a list<struct<key: string, value: binary>> type, when headers were kept;
        a record without headers has null there, as in Spark). The builder starts empty again."""
        import pyarrow as pa

        c, n = self._cols, self.count
        validity_bitmap, nonempty_bitmap, spread_flag = _BITMAPS[_accel.mode.python]

        def binary(valid_col: int, ends: int, data: int, typ) -> Any:
            bitmap, nulls = validity_bitmap(c[valid_col])
            return pa.Array.from_buffers(typ, len(c[ends]) // 4 - 1, [_buffer(pa, bitmap), pa.py_buffer(c[ends]),
                                                                       pa.py_buffer(c[data])], null_count=nulls)

        # per record from its batch's flags; pa.array would first ask whether this is a pandas Series
        timestamp_type = spread_flag(self._facts, FLAG_LOG_APPEND_TIME)
        out = {
            "offset": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c[OFFSET])]),
            "timestamp": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c[TIMESTAMP])]),
            "timestamp_type": pa.Array.from_buffers(pa.int32(), len(timestamp_type) // 4, [None, pa.py_buffer(timestamp_type)]),
            "key": binary(KEY_VALID, KEY_END, KEY_DATA, pa.binary()),
            "value": binary(VALUE_VALID, VALUE_END, VALUE_DATA, pa.binary()),
        }
        if self.include_headers and headers_type is not None:
            item = headers_type.value_type
            keys = pa.Array.from_buffers(item.field("key").type, len(c[HKEY_END]) // 4 - 1,
                                         [None, pa.py_buffer(c[HKEY_END]), pa.py_buffer(c[HKEY_DATA])])
            values = binary(HVAL_VALID, HVAL_END, HVAL_DATA, item.field("value").type)
            entries = pa.Array.from_buffers(item, len(keys), [None], children=[keys, values])
            bitmap, nulls = nonempty_bitmap(c[HDR_END])
            out["headers"] = pa.Array.from_buffers(headers_type, n, [_buffer(pa, bitmap), pa.py_buffer(c[HDR_END])],
                                                   null_count=nulls, children=[entries])
        self._reset()
        return out


def _facts_of(facts) -> dict[str, Any]:
    """The six int64 per batch of a facts buffer (as decode_frames writes them), as named numpy columns."""
    import numpy as np

    a = np.frombuffer(facts, np.int64).reshape(-1, 6)
    return dict(zip(("position", "base_offset", "last_offset", "producer_id", "flags", "records"), a.T))


def _buffer(pa, data) -> Any:
    return None if data is None else pa.py_buffer(data)


# ------------------------------------------------------------------ Arrow validity, per record flags
# In C (one pass over the bytes) where the extension is built; the numpy versions (lookupd.format._accel)
# are the reference.
validity_bitmap, nonempty_bitmap, spread_flag = _accel.validity_bitmap, _accel.nonempty_bitmap, _accel.spread_flag
validity_bitmap_reference, nonempty_bitmap_reference, spread_flag_reference = \
    _accel.validity_bitmap_reference, _accel.nonempty_bitmap_reference, _accel.spread_flag_reference
_BITMAPS = {False: (validity_bitmap, nonempty_bitmap, spread_flag),  # by `_accel.mode.python`
            True: (validity_bitmap_reference, nonempty_bitmap_reference, spread_flag_reference)}
