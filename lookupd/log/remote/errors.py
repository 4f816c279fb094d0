"""What callers of the bucket catch or set, importable without the object-store packages: the objects the store
no longer has or that are too large to read, and the per-thread local-only mode in which nothing may wait
for the store."""

from __future__ import annotations

import threading

from ...errors import CorruptDataError, Unavailable


class ObjectNotFound(Unavailable):
    """The object is gone (deleted by retention after it was listed): relist, and the segment drops out."""


class ObjectTooLarge(CorruptDataError):
    """A whole-object GET whose length is above what the caller reads of such an object (its body not read)."""

    def __init__(self, key: str, size: int, limit: int, what: str):
        super().__init__(key, None, f"{what} of {size} bytes exceeds {limit}: not read")
        self.size = size


class StoreWouldWait(BaseException):
    """Raised in local-only mode where a call would wait for the object store (a GET, a listing, or another
    thread's GET of the same chunk). A BaseException, as lookupd.log.fileio.WouldBlock: the daemon reruns the
    call on its remote pool, so that calls on local data never wait behind the store."""


class _LocalOnly(threading.local):
    """Per thread: whether nothing may wait for the object store (set it around a call and clear it in a
    `finally`); a class default, so a thread that never set it reads False."""

    on = False


local_only = _LocalOnly()  # `local_only.on`: this thread raises StoreWouldWait rather than wait for the store
