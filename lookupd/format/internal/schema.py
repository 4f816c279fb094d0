"""Kafka's generated-message wire format, read from compact field tables. No I/O.

Kafka describes each record of its internal topics as a message schema and generates Java classes
that read it. Here each message is a short table, one line per field:

    name          type         versions  [null=VERSIONS] [tag=N@VERSIONS] [default=VALUE]

and a struct's fields follow its line, indented. Types are int8, int16, uint16, int32, uint32,
int64, float64, bool, uuid, string, bytes, a struct (a capitalised name: inline, or one of the
message's common structs) and `[]T` arrays of any of them. Versions are `0+`, `3+`, `1`, `0-1`.
`null=` gives the versions in which the field may be null, `tag=N@V` makes it tagged field N in
versions V, `default=` its value where absent (`null`, `true`, `false`, a number or a word).

`Message.read` interprets a table at one version the way the generated `read` does:

* in flexible versions strings, bytes and arrays are compact (an unsigned varint of length + 1,
  0 meaning null), and every struct ends with its tagged fields (an unsigned varint count, then
  per field an unsigned varint tag and size and the field's bytes); unknown tags are skipped;
* elsewhere a string has an int16 length, bytes and arrays an int32 one, -1 meaning null;
* a nullable struct has an int8 (tagged: unsigned varint) before it, negative (zero) for null.

The answer is a dict keyed by each field's JSON name (as Kafka's JsonConverters name them), with
every field of that version: tagged ones absent from the bytes get their default. A version the
table does not know, a null where none may be, a length past the bytes, a tagged field whose size
does not match what it holds: all raise MessageError saying which message, version and field.
Decoding never guesses.
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Any, Callable, NamedTuple

VERSION_MAX = 0x7FFF  # Kafka's versions are int16


class MessageError(Exception):
    """Bytes that are not the message they claim to be (the caller adds the file and byte)."""


class UnknownRecordType(MessageError):
    """A record type this decoder has no table for (a newer Kafka's, or not Kafka's at all)."""


class UnsupportedVersion(MessageError):
    """A version of a message that its table does not describe (a newer Kafka's)."""


Versions = tuple[int, int]  # inclusive; (1, 0) is empty
NONE: Versions = (1, 0)


def parse_versions(text: str) -> Versions:
    """`0+`, `3+`, `1`, `0-4` or `none`."""
    if text == "none":
        return NONE
    if text.endswith("+"):
        return int(text[:-1]), VERSION_MAX
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _has(v: Versions, version: int) -> bool:
    return v[0] <= version <= v[1]


def _text(v: Versions) -> str:
    if v == NONE:
        return "none"
    if v[1] == VERSION_MAX:
        return f"{v[0]}+"
    return str(v[0]) if v[0] == v[1] else f"{v[0]}-{v[1]}"


PRIMITIVES = {"int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "bool", "uuid", "string", "bytes"}
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID as Kafka prints it (base64url, no padding)


class Field(NamedTuple):
    name: str  # the JSON name
    type: str  # a primitive, or a struct's name
    array: bool
    struct: "Struct | None"
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions  # the versions in which it is a tagged field
    default: Any


class Struct(NamedTuple):
    name: str
    fields: tuple[Field, ...]


_LINE = re.compile(r"(?P<indent> *)(?P<name>\w+) +(?P<type>(?:\[\])?\w+) +(?P<versions>[0-9+\-]+|none)(?P<options>.*)")


def _default(typ: str, array: bool, struct_: Struct | None, text: str | None) -> Any:
    if text == "null":
        return None
    if array:
        return []
    if struct_ is not None:
        return {f.name: f.default for f in struct_.fields}
    if typ == "bool":
        return text == "true"
    if typ == "string":
        return text or ""
    if typ == "bytes":
        return b""
    if typ == "uuid":
        return ZERO_UUID
    if typ == "float64":
        return float(text or 0)
    return int(text or 0)


def parse_table(name: str, table: str, common: dict[str, Struct] | None = None) -> Struct:
    """A struct from its field table (see the module docstring); `common` names shared structs."""
    common = common or {}
    lines = [line for line in table.splitlines() if line.strip() and not line.strip().startswith("#")]

    def block(i: int, indent: int, struct_name: str) -> tuple[Struct, int]:
        fields: list[Field] = []
        while i < len(lines):
            m = _LINE.fullmatch(lines[i].rstrip())
            if m is None:
                raise ValueError(f"{name}: cannot read the table line {lines[i]!r}")
            here = len(m["indent"])
            if here < indent:
                break
            if here > indent:
                raise ValueError(f"{name}: unexpected indentation at {lines[i]!r}")
            typ = m["type"]
            array = typ.startswith("[]")
            typ = typ.removeprefix("[]")
            options = dict(o.split("=", 1) for o in m["options"].split())
            i += 1
            struct_: Struct | None = None
            if typ not in PRIMITIVES:
                if i < len(lines) and len(lines[i]) - len(lines[i].lstrip()) > indent:
                    struct_, i = block(i, len(lines[i]) - len(lines[i].lstrip()), typ)
                elif typ in common:
                    struct_ = common[typ]
                else:
                    raise ValueError(f"{name}: struct {typ} has no fields and is not a common struct")
            tag, tagged = None, NONE
            if "tag" in options:
                number, _, when = options["tag"].partition("@")
                tag, tagged = int(number), parse_versions(when)
            fields.append(Field(m["name"], typ, array, struct_, parse_versions(m["versions"]),
                                parse_versions(options.get("null", "none")), tag, tagged,
                                _default(typ, array, struct_, options.get("default"))))
        return Struct(struct_name, tuple(fields)), i

    if not lines:
        return Struct(name, ())
    struct_, end = block(0, len(lines[0]) - len(lines[0].lstrip()), name)
    if end != len(lines):
        raise ValueError(f"{name}: table line {lines[end]!r} is indented less than the first")
    return struct_


# ------------------------------------------------------------------ reading

_I8, _I16, _U16, _I32, _U32, _I64, _F64 = (struct.Struct(f) for f in (">b", ">h", ">H", ">i", ">I", ">q", ">d"))
Reader = Callable[[bytes, int], tuple[Any, int]]


def uvarint(data: bytes, p: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes, as ByteUtils.readUnsignedVarint) at `p`: (value, next)."""
    value = 0
    for shift in range(0, 35, 7):
        if p >= len(data):
            raise MessageError(f"unsigned varint runs past the end of the {len(data)} bytes")
        b = data[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value & 0xFFFFFFFF, p
    raise MessageError(f"unsigned varint at byte {p - 5} is longer than 5 bytes")


def _fixed(s: struct.Struct) -> Reader:
    size, unpack = s.size, s.unpack_from

    def read(data: bytes, p: int) -> tuple[Any, int]:
        if p + size > len(data):
            raise MessageError(f"needs {size} bytes at byte {p}, {len(data) - p} left")
        return unpack(data, p)[0], p + size
    return read


_read_int8, _read_int16, _read_uint16, _read_int32, _read_uint32, _read_int64, _read_float64 = \
    (_fixed(s) for s in (_I8, _I16, _U16, _I32, _U32, _I64, _F64))


def _read_bool(data: bytes, p: int) -> tuple[bool, int]:
    v, p = _read_int8(data, p)
    return v != 0, p


def _read_uuid(data: bytes, p: int) -> tuple[str, int]:
    if p + 16 > len(data):
        raise MessageError(f"needs 16 bytes for a uuid at byte {p}, {len(data) - p} left")
    return base64.urlsafe_b64encode(data[p:p + 16]).rstrip(b"=").decode("ascii"), p + 16


FIXED = {"int8": _read_int8, "int16": _read_int16, "uint16": _read_uint16, "int32": _read_int32,
         "uint32": _read_uint32, "int64": _read_int64, "float64": _read_float64, "bool": _read_bool, "uuid": _read_uuid}
MIN_SIZE = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8, "bool": 1,
            "uuid": 16, "string": 1, "bytes": 1}


def _length(flexible: bool, kind: str) -> Reader:
    """The length (or count) in front of a string, bytes or array: -1 for null."""
    if flexible:
        def read(data: bytes, p: int) -> tuple[int, int]:
            n, p = uvarint(data, p)
            return n - 1, p
        return read
    return _read_int16 if kind == "string" else _read_int32


def _nullable_check(field: Field, version: int) -> Callable[[], Any]:
    if _has(field.nullable, version):
        return lambda: None

    def refuse() -> Any:
        raise MessageError(f"non-nullable field {field.name} was serialized as null")
    return refuse


def _variable(field: Field, version: int, flexible: bool) -> Reader:
    """A string or bytes field's reader."""
    length = _length(flexible, field.type)
    null = _nullable_check(field, version)
    is_string = field.type == "string"

    def read(data: bytes, p: int) -> tuple[Any, int]:
        n, p = length(data, p)
        if n < 0:
            return null(), p
        if is_string and n > 0x7FFF:
            raise MessageError(f"string field {field.name} had invalid length {n}")
        if p + n > len(data):
            raise MessageError(f"field {field.name} of {n} bytes runs past the end ({len(data) - p} left)")
        raw = data[p:p + n]
        if is_string:
            return raw.decode("utf-8", "replace"), p + n  # Java's String(bytes, UTF_8) replaces malformed input
        return bytes(raw), p + n
    return read


def _element(field: Field, version: int, flexible: bool) -> tuple[Reader, int]:
    """The reader of one array element and the fewest bytes an element takes."""
    if field.struct is not None:
        return _struct_reader(field.struct, version, flexible), 1 if flexible else 0
    if field.type in FIXED:
        return FIXED[field.type], MIN_SIZE[field.type]
    elem = field._replace(array=False, nullable=NONE)
    return _variable(elem, version, flexible), 1 if flexible else MIN_SIZE[field.type] + 1


def _array(field: Field, version: int, flexible: bool) -> Reader:
    length = _length(flexible, "array")
    null = _nullable_check(field, version)
    element, least = _element(field, version, flexible)

    def read(data: bytes, p: int) -> tuple[Any, int]:
        n, p = length(data, p)
        if n < 0:
            return null(), p
        if n * least > len(data) - p:  # bounds the list before it is built
            raise MessageError(f"array field {field.name} claims {n} elements, more than the "
                               f"{len(data) - p} bytes left can hold")
        out = []
        for _ in range(n):
            v, p = element(data, p)
            out.append(v)
        return out, p
    return read


def _struct_field(field: Field, version: int, flexible: bool, tagged: bool) -> Reader:
    inner = _struct_reader(field.struct, version, flexible)
    if not _has(field.nullable, version):
        return inner

    def read(data: bytes, p: int) -> tuple[Any, int]:
        if tagged:
            marker, p = uvarint(data, p)
            present = marker > 0
        else:
            marker, p = _read_int8(data, p)
            present = marker >= 0
        return (inner(data, p) if present else (None, p))
    return read


def field_reader(field: Field, version: int, flexible: bool, tagged: bool = False) -> Reader:
    """The reader of one field at `version` (tagged fields are always read in the flexible form)."""
    flexible = flexible or tagged
    if field.array:
        return _array(field, version, flexible)
    if field.struct is not None:
        return _struct_field(field, version, flexible, tagged)
    if field.type in FIXED:
        return FIXED[field.type]
    return _variable(field, version, flexible)


_CACHE: dict[tuple[int, int, bool], Reader] = {}


def _struct_reader(s: Struct, version: int, flexible: bool) -> Reader:
    """A struct's reader at `version`, built once per (struct, version, flexibility)."""
    key = (id(s), version, flexible)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    steps: list[tuple[str, Reader]] = []
    defaults: dict[str, Any] = {}
    tags: dict[int, tuple[str, Reader]] = {}
    known_tags: dict[int, str] = {}
    for f in s.fields:
        if not _has(f.versions, version):
            continue
        if _has(f.tagged, version):
            defaults[f.name] = f.default
            tags[f.tag] = (f.name, field_reader(f, version, flexible, tagged=True))
        else:
            steps.append((f.name, field_reader(f, version, flexible)))
        if f.tag is not None:
            known_tags[f.tag] = f.name
    order = [f.name for f in s.fields if _has(f.versions, version)]
    name = s.name

    def read(data: bytes, p: int) -> tuple[dict, int]:
        out: dict[str, Any] = {}
        for field_name, reader in steps:
            try:
                out[field_name], p = reader(data, p)
            except MessageError as e:
                raise MessageError(f"{name}.{field_name}: {e}") from None
        if flexible:
            out.update(defaults)
            count, p = uvarint(data, p)
            for _ in range(count):
                tag, p = uvarint(data, p)
                size, p = uvarint(data, p)
                end = p + size
                if end > len(data):
                    raise MessageError(f"{name}: tagged field {tag} of {size} bytes runs past the end")
                if tag in tags:
                    field_name, reader = tags[tag]
                    value, q = reader(data[p:end], 0)
                    if q != size:
                        raise MessageError(f"{name}.{field_name}: tagged field {tag} is {size} bytes but its "
                                           f"value takes {q}")
                    out[field_name] = value
                elif tag in known_tags:
                    raise MessageError(f"{name}: tag {tag} ({known_tags[tag]}) is not valid for version {version}")
                p = end
            if defaults:  # tagged fields in their place among the others
                out = {k: out[k] for k in order}
        return out, p

    _CACHE[key] = read
    return read


class Message(NamedTuple):
    """A message's table: its name, the versions Kafka defines and those that are flexible."""

    name: str
    valid: Versions
    flexible: Versions
    struct: Struct

    def read(self, data: bytes, version: int, p: int = 0) -> tuple[dict, int]:
        """The message at `version` from data[p:]: (fields, where it ended)."""
        if not _has(self.valid, version):
            raise UnsupportedVersion(f"{self.name} version {version} is not one this decoder knows "
                                     f"(versions {_text(self.valid)}; a newer Kafka's?)")
        return _struct_reader(self.struct, version, _has(self.flexible, version))(data, p)


def message(name: str, valid: str, flexible: str, table: str, common: dict[str, Struct] | None = None) -> Message:
    return Message(name, parse_versions(valid), parse_versions(flexible), parse_table(name, table, common))


def common(name: str, table: str, structs: dict[str, Struct] | None = None) -> Struct:
    """A struct shared by several fields or messages (Kafka's commonStructs); `structs`: others it uses."""
    return parse_table(name, table, structs)


_VERSION = struct.Struct(">h")


def read_prefixed(msg: Message, data: bytes | None, what: str) -> tuple[int, dict]:
    """A message after its int16 version (MessageUtil.toVersionPrefixedBytes): (version, fields); `what`
    names it in errors (the caller has ruled out null)."""
    if len(data) < 2:
        raise MessageError(f"the {what} is {len(data)} bytes, too short for its version")
    version = _VERSION.unpack_from(data)[0]
    try:
        fields, _ = msg.read(data, version, 2)
    except MessageError as e:
        raise type(e)(f"{msg.name}: {e}") from None
    return version, fields
