"""A generated file read like a real one: produced lazily, front to back, as far as reads need.

A view is a producer: given a cursor it yields (bytes, cursor after them) pieces. One open
file keeps its producer running and a window of the latest output, so sequential reads
(`cat`, `head`, `jq`) cost one pass and `head` stops the work where it stops reading.
Every CHECKPOINT bytes of output the cursor is remembered; a read behind the window (a
seek back, `less` scrolling up) restarts the producer from the nearest checkpoint instead
of from the start. An error while producing (the daemon went away, a corrupt batch) ends
that read short, after the bytes made before it, and fails the read that gets to it; a
later read starts the producer again from a checkpoint.

A view of records grows as the broker appends (`resumable`): a read past the end, or `grow`,
starts the producer again from the cursor after its last piece, so a reader at the end of the
file (`tail -f`) sees the new records; the size `grow` gives never shrinks.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from typing import Callable, Generator, Generic, TypeVar

C = TypeVar("C")
Pieces = Generator[tuple[bytes, C], None, None]
Producer = Callable[[C], Pieces]

CHECKPOINT = 1 << 20
KEEP_BEHIND = 256 << 10  # output kept before the latest read, for slightly out-of-order reads
GROW_AHEAD = 1 << 20  # what `grow` produces past the latest read at most: one FUSE read's worth of pieces and more


class Stream(Generic[C]):
    def __init__(self, produce: Producer, start: C, *, resumable: bool = False):
        self._produce = produce
        self._resumable = resumable
        self._last = start  # the cursor after the latest piece: where a resumed producer starts
        self._read_to = 0  # output offset just past the latest read
        self._lock = threading.Lock()
        self._marks = [0]  # output offsets of the checkpoints
        self._cursors = [start]
        self._pieces: Pieces | None = None
        # The window: produced pieces, oldest first, and the output offset where each starts (kept whole,
        # never joined: appending to one buffer and trimming its front copied the window on every piece).
        self._window: deque[bytes] = deque()
        self._starts: deque[int] = deque()
        self._end = 0  # output offset just past the window
        self._eof = False

    def _restart(self, offset: int) -> None:
        i = bisect.bisect_right(self._marks, offset) - 1
        self._pieces = self._produce(self._cursors[i])
        self._window.clear()
        self._starts.clear()
        self._end = self._marks[i]
        self._last = self._cursors[i]
        self._eof = False

    def read(self, size: int, offset: int) -> bytes:
        with self._lock:
            behind = offset < (self._starts[0] if self._starts else self._end)
            if behind or self._pieces is None and not self._eof:
                self._restart(offset)
            want = offset + size
            self._produce_to(want, offset)
            out = self._slice(offset, min(want, self._end))
            self._read_to = offset + len(out)
            while len(self._window) > 1 and self._starts[1] <= offset - KEEP_BEHIND:
                self._window.popleft()
                self._starts.popleft()
            return out

    def _produce_to(self, want: int, offset: int) -> None:
        """Produce until the output reaches `want` or the producer ends (a resumable one is started
        again once from its last cursor first); an error fails only if nothing from `offset` on was made."""
        if self._eof and self._end < want and self._resumable:
            self._pieces = self._produce(self._last)
            self._eof = False
        while self._end < want and not self._eof:
            try:
                piece, cursor = next(self._pieces)
            except StopIteration:
                self._eof = True
                break
            except BaseException:
                self._pieces = None
                if self._end <= offset:
                    raise
                break  # a short read of what is sound; the next read meets the error
            if piece:
                self._window.append(piece)
                self._starts.append(self._end)
                self._end += len(piece)
            self._last = cursor
            if self._end - self._marks[-1] >= CHECKPOINT:
                self._marks.append(self._end)
                self._cursors.append(cursor)

    def grow(self) -> int:
        """Produce up to GROW_AHEAD past the latest read (what the broker appended, for a resumable view
        read to its end), then the bytes produced so far (never fewer than before): a follower that polls the size (`tail -f`) reads on to there.
        Errors are left to the read that gets to them."""
        with self._lock:
            if self._pieces is not None or self._eof:
                try:
                    self._produce_to(self._read_to + GROW_AHEAD, self._end)
                except Exception:  # noqa: BLE001 - the read at that point reports it
                    pass
            return self._end

    def _slice(self, start: int, stop: int) -> bytes:
        """Output bytes [start, stop) from the window."""
        if start >= stop:
            return b""
        i = bisect.bisect_right(self._starts, start) - 1
        parts = []
        while start < stop:
            piece, at = self._window[i], self._starts[i]
            parts.append(piece[start - at:stop - at])
            start = at + len(piece)
            i += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        with self._lock:
            if self._pieces is not None:
                self._pieces.close()
                self._pieces = None
