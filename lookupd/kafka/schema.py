"""Kafka's message schemas in this project's form, and the one codec that reads and writes them.

A message is declared as Kafka's JSON schemas declare it (clients/src/main/resources/common/message/):
fields in wire order, each with its type, the versions it exists in, the versions it may be null in,
and for tagged fields its tag; the message has its valid and flexible versions. `Message.decode` and
`Message.encode` follow those declarations for one version: a value is a dict of snake_case field
names, a field absent in that version reads as its default, and unknown tagged fields are skipped.

Decoding is bounded (lookupd.kafka.wire): no count or length is trusted beyond the bytes present, and
the elements of one request are capped at MAX_REQUEST_ITEMS, so a small request cannot make millions
of objects. The hot messages also have hand-written codecs (lookupd.kafka.fetch, .listoffsets), checked
against these in tests/test_kafka_protocol.py.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from . import wire
from .wire import MalformedRequest, Reader

# The elements (array items and structs) one request may decode into: a Fetch for 10,000 partitions
# is about 10,000 of them, while a 1 MiB frame of one-byte structs would be a million dicts (~200 MB).
MAX_REQUEST_ITEMS = 100_000
ANY = 1 << 15  # "N+": every version from N


def versions(spec: str | None) -> tuple[int, int] | None:
    """Kafka's version range syntax: "3+", "0-7", "5", or "none"/None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), ANY
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def _within(v: int, rng: tuple[int, int] | None) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


class Field(NamedTuple):
    name: str
    type: str  # int8 int16 int32 int64 bool uuid string bytes records, "[]<prim>", "[]" (structs), "{}" (a struct)
    versions: tuple[int, int]
    nullable: tuple[int, int] | None = None
    tag: int | None = None
    tagged: tuple[int, int] | None = None
    default: Any = None  # None: the type's default (0, "", false, empty array); NULL: null
    fields: tuple["Field", ...] = ()


NULL = object()  # a declared default of null


def f(name: str, type_: str, vers: str, *, nullable: str | None = None, tag: int | None = None,
      default: Any = None, fields: tuple[Field, ...] | list[Field] = ()) -> Field:
    """One field as Kafka's schema states it (`tag` implies taggedVersions = versions)."""
    rng = versions(vers)
    return Field(name, type_, rng, versions(nullable), tag, rng if tag is not None else None, default, tuple(fields))


_PRIMITIVE_SIZE = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "uuid": 16, "float64": 8}


def _default(fld: Field, v: int) -> Any:
    if fld.default is NULL:
        return None
    if fld.default is not None:
        return fld.default
    t = fld.type
    if t in ("int8", "int16", "int32", "int64"):
        return 0
    if t == "bool":
        return False
    if t == "uuid":
        return wire.ZERO_UUID
    if t == "string":
        return ""
    if t in ("bytes",):
        return b""
    if t == "records":
        return None
    if t == "{}":
        return {g.name: _default(g, v) for g in fld.fields}
    return []  # arrays


class _Budget:
    __slots__ = ("left",)

    def __init__(self, items: int):
        self.left = items

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise MalformedRequest(f"request holds more than {MAX_REQUEST_ITEMS} elements (MAX_REQUEST_ITEMS)")


Read = Callable[[Reader, _Budget], Any]
Write = Callable[[Any, list], None]


def _min_size(fld: Field, v: int, flex: bool) -> int:
    """The fewest bytes one value of the field takes at version v (for bounding array counts)."""
    t = fld.type
    if t in _PRIMITIVE_SIZE:
        return _PRIMITIVE_SIZE[t]
    if t == "string":
        return 1 if flex else 2
    if t in ("bytes", "records") or t.startswith("[]"):
        return 1 if flex else 4
    if t == "{}":
        return _struct_min(fld.fields, v, flex)
    return 1


def _struct_min(fields: tuple[Field, ...], v: int, flex: bool) -> int:
    return sum(_min_size(g, v, flex) for g in fields if _within(v, g.versions) and g.tag is None) + (1 if flex else 0)


def _scalar_reader(t: str, flex: bool, nullable: bool, what: str) -> Read:
    if t == "int8":
        return lambda r, b: r.int8()
    if t == "int16":
        return lambda r, b: r.int16()
    if t == "int32":
        return lambda r, b: r.int32()
    if t == "int64":
        return lambda r, b: r.int64()
    if t == "bool":
        return lambda r, b: r.boolean()
    if t == "uuid":
        return lambda r, b: r.uuid()
    if t == "string":
        return lambda r, b: r.string(flex, nullable, what)
    if t in ("bytes", "records"):
        return lambda r, b: r.bytes_(flex, nullable, what)
    raise AssertionError(f"unknown type {t}")


def _field_reader(fld: Field, v: int, flex: bool) -> Read:
    t, nullable, what = fld.type, _within(v, fld.nullable), fld.name
    if t == "{}":
        return _struct_reader(fld.fields, v, flex)
    if t.startswith("[]"):
        if t == "[]":
            item = _struct_reader(fld.fields, v, flex)
            least = _struct_min(fld.fields, v, flex)
        else:
            item = _scalar_reader(t[2:], flex, False, what)
            least = _min_size(Field(what, t[2:], (0, ANY)), v, flex)

        def read_array(r: Reader, b: _Budget) -> list | None:
            n = r.count(flex, nullable, least, what)
            if n < 0:
                return None
            b.take(n)
            return [item(r, b) for _ in range(n)]
        return read_array
    return _scalar_reader(t, flex, nullable, what)


def _struct_reader(fields: tuple[Field, ...], v: int, flex: bool) -> Read:
    regular: list[tuple[str, Read]] = []
    tagged: dict[int, tuple[str, Read]] = {}
    defaults: dict[str, Any] = {}
    for fld in fields:
        if _within(v, fld.versions):
            if fld.tag is not None and flex and _within(v, fld.tagged):
                tagged[fld.tag] = (fld.name, _field_reader(fld, v, flex))
                defaults[fld.name] = _default(fld, v)
            else:
                regular.append((fld.name, _field_reader(fld, v, flex)))
        else:
            defaults[fld.name] = _default(fld, v)

    def read_struct(r: Reader, b: _Budget) -> dict:
        b.take(1)
        out = dict(defaults)
        for name, read in regular:
            out[name] = read(r, b)
        if flex:
            for _ in range(r.tag_count()):
                tag = r.uvarint()
                size = r.uvarint()
                known = tagged.get(tag)
                if known is None:
                    r.skip(size, "tagged field")
                    continue
                end = r.pos + size
                if size > r.remaining:
                    raise MalformedRequest(f"tagged field {tag} of {size} bytes with {r.remaining} left")
                sub = Reader(r.buf, r.pos, end)
                out[known[0]] = known[1](sub, b)
                r.pos = end
        return out
    return read_struct


def _scalar_writer(t: str, flex: bool) -> Callable[[Any], bytes]:
    if t == "int8":
        return wire.int8
    if t == "int16":
        return wire.int16
    if t == "int32":
        return wire.int32
    if t == "int64":
        return wire.int64
    if t == "bool":
        return lambda x: b"\x01" if x else b"\x00"
    if t == "uuid":
        return wire.uuid_of
    if t == "string":
        return lambda x: wire.string(x, flex)
    if t in ("bytes", "records"):
        return lambda x: wire.bytes_(x, flex)
    raise AssertionError(f"unknown type {t}")


def _field_writer(fld: Field, v: int, flex: bool) -> Write:
    t = fld.type
    if t == "{}":
        return _struct_writer(fld.fields, v, flex)
    if t.startswith("[]"):
        if t == "[]":
            sub = _struct_writer(fld.fields, v, flex)

            def write_items(value, out):
                for x in value:
                    sub(x, out)
        else:
            scalar = _scalar_writer(t[2:], flex)

            def write_items(value, out):
                out.extend(scalar(x) for x in value)

        def write_array(value, out: list) -> None:
            if value is None:
                out.append(wire.length(-1, flex))
                return
            out.append(wire.length(len(value), flex))
            write_items(value, out)
        return write_array
    scalar = _scalar_writer(t, flex)
    return lambda value, out: out.append(scalar(value))


def _struct_writer(fields: tuple[Field, ...], v: int, flex: bool) -> Write:
    regular: list[tuple[str, Write, Any]] = []
    tagged: list[tuple[int, str, Write, Any]] = []
    for fld in fields:
        if not _within(v, fld.versions):
            continue
        default = _default(fld, v)
        if fld.tag is not None and flex and _within(v, fld.tagged):
            tagged.append((fld.tag, fld.name, _field_writer(fld, v, flex), default))
        else:
            regular.append((fld.name, _field_writer(fld, v, flex), default))
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
    """One request or response schema: its API key, valid and flexible versions, and fields."""

    def __init__(self, name: str, api_key: int, valid: str, flexible: str, fields: list[Field]):
        self.name = name
        self.api_key = api_key
        self.valid = versions(valid)
        self.flexible = versions(flexible)
        self.fields = tuple(fields)
        self._readers: dict[int, Read] = {}
        self._writers: dict[int, Write] = {}

    def is_flexible(self, v: int) -> bool:
        return _within(v, self.flexible)

    def _check(self, v: int) -> None:
        if not _within(v, self.valid):
            raise ValueError(f"{self.name} has no version {v} (valid: {self.valid[0]}-{self.valid[1]})")

    def decode(self, buf, v: int, pos: int = 0) -> dict:
        """The message at `buf[pos:]`, version `v`; MalformedRequest if it does not follow the schema.
        Bytes after it are ignored (Kafka reads a request's body and leaves any rest unread too)."""
        read = self._readers.get(v)
        if read is None:
            self._check(v)
            read = self._readers[v] = _struct_reader(self.fields, v, self.is_flexible(v))
        return read(Reader(buf, pos), _Budget(MAX_REQUEST_ITEMS))

    def encode(self, value: dict, v: int) -> bytes:
        write = self._writers.get(v)
        if write is None:
            self._check(v)
            write = self._writers[v] = _struct_writer(self.fields, v, self.is_flexible(v))
        out: list = []
        write(value, out)
        return b"".join(out)
