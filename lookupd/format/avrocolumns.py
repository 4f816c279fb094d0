"""Avro values of an Arrow binary column decoded in one native call: JSON text, or a struct's columns.

The Spark source decodes a batch's keys and values a column at a time (spark_client.decoded). For the
Avro values, C reads the column (`_accel.avro_json`, `_accel.avro_arrow`, lookupd/format/_avro.c)
with a program compiled here from fastavro's parsed schema: one node per Avro type, in a tuple the C
side checks. A value C is not sure to read exactly as fastavro does (see _avro.c), one of another
format or an unknown id, and every value of a schema this compiler refuses (`Unsupported`: decimals
and times of day, which fastavro converts and C does not, or a struct type other than the schema's) is
marked for the reference path,
`ValueDecoder.decode_many`, which the caller runs on those values alone and puts in their rows with
`put_rows`. So the columns are the reference path's, value for value, error for error.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from . import _accel
from .wire import _AvroCodec, _text

# Node kinds, as _avro.c numbers them.
(K_NULL, K_BOOLEAN, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_FIXED, K_ENUM, K_RECORD, K_ARRAY, K_MAP,
 K_UNION, K_DATE, K_TS_MILLIS, K_TS_MICROS, K_LOCAL_TS_MILLIS, K_LOCAL_TS_MICROS, K_UUID) = range(20)
# Per value: not in the wire format, decoded in C, for the reference path, decoded in C as Avro's null (which
# the reference path shows as no value, as fastavro's None).
S_PLAIN, S_DONE, S_REFERENCE, S_NULL = range(4)

_PRIMITIVES = {"null": K_NULL, "boolean": K_BOOLEAN, "int": K_INT, "long": K_LONG, "float": K_FLOAT,
               "double": K_DOUBLE, "bytes": K_BYTES, "string": K_STRING}
# The logical types fastavro converts that C reads as fastavro's own readers do (see _avro.c).
_LOGICAL = {"int-date": K_DATE, "long-timestamp-millis": K_TS_MILLIS, "long-timestamp-micros": K_TS_MICROS,
            "long-local-timestamp-millis": K_LOCAL_TS_MILLIS, "long-local-timestamp-micros": K_LOCAL_TS_MICROS,
            "string-uuid": K_UUID}
# The Arrow type of each kind's column in a struct (Spark's types for spark-avro's mapping, timestamps in UTC).
_ARROW = {K_BOOLEAN: pa.bool_(), K_INT: pa.int32(), K_LONG: pa.int64(), K_FLOAT: pa.float32(),
          K_DOUBLE: pa.float64(), K_BYTES: pa.binary(), K_STRING: pa.string(), K_FIXED: pa.binary(),
          K_ENUM: pa.string(), K_DATE: pa.date32(), K_TS_MILLIS: pa.timestamp("us", "UTC"),
          K_TS_MICROS: pa.timestamp("us", "UTC"), K_LOCAL_TS_MILLIS: pa.timestamp("us"),
          K_LOCAL_TS_MICROS: pa.timestamp("us"), K_UUID: pa.string()}


class Unsupported(ValueError):
    """A schema whose values this path leaves to the reference path."""


def _logical_readers() -> dict:
    from fastavro.read import LOGICAL_READERS  # the conversions fastavro applies, its own and any registered
    return LOGICAL_READERS


_FASTAVROS_OWN = {k: v for k, v in _logical_readers().items() if k in _LOGICAL}  # before anyone registers another


class _Compiler:
    """Nodes of a program from a parsed schema (fastavro.parse_schema's, names qualified; `named` holds
    the named types a schema refers to by name). `arrow`: a tree of nodes for avro_arrow, checked against
    the struct's Arrow type, every node its own column; else a graph for avro_json, named types once."""

    def __init__(self, named: dict, arrow: bool):
        self.named, self.arrow = named, arrow
        self.nodes: list[Any] = []
        self.shared: dict[Any, int] = {}  # JSON: primitive kinds and named types, by name
        self.readers = _logical_readers()

    def add(self, node=None) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1

    def primitive(self, kind: int, arrow_type) -> int:
        if self.arrow:
            self.expect(kind, arrow_type)
            return self.add((kind, 0, (), ()))
        if kind not in self.shared:
            self.shared[kind] = self.add((kind, 0, (), ()))
        return self.shared[kind]

    def expect(self, kind: int, arrow_type) -> None:
        if _ARROW.get(kind) != arrow_type:
            raise Unsupported(f"Avro kind {kind} is not read into {arrow_type}")

    def visit(self, schema, arrow_type=None, seen: frozenset = frozenset()) -> int:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self.primitive(_PRIMITIVES[schema], arrow_type)
            if not self.arrow and schema in self.shared:
                return self.shared[schema]
            if schema in seen or schema not in self.named:
                raise Unsupported(f"the named type {schema} is recursive or not defined")
            return self.visit(self.named[schema], arrow_type, seen)
        if isinstance(schema, list):
            return self.union(schema, arrow_type, seen)
        if not isinstance(schema, dict) or not isinstance(schema.get("type"), str):
            raise Unsupported("a schema that is not a type name, a union or an object with a type name")
        t, logical = schema["type"], schema.get("logicalType")
        if logical and f"{t}-{logical}" in self.readers:
            kind = _LOGICAL.get(f"{t}-{logical}")
            if kind is None or self.readers[f"{t}-{logical}"] is not _FASTAVROS_OWN.get(f"{t}-{logical}"):
                raise Unsupported(f"fastavro converts the logical type {logical}")
            return self.primitive(kind, arrow_type)
        if t in _PRIMITIVES:
            return self.primitive(_PRIMITIVES[t], arrow_type)
        if t in ("record", "enum", "fixed"):
            name = schema.get("name")
            if not isinstance(name, str) or name in seen:
                raise Unsupported("a named type without a name, or a recursive one in a struct")
            if not self.arrow and name in self.shared:
                return self.shared[name]
            at = self.add()
            if not self.arrow:
                self.shared[name] = at
            self.nodes[at] = getattr(self, t)(schema, arrow_type, seen | {name})
            return at
        if t in ("array", "map"):
            at = self.add()
            self.nodes[at] = getattr(self, t)(schema, arrow_type, seen)
            return at
        return self.visit(t, arrow_type, seen)  # {"type": "a.Named"}: the named type

    def union(self, branches: list, arrow_type, seen) -> int:
        if not branches:
            raise Unsupported("an empty union")
        if self.arrow and len([b for b in branches if b != "null"]) != 1:
            raise Unsupported("a union of other than one type besides null, in a struct")
        at = self.add()
        children = tuple(self.add((K_NULL, 0, (), ())) if self.arrow and b == "null" else
                         self.visit(b, arrow_type, seen) for b in branches)
        self.nodes[at] = (K_UNION, len(children), children, ())
        return at

    def record(self, schema, arrow_type, seen):
        fields = schema.get("fields")
        names = [f.get("name") for f in fields] if isinstance(fields, list) and all(
            isinstance(f, dict) for f in fields) else None
        if names is None or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise Unsupported("a record whose fields are not named once each")
        if self.arrow:
            if not pa.types.is_struct(arrow_type) or [arrow_type.field(i).name for i in range(arrow_type.num_fields)] \
                    != names:
                raise Unsupported(f"the record {schema['name']} is not read into {arrow_type}")
            children = tuple(self.visit(f["type"], arrow_type.field(i).type, seen) for i, f in enumerate(fields))
            return (K_RECORD, len(names), children, ())
        children = tuple(self.visit(f["type"], None, seen) for f in fields)
        texts = tuple(_utf8(("{" if i == 0 else ",") + _text(n) + ":") for i, n in enumerate(names))
        return (K_RECORD, len(names), children, texts)

    def enum(self, schema, arrow_type, seen):
        symbols = schema.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise Unsupported("an enum whose symbols are not text")
        if self.arrow:
            self.expect(K_ENUM, arrow_type)
            return (K_ENUM, len(symbols), (), tuple(_utf8(s) for s in symbols))
        return (K_ENUM, len(symbols), (), tuple(_utf8(_text(s)) for s in symbols))

    def fixed(self, schema, arrow_type, seen):
        size = schema.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise Unsupported("a fixed type without a size")
        if self.arrow:
            self.expect(K_FIXED, arrow_type)
        return (K_FIXED, size, (), ())

    def array(self, schema, arrow_type, seen):
        if self.arrow and not (pa.types.is_list(arrow_type) and not pa.types.is_large_list(arrow_type)):
            raise Unsupported(f"an array is not read into {arrow_type}")
        return (K_ARRAY, 0, (self.visit(schema.get("items"), arrow_type.value_type if self.arrow else None, seen),), ())

    def map(self, schema, arrow_type, seen):
        if self.arrow and not (pa.types.is_map(arrow_type) and arrow_type.key_type == pa.string()):
            raise Unsupported(f"a map is not read into {arrow_type}")
        return (K_MAP, 0, (self.visit(schema.get("values"), arrow_type.item_type if self.arrow else None, seen),), ())


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no Arrow string holds it
        raise Unsupported("a name or symbol that is not Unicode text") from None


def compile_nodes(codec: _AvroCodec, arrow_type: pa.DataType | None = None) -> tuple:
    """The program nodes of an Avro codec's schema: for avro_json, or (`arrow_type`) for avro_arrow
    into that struct's columns. Unsupported when its values must take the reference path."""
    c = _Compiler(codec.named, arrow_type is not None)
    try:
        c.visit(codec.schema, arrow_type)
    except RecursionError:
        raise Unsupported("the schema nests too deeply") from None
    return tuple(c.nodes)


def program(codec, arrow_type: pa.DataType | None = None) -> tuple[Any, tuple] | None:
    """(the C program, its nodes) of `codec` (see compile_nodes), or None when its values take the reference
    path (another format than Avro, a schema refused, or no C extension)."""
    if not isinstance(codec, _AvroCodec):
        return None
    try:
        nodes = compile_nodes(codec, arrow_type)
    except Unsupported:
        return None
    prog = _accel.avro_program(nodes, arrow_type is not None)
    return None if prog is None else (prog, nodes)


class Column(NamedTuple):
    """A column of keys or values as C decoded it: `status` per value (S_PLAIN, S_DONE, S_REFERENCE, S_NULL),
    `ids` (int32, null for S_PLAIN) and `values` (JSON text or the struct; null but where S_DONE)."""

    status: np.ndarray
    ids: pa.Array
    values: pa.Array

    def reference_rows(self) -> np.ndarray:
        """The rows the reference path must decode."""
        return np.flatnonzero(self.status == S_REFERENCE)


def _buffers(column: pa.Array) -> tuple | None:
    """(validity, offsets, data, offset, length) of a binary column, None for another type."""
    if column.type != pa.binary():
        return None
    validity, offsets, data = column.buffers()
    return validity, offsets, data if data is not None else b"", column.offset, len(column)


def _ids(status: np.ndarray, ids: bytes) -> pa.Array:
    valid, nulls = _accel.validity_bitmap((status != S_PLAIN).view(np.uint8))
    return pa.Array.from_buffers(pa.int32(), len(status), [valid and pa.py_buffer(valid), pa.py_buffer(ids)], nulls)


def json_column(programs: dict, codecs, column: pa.Array) -> Column | None:
    """The column's Avro values as JSON text, as C reads them with `programs` (schema id -> program, or
    None for the reference path), which gains the ids met for the first time (`codecs(id)` gives their
    codec, or raises WireError). None when C takes none of it."""
    if _accel.mode.python or (buffers := _buffers(column)) is None or not len(column):
        return None
    got = _accel.avro_json(programs, *buffers)
    if got is not None and got[2]:
        compiled = False
        for sid in got[2]:
            try:
                compiled_sid = program(codecs(sid))
            except ValueError:  # WireError: no such id, or its schema does not parse (the reference says so)
                compiled_sid = None
            programs[sid] = compiled_sid and compiled_sid[0]
            compiled = compiled or programs[sid] is not None
        if compiled:
            got = _accel.avro_json(programs, *buffers)
    if got is None:
        return None
    status_bytes, ids, _, ends, text = got
    status = np.frombuffer(status_bytes, np.uint8)
    valid, nulls = _accel.validity_bitmap((status == S_DONE).view(np.uint8))
    values = pa.Array.from_buffers(pa.string(), len(status), [valid and pa.py_buffer(valid), pa.py_buffer(ends),
                                                              pa.py_buffer(text)], nulls)
    return Column(status, _ids(status, ids), values)


def struct_column(schema_id: int, compiled: tuple | None, value_type: pa.DataType, column: pa.Array) -> Column | None:
    """The column's values of `schema_id` read into the struct by `compiled` (`program(codec, value_type)`);
    the other values in the wire format are for the reference path. None when C takes none of it."""
    if _accel.mode.python or compiled is None or (buffers := _buffers(column)) is None or not len(column):
        return None
    prog, nodes = compiled
    got = _accel.avro_arrow(schema_id, prog, *buffers)
    if got is None:
        return None
    status_bytes, ids, columns = got
    status = np.frombuffer(status_bytes, np.uint8)
    return Column(status, _ids(status, ids), _assemble(nodes, columns, 0, value_type))


def _buf(b) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


def _assemble(nodes: tuple, columns: tuple, at: int, arrow_type: pa.DataType) -> pa.Array:
    """Node `at`'s Arrow array from avro_arrow's columns (a union's: its other branch than null)."""
    kind, _, children, _ = nodes[at]
    if kind == K_UNION:
        at = next(c for c in children if nodes[c][0] != K_NULL)
        kind, _, children, _ = nodes[at]
    length, nulls, valid, values, offsets, key_offsets, keys = columns[at]
    if kind == K_RECORD:
        kids = [_assemble(nodes, columns, c, arrow_type.field(i).type) for i, c in enumerate(children)]
        return pa.Array.from_buffers(arrow_type, length, [_buf(valid)], nulls, children=kids)
    if kind == K_ARRAY:
        item = _assemble(nodes, columns, children[0], arrow_type.value_type)
        return pa.Array.from_buffers(arrow_type, length, [_buf(valid), _buf(offsets)], nulls, children=[item])
    if kind == K_MAP:
        item = _assemble(nodes, columns, children[0], arrow_type.item_type)
        key_col = pa.Array.from_buffers(pa.string(), len(item), [None, _buf(key_offsets), _buf(keys)], 0)
        entries = pa.StructArray.from_arrays([key_col, item], fields=[arrow_type.key_field, arrow_type.item_field])
        return pa.Array.from_buffers(arrow_type, length, [_buf(valid), _buf(offsets)], nulls, children=[entries])
    if offsets is not None:
        return pa.Array.from_buffers(arrow_type, length, [_buf(valid), _buf(offsets), _buf(values)], nulls)
    return pa.Array.from_buffers(arrow_type, length, [_buf(valid), _buf(values)], nulls)


def put_rows(column: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """`column` with its items at `rows` (ascending) replaced by `values`, in order."""
    if not len(rows):
        return column
    index = np.arange(len(column), dtype=np.int64)
    index[rows] = len(column) + np.arange(len(rows), dtype=np.int64)
    return pa.concat_arrays([column, values]).take(pa.array(index))
