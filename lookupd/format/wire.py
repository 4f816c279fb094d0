"""Keys and values in Confluent's wire format, decoded with the schemas of a `Registry`. No I/O.

The wire format: byte 0 (the magic), the schema's global id as a big-endian int32, then the payload:
- Avro: the value in Avro's binary encoding, written with that schema (read with fastavro);
- Protobuf: the message indexes (a zigzag varint count, then that many zigzag varints, the path from
  the file's top-level messages down to the nested one; a single 0 byte is `[0]`, the first message),
  then the message (read by the protobuf runtime from the schema's `.proto`, its imports being its
  references, or protobuf's own well-known types);
- JSON Schema: the JSON text itself.

`ValueDecoder.decode` gives what a record's JSON shows (`Decoded`, its `value` ready for JSON), None
for bytes not in the wire format, and raises `WireError` with the reason for bytes that are (magic 0,
five bytes or more) but whose id is not in the registry or that do not read as their schema. A
schema is parsed once, at its first value; one that does not parse fails each of its values with
the same reason.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import math
import re
import struct
import uuid
from typing import Any, Callable, NamedTuple

from .schemas import Registry, SchemaVersion
from ..errors import MissingExtra

MAGIC = 0
HEADER = struct.Struct(">bI")  # magic, schema id
MAX_MESSAGE_INDEXES = 64  # nesting of the message a Protobuf value names (each index one level)
MAX_CODECS = 10_000  # schemas parsed and kept (one per id met)
EXTRA_HINT = "pip install 'kafka-lookupd[schemas]' (fastavro, protobuf, proto-schema-parser)"


class WireError(ValueError):
    """Bytes in the wire format that do not decode: `schema_id` and the reason."""

    def __init__(self, schema_id: int, reason: str):
        super().__init__(reason)
        self.schema_id = schema_id


class Decoded(NamedTuple):
    schema_id: int
    value: Any  # JSON-ready: dicts, lists, str, int, float, bool, None


def require() -> None:
    """Raise MissingExtra (one line saying what to install) unless the decoding packages import."""
    try:
        import fastavro  # noqa: F401
        import google.protobuf  # noqa: F401
        import proto_schema_parser  # noqa: F401
    except ImportError as err:
        raise MissingExtra(f"decoding schemas needs {err.name}: {EXTRA_HINT}") from None


def split(data) -> tuple[int, memoryview] | None:
    """(schema id, payload) of bytes in the wire format; None for any other bytes (or none)."""
    if data is None or len(data) < HEADER.size or data[0] != MAGIC:
        return None
    return HEADER.unpack_from(data)[1], memoryview(data)[HEADER.size:]


class ValueDecoder:
    """Decodes wire-format bytes with the schemas of `registry` (thread-safe: codecs are only added)."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self._codecs: dict[int, _Codec | WireError] = {}

    def decode(self, data, *, text: bool = False) -> Decoded | None:
        """The decoded value ready for JSON (`text`: as compact JSON text); None when `data` is not in the
        wire format."""
        got = self.decode_object(data)
        if got is None:
            return None
        sid, obj, codec = got
        return Decoded(sid, codec.json_text(obj) if text else codec.to_json(obj))

    def decode_object(self, data) -> tuple[int, Any, "_Codec"] | None:
        """(schema id, the object as the library reads it, the codec that read it: its `to_json` and
        `json_text` show it)."""
        wire = split(data)
        if wire is None:
            return None
        sid, payload = wire
        codec = self.codec(sid)
        try:
            return sid, codec.read(payload), codec
        except WireError:
            raise
        except RecursionError:
            raise WireError(sid, f"the payload nests too deeply for schema id {sid}") from None
        except Exception as err:  # noqa: BLE001 - each library has its own errors for bytes that do not match
            raise WireError(sid, _mismatch(sid, codec, err)) from None

    def decode_many(self, datas: list, reader_schemas: dict | None = None) -> tuple[list, list, list]:
        """`decode_object` over many keys or values in one loop: (ids, objects, reasons), each a list as long
        as `datas`; None where a value is not in the wire format (its id None too) or did not decode (its
        id set, the reason given). Avro values whose id has an entry in `reader_schemas` are resolved to
        that schema (Avro's schema resolution). The loop Spark's columns are made by."""
        n = len(datas)
        ids, objs, reasons = [None] * n, [None] * n, [None] * n
        codecs: dict[int, tuple] = {}
        for i, data in enumerate(datas):
            if data is None or len(data) < HEADER.size or data[0] != MAGIC:
                continue
            sid = ids[i] = int.from_bytes(data[1:5], "big")
            got = codecs.get(sid)
            if got is None:
                try:
                    codec = self.codec(sid)
                except WireError as err:
                    got = codecs[sid] = (None, str(err))
                else:
                    got = codecs[sid] = (codec, codec.reader((reader_schemas or {}).get(sid, _NO_READER)))
            codec, read = got
            if codec is None:
                reasons[i] = read
                continue
            try:
                objs[i] = read(data)
            except RecursionError:
                reasons[i] = f"the payload nests too deeply for schema id {sid}"
            except Exception as err:  # noqa: BLE001 - as decode_object
                reasons[i] = _mismatch(sid, codec, err)
        return ids, objs, reasons

    def codec(self, sid: int) -> "_Codec":
        """The parsed schema with id `sid` (cached, failures too); WireError when there is none."""
        got = self._codecs.get(sid)
        if got is None:
            try:
                got = self._make(sid)
            except WireError as err:
                got = err
            if len(self._codecs) < MAX_CODECS:
                self._codecs[sid] = got
        if isinstance(got, WireError):
            raise got
        return got

    def _make(self, sid: int) -> "_Codec":
        sv = self.registry.by_id(sid)
        if sv is None:
            raise WireError(sid, f"schema id {sid} is not in _schemas")
        label = f"{sv.schema_type} schema of {sv.subject} version {sv.version}"
        try:
            refs = self.registry.resolve(sv)
            make = {"AVRO": _AvroCodec, "PROTOBUF": _ProtobufCodec, "JSON": _JsonCodec}[sv.schema_type]
            return make(sv, refs, label)
        except MissingExtra as err:
            raise WireError(sid, str(err)) from None
        except LookupError as err:
            raise WireError(sid, f"schema id {sid} ({label}): {err}") from None
        except RecursionError:
            raise WireError(sid, f"schema id {sid} ({label}) nests too deeply") from None
        except Exception as err:  # noqa: BLE001 - a schema any producer could have registered
            raise WireError(sid, f"schema id {sid} ({label}) does not parse: {type(err).__name__}: {err}") from None


_NO_READER = object()
# fastavro names the file object it read from ("cannot read boolean from <_io.BytesIO object at 0x...>"):
# an address that differs at each read, which a reason leaves out.
_FILE_OBJECT = re.compile(r" from <_io\.BytesIO object at 0x[0-9a-fA-F]+>")


def _mismatch(sid: int, codec: "_Codec", err: Exception) -> str:
    """Why a payload did not read as its schema: the library's error, without the address of its buffer."""
    return f"the payload does not match schema id {sid} ({codec.label}): {type(err).__name__}: " + \
        _FILE_OBJECT.sub("", str(err))


class _Codec:
    label: str

    def read(self, payload: memoryview) -> Any:
        raise NotImplementedError

    def reader(self, reader_schema: Any = _NO_READER) -> Callable[[bytes], Any]:
        """A function reading a whole wire-format value (header included) as `read` reads its payload."""
        return lambda data: self.read(memoryview(data)[HEADER.size:])

    def to_json(self, obj: Any) -> Any:
        raise NotImplementedError

    def json_text(self, obj: Any, ascii: bool = False) -> str:
        """`to_json(obj)` as compact JSON text: non-ASCII as it is, or (`ascii`) escaped as `json.dumps` does."""
        return (_ascii if ascii else _text)(self.to_json(obj))


_text = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_ascii = json.JSONEncoder(separators=(",", ":")).encode


# ---------------------------------------------------------------------------------------------- Avro


class _AvroCodec(_Codec):
    def __init__(self, sv: SchemaVersion, refs: list[tuple[str, SchemaVersion]], label: str):
        try:
            import fastavro
        except ImportError:
            raise MissingExtra(f"decoding Avro needs fastavro: {EXTRA_HINT}") from None
        self._reader = fastavro.schemaless_reader
        named: dict = {}
        for _, ref in refs:  # a referenced schema defines named types the main one uses by name
            fastavro.parse_schema(json.loads(ref.schema), named_schemas=named)
        self.schema = fastavro.parse_schema(json.loads(sv.schema), named_schemas=named)
        self.named = named
        self.label = label

    def read(self, payload: memoryview) -> Any:
        buf = io.BytesIO(payload)
        obj = self._reader(buf, self.schema, None)
        left = len(payload) - buf.tell()
        if left:
            raise ValueError(f"{left} bytes are left after the Avro value")
        return obj

    def reader(self, reader_schema: Any = _NO_READER) -> Callable[[bytes], Any]:
        read, schema, into = self._reader, self.schema, None if reader_schema is _NO_READER else reader_schema
        bytes_io = io.BytesIO

        def read_value(data: bytes) -> Any:
            buf = bytes_io(data)
            buf.seek(HEADER.size)
            obj = read(buf, schema, into)
            if buf.tell() != len(data):
                raise ValueError(f"{len(data) - buf.tell()} bytes are left after the Avro value")
            return obj
        return read_value

    def to_json(self, obj: Any) -> Any:
        return avro_json(obj)

    def json_text(self, obj: Any, ascii: bool = False) -> str:
        try:  # most values: no walk over the object, the encoder asks for what JSON lacks
            return (_avro_ascii if ascii else _avro_text)(obj)
        except ValueError:  # NaN or an infinity
            return (_ascii if ascii else _text)(avro_json(obj))


def avro_json(obj: Any) -> Any:
    """fastavro's objects as JSON values: bytes and fixed as Avro's JSON encoding writes them (one character
    per byte, U+0000 to U+00FF), decimals as exact strings, dates and times as ISO 8601, UUIDs as text,
    NaN and infinities as "NaN", "Infinity", "-Infinity"."""
    if isinstance(obj, dict):
        return {k: avro_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [avro_json(v) for v in obj]
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode("latin-1")
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else _NONFINITE[str(obj)]
    if isinstance(obj, decimal.Decimal):
        return str(obj)
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    return obj


_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _avro_default(obj: Any) -> Any:
    converted = avro_json(obj)
    if converted is obj:
        raise TypeError(f"{type(obj).__name__} is not an Avro value")
    return converted


_avro_text = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                              default=_avro_default).encode
_avro_ascii = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_avro_default).encode


# ---------------------------------------------------------------------------------------------- Protobuf


class _ProtobufCodec(_Codec):
    def __init__(self, sv: SchemaVersion, refs: list[tuple[str, SchemaVersion]], label: str):
        try:
            from google.protobuf import descriptor_pool, json_format, message_factory
            from . import protoschema
        except ImportError as err:
            raise MissingExtra(f"decoding Protobuf needs {err.name}: {EXTRA_HINT}") from None
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()
        files = [protoschema.file_descriptor(ref.schema, name) for name, ref in refs]
        main = protoschema.file_descriptor(sv.schema, f"schema-id-{sv.id}.proto")
        for fdp in [*files, main]:
            for dep in fdp.dependency:
                _add_well_known(pool, dep, added)
            if fdp.name not in added:
                pool.Add(fdp)
                added.add(fdp.name)
        self.file = pool.FindFileByName(main.name)
        self._classes: dict[tuple[int, ...], Any] = {}
        self._get_class = message_factory.GetMessageClass
        self._to_dict = json_format.MessageToDict
        self.label = label

    def message_class(self, indexes: tuple[int, ...]):
        cls = self._classes.get(indexes)
        if cls is None:
            types = self.file.message_types_by_name
            desc = None
            for depth, i in enumerate(indexes):
                choices = list(types.values()) if depth == 0 else desc.nested_types
                if not 0 <= i < len(choices):
                    raise ValueError(f"message index {list(indexes)} names no message of the schema")
                desc = choices[i]
            cls = self._classes[indexes] = self._get_class(desc)
        return cls

    def read(self, payload: memoryview) -> Any:
        indexes, at = message_indexes(payload)
        return self.message_class(indexes).FromString(payload[at:].tobytes())

    def to_json(self, obj: Any) -> Any:
        return self._to_dict(obj, preserving_proto_field_name=True)


def message_indexes(payload) -> tuple[tuple[int, ...], int]:
    """The message indexes in front of a Protobuf payload, and where the message starts."""
    count, at = _zigzag(payload, 0)
    if count == 0:
        return (0,), at
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        raise ValueError(f"{count} message indexes (at most {MAX_MESSAGE_INDEXES} are read)")
    out = []
    for _ in range(count):
        i, at = _zigzag(payload, at)
        out.append(i)
    return tuple(out), at


def _zigzag(data, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("the message indexes run past the end of the payload")
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
        if shift > 28:
            raise ValueError("a message index is longer than a 32-bit varint")


# The well-known types a schema imports without a reference: the runtime ships their descriptors.
_WELL_KNOWN = {f"google/protobuf/{n}.proto": f"google.protobuf.{n}_pb2" for n in (
    "any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp", "type", "wrappers")}


def _add_well_known(pool, name: str, added: set[str]) -> None:
    module = _WELL_KNOWN.get(name)
    if module is None or name in added:
        return
    import importlib

    from google.protobuf import descriptor_pb2

    fd = importlib.import_module(module).DESCRIPTOR
    fdp = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(fdp)
    for dep in fdp.dependency:
        _add_well_known(pool, dep, added)
    pool.Add(fdp)
    added.add(name)


# ---------------------------------------------------------------------------------------------- JSON Schema


class _JsonCodec(_Codec):
    """The payload is the JSON itself (what the schema validated when it was written)."""

    def __init__(self, sv: SchemaVersion, refs: list[tuple[str, SchemaVersion]], label: str):
        self.label = label

    def read(self, payload: memoryview) -> Any:
        return json.loads(payload.tobytes().decode("utf-8"), parse_constant=_not_json)

    def to_json(self, obj: Any) -> Any:
        return obj


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")
