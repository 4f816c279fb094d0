"""Giving memory freed after a burst back to the system (glibc's malloc_trim).

When clients that filled the daemon's buffers leave, their requests and answers are freed, but
glibc keeps freed memory in its arenas (one per worker thread that allocated it) for reuse: after
the issue's attacks the daemon stayed 150-250 MB larger than before them. `malloc_trim(0)` hands
the free pages of every arena back. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM = _malloc_trim()


def give_back() -> None:
    """Return the allocator's free memory to the system (milliseconds for large heaps: call it in a thread)."""
    if _TRIM is not None:
        _TRIM(0)
