"""The map lifecycle of an index file: one read-only map (`IndexMapping`), paged in with the GIL
released, registered with the SIGBUS guard (lookupd.log._native, through lookupd.log._accel) while it
lives and unmapped when its last holder drops it; and `IndexState`, what one look at an index found.
The index classes (lookupd.log.index) decide which entries are valid and when to remap.

Without the guard (pure Python: no compiler, or LOOKUPD_PURE_PYTHON=1) nothing is mapped: a page of a
map past a shrunk file's end would kill the process with SIGBUS between any size check and the read.
`IndexCopy` reads the file into a private buffer with pread instead, and `map_index` picks one of the
two. Both offer the same: `mm`, the entries' buffer; `size()`; `read(start, stop)`, the file's bytes
now (how a live index's appended entries are seen), `refresh`, the same into `mm`, and `rewritten`,
whether a range of `mm` is out of date (never, for a map); `resident()`. The IndexCache's bound on mapped
bytes then bounds the copies' memory.
"""

from __future__ import annotations

import mmap
import os
import weakref
from typing import Callable, NamedTuple

import numpy as np

from ..errors import CorruptIndexError
from . import _accel
from .fileio import open_regular, pread_into

_PAGE_IN_CHUNK = 1 << 20  # bytes read a call while paging a new map in (preadv, the GIL released)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # a LogWindow's pages mapped in one call, not faulted in one by one


guard_faults: Callable[[], int] = _accel.faults
SIGBUS_GUARD = _accel.NATIVE


def _guard(mm: mmap.mmap, length: int) -> tuple[int, int]:
    """(address, guard slot) of a new read-only map, registered with the SIGBUS guard: a fault in it then reads
    zeros instead of killing the process. The slot is -1 where the guard's slots are full (unguarded)."""
    _accel.install()
    address = np.frombuffer(mm, np.uint8).ctypes.data
    return address, _accel.register(address, length)


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
                self.address, slot = _guard(mm, length)
            weakref.finalize(self, _release, mm, slot)

    def resident(self) -> bool:
        """Whether every page of the map is in memory (False when that cannot be asked)."""
        if self.mm is None:
            return True
        return _accel.resident(self.address, self.length)

    def size(self) -> int:
        """The file's size now (an fstat)."""
        return self.mm.size() if self.mm is not None else 0

    def read(self, start: int, stop: int) -> bytes:
        """The file's bytes [start, stop) now, stop <= `length` (the map shows the broker's writes)."""
        return self.mm[start:stop]

    def refresh(self, start: int, stop: int) -> None:
        """Make `mm`'s bytes [start, stop) the file's now: a map always shows them."""

    def rewritten(self, start: int, stop: int) -> bool:
        """Whether the file's bytes [start, stop) differ from `mm`'s: never, for a map."""
        return False


class IndexCopy:
    """A private copy of an index file, read with pread: what stands in for the map without the SIGBUS
    guard. No read of it can fault, however the file shrinks; a shrink shows as `size()` falling, as
    it does for a map. The descriptor stays open (closed when the last holder drops the copy): `size()`
    asks it, and `read` copies the broker's appends to a live index in."""

    __slots__ = ("mm", "length", "fd", "__weakref__")

    def __init__(self, path: str):
        fd, st = open_regular(path)
        weakref.finalize(self, os.close, fd)
        self.fd = fd
        self.length = length = st.st_size
        buf = bytearray(length)
        if pread_into(fd, memoryview(buf), 0) < length:
            raise ValueError("the file shrank while it was being read")  # as mmap's: look again
        self.mm = buf if length else None

    def resident(self) -> bool:
        """False, as for a map that cannot be asked: `read` (live indexes) may wait for the disk, so
        lookups over a copy run in a worker thread."""
        return False

    def size(self) -> int:
        """The file's size now (an lseek to its end)."""
        return os.lseek(self.fd, 0, os.SEEK_END)

    def read(self, start: int, stop: int) -> bytes:
        """The file's bytes [start, stop) now, stop <= `length`, copied into the copy too; fewer where the
        file ends sooner."""
        view = memoryview(self.mm)[start:stop]
        return bytes(view[:pread_into(self.fd, view, start)])

    def refresh(self, start: int, stop: int) -> None:
        """Make `mm`'s bytes [start, stop) the file's now, stop <= `length` (where the file ends sooner,
        the rest stays as it was: the next size check finds the shrink)."""
        pread_into(self.fd, memoryview(self.mm)[start:stop], start)

    def rewritten(self, start: int, stop: int) -> bool:
        """Whether the file's bytes [start, stop) differ from the copy's (stop <= `length`; one pread)."""
        return os.pread(self.fd, stop - start, start) != self.mm[start:stop]


class IndexBytes:
    """An index held in memory, not in a file: one the cache could not write (cache_dir's filesystem full).
    It never changes, so it reads like a copy of a rolled segment's index."""

    __slots__ = ("mm", "length", "__weakref__")

    def __init__(self, data: bytes):
        self.mm = data if data else None
        self.length = len(data)

    def resident(self) -> bool:
        return True

    def size(self) -> int:
        return self.length

    def read(self, start: int, stop: int) -> bytes:
        return self.mm[start:stop]

    def refresh(self, start: int, stop: int) -> None:
        """Nothing to do: the bytes never change."""

    def rewritten(self, start: int, stop: int) -> bool:
        return False


def map_index(path: str) -> IndexMapping | IndexCopy:
    """The index file at `path` as a map under the SIGBUS guard, or without the guard as a copy; ValueError
    when the file shrank while it was being mapped or read (look again)."""
    return IndexMapping(path) if SIGBUS_GUARD else IndexCopy(path)


class LogWindow:
    """A read-only map of bytes [start, stop) of a `.log` under the SIGBUS guard, paged in as it is made
    (MAP_POPULATE): a scan reads the file's bytes in place instead of copying them out with pread (the
    compacted `__consumer_offsets` replay spent about a tenth of its time on that copy). Bytes past the
    end of a file that shrank meanwhile read as zeros (the guard's page), which look like a broken
    batch: `shrank()` tells the reader to take it for the shrink, not for a fault. `view[i]` is the
    file's byte `base + i`; `close()` unmaps it, and nothing may hold a slice of `view` by then."""

    __slots__ = ("handle", "base", "stop", "view", "_mm", "_slot", "_faults")

    def __init__(self, handle, mm: mmap.mmap, base: int, stop: int, slot: int, faults: int):
        self.handle = handle
        self.base = base
        self.stop = stop
        self.view = memoryview(mm)
        self._mm = mm
        self._slot = slot
        self._faults = faults

    @classmethod
    def open(cls, handle, start: int, stop: int) -> "LogWindow | None":
        """The window over [start, stop) of the FileHandle's file (start rounded down to a page), or None
        where it cannot be guarded (no guard, its slots full) or the file already ends before `stop`: the
        caller reads with pread then (and sees the shrink as a short read)."""
        if not SIGBUS_GUARD:
            return None
        base = start - start % mmap.ALLOCATIONGRANULARITY
        faults = guard_faults()
        try:
            mm = mmap.mmap(handle.fd, stop - base, mmap.MAP_SHARED | _POPULATE, mmap.PROT_READ, offset=base)
        except ValueError:  # (mmap's own size check: the file is shorter now)
            return None
        slot = _guard(mm, stop - base)[1]
        if slot < 0:
            mm.close()
            return None
        return cls(handle, mm, base, stop, slot, faults)

    def shrank(self) -> bool:
        """Whether the file may have shrunk under the window since it was made (the guard absorbed a
        fault, this window's or another map's, or the file now ends before `stop`)."""
        return guard_faults() != self._faults or self.handle.size() < self.stop

    def close(self) -> None:
        self.view.release()
        try:
            self._mm.close()
        except BufferError:
            return  # a slice still exports it: it stays mapped, and guarded, until that slice dies
        _accel.unregister(self._slot)


class IndexState(NamedTuple):
    """What one look at an index found: its mapping, how many entries are valid, and any fault."""

    mapping: "IndexMapping | IndexCopy | IndexBytes | NoMapping"
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
