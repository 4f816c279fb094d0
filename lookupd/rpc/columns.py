"""int64 columns straight into msgpack arrays, without a Python int per value.

A columnar answer (resolve_offsets and its kin) of 100,000 targets is five columns of 100,000
integers. Packed through `tolist()` each value became a Python int first: 500,000 small objects
per answer, made and freed in a worker thread while other threads allocate. Python's small-object
allocator keeps a 1 MiB arena for as long as one object in it lives, so after a burst of such
answers a few hundred long-lived objects scattered among them held a hundred MB or more that no
`malloc_trim` can give back (measured for issue 40). Here a column is encoded with numpy: large
buffers only, which the allocator hands back, and several times faster.

The bytes are exactly msgpack-python's for the same list of ints (each value in its smallest form:
positive fixint, uint 8/16/32/64, negative fixint, int 8/16/32/64); `pack_int64_array_reference`
is that reference, and tests/test_rpc.py checks both agree on every boundary.
"""

from __future__ import annotations

import msgpack
import numpy as np

# Where each encoding starts (np.searchsorted side="right" gives the encoding's number for a value):
# int64, int32, int16, int8, fixint (-32..127), uint8, uint16, uint32, uint64.
_BOUNDS = np.array([-(1 << 31), -(1 << 15), -(1 << 7), -32, 1 << 7, 1 << 8, 1 << 16, 1 << 32], np.int64)
_MARKERS = np.array([0xD3, 0xD2, 0xD1, 0xD0, 0, 0xCC, 0xCD, 0xCE, 0xCF], np.uint8)
_PAYLOAD = np.array([8, 4, 2, 1, 0, 1, 2, 4, 8], np.int64)  # bytes after the marker (fixint: none)
_FIXINT = 4
_COLUMN = np.arange(9)


def array_header(n: int) -> bytes:
    """msgpack's header of an array of `n` items."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def pack_int64_array(values: np.ndarray) -> bytes:
    """`msgpack.packb(values.tolist())` for a 1-d integer array that fits int64, without the list.

    Each value is a row of 9 bytes, its marker then its 8 big-endian bytes; a mask keeps the marker and
    the last bytes its encoding needs (none for a fixint, whose marker is the value), row by row."""
    a = np.ascontiguousarray(values, dtype=np.int64)
    n = len(a)
    if n == 0:
        return array_header(0)
    kind = np.searchsorted(_BOUNDS, a, side="right")
    rows = np.empty((n, 9), np.uint8)
    rows[:, 1:] = a.astype(">i8").view(np.uint8).reshape(n, 8)
    rows[:, 0] = np.where(kind == _FIXINT, rows[:, 8], _MARKERS[kind])  # a fixint's byte: two's complement
    keep = _COLUMN >= (9 - _PAYLOAD[kind])[:, None]
    keep[:, 0] = True
    return array_header(n) + rows[keep].tobytes()


def pack_int64_array_reference(values: np.ndarray) -> bytes:
    """The answer of record: msgpack-python packing the list of Python ints."""
    return msgpack.packb(np.asarray(values, dtype=np.int64).tolist())


pack_column = pack_int64_array
