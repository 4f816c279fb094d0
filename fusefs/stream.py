"""A generated file read like a real one: produced lazily, front to back, as far as reads need.

A view is a producer: given a cursor it yields (bytes, cursor after them) pieces. One open
file keeps its producer running and a window of the latest output, so sequential reads
(`cat`, `head`, `jq`) cost one pass and `head` stops the work where it stops reading.
Every CHECKPOINT bytes of output the cursor is remembered; a read behind the window (a
seek back, `less` scrolling up) restarts the producer from the nearest checkpoint instead
of from the start. An error while producing (the daemon went away, a corrupt batch) ends
that read short, after the bytes made before it, and fails the read that gets to it; a
later read starts the producer again from a checkpoint.
"""

from __future__ import annotations

import bisect
import threading
from typing import Callable, Generator, Generic, TypeVar

C = TypeVar("C")
Pieces = Generator[tuple[bytes, C], None, None]
Producer = Callable[[C], Pieces]

CHECKPOINT = 1 << 20
KEEP_BEHIND = 256 << 10  # output kept before the latest read, for slightly out-of-order reads


class Stream(Generic[C]):
    def __init__(self, produce: Producer, start: C):
        self._produce = produce
        self._lock = threading.Lock()
        self._marks = [0]  # output offsets of the checkpoints
        self._cursors = [start]
        self._pieces: Pieces | None = None
        self._buf = bytearray()
        self._buf_at = 0  # output offset of _buf[0]
        self._eof = False

    def _restart(self, offset: int) -> None:
        i = bisect.bisect_right(self._marks, offset) - 1
        self._pieces = self._produce(self._cursors[i])
        self._buf = bytearray()
        self._buf_at = self._marks[i]
        self._eof = False

    def read(self, size: int, offset: int) -> bytes:
        with self._lock:
            if offset < self._buf_at or self._pieces is None and not self._eof:
                self._restart(offset)
            want = offset + size
            while self._buf_at + len(self._buf) < want and not self._eof:
                try:
                    piece, cursor = next(self._pieces)
                except StopIteration:
                    self._eof = True
                    break
                except BaseException:
                    self._pieces = None
                    if self._buf_at + len(self._buf) <= offset:
                        raise
                    break  # a short read of what is sound; the next read meets the error
                self._buf += piece
                end = self._buf_at + len(self._buf)
                if end - self._marks[-1] >= CHECKPOINT:
                    self._marks.append(end)
                    self._cursors.append(cursor)
            start = offset - self._buf_at
            out = bytes(self._buf[start:start + size])
            drop = min(start - KEEP_BEHIND, len(self._buf))
            if drop > 0:
                del self._buf[:drop]
                self._buf_at += drop
            return out

    def close(self) -> None:
        with self._lock:
            if self._pieces is not None:
                self._pieces.close()
                self._pieces = None
