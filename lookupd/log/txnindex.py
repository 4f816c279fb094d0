"""`.txnindex`: the aborted transactions whose ABORT marker lies in a segment (TransactionIndex).

Entries are 34 bytes (AbortedTxn): int16 version, int64 producer id, int64 first offset,
int64 last offset, int64 last stable offset. The file exists only for segments that hold at
least one ABORT marker, and the broker truncates it with `ftruncate`, so it is read with
`pread` (never mapped) through a descriptor kept open while the segment is in use.
"""

from __future__ import annotations

import os
from typing import NamedTuple, TYPE_CHECKING

import numpy as np

from ..errors import CorruptIndexError
from .fileio import LazyHandle, RefusedFile

if TYPE_CHECKING:
    from .cache import IndexCache

ENTRY_SIZE = 34
CURRENT_VERSION = 0
ENTRY_DTYPE = np.dtype([
    ("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
    ("last_offset", ">i8"), ("last_stable_offset", ">i8"),
])


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """Read-only view of one segment's `.txnindex`."""

    def __init__(self, path: str | os.PathLike, base_offset: int, cache: IndexCache | None = None, *,
                 data: bytes | None = None):
        self.path = os.fspath(path)  # with `data`: a name for messages (the index is in memory, not in a file)
        self.base_offset = base_offset
        self._file = LazyHandle(self.path, cache)
        self._data = data

    def close(self) -> None:
        self._file.close()

    def _read(self) -> bytes:
        if self._data is not None:
            return self._data
        try:
            handle = self._file.get()
        except RefusedFile as err:  # a symbolic link: not read, and the aborted transactions are unknown
            raise CorruptIndexError(self.path, None, err.strerror) from None
        except FileNotFoundError:
            return b""  # created only on the segment's first aborted transaction
        return handle.pread(handle.size(), 0)

    def entries(self) -> np.ndarray:
        """Every whole entry, as a structured array (a partial trailing entry is ignored, as Kafka does)."""
        data = self._read()
        n = len(data) // ENTRY_SIZE
        arr = np.frombuffer(data, dtype=ENTRY_DTYPE, count=n)
        if n and (arr["version"] > CURRENT_VERSION).any():
            slot = int(np.argmax(arr["version"] > CURRENT_VERSION))
            raise CorruptIndexError(self.path, slot * ENTRY_SIZE,
                                    f"aborted transaction entry {slot} has unknown version {int(arr['version'][slot])}")
        return arr

    def all_aborted_txns(self) -> list[AbortedTxn]:
        arr = self.entries()
        return [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                           int(e["last_stable_offset"])) for e in arr]

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """TransactionIndex.collectAbortedTxns: transactions overlapping [fetch, upper bound), and
        whether the search is complete (an entry's last stable offset reached the upper bound)."""
        out = []
        for txn in self.all_aborted_txns():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    def sanity_check(self) -> None:
        """TransactionIndex.sanityCheck, plus the file size (a partial entry means a torn write)."""
        data = self._read()
        arr = self.entries()
        for slot, e in enumerate(arr):
            if e["last_offset"] < self.base_offset:
                raise CorruptIndexError(
                    self.path, slot * ENTRY_SIZE,
                    f"last offset {int(e['last_offset'])} of aborted transaction entry {slot} is less than "
                    f"the segment's base offset {self.base_offset}")
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(self.path, len(data) - len(data) % ENTRY_SIZE,
                                    f"size {len(data)} is not a multiple of the entry size {ENTRY_SIZE}")
