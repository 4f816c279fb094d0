"""Read-only file handles that close themselves when the last user lets go, and reads that never wait.

A handle may be dropped by the cache (eviction, segment deleted) while another thread is
still reading through it; closing the descriptor then could hand its number to a new
file mid-read. So nothing closes a descriptor explicitly: the handle's finalizer does,
once no reader holds it.

Non-blocking mode (`mode.on`, per thread; only where RWF_NOWAIT exists, CAN_READ_NOWAIT): the
daemon runs a lookup on its event loop with it set. Reads then use `preadv(..., RWF_NOWAIT)`,
which returns at once with EAGAIN when the data is not in the page cache (about a microsecond
on ext4), and indexes that are not mapped or not resident raise `WouldBlock` instead of
touching the disk; the daemon then runs the lookup again in a worker thread. Lookups only
read, so starting one over is harmless.
"""

from __future__ import annotations

import os
import threading
import weakref

from .cache import tick


class WouldBlock(BaseException):
    """Raised in non-blocking mode where a read would wait for the disk. A BaseException so that no
    handler for ordinary errors (OSError, Exception) on the way up can take it for a failure."""


class _Mode(threading.local):
    """Per thread: whether reads must not wait (set it around a call and clear it in a `finally`).
    A class default, so a thread that never set it reads False without the AttributeError a
    getattr default costs (a third of a microsecond)."""

    on = False


mode = _Mode()  # `mode.on`: whether this thread is in non-blocking mode
_NOWAIT = getattr(os, "RWF_NOWAIT", None)
CAN_READ_NOWAIT = _NOWAIT is not None  # without it (not Linux) every read may block: nothing runs inline


def is_nonblocking() -> bool:
    return mode.on


class FileHandle:
    """An `O_RDONLY` descriptor for one file, with `pread`-based reads."""

    __slots__ = ("path", "fd", "__weakref__")

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)

    def size(self) -> int:
        """The file's current size: lseek to its end, a fifth of the cost of an fstat (no stat object).
        The descriptor's offset is not used otherwise (every read is a pread), so moving it is harmless."""
        return os.lseek(self.fd, 0, os.SEEK_END)

    def pread(self, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position`; shorter only at end of file."""
        if mode.on:
            return self._pread_nowait(size, position)
        data = os.pread(self.fd, size, position)
        if len(data) == size or not data:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self.fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)


    def _pread_nowait(self, size: int, position: int) -> bytes:
        buf = bytearray(size)
        got = 0
        while got < size:
            try:
                n = os.preadv(self.fd, [memoryview(buf)[got:]], position + got, _NOWAIT)
            except BlockingIOError:
                raise WouldBlock() from None
            if n == 0:
                break
            got += n
        return bytes(buf) if got == size else bytes(buf[:got])


class LazyHandle:
    """Opens its file on first use and reports to an IndexCache, which may drop it again."""

    def __init__(self, path: str, cache=None):
        self.path = path
        self._cache = cache
        self._handle: FileHandle | None = None
        self.last_used = 0  # tick() of the last use (lookupd.log.cache)

    mapped_bytes = 0

    def get(self) -> FileHandle:
        """The open handle (raises FileNotFoundError if the file is gone)."""
        h = self._handle
        if h is None:
            h = FileHandle(self.path)
            self._handle = h
            if self._cache is not None:
                self._cache.opened(self)
        else:
            self.last_used = tick()  # for the IndexCache's least-recently-used order
        return h

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    def unmap(self) -> None:
        """Drop the handle (the descriptor closes once no reader holds it)."""
        self._handle = None

    def close(self) -> None:
        self.unmap()
        if self._cache is not None:
            self._cache.forget(self)
