"""msgpack-rpc framing with no I/O (h11 style): bytes in, events out; events in, bytes out.

Wire format (https://github.com/msgpack-rpc/msgpack-rpc/blob/master/spec.md): a stream of
concatenated msgpack values, no length prefix:

    request       [0, msgid, method, params]     msgid: uint32, method: str, params: array
    response      [1, msgid, error, result]      error nil on success, else {"code", "message"}
    notification  [2, method, params]

Faults come out of `next_event` as `ProtocolError` events, in two kinds:

* fatal (`ProtocolError.fatal`): the stream cannot be framed any more: malformed msgpack,
  or one value longer than `max_frame_bytes` (the Unpacker's buffer is capped at that, so
  a peer cannot make us hold more). The peer gets one *error notification*,
  `[2, "error", [{"code", "message"}]]`, and the connection is closed. A notification,
  not a response with a nil msgid: no request can be blamed, and every msgpack-rpc
  client can receive a notification without confusing it with an answer.
* not fatal: a well-formed value that is not a valid message (including one nested deeper
  than MAX_DEPTH). If a request msgid can be recovered (`[0, <uint32>, ...]`) the peer gets
  an error response to that msgid; otherwise the same error notification as above. Either
  way the stream goes on.

Resources a peer controls are bounded here, before anything else sees a value: a message's
bytes (`max_frame_bytes`), and so its element counts and string lengths, and its nesting
depth (MAX_DEPTH), checked without recursion, so later code (repr, validation, packing)
never meets a value deep enough to exhaust Python's recursion limit.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, NamedTuple

import msgpack

from ..errors import InvalidArgument

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2
MAX_MSGID = (1 << 32) - 1
DEFAULT_MAX_FRAME_BYTES = 1 << 20
ERROR_NOTIFICATION = "error"
# The deepest legal message has 3 levels (message, params, a list of targets). 16 leaves room
# for what other msgpack-rpc peers put in notifications, and keeps every value far below
# Python's recursion limit (1000), which a repr or a validator would otherwise meet: one
# 1,000-deep array used to end the daemon.
MAX_DEPTH = 16
_CONTAINERS = frozenset((list, dict))


_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (a frame per request)


def _malformed(err: Exception) -> str:
    """The message for bytes msgpack cannot unpack; msgpack's FormatError (a byte no value starts with,
    such as 0xc1) carries no text of its own."""
    if isinstance(err, msgpack.FormatError):
        return "malformed msgpack (FormatError: a byte that starts no msgpack value, such as 0xc1)"
    detail = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return f"malformed msgpack ({detail})"


class Request(NamedTuple):
    msgid: int
    method: str
    params: list


class Response(NamedTuple):
    msgid: int
    error: Any
    result: Any


class Notification(NamedTuple):
    method: str
    params: list


class ProtocolError(NamedTuple):
    """A message that could not be accepted; `msgid` is set when an error response can be sent."""

    code: str
    message: str
    fatal: bool
    msgid: int | None = None


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


class _Closed:
    def __repr__(self) -> str:
        return "CLOSED"


_NO_VALUE = object()  # next_event found no whole message at the start of a receive
NEED_DATA = _NeedData()  # feed more bytes with receive_data
CLOSED = _Closed()  # the peer ended the stream cleanly, between messages

Event = Request | Response | Notification | ProtocolError | _NeedData | _Closed


def error_map(code: str, message: str) -> dict:
    return {"code": code, "message": message}


class Connection:
    """One side of a msgpack-rpc stream. `role` is "server" (accepts requests and
    notifications) or "client" (accepts responses and notifications)."""

    def __init__(self, role: str = "server", max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        if role not in ("server", "client"):
            raise ValueError(f"role must be 'server' or 'client', got {role!r}")
        if max_frame_bytes < 16:
            raise ValueError("max_frame_bytes must be at least 16")
        self.role = role
        self.max_frame_bytes = max_frame_bytes
        # The longest message accepted now, at most max_frame_bytes: a server lowers it for a peer that
        # has not authenticated yet and raises it back (between messages) once it has. `frame_limit_note`
        # says why in the TOO_LARGE message.
        self.frame_limit = max_frame_bytes
        self.frame_limit_note = ""
        self.frame_bytes = 0  # the length on the wire of the last message next_event returned
        # An unpacker is held only while a message is partly received (see _UnpackerPool).
        self._unpacker: msgpack.Unpacker | None = None
        self._tell_base = 0  # unpacker.tell() - stream position, for the unpacker held now
        self._pending = bytearray()  # received, not yet handed to the unpacker
        self._fed = 0  # bytes handed to the unpacker so far
        self._frame_start = 0  # stream position where the current message starts
        self._eof = False
        self._broken: ProtocolError | None = None
        self._whole: bytes | None = None  # received between messages, not yet unpacked (see next_event)
        self._msgids = itertools.count()

    # ------------------------------------------------------------------ receiving

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer; b"" means the peer closed its side (end of stream)."""
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("data received after end of stream")
        if self._whole is not None:  # two receives before next_event: both go the incremental way
            self._receive(self._whole)
            self._whole = None
        elif self._unpacker is None and not self._pending and self._broken is None and \
                len(data) <= self.frame_limit:
            self._whole = data  # between messages: next_event tries it as whole messages first
            return
        self._receive(data)

    def _receive(self, data: bytes) -> None:
        """Hand received bytes to the incremental unpacker (or keep them pending)."""
        if self._pending or self._broken is not None:
            self._pending += data
            return
        # Nothing waiting: straight to the unpacker when the current frame may take all of it (the
        # usual case, a request or a burst of them well under the frame limit), saving two copies.
        if self._unpacker is None:
            self._unpacker = _POOL.take(self.max_frame_bytes)
            self._tell_base = self._unpacker.tell() - self._fed
        if len(data) <= self.frame_limit - (self._fed - self._frame_start):
            self._unpacker.feed(data)
            self._fed += len(data)
        else:
            self._pending += data

    def next_event(self) -> Event:
        """The next complete event, NEED_DATA, or CLOSED; a fatal ProtocolError repeats forever."""
        if self._broken is not None:
            return self._broken
        if self._whole is not None:
            # Bytes received between messages: a receive is usually exactly one request, unpacked in one
            # call; what follows the first message goes the incremental way, and so do all the bytes when
            # they do not start with a whole message (the incremental unpacker waits for the rest or says
            # what is wrong).
            data, self._whole = self._whole, None
            try:
                value = msgpack.unpackb(data, raw=False, unicode_errors="surrogateescape")
                self.frame_bytes = len(data)
            except msgpack.ExtraData as more:
                self._receive(more.extra)
                value = more.unpacked
                self.frame_bytes = len(data) - len(more.extra)
            except Exception:  # noqa: BLE001 - incomplete or malformed: the incremental unpacker tells which
                self._receive(data)
                value = _NO_VALUE
            if value is not _NO_VALUE:
                return self._event(value)
        while True:
            if self._unpacker is None:
                if not self._pending:
                    return CLOSED if self._eof else NEED_DATA
                self._unpacker = _POOL.take(self.max_frame_bytes)
                self._tell_base = self._unpacker.tell() - self._fed
            elif self._fed == self._frame_start and not self._pending:
                # Every byte fed was a whole message (the usual end of a receive): say so without
                # asking the unpacker, whose OutOfData costs as much as the message's unpacking.
                self._give_back()
                return CLOSED if self._eof else NEED_DATA
            try:
                value = self._unpacker.unpack()
            except msgpack.OutOfData:
                if self._feed():
                    continue
                in_frame = self._fed > self._frame_start
                if in_frame and self._fed - self._frame_start >= self.frame_limit:
                    return self._fail("TOO_LARGE", f"a message is longer than the {self.frame_limit}-byte frame "
                                      f"limit{self.frame_limit_note}")
                if self._eof:
                    if in_frame:
                        return self._fail("INVALID_ARGUMENT", "the stream ended in the middle of a message")
                    self._give_back()
                    return CLOSED
                if not in_frame:
                    self._give_back()
                return NEED_DATA
            except msgpack.StackError:  # nested deeper than the unpacker's own stack (it says nothing more)
                return self._fail("INVALID_ARGUMENT", f"a message nested deeper than the unpacker's stack can "
                                  f"hold; messages may be nested at most {MAX_DEPTH} levels deep")
            except Exception as err:  # noqa: BLE001 - any unpack failure leaves the stream unframeable
                # A length header above the frame limit (msgpack's ValueError "... exceeds max_..."): fail fast.
                if isinstance(err, ValueError) and "exceeds max_" in str(err):
                    return self._fail("TOO_LARGE", f"a message is longer than the {self.max_frame_bytes}-byte "
                                      f"frame limit ({err})")
                return self._fail("INVALID_ARGUMENT", _malformed(err))
            end = self._unpacker.tell() - self._tell_base
            self.frame_bytes, self._frame_start = end - self._frame_start, end
            return self._event(value)

    def _event(self, value: Any) -> Event:
        """The event one unpacked message makes."""
        if self.role == "server" and type(value) is list and len(value) == 4 and type(value[0]) is int \
                and value[0] == REQUEST \
                and type(value[1]) is int and 0 <= value[1] <= MAX_MSGID and type(value[2]) is str \
                and type(value[3]) is list and _CONTAINERS.isdisjoint(map(type, value[3])):
            return _tuple(Request, (value[1], value[2], value[3]))  # the common case, checked in one go
        if not _within_depth(value, MAX_DEPTH):
            msgid = value[1] if type(value) is list and len(value) > 1 and value[0] == REQUEST \
                and _is_msgid(value[1]) and self.role == "server" else None
            return ProtocolError("INVALID_ARGUMENT", f"a message may be nested at most {MAX_DEPTH} levels deep",
                                 False, msgid)
        return self._classify(value)

    def _feed(self) -> bool:
        """Hand pending bytes to the unpacker, never more than the current frame may still take."""
        room = self.frame_limit - (self._fed - self._frame_start)
        if not self._pending or room <= 0:
            return False
        chunk = bytes(self._pending[:room])
        del self._pending[:room]
        self._unpacker.feed(chunk)
        self._fed += len(chunk)
        return True

    def _give_back(self) -> None:
        """Between messages: the unpacker holds nothing of this stream; another connection may use it."""
        _POOL.give(self.max_frame_bytes, self._unpacker)
        self._unpacker = None

    def _fail(self, code: str, message: str) -> ProtocolError:
        self._broken = ProtocolError(code, message, fatal=True)
        self._pending.clear()
        self._unpacker = None  # mid-message state: never reused
        return self._broken

    def _classify(self, value: Any) -> Event:
        if not isinstance(value, list) or not value:
            return ProtocolError("INVALID_ARGUMENT", f"a message must be a non-empty array, got {_type(value)}", False)
        kind = value[0]
        if kind == REQUEST and _is_int(kind) and self.role == "server":
            return _request(value)
        if kind == NOTIFICATION and _is_int(kind):
            return _notification(value)
        if kind == RESPONSE and _is_int(kind) and self.role == "client":
            return _response(value)
        if _is_int(kind) and kind in (REQUEST, RESPONSE):
            what = "request" if kind == REQUEST else "response"
            return ProtocolError("INVALID_ARGUMENT", f"a {self.role} does not accept a {what}", False)
        return ProtocolError("INVALID_ARGUMENT", f"message type must be 0, 1 or 2, got {_brief(kind)}", False)

    # ------------------------------------------------------------------ sending

    def send_request(self, method: str, params: list | tuple) -> tuple[int, bytes]:
        """(msgid, bytes) of a new request; msgids count up and wrap at 2**32.

        Params msgpack cannot carry (an integer beyond 64 bits, an object) are the caller's
        mistake: InvalidArgument, like every other bad argument.
        """
        msgid = next(self._msgids) & MAX_MSGID
        try:
            return msgid, _pack([REQUEST, msgid, method, list(params)])
        except (TypeError, ValueError, OverflowError) as err:
            raise InvalidArgument(f"cannot send {method} {list(params)!r}: {err}") from None

    def send_response(self, msgid: int, error: Any, result: Any) -> bytes:
        """Bytes of a response; raises TypeError/ValueError/OverflowError if `result` cannot be packed. A Packed
        result, or a map result's Packed values, go in as they are (an answer or columns packed once)."""
        if type(result) is Packed:  # the array's first three elements, then the result's bytes
            return b"".join([b"\x94", _pack(RESPONSE), _pack(msgid), _pack(error), result])
        if type(result) is dict and any(type(v) is Packed for v in result.values()):
            return b"".join([b"\x94", _pack(RESPONSE), _pack(msgid), _pack(error), _map_header(len(result)),
                             *(_pack(k) + (v if type(v) is Packed else _pack(v)) for k, v in result.items())])
        return _pack([RESPONSE, msgid, error, result])

    def send_notification(self, method: str, params: list | tuple) -> bytes:
        return _pack([NOTIFICATION, method, list(params)])

    def send_error(self, error: ProtocolError) -> bytes:
        """The answer to a ProtocolError: an error response if it has a msgid, else an error notification."""
        err = error_map(error.code, error.message)
        if error.msgid is not None:
            return self.send_response(error.msgid, err, None)
        return self.send_notification(ERROR_NOTIFICATION, [err])


class _UnpackerPool:
    """Unpackers not in use, by frame limit: a connection holds one only while a message is partly
    received. A msgpack Unpacker costs about 45 KB (its parse stack is embedded), so one per open
    connection made 2,000 idle connections cost ~90 MB the allocator kept after they closed; now
    that memory scales with the connections in the middle of a message. list.pop/append are atomic,
    so clients in several threads can share the pool."""

    KEEP = 64  # idle unpackers kept per frame limit; more are left to the garbage collector

    def __init__(self) -> None:
        self._free: dict[int, list[msgpack.Unpacker]] = {}

    def take(self, max_frame_bytes: int) -> msgpack.Unpacker:
        free = self._free.get(max_frame_bytes)
        if free:
            try:
                return free.pop()
            except IndexError:  # another thread took the last one
                pass
        # Maps may only have str/bytes keys (msgpack's default: no hash flooding); invalid UTF-8
        # in a str is kept as surrogates so that it fails validation, not framing. The buffer
        # starts small and grows to max_frame_bytes only for a message that long.
        return msgpack.Unpacker(max_buffer_size=max_frame_bytes, read_size=min(max_frame_bytes, _READ_SIZE),
                                raw=False, unicode_errors="surrogateescape")

    def give(self, max_frame_bytes: int, unpacker: msgpack.Unpacker) -> None:
        free = self._free.setdefault(max_frame_bytes, [])
        if len(free) < self.KEEP:
            free.append(unpacker)


_POOL = _UnpackerPool()
_READ_SIZE = 16 << 10
# Packing: one Packer per thread (the daemon packs on its event loop; client threads pack their
# own requests). A Packer keeps its largest buffer, so after packing something bigger than
# _PACKER_KEEP_BYTES (a large columnar answer) the thread's Packer is replaced, giving it back.
_PACKER_KEEP_BYTES = 1 << 20
_packers = threading.local()


class Packed(bytes):
    """A value already in msgpack form, sent as it is: a whole result, or a value of a result map (see
    send_response)."""


def pack(value: Any) -> Packed:
    """`value` in msgpack, as a response carries it (raises TypeError/ValueError/OverflowError as packing does)."""
    return Packed(_pack(value))


def _map_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x80 | n])
    return b"\xde" + n.to_bytes(2, "big") if n < 1 << 16 else b"\xdf" + n.to_bytes(4, "big")


def _pack(value: Any) -> bytes:
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")
    data = packer.pack(value)
    if len(data) > _PACKER_KEEP_BYTES:
        _packers.packer = None
    return data


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_msgid(v: Any) -> bool:
    return _is_int(v) and 0 <= v <= MAX_MSGID


def _within_depth(value: Any, limit: int) -> bool:
    """Whether `value` nests at most `limit` containers deep; level by level, no recursion, and
    flat arrays (the columnar calls' targets) cost one C-level pass over their element types."""
    level, depth = [value], 1
    while True:
        deeper = []
        for v in level:
            if type(v) is list:
                if not _CONTAINERS.isdisjoint(map(type, v)):
                    deeper += [x for x in v if type(x) in _CONTAINERS]
            elif type(v) is dict:  # keys are str or bytes (the unpacker's strict_map_key)
                deeper += [x for x in v.values() if type(x) in _CONTAINERS]
        if not deeper:
            return True
        depth += 1
        if depth > limit:
            return False
        level = deeper


def _brief(v: Any) -> str:
    """A short description of a peer's value for an error message: never a full repr."""
    if isinstance(v, (list, dict)):
        return f"{_type(v)} of {len(v)}"
    if isinstance(v, (str, bytes)):
        return repr(v[:40]) + ("..." if len(v) > 40 else "")
    return f"{v!r:.40}"


def _type(v: Any) -> str:
    return {dict: "map", list: "array", str: "str", bytes: "bin", type(None): "nil"}.get(type(v), type(v).__name__)


def _method(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):  # old clients send method names as raw bytes
        return v.decode("utf-8", "surrogateescape")
    return None


def _request(v: list) -> Event:
    msgid = v[1] if len(v) > 1 and _is_msgid(v[1]) else None
    def bad(message: str) -> ProtocolError:
        return ProtocolError("INVALID_ARGUMENT", message, False, msgid)
    if len(v) != 4:
        return bad(f"a request is [0, msgid, method, params], got an array of {len(v)}")
    if msgid is None:
        return bad(f"msgid must be an unsigned 32-bit integer, got {_brief(v[1])}")
    method = _method(v[2])
    if method is None:
        return bad(f"method must be a string, got {_type(v[2])}")
    if not isinstance(v[3], list):
        return bad(f"params must be an array, got {_type(v[3])}")
    return Request(msgid, method, v[3])


def _notification(v: list) -> Event:
    if len(v) != 3:
        return ProtocolError("INVALID_ARGUMENT", f"a notification is [2, method, params], got an array of {len(v)}", False)
    method = _method(v[1])
    if method is None or not isinstance(v[2], list):
        return ProtocolError("INVALID_ARGUMENT", "a notification needs a string method and an array of params", False)
    return Notification(method, v[2])


def _response(v: list) -> Event:
    if len(v) != 4 or not _is_msgid(v[1]):
        return ProtocolError("INVALID_ARGUMENT", "a response is [1, msgid, error, result] with a uint32 msgid", False)
    return Response(v[1], v[2], v[3])
