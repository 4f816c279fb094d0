"""Bytes the daemon holds for its connections, bounded: back-pressure on clients that do not read.

A connection holds requests it sent that wait for or run in a worker thread (their size unpacked,
estimated: REQUEST_MEMORY_FACTOR times their bytes on the wire) and answers not yet sent (their bytes). A client that pipelines 8 MiB `read`s and never
reads its answers once took the daemon from 51 MB to 1 GB. So, as Kafka mutes a channel until its
response is sent and Redis bounds a client's output buffer (client-output-buffer-limit):

* a connection holding `per_connection` bytes or more is not read until its client reads answers,
  and its requests waiting for a thread do not start while its unsent answers alone are that
  large (requests already in threads finish: at most its share of the threads' answers more);
* when all connections together hold more than `total`, the one holding the most is closed, as
  Redis's maxmemory-clients does: muting alone would leave every connection its allowance.

No I/O here; the daemon calls `mute`/`wait_to_start` where it would read or start a thread,
and tells this module what it holds.
"""

from __future__ import annotations

from typing import Callable

import trio

# A request's memory once unpacked, per byte on the wire: a msgpack integer of 1 to 9 bytes becomes a
# 32-byte Python int and an 8-byte list slot, so a 500 KB list of 100k offsets takes about 4 MB.
# Requests are held as this many times their wire size.
REQUEST_MEMORY_FACTOR = 8


class Holding:
    """What one connection holds; `close` is how `Buffers` ends it when all together hold too much."""

    __slots__ = ("requests", "answers", "close", "room")

    def __init__(self, close: Callable[[str], None]):
        self.requests = 0  # bytes of requests read that wait for or run in a worker thread
        self.answers = 0  # bytes of answers not yet taken by the socket
        self.close = close
        self.room = trio.lowlevel.ParkingLot()  # its tasks waiting for it to hold less


class Buffers:
    """Every connection's Holding, the limits, and the wait for room."""

    def __init__(self, per_connection: int, total: int):
        self.per_connection = per_connection
        self.total_limit = total
        self.total = 0
        self.high = 0  # the most `total` has been since the daemon last gave memory back (see lookupd.daemon.memory)
        self._holdings: set[Holding] = set()

    def open(self, close: Callable[[str], None]) -> Holding:
        h = Holding(close)
        self._holdings.add(h)
        return h

    def forget(self, h: Holding) -> None:
        """The connection ended: whatever it held is gone with it."""
        self._holdings.discard(h)
        self.total -= h.requests + h.answers
        h.requests = h.answers = 0

    def mute(self, h: Holding) -> bool:
        """Whether the connection must not be read now."""
        return h.requests + h.answers >= self.per_connection

    async def wait_unmuted(self, h: Holding) -> None:
        while self.mute(h):
            await h.room.park()

    async def wait_to_start(self, h: Holding) -> None:
        """Wait before a request starts in a thread while the connection's unsent answers are too large."""
        while h.answers >= self.per_connection:
            await h.room.park()

    def hold(self, h: Holding, requests: int = 0, answers: int = 0) -> None:
        if h not in self._holdings:
            return  # closed by `hold` meanwhile, already forgotten
        h.requests += requests
        h.answers += answers
        self.total += requests + answers
        if self.total > self.high:
            self.high = self.total
        if self.total > self.total_limit and len(self._holdings) > 1:
            biggest = max(self._holdings, key=lambda x: x.requests + x.answers)
            biggest.close(f"closing: it holds {biggest.requests + biggest.answers} bytes of requests and unread "
                          f"answers, the most of any connection, and all connections together hold more than "
                          f"{self.total_limit} (max_buffered_bytes)")
            self.forget(biggest)  # its memory is as good as gone: the next answer's check must not pick it again

    def release(self, h: Holding, requests: int = 0, answers: int = 0) -> None:
        if h not in self._holdings:
            return  # closed by `hold` meanwhile, already forgotten
        h.requests -= requests
        h.answers -= answers
        self.total -= requests + answers
        if h.room:
            h.room.unpark_all()
