"""One Kafka connection's framing, server side, with no I/O (as h11 is HTTP's).

The listener feeds what it reads to `receive_data` and takes events from `next_event`: a Request (its
header read, its body left as bytes for the API's decoder), NEED_DATA, CLOSED, or a Violation (a frame
that breaks the protocol: the connection must be closed after logging it, as Kafka closes it). It frames
answers with `response`. Requests are size-prefixed (int32) and at most `frame_limit` bytes: the frame is
refused as soon as its size is read, before any of it is held. A request's header is v1 (a legacy
client id) or, for a flexible version of its API, v2 (the same, then tagged fields); a response's header
is v0 (the correlation id) or v1 for a flexible version, except ApiVersions', always v0 (KIP-511: a
client reads it before it knows what versions the broker has).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..message import wire
from .apis import supported as is_supported
from .messages import REQUESTS
from ..message.wire import MessageError, Reader

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_HEAD_ID = struct.Struct(">hhih")  # and the client id's length (header v1 and v2)
API_VERSIONS_KEY = 18
_FLEXIBLE, _LEGACY = "flexible", "legacy"
# (api key, version) -> its request header's kind, for every version the listener advertises
_KINDS = {(k, v): (_FLEXIBLE if REQUESTS[k].is_flexible(v) else _LEGACY)
          for k in REQUESTS for v in range(REQUESTS[k].valid[0], REQUESTS[k].valid[1] + 1) if is_supported(k, v)}


class Request(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: bytes  # the whole frame; the body starts at `body_at`
    body_at: int
    supported: bool  # an API and version the listener advertises (else: answer UNSUPPORTED_VERSION or close)
    size: int  # the frame's size on the wire


class Violation(NamedTuple):
    """A frame that breaks the protocol; the connection ends after it."""

    message: str


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


class _Closed:
    def __repr__(self) -> str:
        return "CLOSED"


NEED_DATA = _NeedData()
CLOSED = _Closed()
Event = Request | Violation | _NeedData | _Closed


def is_flexible(api_key: int, version: int) -> bool:
    m = REQUESTS.get(api_key)
    return m is not None and m.is_flexible(version)


def response_header_flexible(api_key: int, version: int) -> bool:
    return api_key != API_VERSIONS_KEY and is_flexible(api_key, version)


class Connection:
    """Framing state: bytes received and not yet consumed; `frame_limit` may change between requests
    (a smaller one before authentication)."""

    def __init__(self, max_frame_bytes: int):
        self.max_frame_bytes = max_frame_bytes
        self.frame_limit = max_frame_bytes
        self.frame_limit_note = ""
        self._buf = bytearray()
        self._eof = False
        self._failed = False

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def wants_data(self) -> bool:
        """Whether `next_event` has nothing but NEED_DATA to say until more is read (False once a whole
        request, or a size that breaks the protocol, is there)."""
        buf = self._buf
        if len(buf) < 4:
            return True
        size = _SIZE.unpack_from(buf, 0)[0]
        return 8 <= size <= self.frame_limit and len(buf) < 4 + size

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the peer; b"" at its end of stream."""
        if data:
            self._buf += data
        else:
            self._eof = True

    def next_event(self) -> Event:
        if self._failed:
            return CLOSED
        buf = self._buf
        if len(buf) < 4:
            if self._eof:
                return CLOSED if not buf else self._fail("the peer closed the connection inside a request's size")
            return NEED_DATA
        size = _SIZE.unpack_from(buf, 0)[0]
        if size < 8:
            return self._fail(f"a request of {size} bytes is shorter than a request header")
        if size > self.frame_limit:
            return self._fail(f"a request of {size} bytes is longer than the {self.frame_limit}-byte limit"
                              f"{self.frame_limit_note}")
        if len(buf) < 4 + size:
            if self._eof:
                return self._fail(f"the peer closed the connection inside a {size}-byte request")
            return NEED_DATA
        frame = bytes(buf[4:4 + size])
        del buf[:4 + size]
        api_key, version, correlation_id, n = _HEAD_ID.unpack_from(frame, 0) if size >= 10 else \
            (*_HEAD.unpack_from(frame, 0), -2)
        kind = _KINDS.get((api_key, version))
        if kind is None:
            return Request(api_key, version, correlation_id, None, frame, len(frame), False, size)
        at = 10 + n
        if n < -1 or at > size:
            return self._fail(f"bad request header (a client id of {n} bytes in a {size}-byte request)")
        try:
            client_id = frame[10:at].decode() if n >= 0 else None
        except UnicodeDecodeError:
            return self._fail("bad request header (the client id is not UTF-8)")
        at = max(at, 10)
        if kind is _FLEXIBLE:
            if at < size and frame[at] == 0:  # no tagged fields: the usual header v2
                at += 1
            else:
                r = Reader(frame, at)
                try:
                    r.skip_tagged_fields()
                except MessageError as err:
                    return self._fail(f"bad request header ({err})")
                at = r.pos
        return Request(api_key, version, correlation_id, client_id, frame, at, True, size)

    def _fail(self, message: str) -> Violation:
        self._failed = True
        self._buf = bytearray()
        return Violation(message)


def response(request: Request, body: bytes | list) -> list[bytes]:
    """The framed response to `request`: its pieces, to be written in order (`body` may be pieces too, as
    a Fetch response's are; their total length goes in the size prefix)."""
    return response_to(request.api_key, request.api_version, request.correlation_id, body)


def response_to(api_key: int, version: int, correlation_id: int, body: bytes | list) -> list[bytes]:
    """`response` for a request known by its API key, version and correlation id."""
    parts = body if isinstance(body, list) else [body]
    head = wire.int32(correlation_id)
    if response_header_flexible(api_key, version):
        head += wire.NO_TAGS
    size = len(head) + sum(len(p) for p in parts)
    return [wire.int32(size) + head, *parts]
