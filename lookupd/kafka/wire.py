"""Kafka's primitive types on the wire (the protocol guide's "Protocol Primitive Types"), read with bounds.

Everything read comes from a peer: every length and count is checked against the bytes that remain
before anything is allocated for it, so a request costs memory in proportion to its own size, never
to a number it claims (MalformedRequest names what was wrong and where).
"""

from __future__ import annotations

import struct
import uuid

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

# A varint is at most 5 bytes for 32 bits of value (Kafka's ByteUtils.readUnsignedVarint rejects a sixth).
MAX_VARINT_BYTES = 5
ZERO_UUID = bytes(16)


class MalformedRequest(Exception):
    """Bytes that do not follow the request's schema; the connection cannot go on (Kafka closes it too)."""


class Reader:
    """A cursor over one message's bytes; every read checks that the bytes are there."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str) -> int:
        pos = self.pos
        if n > self.end - pos:
            raise MalformedRequest(f"{what} needs {n} bytes at byte {pos}, {self.end - pos} remain")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self.take(1, "int8"))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self.take(2, "int16"))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self.take(4, "int32"))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self.take(8, "int64"))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self.take(4, "uint32"))[0]

    def boolean(self) -> bool:
        return self.buf[self.take(1, "bool")] != 0

    def uuid(self) -> bytes:
        pos = self.take(16, "uuid")
        return bytes(self.buf[pos:pos + 16])

    def uvarint(self) -> int:
        """Unsigned varint of up to 32 bits."""
        buf, pos, end = self.buf, self.pos, self.end
        value = shift = 0
        for i in range(MAX_VARINT_BYTES):
            if pos + i >= end:
                raise MalformedRequest(f"varint cut off at byte {pos + i}")
            b = buf[pos + i]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos + i + 1
                return value
            shift += 7
        raise MalformedRequest(f"varint longer than {MAX_VARINT_BYTES} bytes at byte {pos}")

    def raw(self, n: int, what: str = "bytes") -> bytes:
        pos = self.take(n, what)
        return bytes(self.buf[pos:pos + n])

    def skip(self, n: int, what: str = "bytes") -> None:
        self.take(n, what)

    # ---------------------------------------------------------------- lengths

    def length(self, flexible: bool, nullable: bool, what: str, wide: bool = False) -> int:
        """A string, bytes or array length: -1 for null (only where nullable), else checked >= 0.
        Legacy strings have an int16 length, legacy bytes and arrays an int32 (`wide`); compact ones a
        varint of length + 1."""
        if flexible:
            n = self.uvarint() - 1
        else:
            n = self.int32() if wide else self.int16()
        if n < -1 or (n == -1 and not nullable):
            raise MalformedRequest(f"{what} has length {n} at byte {self.pos}")
        return n

    def string(self, flexible: bool, nullable: bool = False, what: str = "string") -> str | None:
        n = self.length(flexible, nullable, what)
        if n < 0:
            return None
        pos = self.take(n, what)
        try:
            return str(self.buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError:
            raise MalformedRequest(f"{what} at byte {pos} is not UTF-8") from None

    def bytes_(self, flexible: bool, nullable: bool = False, what: str = "bytes") -> bytes | None:
        n = self.length(flexible, nullable, what, wide=True)
        if n < 0:
            return None
        return self.raw(n, what)

    def count(self, flexible: bool, nullable: bool, min_item: int, what: str) -> int:
        """An array's element count (-1: null), no larger than the remaining bytes allow."""
        n = self.length(flexible, nullable, what, wide=True)
        if n > 0 and n * max(min_item, 1) > self.end - self.pos:
            raise MalformedRequest(f"{what} claims {n} elements with {self.end - self.pos} bytes left")
        return n

    def tag_count(self) -> int:
        """The number of tagged fields that follow (a plain varint), each at least two bytes."""
        n = self.uvarint()
        if 2 * n > self.end - self.pos:
            raise MalformedRequest(f"{n} tagged fields claimed with {self.end - self.pos} bytes left")
        return n

    def skip_tagged_fields(self) -> None:
        """Skip a tagged-field section this listener reads nothing from."""
        for _ in range(self.tag_count()):
            self.uvarint()
            self.skip(self.uvarint(), "tagged field")


# ------------------------------------------------------------------- writing


def uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = tuple(bytes((i,)) for i in range(0x80))
int8 = _I8.pack
int16 = _I16.pack
int32 = _I32.pack
int64 = _I64.pack
NO_TAGS = b"\x00"  # an empty tagged-field section


def string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def bytes_(value: bytes | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff\xff\xff"
    return (uvarint(len(value) + 1) if flexible else _I32.pack(len(value))) + bytes(value)


def length(n: int, flexible: bool) -> bytes:
    """An array's (or records') length prefix; -1 for null."""
    return uvarint(n + 1) if flexible else _I32.pack(n)


def uuid_of(value: uuid.UUID | bytes | None) -> bytes:
    if value is None:
        return ZERO_UUID
    return value.bytes if isinstance(value, uuid.UUID) else bytes(value)
