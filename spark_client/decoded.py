"""`lookupd.decodeValues`: keys and values in Confluent's wire format decoded on the executors.

The schemas are those of the Schema Registry's topic as a daemon reads it (its `schemas` method),
fetched once by the driver and shipped with the read. With the option set, five columns follow
Kafka's: `decodedKey` and `decodedValue` (JSON text; with `struct`, `decodedValue` is a struct),
`keySchemaId` and `valueSchemaId` (the ids, null for bytes not in the wire format) and `decodeError`
(why a key or value in the wire format did not decode; null when all did). `key` and `value` keep
their bytes, so nothing is lost and a job reading Kafka's columns reads them unchanged.

`struct` needs one subject: the values of one topic under the registry's default naming,
`<topic>-value`. Its latest version gives the struct's type (from the Avro schema, as spark-avro's
SchemaConverters maps it, or from the Protobuf message, the schema's first); each value is read with
the schema it was written with and, for Avro, resolved to that latest version (fastavro's schema
resolution), so older versions fill the same struct.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, MapType, NullType, StringType, StructField,
                               StructType, TimestampNTZType, TimestampType)

from lookupd.errors import LookupdError
from lookupd.format import avrocolumns
from lookupd.format.schemas import Registry, SchemaVersion
from lookupd.format.wire import MissingExtra, ValueDecoder, require

from .errors import OptionError
from .options import ReadOptions
from .routing import Daemons, addresses

OPTION = "lookupd.decodeValues"
MODES = ("json", "struct")


def columns(mode: str | None, value_type: DataType | None = None) -> list[StructField]:
    """The columns the option adds after Kafka's."""
    if mode is None:
        return []
    return [StructField("decodedKey", StringType()), StructField("keySchemaId", IntegerType()),
            StructField("decodedValue", value_type if mode == "struct" else StringType()),
            StructField("valueSchemaId", IntegerType()), StructField("decodeError", StringType())]


def fetch_registry(options: ReadOptions, daemons: Daemons) -> dict:
    """The schemas as the first daemon that serves the schemas topic answers them (OptionError if none does)."""
    try:
        require()
    except MissingExtra as err:
        raise OptionError(f"{OPTION}: {err}") from None
    for address in addresses(options.address):
        try:
            answer = daemons.client(address).call("schemas")
        except LookupdError as err:
            raise OptionError(f"{OPTION}: lookupd at {address} did not answer `schemas`: {err}") from None
        if answer is not None:
            return answer
    raise OptionError(f"{OPTION} needs the Schema Registry's topic (_schemas, or the daemon's schemas_topic), "
                      f"and no daemon at {', '.join(addresses(options.address))} serves it")


def value_subject(options: ReadOptions) -> str:
    """`<topic>-value` of the one topic a struct read names; OptionError otherwise."""
    s = options.strategy
    topics = set(s.topics) if s.kind == "subscribe" else {t for t, _ in s.partitions} if s.kind == "assign" else set()
    if len(topics) != 1:
        raise OptionError(f"{OPTION}=struct reads one topic (subscribe or assign naming one), whose values have one "
                          f"subject, <topic>-value; use {OPTION}=json for several")
    return f"{topics.pop()}-value"


class Decoding:
    """What the executors decode with (picklable: the registry travels as the daemon's answer)."""

    def __init__(self, mode: str, registry: dict, subject: str | None = None):
        self.mode = mode
        self.registry_json = registry
        self.subject = subject
        self._state: tuple | None = None

    def __getstate__(self) -> dict:
        return {"mode": self.mode, "registry_json": self.registry_json, "subject": self.subject, "_state": None}

    def latest(self, reg: Registry) -> SchemaVersion:
        sv = reg.latest(self.subject)
        if sv is None:
            raise OptionError(f"{OPTION}=struct: the subject {self.subject} has no version in the schemas topic")
        if sv.schema_type == "JSON":
            raise OptionError(f"{OPTION}=struct: {self.subject} is a JSON Schema, which gives no struct type; "
                              f"use {OPTION}=json")
        return sv

    def value_type(self) -> DataType | None:
        """The struct's Spark type (struct mode), from the subject's latest version."""
        if self.mode != "struct":
            return None
        decoder = self._decoder()[0]
        sv = self.latest(decoder.registry)
        codec = decoder.codec(sv.id)
        if sv.schema_type == "AVRO":
            return avro_type(codec.schema, codec.named)
        return proto_type(codec.message_class((0,)).DESCRIPTOR)

    def _decoder(self) -> tuple[ValueDecoder, Any, Callable | None]:
        if self._state is None:
            decoder = ValueDecoder(Registry.from_json(self.registry_json))
            reader, to_row = None, None
            if self.mode == "struct":
                sv = self.latest(decoder.registry)
                codec = decoder.codec(sv.id)
                if sv.schema_type == "AVRO":
                    reader = (sv.id, codec.schema)
                    to_row = _avro_row(codec.schema, codec.named)
                else:
                    to_row = _proto_rows(codec.message_class((0,)).DESCRIPTOR.full_name)
            self._state = (decoder, reader, to_row)
            self._programs: dict = {}  # schema id -> its JSON program in C (None: the reference path)
            self._struct_program: tuple | None = None  # (Arrow type, program) of the latest Avro version
        return self._state

    def arrays(self, keys: pa.Array, values: pa.Array, value_type: pa.DataType) -> list[pa.Array]:
        """The five columns for a batch's keys and values: Avro values decoded in C a column at a time
        (lookupd.format.avrocolumns), the values C hands back and all others by the reference path
        (ValueDecoder.decode_many), in their rows; within `_accel.python_only()`, all by the reference path."""
        decoder, reader, to_row = self._decoder()
        k_ids, k_json, k_why = self._json_column(decoder, keys)
        if to_row is None:
            v_ids, value_col, v_why = self._json_column(decoder, values)
        else:
            v_ids, value_col, v_why = self._struct_column(decoder, reader, to_row, values, value_type)
        if not k_why and not v_why:
            errors = pa.nulls(len(keys), pa.string())
        else:
            errors = [None] * len(keys)
            for i in sorted({*k_why, *v_why}):
                errors[i] = "; ".join(f"{what}: {why[i]}" for what, why in (("key", k_why), ("value", v_why)) if i in why)
            errors = pa.array(errors, pa.string())
        return [k_json, k_ids, value_col, v_ids, errors]

    def _json_column(self, decoder: ValueDecoder, column: pa.Array) -> tuple[pa.Array, pa.Array, dict[int, str]]:
        """(ids, JSON texts, {row: why it did not decode}) of a column of keys or values."""
        native = avrocolumns.json_column(self._programs, decoder.codec, column)
        if native is None:
            ids, objs, why = decoder.decode_many(column.to_pylist())
            return pa.array(ids, pa.int32()), pa.array(_texts(decoder, ids, objs), pa.string()), _reasons(why)
        rows = native.reference_rows()
        if not len(rows):
            return native.ids, native.values, {}
        ids, objs, why = decoder.decode_many(column.take(rows).to_pylist())
        texts = pa.array(_texts(decoder, ids, objs), pa.string())
        return native.ids, avrocolumns.put_rows(native.values, rows, texts), _reasons(why, rows)

    def _struct_column(self, decoder: ValueDecoder, reader, to_row, column: pa.Array,
                       value_type: pa.DataType) -> tuple[pa.Array, pa.Array, dict[int, str]]:
        """(ids, struct values, {row: why it did not decode}) of a column of values."""
        native = None
        if reader is not None:
            if self._struct_program is None or self._struct_program[0] != value_type:
                self._struct_program = (value_type, avrocolumns.program(decoder.codec(reader[0]), value_type))
            native = avrocolumns.struct_column(reader[0], self._struct_program[1], value_type, column)
        if native is None:
            ids, col, why = _struct_values(decoder, reader, to_row, column.to_pylist(), value_type)
            return pa.array(ids, pa.int32()), col, _reasons(why)
        rows = native.reference_rows()
        if not len(rows):
            return native.ids, native.values, {}
        _, col, why = _struct_values(decoder, reader, to_row, column.take(rows).to_pylist(), value_type)
        return native.ids, avrocolumns.put_rows(native.values, rows, col), _reasons(why, rows)


def _reasons(why: list, rows=None) -> dict[int, str]:
    """{row: reason} of the values that did not decode (`rows`: the rows of `why`'s items, else 0, 1, ...)."""
    return {i if rows is None else int(rows[i]): w for i, w in enumerate(why) if w is not None}


def _struct_values(decoder: ValueDecoder, reader, to_row, value_list: list,
                   value_type: pa.DataType) -> tuple[list, pa.Array, list]:
    """The reference path of a struct column: (ids, values, reasons) of `value_list`, each value decoded with
    its schema (Avro: resolved to the latest version's, `reader`) and made a row of `value_type`."""
    resolve = None
    if reader is not None:  # the subject's other Avro versions resolved to the latest one's schema
        resolve = {sid: reader[1] for sid in _ids(value_list) if sid != reader[0]}
    v_ids, v_objs, v_why = decoder.decode_many(value_list, resolve)
    v_out = [None] * len(v_objs)
    for i, obj in enumerate(v_objs):
        if obj is not None:
            try:
                v_out[i] = to_row(obj)
            except ValueError as err:
                v_why[i] = str(err)
    try:
        value_col = pa.array(v_out, type=value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # a value that does not fit: find it
        value_col = _one_by_one(v_out, value_type, v_why)
    return v_ids, value_col, v_why


def _ids(values: list) -> set[int]:
    """The schema ids of the wire-format values among `values`."""
    return {int.from_bytes(v[1:5], "big") for v in values if v is not None and len(v) >= 5 and v[0] == 0}


def _texts(decoder: ValueDecoder, ids: list, objs: list) -> list:
    """Decoded objects as JSON text (None stays None)."""
    out = [None] * len(objs)
    codecs: dict = {}
    for i, obj in enumerate(objs):
        if obj is not None:
            sid = ids[i]
            codec = codecs.get(sid)
            if codec is None:
                codec = codecs[sid] = decoder.codec(sid)
            out[i] = codec.json_text(obj)
    return out


def _one_by_one(rows: list, value_type: pa.DataType, errors: list) -> pa.Array:
    """The struct column when some value does not fit its type: each such value null, with the reason (in
    `errors`, the values' reasons)."""
    fitted = []
    for i, row in enumerate(rows):
        try:
            pa.array([row], type=value_type)
            fitted.append(row)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as err:
            fitted.append(None)
            errors[i] = "; ".join(filter(None, [errors[i], f"does not fit the struct: {err}"]))
    return pa.array(fitted, type=value_type)


# ------------------------------------------------------------------------------------------- Avro -> Spark


def avro_type(schema: Any, named: dict, seen: frozenset = frozenset()) -> DataType:
    """spark-avro's SchemaConverters.toSqlType for the types a struct can hold; OptionError for others."""
    if isinstance(schema, str):
        simple = _AVRO_PRIMITIVES.get(schema)
        if simple is not None:
            return simple
        if schema in seen:
            raise OptionError(f"{OPTION}=struct: the Avro type {schema} is recursive; use {OPTION}=json")
        if schema not in named:
            raise OptionError(f"{OPTION}=struct: the Avro type {schema} is not defined; use {OPTION}=json")
        return avro_type(named[schema], named, seen | {schema})
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) == 1:
            return avro_type(members[0], named, seen)
        raise OptionError(f"{OPTION}=struct: a union of {len(members)} types is not read into a struct; "
                          f"use {OPTION}=json")
    t, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal" and t in ("bytes", "fixed"):
        return DecimalType(schema["precision"], schema.get("scale", 0))
    if logical == "date" and t == "int":
        return DateType()
    if logical in ("timestamp-millis", "timestamp-micros") and t == "long":
        return TimestampType()
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and t == "long":
        return TimestampNTZType()
    if logical in ("time-millis", "time-micros"):
        raise OptionError(f"{OPTION}=struct: Avro's {logical} has no Spark type; use {OPTION}=json")
    if t == "record":
        name = schema["name"]
        if name in seen:
            raise OptionError(f"{OPTION}=struct: the Avro type {name} is recursive; use {OPTION}=json")
        return StructType([StructField(f["name"], avro_type(f["type"], named, seen | {name}), True)
                           for f in schema["fields"]])
    if t == "array":
        return ArrayType(avro_type(schema["items"], named, seen), True)
    if t == "map":
        return MapType(StringType(), avro_type(schema["values"], named, seen), True)
    if t == "enum":
        return StringType()
    if t == "fixed":
        return BinaryType()
    return avro_type(t, named, seen)


_AVRO_PRIMITIVES = {"null": NullType(), "boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
                    "float": FloatType(), "double": DoubleType(), "bytes": BinaryType(), "string": StringType()}


def _avro_row(schema, named) -> Callable[[Any], Any]:
    """fastavro's objects as pyarrow takes them for the struct: the same, but UUIDs as text."""
    text = json.dumps(schema)
    if '"uuid"' not in text:
        return lambda obj: obj
    import uuid

    def fix(obj):
        if isinstance(obj, dict):
            return {k: fix(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [fix(v) for v in obj]
        return str(obj) if isinstance(obj, uuid.UUID) else obj
    return fix


# ------------------------------------------------------------------------------------------- Protobuf -> Spark

_TIMESTAMP = "google.protobuf.Timestamp"


def proto_type(desc, seen: frozenset = frozenset()) -> DataType:
    """A message's struct, as spark-protobuf maps it (Timestamp as a timestamp, enums by name)."""
    if desc.full_name == _TIMESTAMP:
        return TimestampType()
    if desc.full_name in seen:
        raise OptionError(f"{OPTION}=struct: the message {desc.full_name} is recursive; use {OPTION}=json")
    return StructType([StructField(f.name, _proto_field_type(f, seen | {desc.full_name}), True) for f in desc.fields])


def _proto_field_type(f, seen) -> DataType:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return MapType(_proto_scalar(k, seen), _proto_scalar(v, seen), True)
    t = _proto_scalar(f, seen)
    return ArrayType(t, True) if _repeated(f) else t


def _repeated(f) -> bool:
    repeated = getattr(f, "is_repeated", None)  # protobuf 6.31 on; `label` before (gone in 7)
    return repeated if repeated is not None else f.label == f.LABEL_REPEATED


def _proto_scalar(f, seen) -> DataType:
    if f.type == f.TYPE_MESSAGE:
        return proto_type(f.message_type, seen)
    if f.type == f.TYPE_ENUM:
        return StringType()
    return _PROTO_SCALARS[f.type]


def _scalars():
    from google.protobuf.descriptor import FieldDescriptor as F
    return {F.TYPE_DOUBLE: DoubleType(), F.TYPE_FLOAT: FloatType(), F.TYPE_INT64: LongType(),
            F.TYPE_UINT64: LongType(), F.TYPE_INT32: IntegerType(), F.TYPE_FIXED64: LongType(),
            F.TYPE_FIXED32: LongType(), F.TYPE_BOOL: BooleanType(), F.TYPE_STRING: StringType(),
            F.TYPE_BYTES: BinaryType(), F.TYPE_UINT32: LongType(), F.TYPE_SFIXED32: IntegerType(),
            F.TYPE_SFIXED64: LongType(), F.TYPE_SINT32: IntegerType(), F.TYPE_SINT64: LongType()}


class _LazyScalars(dict):
    def __missing__(self, key):
        self.update(_scalars())
        return dict.__getitem__(self, key)


_PROTO_SCALARS = _LazyScalars()


def _proto_rows(full_name: str) -> Callable[[Any], dict]:
    """Messages of the struct's type (by name: any version of it) as rows; another message is refused."""
    def to_row(msg) -> dict:
        if msg.DESCRIPTOR.full_name != full_name:
            raise ValueError(f"the value is a {msg.DESCRIPTOR.full_name}, not the struct's {full_name}")
        return _proto_row(msg)
    return to_row


def _proto_row(msg) -> dict:
    """A message as pyarrow takes it for proto_type's struct (fields by name: older versions fit too)."""
    out = {}
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = {k: _proto_value(vf, v) for k, v in value.items()}
        elif _repeated(f):
            out[f.name] = [_proto_value(f, v) for v in value]
        elif f.type == f.TYPE_MESSAGE and not msg.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = _proto_value(f, value)
    return out


def _proto_value(f, v):
    if f.type == f.TYPE_MESSAGE:
        if f.message_type.full_name == _TIMESTAMP:
            return datetime.datetime.fromtimestamp(v.seconds + v.nanos / 1e9, datetime.timezone.utc)
        return _proto_row(v)
    if f.type == f.TYPE_ENUM:
        named = f.enum_type.values_by_number.get(v)
        return named.name if named is not None else str(v)
    return v
