"""Kafka's message declarations in this project's form, and the one codec that reads and writes them.

Kafka declares each message (a request, a response, a record of an internal topic) in a JSON schema and
generates Java classes that read and write it. Here a message is a short table, one line per field, in
wire order:

    name          type         versions  [null=VERSIONS] [tag=N[@VERSIONS]] [default=VALUE]

and a struct's fields follow its line, indented. Types are int8, int16, uint16, int32, uint32, int64,
float64, bool, uuid, string, bytes, records, a struct (a capitalised name: inline, or one of the
`common` structs) and `[]T` arrays of any of them. Versions are `0+`, `3+`, `1`, `0-1` or `none`.
`null=` gives the versions in which the field may be null, `tag=N` makes it tagged field N (in the
versions after `@`, else in all of its versions), `default=` its value where absent (`null`, `true`,
`false`, a number or a word).

`Message.read` and `Message.encode` follow a table at one version as the generated `read` and `write` do:

* in flexible versions strings, bytes and arrays are compact (an unsigned varint of length + 1, 0
  meaning null), and every struct ends with its tagged fields (an unsigned varint count, then per field
  an unsigned varint tag and size and the field's bytes); unknown tags are skipped;
* elsewhere a string has an int16 length, bytes and arrays an int32 one, -1 meaning null;
* a nullable struct has an int8 (tagged: an unsigned varint) before it, negative (zero) for null.

A message is read in one of two views. The object view (the generated class's): every declared field,
those absent from the version at their default, uuids as 16 bytes; the Kafka listener's requests. The
JSON view (`json=True`, what Kafka's JsonConverters print): only the version's fields, tagged ones at
their default where absent, uuids as base64url text; the records of the internal topics. Names are the
tables' own (snake_case for the listener, Kafka's JSON names for records).

Reading is bounded (lookupd.message.wire): no count or length is trusted beyond the bytes present, and
one message decodes into at most `max_items` elements (array items and structs), so a few bytes cannot
make millions of objects. A version the table does not know, a null where none may be, a length past
the bytes, a tagged field whose size is not what its value takes: all raise MessageError naming the
message, struct and field. Decoding never guesses.
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Any, Callable, NamedTuple

from . import wire
from .wire import MessageError, Reader, UnsupportedVersion

VERSION_MAX = 0x7FFF  # Kafka's versions are int16
# The elements (array items and structs) one message may decode into unless its declaration says: a
# Fetch for 10,000 partitions is about 10,000 of them, while a 1 MiB frame of one-byte structs would be a
# million dicts (~200 MB).
MAX_ITEMS = 100_000

Versions = tuple[int, int]  # inclusive; (1, 0) is empty
NONE: Versions = (1, 0)


def parse_versions(text: str | None) -> Versions:
    """`0+`, `3+`, `1`, `0-4` or `none`."""
    if text is None or text == "none":
        return NONE
    if text.endswith("+"):
        return int(text[:-1]), VERSION_MAX
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def has(v: Versions, version: int) -> bool:
    return v[0] <= version <= v[1]


def versions_text(v: Versions) -> str:
    if v == NONE:
        return "none"
    if v[1] == VERSION_MAX:
        return f"{v[0]}+"
    return str(v[0]) if v[0] == v[1] else f"{v[0]}-{v[1]}"


PRIMITIVES = {"int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "bool", "uuid", "string", "bytes",
              "records"}
_FIXED_SIZE = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8, "bool": 1,
               "uuid": 16}
_FIXED_READ = {"int8": Reader.int8, "int16": Reader.int16, "uint16": Reader.uint16, "int32": Reader.int32,
               "uint32": Reader.uint32, "int64": Reader.int64, "float64": Reader.float64, "bool": Reader.boolean}
ZERO_UUID_TEXT = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID as Kafka prints it (base64url, no padding)


class Field(NamedTuple):
    name: str
    type: str  # a primitive, or a struct's name
    array: bool
    struct: "Struct | None"
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions  # the versions in which it is a tagged field
    default: Any  # in its message's view (a uuid's: 16 zero bytes, or its text in the JSON view)


class Struct(NamedTuple):
    name: str
    fields: tuple[Field, ...]


# ------------------------------------------------------------------ declarations

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
    if typ == "records":
        return None
    if typ == "uuid":
        return wire.ZERO_UUID
    if typ == "float64":
        return float(text or 0)
    return int(text or "0", 0)


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
            if set(options) - {"null", "tag", "default"}:
                raise ValueError(f"{name}: unknown option in {lines[i]!r}")
            i += 1
            struct_: Struct | None = None
            if typ not in PRIMITIVES:
                if i < len(lines) and len(lines[i]) - len(lines[i].lstrip()) > indent:
                    struct_, i = block(i, len(lines[i]) - len(lines[i].lstrip()), typ)
                elif typ in common:
                    struct_ = common[typ]
                else:
                    raise ValueError(f"{name}: struct {typ} has no fields and is not a common struct")
            versions = parse_versions(m["versions"])
            tag, tagged = None, NONE
            if "tag" in options:
                number, _, when = options["tag"].partition("@")
                tag, tagged = int(number), parse_versions(when) if when else versions
            fields.append(Field(m["name"], typ, array, struct_, versions, parse_versions(options.get("null")),
                                tag, tagged, _default(typ, array, struct_, options.get("default"))))
        return Struct(struct_name, tuple(fields)), i

    if not lines:
        return Struct(name, ())
    struct_, end = block(0, len(lines[0]) - len(lines[0].lstrip()), name)
    if end != len(lines):
        raise ValueError(f"{name}: table line {lines[end]!r} is indented less than the first")
    return struct_


def common(name: str, table: str, structs: dict[str, Struct] | None = None) -> Struct:
    """A struct shared by several fields or messages (Kafka's commonStructs); `structs`: others it uses."""
    return parse_table(name, table, structs)


# ------------------------------------------------------------------ reading


class _Budget:
    """The elements a message may still decode into."""

    __slots__ = ("left", "limit", "name")

    def __init__(self, limit: int, name: str):
        self.left = self.limit = limit
        self.name = name

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise MessageError(f"the message holds more than {self.limit} elements ({self.name})")


Read = Callable[[Reader, _Budget], Any]


def _uuid_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _json_value(value: Any) -> Any:
    """A default in the JSON view: uuids as text, within structs too."""
    if isinstance(value, bytes) and len(value) == 16 and value == wire.ZERO_UUID:
        return ZERO_UUID_TEXT
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


def _json_struct(s: Struct) -> Struct:
    """The struct with its defaults in the JSON view."""
    return s._replace(fields=tuple(f._replace(default=_json_value(f.default),
                                              struct=f.struct and _json_struct(f.struct)) for f in s.fields))


def _min_size(f: Field, version: int, flex: bool) -> int:
    """The fewest bytes one value of the field takes (for bounding array counts)."""
    if f.array or f.type in ("bytes", "records"):
        return 1 if flex else 4
    if f.struct is not None:
        return 1 if has(f.nullable, version) else _struct_min(f.struct, version, flex)
    if f.type == "string":
        return 1 if flex else 2
    return _FIXED_SIZE[f.type]


def _struct_min(s: Struct, version: int, flex: bool) -> int:
    return sum(_min_size(f, version, flex) for f in s.fields
               if has(f.versions, version) and not (flex and has(f.tagged, version))) + (1 if flex else 0)


class _Compiler:
    """The readers and writers of one message at one version (nested structs are read at the message's
    version, as the generated code reads them)."""

    def __init__(self, version: int, flexible: bool, json: bool):
        self.version = version
        self.flexible = flexible
        self.json = json

    # -------------------------------------------------------------- reading

    def scalar(self, t: str, flex: bool, nullable: bool, what: str) -> Read:
        fixed = _FIXED_READ.get(t)
        if fixed is not None:
            return lambda r, b: fixed(r)
        if t == "uuid":
            return (lambda r, b: _uuid_text(r.uuid())) if self.json else (lambda r, b: r.uuid())
        if t == "string":
            return lambda r, b: r.string(flex, nullable, what)
        if t in ("bytes", "records"):
            return lambda r, b: r.bytes_(flex, nullable, what)
        raise AssertionError(f"unknown type {t}")

    def field_reader(self, f: Field, tagged: bool) -> Read:
        """Tagged fields are always in the flexible form."""
        v = self.version
        flex = self.flexible or tagged
        nullable = has(f.nullable, v)
        if f.array:
            if f.struct is not None:
                item = self.struct_reader(f.struct, flex)
            else:
                item = self.scalar(f.type, flex, False, f.name + " element")
            least = _min_size(f._replace(array=False, nullable=NONE), v, flex)
            name = f.name

            def read_array(r: Reader, b: _Budget) -> list | None:
                n = r.count(flex, nullable, least, name)
                if n < 0:
                    return None
                b.take(n)
                return [item(r, b) for _ in range(n)]
            return read_array
        if f.struct is not None:
            inner = self.struct_reader(f.struct, flex)
            if not nullable:
                return inner
            if tagged:
                return lambda r, b: inner(r, b) if r.uvarint() > 0 else None
            return lambda r, b: inner(r, b) if r.int8() >= 0 else None
        return self.scalar(f.type, flex, nullable, f.name)

    def struct_reader(self, s: Struct, flex: bool) -> Read:
        v, json = self.version, self.json
        template: dict[str, Any] = {}  # every field the answer has, in declaration order, with its default
        regular: list[tuple[str, Read]] = []
        tagged: dict[int, tuple[str, Read]] = {}
        known_tags: dict[int, str] = {}
        for f in s.fields:
            if f.tag is not None:
                known_tags[f.tag] = f.name
            if not has(f.versions, v):
                if not json:
                    template[f.name] = f.default
                continue
            if flex and has(f.tagged, v):
                template[f.name] = f.default
                tagged[f.tag] = (f.name, self.field_reader(f, True))
            else:
                template[f.name] = None
                regular.append((f.name, self.field_reader(f, False)))
        name = s.name

        def read_struct(r: Reader, b: _Budget) -> dict:
            b.take(1)
            out = dict(template)
            field = None
            try:
                for field, read in regular:
                    out[field] = read(r, b)
                if flex:
                    field = None
                    for _ in range(r.tag_count()):
                        tag = r.uvarint()
                        size = r.uvarint()
                        if size > r.remaining:
                            raise MessageError(f"tagged field {tag} of {size} bytes runs past the end "
                                               f"({r.remaining} left)")
                        known = tagged.get(tag)
                        if known is None:
                            if tag in known_tags:
                                raise MessageError(f"tag {tag} ({known_tags[tag]}) is not valid for version {v}")
                            r.pos += size
                            continue
                        field = known[0]
                        end = r.pos + size
                        sub = Reader(r.buf, r.pos, end)
                        out[field] = known[1](sub, b)
                        if sub.pos != end:
                            raise MessageError(f"tagged field {tag} is {size} bytes but its value takes "
                                               f"{sub.pos - r.pos}")
                        r.pos = end
                        field = None
            except MessageError as e:
                raise type(e)(f"{name}.{field}: {e}" if field else f"{name}: {e}") from None
            return out
        return read_struct

    # -------------------------------------------------------------- writing

    def scalar_writer(self, t: str, flex: bool) -> Callable[[Any], bytes]:
        if t in ("int8", "int16", "uint16", "int32", "uint32", "int64", "float64"):
            return getattr(wire, t)
        if t == "bool":
            return lambda x: b"\x01" if x else b"\x00"
        if t == "uuid":
            if self.json:
                return lambda x: base64.urlsafe_b64decode(x + "==")
            return wire.uuid_of
        if t == "string":
            return lambda x: wire.string(x, flex)
        if t in ("bytes", "records"):
            return lambda x: wire.bytes_(x, flex)
        raise AssertionError(f"unknown type {t}")

    def field_writer(self, f: Field, tagged: bool) -> Callable[[Any, list], None]:
        flex = self.flexible or tagged
        if f.array:
            if f.struct is not None:
                sub = self.struct_writer(f.struct, flex)

                def write_items(value, out):
                    for x in value:
                        sub(x, out)
            else:
                scalar = self.scalar_writer(f.type, flex)

                def write_items(value, out):
                    out.extend(scalar(x) for x in value)

            def write_array(value, out: list) -> None:
                if value is None:
                    out.append(wire.length(-1, flex))
                    return
                out.append(wire.length(len(value), flex))
                write_items(value, out)
            return write_array
        if f.struct is not None:
            inner = self.struct_writer(f.struct, flex)
            if not has(f.nullable, self.version):
                return inner

            def write_nullable(value, out: list) -> None:
                if value is None:
                    out.append(b"\x00" if tagged else b"\xff")
                    return
                out.append(b"\x01")
                inner(value, out)
            return write_nullable
        scalar = self.scalar_writer(f.type, flex)
        return lambda value, out: out.append(scalar(value))

    def struct_writer(self, s: Struct, flex: bool) -> Callable[[dict, list], None]:
        v = self.version
        regular: list[tuple[str, Callable, Any]] = []
        tagged: list[tuple[int, str, Callable, Any]] = []
        for f in s.fields:
            if not has(f.versions, v):
                continue
            default = f.default
            if flex and has(f.tagged, v):
                tagged.append((f.tag, f.name, self.field_writer(f, True), default))
            else:
                regular.append((f.name, self.field_writer(f, False), default))
        tagged.sort(key=lambda x: x[0])

        def write_struct(value: dict, out: list) -> None:
            get = value.get
            for name, write, default in regular:
                write(get(name, default), out)
            if flex:
                present = [(tag, name, write) for tag, name, write, default in tagged
                           if name in value and value[name] != default]
                out.append(wire.uvarint(len(present)))
                for tag, name, write in present:
                    part: list = []
                    write(value[name], part)
                    data = b"".join(part)
                    out.append(wire.uvarint(tag) + wire.uvarint(len(data)))
                    out.append(data)
        return write_struct


class Message:
    """A message's declaration: its name, api key (a request's, or a record's type), the versions Kafka
    defines and those that are flexible, its fields, and how it is read (see the module docstring)."""

    def __init__(self, name: str, valid: str, flexible: str, fields: Struct, *, api_key: int | None = None,
                 json: bool = False, max_items: int = MAX_ITEMS, max_items_name: str = "MAX_ITEMS"):
        self.name = name
        self.api_key = api_key
        self.valid = parse_versions(valid)
        self.flexible = parse_versions(flexible)
        self.struct = _json_struct(fields) if json else fields
        self.json = json
        self.max_items = max_items
        self.max_items_name = max_items_name
        self._readers: dict[int, Read] = {}
        self._writers: dict[int, Callable[[dict, list], None]] = {}

    @property
    def fields(self) -> tuple[Field, ...]:
        return self.struct.fields

    def is_flexible(self, version: int) -> bool:
        return has(self.flexible, version)

    def _compiler(self, version: int) -> _Compiler:
        if not has(self.valid, version):
            raise UnsupportedVersion(f"{self.name} version {version} is not one this decoder knows "
                                     f"(versions {versions_text(self.valid)}; a newer Kafka's?)")
        return _Compiler(version, self.is_flexible(version), self.json)

    def read(self, buf, version: int, pos: int = 0) -> tuple[dict, int]:
        """The message at `version` from buf[pos:]: (fields, where it ended). Bytes after it are the
        caller's (a request's rest is left unread, as Kafka leaves it)."""
        read = self._readers.get(version)
        if read is None:
            c = self._compiler(version)
            read = self._readers[version] = c.struct_reader(self.struct, c.flexible)
        r = Reader(buf, pos)
        return read(r, _Budget(self.max_items, self.max_items_name)), r.pos

    def decode(self, buf, version: int, pos: int = 0) -> dict:
        """The message at `version` from buf[pos:]."""
        return self.read(buf, version, pos)[0]

    def encode(self, value: dict, version: int) -> bytes:
        """The message's bytes at `version`; a field missing from `value` is written at its default."""
        write = self._writers.get(version)
        if write is None:
            c = self._compiler(version)
            write = self._writers[version] = c.struct_writer(self.struct, c.flexible)
        out: list = []
        write(value, out)
        return b"".join(out)


def message(name: str, valid: str, flexible: str, table: str, common: dict[str, Struct] | None = None, *,
            api_key: int | None = None, json: bool = False, max_items: int = MAX_ITEMS,
            max_items_name: str = "MAX_ITEMS") -> Message:
    """A message from its field table (see the module docstring)."""
    return Message(name, valid, flexible, parse_table(name, table, common), api_key=api_key, json=json,
                   max_items=max_items, max_items_name=max_items_name)


_VERSION = struct.Struct(">h")


def read_prefixed(msg: Message, data, what: str) -> tuple[int, dict]:
    """A message after its int16 version (MessageUtil.toVersionPrefixedBytes): (version, fields); `what`
    names it in errors (the caller has ruled out null). Bytes after it are ignored, as Kafka's serdes
    ignore them."""
    if len(data) < 2:
        raise MessageError(f"the {what} is {len(data)} bytes, too short for its version")
    version = _VERSION.unpack_from(data)[0]
    return version, msg.read(data, version, 2)[0]
