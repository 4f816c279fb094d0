"""Kafka's primitive types (the protocol guide's "Protocol Primitive Types"), read with bounds and written.

What is read comes from a peer or from a file: every length and count is checked against the bytes that
remain before anything is allocated for it, so a message costs memory in proportion to its own size,
never to a number it claims. MessageError names what was wrong and where.

Strings are read as Kafka's generated readers read them: at most 0x7FFF bytes, malformed UTF-8 replaced
(Java's `new String(bytes, UTF_8)`), not refused.
"""

from __future__ import annotations

import struct
import uuid

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

# A varint is at most 5 bytes for 32 bits of value (Kafka's ByteUtils.readUnsignedVarint rejects a sixth).
MAX_VARINT_BYTES = 5
# The longest string Kafka's generated readers accept ("string field ... had invalid length").
MAX_STRING_BYTES = 0x7FFF
ZERO_UUID = bytes(16)


class MessageError(Exception):
    """Bytes that are not the message they claim to be. From a Kafka connection: a malformed request,
    the connection cannot go on (Kafka closes it too); from a file: the caller adds the file and byte."""


class UnknownRecordType(MessageError):
    """A record type (an api key) that has no declaration here (a newer Kafka's, or not Kafka's at all)."""


class UnsupportedVersion(MessageError):
    """A version of a message that its declaration does not describe (a newer Kafka's)."""


class Reader:
    """A cursor over one message's bytes, buf[pos:end]; every read checks that the bytes are there."""

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
            raise MessageError(f"{what} needs {n} bytes at byte {pos}, {self.end - pos} remain")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self.take(1, "int8"))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self.take(2, "int16"))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self.take(2, "uint16"))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self.take(4, "int32"))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self.take(4, "uint32"))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self.take(8, "int64"))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self.take(8, "float64"))[0]

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
                raise MessageError(f"varint cut off at byte {pos + i}")
            b = buf[pos + i]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos + i + 1
                return value & 0xFFFFFFFF
            shift += 7
        raise MessageError(f"varint longer than {MAX_VARINT_BYTES} bytes at byte {pos}")

    def raw(self, n: int, what: str = "bytes") -> bytes:
        pos = self.take(n, what)
        return bytes(self.buf[pos:pos + n])

    def skip(self, n: int, what: str = "bytes") -> None:
        self.take(n, what)

    # ---------------------------------------------------------------- lengths

    def length(self, flexible: bool, nullable: bool, what: str, wide: bool = False) -> int:
        """A string, bytes or array length, -1 for null. Legacy strings have an int16 length, legacy bytes
        and arrays an int32 (`wide`); compact ones a varint of length + 1. As in Kafka's generated readers
        any negative length is null, an error where the field is not nullable."""
        if flexible:
            n = self.uvarint() - 1
        else:
            n = self.int32() if wide else self.int16()
        if n < 0:
            if not nullable:
                raise MessageError(f"non-nullable field {what} was serialized as null")
            return -1
        return n

    def string(self, flexible: bool, nullable: bool = False, what: str = "string") -> str | None:
        n = self.length(flexible, nullable, what)
        if n < 0:
            return None
        if n > MAX_STRING_BYTES:
            raise MessageError(f"string field {what} had invalid length {n}")
        pos = self.take(n, what)
        return str(self.buf[pos:pos + n], "utf-8", "replace")

    def bytes_(self, flexible: bool, nullable: bool = False, what: str = "bytes") -> bytes | None:
        n = self.length(flexible, nullable, what, wide=True)
        if n < 0:
            return None
        return self.raw(n, what)

    def count(self, flexible: bool, nullable: bool, min_item: int, what: str) -> int:
        """An array's element count (-1: null), no larger than the remaining bytes allow."""
        n = self.length(flexible, nullable, what, wide=True)
        if n > 0 and n * max(min_item, 1) > self.end - self.pos:
            raise MessageError(f"array field {what} claims {n} elements, more than the {self.end - self.pos} "
                               f"bytes left can hold")
        return n

    def tag_count(self) -> int:
        """The number of tagged fields that follow (a plain varint), each at least two bytes."""
        n = self.uvarint()
        if 2 * n > self.end - self.pos:
            raise MessageError(f"{n} tagged fields claimed with {self.end - self.pos} bytes left")
        return n

    def skip_tagged_fields(self) -> None:
        """Skip a tagged-field section the caller reads nothing from."""
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
uint16 = _U16.pack
int32 = _I32.pack
uint32 = _U32.pack
int64 = _I64.pack
float64 = _F64.pack
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
