"""The answer to the Fetch a consumer sends next, read while it is still taking in the last one.

A consumer that keeps up asks again as soon as it has read an answer: the same request, each partition
from one past the last batch it got whole. Reading that answer (finding the batch, encoding the headers)
once the last answer's bytes are on their way costs about what reading it when the request comes does, and
a header walk more to tell the request, but it is off the round trip: a plain 1 MiB Fetch spent about 60 µs
of its 395 µs there in the listener's Python, in caches gone cold while the client copied the previous MiB
(docs/performance.md, "Kafka listener").

The prepared answer is the broker's own (`KafkaBroker.next_fetch` says what comes next, `KafkaBroker.fetch`
reads it), and it goes only to that request, and only while nothing it was read from has changed
(`KafkaBroker.unchanged`: the logs, their segment listings, log start, log end and last stable offset), so
it is the answer the request would get when it comes. The request is recognised either decoded (`take`) or,
cheaper, by its bytes (`matches`): the last request's frame with each moved partition's fetch offset
rewritten, kept only if it decodes to exactly the request expected. Any other request is answered as
always, and the prepared answer dropped. Only plaintext Fetches answered without a wait are prepared:
records sent from local segment files, no long poll.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

from ..errors import LookupdError
from ..kafka import apis, framing
from ..kafka import fetch as F
from ..log.fileio import WouldBlock, mode as nonblocking_mode
from ..message.wire import MessageError
from .kafkabroker import FetchPlan, KafkaBroker

if TYPE_CHECKING:
    from .service import Counters

# After this many answers read ahead in a row went unused (the client asked for something else, or the log
# changed first), a connection reads ahead only for one answer in PAUSED_EVERY, until one is used again: a
# client whose next request cannot be told costs the listener little more than its own reads.
MISSES_BEFORE_PAUSE = 4
PAUSED_EVERY = 16
_OFFSET = struct.Struct(">q")
_SIZE = struct.Struct(">i")


class FetchAhead:
    """One connection's prepared answer to the Fetch it expects next (none prepared: `request` is None)."""

    __slots__ = ("broker", "counters", "max_bytes_cap", "request", "version", "principal", "plan", "answer", "frame",
                 "frame_at", "hits", "misses", "answers", "prepared_at", "came_back_in")

    def __init__(self, broker: KafkaBroker, counters: Counters, max_bytes_cap: int):
        self.broker = broker
        self.counters = counters  # the daemon's: its fetches_read_ahead counts every connection's hits
        self.max_bytes_cap = max_bytes_cap
        self.request: F.FetchRequest | None = None
        self.version = -1
        self.principal = ""
        self.plan: FetchPlan | None = None  # its Regions hold their files open while prepared
        self.answer: list = []  # the framed response's pieces, coalesced, its correlation id (bytes 4-8) 0
        # The expected request as it arrives, size prefix included (bytes 8-12, the correlation id, excepted);
        # None where the last request's bytes do not tell it.
        self.frame: bytes | None = None
        self.frame_at = 0  # where the request's body starts in the frame after its size prefix
        self.hits = 0  # requests answered with a prepared answer
        self.misses = 0  # prepared answers unused since the last one used
        self.answers = 0  # answers given while paused (see MISSES_BEFORE_PAUSE)
        self.prepared_at = 0.0  # time.perf_counter() when the answer prepared now was
        # Seconds from preparing the last answer used to its request's arrival; inf until one is used, and
        # after one goes unused (`expected_within`).
        self.came_back_in = float("inf")

    def clear(self) -> None:
        self.request, self.plan, self.answer, self.frame = None, None, [], None

    def expected_within(self, seconds: float) -> bool:
        """Whether an answer is prepared and the client came for the last one within `seconds`: the next
        request is expected about that soon (lookupd.daemon.reactor's busy poll)."""
        return self.request is not None and self.came_back_in <= seconds

    def matches(self, data: bytes) -> bool:
        """Whether `data`, all that was read, is the expected request's frame (any correlation id)."""
        frame = self.frame
        return frame is not None and len(data) == len(frame) and data[12:] == frame[12:] and data[:8] == frame[:8]

    def take(self, req: F.FetchRequest, version: int, principal: str) -> tuple[FetchPlan, list] | None:
        """(plan, framed answer as `answer` holds it) prepared for `req`, if it is the request expected and its
        answer still holds; else None. Nothing stays prepared either way. Call in non-blocking mode."""
        if self.request is None:
            return None
        if self.request == req and self.version == version and self.principal == principal:
            return self._taken(req, version)
        self._missed()
        return self.clear()

    def take_frame(self, principal: str) -> tuple[F.FetchRequest, int, FetchPlan, list, int] | None:
        """(request, version, plan, framed answer, where the body starts in the frame) for the frame `matches`
        recognised, if its answer still holds; else None. Nothing stays prepared either way. Call in
        non-blocking mode."""
        req, version, at = self.request, self.version, self.frame_at
        if principal != self.principal:
            self._missed()
            return self.clear()
        taken = self._taken(req, version)
        return None if taken is None else (req, version, *taken, at)

    def _taken(self, req: F.FetchRequest, version: int) -> tuple[FetchPlan, list] | None:
        plan, answer = self.plan, self.answer
        self.clear()
        try:
            if not self.broker.unchanged(req, version, plan):
                self._missed()
                return None
        except (LookupdError, OSError, WouldBlock):
            self._missed()
            return None
        self.hits += 1
        self.counters.fetches_read_ahead += 1
        self.misses = 0
        self.came_back_in = time.perf_counter() - self.prepared_at
        return plan, answer

    def _missed(self) -> None:
        self.misses += 1
        self.came_back_in = float("inf")

    def prepare(self, req: F.FetchRequest, version: int, principal: str, plan: FetchPlan, frame: bytes,
                frame_at: int) -> None:
        """Read the answer to the Fetch that follows `req` (just answered with `plan`; `frame` its bytes after
        the size prefix, its body from `frame_at`), on the event loop in non-blocking mode. Nothing is prepared
        where that would wait for the disk, where the answer has an error or records in memory, where it would
        be a long poll, or (but for one answer in PAUSED_EVERY) while the connection's last answers read ahead
        went unused."""
        if self.request is not None:  # prepared, and the request went another way (the connection's task)
            self._missed()
        self.clear()
        if plan.has_error or not plan.total_bytes:
            return
        if self.misses >= MISSES_BEFORE_PAUSE:
            self.answers += 1
            if self.answers % PAUSED_EVERY:
                return
        nonblocking_mode.on = True
        try:
            nxt = self.broker.next_fetch(req, plan)
            if nxt is None:
                return
            ahead = self.broker.fetch(nxt, version, principal, regions=True, max_bytes_cap=self.max_bytes_cap)
        except (LookupdError, OSError, WouldBlock):
            return
        finally:
            nonblocking_mode.on = False
        if ahead.has_error or ahead.total_bytes < max(nxt.min_bytes, 1) or \
                any(isinstance(p.records, bytes) and p.records for _, _, parts in ahead.topics for p in parts):
            return
        self.request, self.version, self.principal = nxt, version, principal
        self.plan = ahead
        self.answer = F.coalesced(framing.response_to(apis.FETCH, version, 0,
                                                      F.encode_response(version, ahead.topics)))
        self.frame, self.frame_at = _next_frame(frame, frame_at, version, req, nxt), frame_at
        self.prepared_at = time.perf_counter()


def _next_frame(frame: bytes, body_at: int, version: int, req: F.FetchRequest, nxt: F.FetchRequest) -> bytes | None:
    """The frame of `nxt` as the client that sent `frame` (the request `req`) writes it, size prefix first:
    `frame` with each fetch offset that moved rewritten in place. The old offsets are found in partition
    order; the result must decode to exactly `nxt`, else None (the request is then recognised decoded)."""
    raw = bytearray(frame)
    at = body_at
    for ft, nt in zip(req.topics, nxt.topics):
        for fp, np_ in zip(ft.partitions, nt.partitions):
            if fp.fetch_offset == np_.fetch_offset:
                continue
            found = raw.find(_OFFSET.pack(fp.fetch_offset), at)
            if found < 0:
                return None
            raw[found:found + 8] = _OFFSET.pack(np_.fetch_offset)
            at = found + 8
    data = bytes(raw)
    try:
        if F.decode_request(data, body_at, version) != nxt:
            return None
    except MessageError:
        return None
    return _SIZE.pack(len(data)) + data
