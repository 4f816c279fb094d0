"""The map lifecycle of an index file: one read-only map (`IndexMapping`), paged in with the GIL
released, registered with the SIGBUS guard (lookupd.log._native, through lookupd.log._accel) while it
lives and unmapped when its last holder drops it; and `IndexState`, what one look at an index found.
The index classes (lookupd.log.index) decide which entries are valid and when to remap.
"""

from __future__ import annotations

import mmap
import os
import weakref
from typing import Callable, NamedTuple

import numpy as np

from ..errors import CorruptIndexError
from . import _accel
from .fileio import open_regular

_PAGE_IN_CHUNK = 1 << 20  # bytes read a call while paging a new map in (preadv, the GIL released)


guard_faults: Callable[[], int] = _accel.faults
SIGBUS_GUARD = _accel.NATIVE


def _release(mm: mmap.mmap, guard_slot: int) -> None:
    if guard_slot >= 0:
        _accel.unregister(guard_slot)
    try:
        mm.close()
    except BufferError:
        pass  # a numpy view still exports it; it is unmapped when that view dies


def _page_in(fd: int, length: int) -> None:
    buf = memoryview(bytearray(min(length, _PAGE_IN_CHUNK)))
    pos = 0
    while pos < length:
        got = os.preadv(fd, [buf[:min(len(buf), length - pos)]], pos)
        if got <= 0:
            break
        pos += got


class IndexMapping:
    """One read-only map of an index file.

    Released when the last holder drops the object: an evicted index still being searched
    by another thread keeps its map until that search returns. The map keeps the only
    descriptor (Python's mmap holds a duplicate); `size()` asks the file's current size.

    The file is read once through `preadv` right after mapping. That pages it in with the
    GIL released, so the first search (or validation) of a cold index on a slow disk does
    not take page faults while holding the GIL and stall every other thread.
    """

    __slots__ = ("mm", "length", "address", "__weakref__")

    def __init__(self, path: str):
        fd, st = open_regular(path)
        try:
            length = st.st_size
            mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ) if length else None
            if mm is not None:
                _page_in(fd, length)
        finally:
            os.close(fd)
        self.mm = mm
        self.length = length
        self.address = 0
        if mm is not None:
            slot = -1
            if SIGBUS_GUARD:
                _accel.install()
                self.address = np.frombuffer(mm, np.uint8).ctypes.data
                slot = _accel.register(self.address, length)
            weakref.finalize(self, _release, mm, slot)

    def resident(self) -> bool:
        """Whether every page of the map is in memory (False when that cannot be asked)."""
        if self.mm is None:
            return True
        return _accel.resident(self.address, self.length)

    def size(self) -> int:
        """The file's size now (an fstat)."""
        return self.mm.size() if self.mm is not None else 0


class IndexState(NamedTuple):
    """What one look at an index found: its mapping, how many entries are valid, and any fault."""

    mapping: "IndexMapping | NoMapping"
    entries: int
    fault: CorruptIndexError | None


class NoMapping:
    """Stands in for the mapping of a file that does not exist (yet), or is empty."""

    mm = None
    length = 0

    def size(self) -> int:
        return 0

    def resident(self) -> bool:
        return True


NO_MAPPING = NoMapping()
