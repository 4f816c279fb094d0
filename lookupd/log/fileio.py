"""Read-only file handles that close themselves when the last user lets go.

A handle may be dropped by the cache (eviction, segment deleted) while another thread is
still reading through it; closing the descriptor then could hand its number to a new
file mid-read. So nothing closes a descriptor explicitly: the handle's finalizer does,
once no reader holds it.
"""

from __future__ import annotations

import os
import weakref


class FileHandle:
    """An `O_RDONLY` descriptor for one file, with `pread`-based reads."""

    __slots__ = ("path", "fd", "__weakref__")

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position`; shorter only at end of file."""
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


class LazyHandle:
    """Opens its file on first use and reports to an IndexCache, which may drop it again."""

    def __init__(self, path: str, cache=None):
        self.path = path
        self._cache = cache
        self._handle: FileHandle | None = None

    mapped_bytes = 0

    def get(self) -> FileHandle:
        """The open handle (raises FileNotFoundError if the file is gone)."""
        h = self._handle
        if h is None:
            h = FileHandle(self.path)
            self._handle = h
            if self._cache is not None:
                self._cache.opened(self)
        elif self._cache is not None:
            self._cache.touch(self)
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
