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

Only regular files are read (`open_regular`): a log dir is writable by the broker's account, and
a symbolic link there named like a segment file would otherwise make the daemon, or a root FUSE
mount, serve any file they can read. Such a file is refused as if it were absent (`RefusedFile`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import weakref

from . import _accel
from .cache import tick


def pread_into(fd: int, view: memoryview, position: int) -> int:
    """Fill `view` from `position` of `fd` (preadv, the GIL released); the bytes read, fewer only at end of file."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], position + got)
        if n <= 0:
            break
        got += n
    return got


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


class RefusedFile(FileNotFoundError):
    """A file in a log dir that is a symbolic link or not a regular file: never read, and treated as
    absent (so a segment whose `.log` it is drops out of the listing, as a deleted one does)."""

    def __init__(self, path: str, symlink: bool):
        super().__init__(errno.ELOOP if symlink else errno.EINVAL,
                         f"{'a symbolic link' if symlink else 'not a regular file'}: not read (files in a "
                         f"log dir must be regular files)", path)


# O_NOFOLLOW: a symbolic link fails the open (ELOOP) instead of being followed. O_NONBLOCK: opening a
# FIFO does not wait for a writer (it is then refused by its type); cleared again for a regular file
# (one fcntl).
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """An `O_RDONLY` descriptor for `path` and its fstat, if it is a regular file; RefusedFile if it is a
    symbolic link or anything else, FileNotFoundError if it does not exist."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise RefusedFile(path, True) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(path, False)
        fcntl.fcntl(fd, fcntl.F_SETFL, 0)  # O_NONBLOCK off: F_SETFL sets only status flags, none of which we want
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def regular_stat(path: str) -> os.stat_result:
    """`lstat(path)` if it is a regular file; RefusedFile if it is a symbolic link or anything else."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise RefusedFile(path, stat.S_ISLNK(st.st_mode))
    return st


class FileHandle:
    """An `O_RDONLY` descriptor for one regular file (`open_regular`), with `pread`-based reads."""

    __slots__ = ("path", "fd", "__weakref__")

    def __init__(self, path: str):
        self.path = path
        self.fd = open_regular(path)[0]
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
        got = self.pread_into(memoryview(buf), position)
        return bytes(buf) if got == size else bytes(buf[:got])

    def pread_into(self, view: memoryview, position: int) -> int:
        """Fill `view` from `position` (a buffer used again and again: no new pages to fault in at each
        read); the bytes read, fewer only at end of file."""
        if not mode.on:
            return pread_into(self.fd, view, position)
        got = 0
        while got < len(view):
            try:
                n = os.preadv(self.fd, [view[got:]], position + got, _NOWAIT)
            except BlockingIOError:
                raise WouldBlock() from None
            if n == 0:
                break
            got += n
        return got


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


def open_sizes(handles: list[LazyHandle]) -> list[int]:
    """Each file's current size where its handle is open now, -1 where it is not (nothing is opened: a
    reader keeping sizes to tell whether files grew asks again after opening them). One call of the C
    extension where it is built: it reads each LazyHandle's `_handle` and its `fd`, holding the handle
    (so its descriptor stays open) across the lseek."""
    if _accel.open_sizes is not None and not _accel.mode.python:
        return _accel.open_sizes(handles)
    out = []
    for lazy in handles:
        h = lazy._handle
        out.append(-1 if h is None else h.size())
    return out
