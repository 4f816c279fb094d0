"""Client mistakes in the daemon's log: a line per connection, then counts, never a line per request.

Each rejected request used to be one INFO line: one unauthenticated client wrote 36.9 MiB of log
in 3 s. Now a connection's first client error is logged; later ones are counted and said in one
line at most every REPEAT_INTERVAL_S, and once more when the connection closes. Across all
connections at most LINES_PER_S lines a second (in bursts of up to LINES_BURST) are written; the
ones left out are counted in the next line that is.
"""

from __future__ import annotations

import logging
import time

# One line per connection and per this many seconds while it goes on making mistakes.
REPEAT_INTERVAL_S = 10.0
# Lines about clients, across all connections: enough for every distinct client on a busy host, too
# few for a client reconnecting in a loop to fill the journal.
LINES_PER_S = 20.0
LINES_BURST = 100


class ClientLog:
    """The daemon's lines about clients (refusals, mistakes, closes), rate-limited together."""

    def __init__(self, logger: logging.Logger, clock=time.monotonic):
        self._log = logger
        self._clock = clock
        self._tokens = LINES_BURST
        self._refilled = clock()
        self.left_out = 0  # lines not written since the last one that was

    def line(self, level: int, message: str) -> None:
        now = self._clock()
        self._tokens = min(LINES_BURST, self._tokens + (now - self._refilled) * LINES_PER_S)
        self._refilled = now
        if self._tokens < 1:
            self.left_out += 1
            return
        self._tokens -= 1
        if self.left_out:
            message += f" ({self.left_out} lines about clients left out before this one: rate limit)"
            self.left_out = 0
        self._log.log(level, "%s", message)

    def connection(self, peer: str) -> "ConnectionErrors":
        return ConnectionErrors(self, peer)


class ConnectionErrors:
    """One connection's client errors: the first logged, the rest counted (see the module doc)."""

    __slots__ = ("_log", "peer", "_unsaid", "_last", "_said_at")

    def __init__(self, log: ClientLog, peer: str):
        self._log = log
        self.peer = peer
        self._unsaid = 0  # errors since the last line
        self._last = ""
        self._said_at: float | None = None  # when the last line about this connection was written

    def error(self, what: str) -> None:
        """A request of this connection was rejected (or could not be read): `what` says how."""
        now = self._log._clock()
        if self._said_at is None:
            self._said_at = now
            self._log.line(logging.INFO, f"{self.peer}: {what}")
            return
        self._unsaid += 1
        self._last = what
        if now - self._said_at >= REPEAT_INTERVAL_S:
            self._say(now)

    def closed(self) -> None:
        if self._unsaid:
            self._say(self._log._clock())

    def _say(self, now: float) -> None:
        self._log.line(logging.INFO, f"{self.peer}: {self._unsaid} more client errors since the last line "
                                     f"(last: {self._last})")
        self._unsaid = 0
        self._said_at = now
