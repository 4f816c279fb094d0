"""The Spark source's decoded columns read in C (lookupd.format.avrocolumns, _avro.c) are the reference
path's (`_accel.python_only()`: ValueDecoder.decode_many and fastavro), value for value and error for
error, for generated schemas (logical types among them) and values serialized by fastavro, then damaged:
cut short, a byte changed or added, an unknown id, bytes not in the wire format, nulls; and hand-made
encodings fastavro's writer does not make (negative block counts, long varints, a map key twice, dates
out of Python's range, UUIDs in other forms)."""

from __future__ import annotations

import io
import json
import string
import struct

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lookupd.format import _accel, avrocolumns
from lookupd.format.schemas import Registry
from spark_client.decoded import Decoding
from spark_client.errors import OptionError

pytestmark = pytest.mark.native  # the C path is what is compared

SUBJECT = "t-value"
OTHER_ID, UNKNOWN_ID = 2, 99


def registry(schema, other) -> dict:
    def rec(subject, version, sid, s):
        key = json.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).encode()
        return (sid, key, json.dumps({"subject": subject, "version": version, "id": sid,
                                      "schema": json.dumps(s)}).encode())
    return Registry.from_records([rec(SUBJECT, 1, 1, schema), rec("other-value", 1, OTHER_ID, other)]).to_json()


def both(mode: str, reg: dict, keys: pa.Array, values: pa.Array):
    """The five columns from the C path and from the reference path, for the same batch."""
    fast = Decoding(mode, reg, SUBJECT)
    try:
        value_type = fast.value_type()
    except OptionError:
        return None
    from pyspark.sql.pandas.types import to_arrow_type

    arrow_type = to_arrow_type(value_type, timezone="UTC") if mode == "struct" else pa.string()
    got = fast.arrays(keys, values, arrow_type)
    with _accel.python_only():
        want = Decoding(mode, reg, SUBJECT).arrays(keys, values, arrow_type)
    return got, want


TEMPORAL = {pa.types.is_date32: pa.int32(), pa.types.is_time32: pa.int32(), pa.types.is_date64: pa.int64(),
            pa.types.is_time64: pa.int64(), pa.types.is_timestamp: pa.int64()}


def has_temporal(t: pa.DataType) -> bool:
    return any(is_(t) for is_ in TEMPORAL) or any(has_temporal(t.field(i).type) for i in range(t.num_fields))


def plain_values(a: pa.Array) -> list:
    """`a.to_pylist()`, but dates, times and timestamps as the integers they are stored as: a damaged value can
    decode (the same way on both paths) to a day or an instant Python's datetime cannot hold. (Walked by hand:
    pyarrow 26's view and cast of a sliced list<null> lose the offset.)"""
    t = a.type
    if not has_temporal(t):
        return a.to_pylist()
    for is_, integer in TEMPORAL.items():
        if is_(t):
            return a.view(integer).to_pylist()
    valid = a.is_valid().to_pylist()
    if pa.types.is_struct(t):
        columns = [plain_values(f) for f in a.flatten()]
        names = [t.field(i).name for i in range(t.num_fields)]
        return [dict(zip(names, row)) if ok else None for ok, row in zip(valid, zip(*columns))]
    if pa.types.is_list(t) or pa.types.is_map(t):  # a map is a list of key and value structs
        offsets, items = a.offsets.to_pylist(), plain_values(a.values)
        return [items[offsets[i]:offsets[i + 1]] if ok else None for i, ok in enumerate(valid)]
    raise AssertionError(f"no plain form for {t}")


def assert_same(got, want):
    for name, a, b in zip(("decodedKey", "keySchemaId", "decodedValue", "valueSchemaId", "decodeError"), got, want):
        assert a.type == b.type, name
        a.validate(full=True)
        assert repr(plain_values(a)) == repr(plain_values(b)), name  # repr: NaN equals NaN, -0.0 is not 0.0


# ------------------------------------------------------------------------------------------- schemas and values

NAMES = st.text(string.ascii_letters + "_", min_size=1, max_size=6)
LOGICAL = [("long", "timestamp-millis"), ("long", "timestamp-micros"), ("long", "local-timestamp-millis"),
           ("long", "local-timestamp-micros"), ("int", "date"), ("string", "uuid"), ("int", "time-millis")]
PRIMITIVES = ["boolean", "int", "long", "float", "double", "bytes", "string"]


@st.composite
def schemas(draw, depth=0, names=None):
    names = set() if names is None else names

    def fresh():
        name = draw(NAMES.filter(lambda n: n not in names))
        names.add(name)
        return name
    kinds = PRIMITIVES + ["enum", "fixed", "logical"] + (["record", "array", "map", "union"] if depth < 3 else [])
    kind = draw(st.sampled_from(kinds))
    if kind in PRIMITIVES:
        return kind if draw(st.booleans()) else {"type": kind}
    if kind == "enum":
        return {"type": "enum", "name": fresh(), "symbols": draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))}
    if kind == "fixed":
        return {"type": "fixed", "name": fresh(), "size": draw(st.integers(0, 5))}
    if kind == "logical":  # converted by fastavro: dates, timestamps and UUIDs in C, the others by the reference
        return draw(st.sampled_from([{"type": t, "logicalType": lt} for t, lt in LOGICAL] + [
            {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            {"type": "string", "logicalType": "not-one-fastavro-knows"}]))
    if kind == "record":
        fields = draw(st.lists(NAMES, max_size=4, unique=True))
        return {"type": "record", "name": fresh(),
                "fields": [{"name": f, "type": draw(schemas(depth + 1, names))} for f in fields]}
    if kind == "array":
        return {"type": "array", "items": draw(schemas(depth + 1, names))}
    if kind == "map":
        return {"type": "map", "values": draw(schemas(depth + 1, names))}
    branches = draw(st.lists(st.sampled_from(["null", "int", "string", "double"]), min_size=1, max_size=3, unique=True))
    inner = draw(schemas(depth + 1, names))
    if isinstance(inner, (str, list)) or inner.get("type") in PRIMITIVES:  # a union holds one of each kind
        return branches
    return branches + [inner] if draw(st.booleans()) else [inner] + branches


TEXT = st.text(max_size=6)  # control characters, quotes, non-ASCII and astral planes


def values(schema, named):
    import datetime

    if isinstance(schema, list):
        return st.one_of([values(b, named) for b in schema])
    if isinstance(schema, str):
        schema = named.get(schema, {"type": schema})
    t = schema["type"]
    logical = schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        utc = st.just(datetime.timezone.utc) if not logical.startswith("local") else st.none()
        times = st.datetimes(datetime.datetime(1, 1, 2), datetime.datetime(9999, 12, 30), timezones=utc)
        return times.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)) if "millis" in logical else times
    if logical == "date":
        return st.dates()
    if logical == "uuid":
        return st.uuids()
    if logical == "decimal":
        return st.decimals(-9999, 9999, places=2)
    if logical == "time-millis":
        return st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
    return {
        "null": lambda: st.none(),
        "boolean": lambda: st.booleans(),
        "int": lambda: st.integers(-2**31, 2**31 - 1),
        "long": lambda: st.integers(-2**63, 2**63 - 1),
        "float": lambda: st.floats(width=32),
        "double": lambda: st.floats(),
        "bytes": lambda: st.binary(max_size=6),
        "string": lambda: TEXT,
        "enum": lambda: st.sampled_from(schema["symbols"]),
        "fixed": lambda: st.binary(min_size=schema["size"], max_size=schema["size"]),
        "array": lambda: st.lists(values(schema["items"], named), max_size=3),
        "map": lambda: st.dictionaries(TEXT, values(schema["values"], named), max_size=3),
        "record": lambda: st.fixed_dictionaries({f["name"]: values(f["type"], named) for f in schema["fields"]}),
    }[t]()


def named_types(schema, out=None) -> dict:
    out = {} if out is None else out
    if isinstance(schema, list):
        for b in schema:
            named_types(b, out)
    elif isinstance(schema, dict):
        if "name" in schema:
            out[schema["name"]] = schema
        for f in schema.get("fields", []):
            named_types(f["type"], out)
        for k in ("items", "values"):
            if k in schema:
                named_types(schema[k], out)
    return out


def serialize(schema, objs) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for obj in objs:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, obj)
        out.append(buf.getvalue())
    return out


def wire(sid: int, payload: bytes) -> bytes:
    return b"\0" + struct.pack(">I", sid) + payload


@st.composite
def batches(draw):
    """(schema, other schema, keys, values): values of both schemas in the wire format, damaged or not."""
    schema = draw(schemas())
    other = draw(schemas())
    objs = draw(st.lists(values(schema, named_types(schema)), min_size=1, max_size=12))
    others = draw(st.lists(values(other, named_types(other)), max_size=3))
    payloads = [wire(1, p) for p in serialize(schema, objs)] + [wire(OTHER_ID, p) for p in serialize(other, others)]
    column = []
    for p in payloads:
        column.append(p)
        damage = draw(st.sampled_from(["none", "none", "cut", "flip", "extra"]))
        if damage == "cut":
            column.append(p[:draw(st.integers(5, len(p)))])
        elif damage == "flip" and len(p) > 5:
            i = draw(st.integers(5, len(p) - 1))
            column.append(p[:i] + bytes([draw(st.integers(0, 255))]) + p[i + 1:])
        elif damage == "extra":
            column.append(p + draw(st.binary(min_size=1, max_size=3)))
    column += [None, b"", b"\0\0\0", b"text", wire(UNKNOWN_ID, b"\x02"), b"\x01\0\0\0\x01\x02"]
    column = draw(st.permutations(column))
    keys = draw(st.lists(st.sampled_from([None, b"k", *column]), min_size=len(column), max_size=len(column)))
    return schema, other, keys, column


def arrays(keys, values, cut: int):
    """Binary columns sliced by `cut` (Arrow offsets not starting at 0)."""
    k = pa.array([b"x"] * cut + keys, pa.binary()).slice(cut)
    v = pa.array([b"x"] * cut + values, pa.binary()).slice(cut)
    return k, v


def test_c_columns_are_the_reference_paths(monkeypatch):
    done = {"json": 0, "struct": 0}  # values C decoded, whose answers were compared

    def counting(mode, read):
        def wrapped(*args):
            got = read(*args)
            if got is not None:
                done[mode] += int((got.status == avrocolumns.S_DONE).sum())
            return got
        return wrapped
    monkeypatch.setattr(avrocolumns, "json_column", counting("json", avrocolumns.json_column))
    monkeypatch.setattr(avrocolumns, "struct_column", counting("struct", avrocolumns.struct_column))

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(batches(), st.integers(0, 3))
    def check(batch, cut):
        schema, other, keys, column = batch
        reg = registry(schema, other)
        k, v = arrays(keys, column, cut)
        for mode in ("json", "struct"):
            got = both(mode, reg, k, v)
            if got is not None:
                assert_same(*got)
    check()
    assert done["json"] > 1000 and done["struct"] > 200, done


def test_the_c_path_decodes_the_benchmarks_values():
    """The bench's record, every value decoded in C (none handed back), in both modes; and what C hands back."""
    schema = {"type": "record", "name": "Click", "fields": [
        {"name": "user", "type": "string"}, {"name": "n", "type": "long"}, {"name": "ms", "type": "double"},
        {"name": "f", "type": "float"}, {"name": "ok", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "int"]}},
        {"name": "ref", "type": ["null", "string"], "default": None}]}
    objs = [{"user": f"u\n\"{i}\"é😀", "n": -i * 10**15, "ms": i / 7, "f": 0.1, "ok": bool(i % 2),
             "tags": ["a", "b"][:i % 3], "attrs": {"x": i, "y": None} if i % 2 else {}, "ref": None if i % 4 else "r"}
            for i in range(50)]
    column = [wire(1, p) for p in serialize(schema, objs)]
    reg = registry(schema, "int")
    keys, values = arrays([None] * len(column), column, 0)
    for mode in ("json", "struct"):
        dec = Decoding(mode, reg, SUBJECT)
        dec._decoder()
        compiled = avrocolumns.program(dec._decoder()[0].codec(1))
        native = avrocolumns.json_column({1: compiled[0]}, None, values)
        assert list(native.status) == [avrocolumns.S_DONE] * len(column)
        assert_same(*both(mode, reg, keys, values))
    assert [json.loads(t) for t in native.values.to_pylist()] == [
        {**o, "f": float(struct.unpack("<f", struct.pack("<f", 0.1))[0])} for o in objs]


MIN_US, MAX_US = -62135596800 * 10**6, 253402300800 * 10**6 - 1  # Python's datetimes, years 1 to 9999


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


@pytest.mark.parametrize("schema, payload", [
    ({"type": "array", "items": "int"}, _long(-2) + _long(2) + _long(1) + _long(2) + _long(0)),  # a sized block
    ({"type": "array", "items": "int"}, _long(1) + b"\x80\x80\x00" + _long(0)),  # a long form of 0
    ({"type": "array", "items": "null"}, _long(5) + _long(0)),  # more items than bytes: fastavro's
    ({"type": "map", "values": "int"}, _long(2) + _long(1) + b"a" + _long(1) + _long(1) + b"a" + _long(2) + _long(0)),
    ("long", b"\xff" * 9 + b"\x01"),  # ten bytes: the longest
    ("long", b"\xff" * 9 + b"\x7f"),  # bits past 64, which fastavro drops
    ("long", b"\xff" * 10 + b"\x01"),  # eleven bytes
    ("int", _long(2**40)),  # an int past 32 bits: JSON shows it, the struct's int32 cannot
    ("boolean", b"\x02"),  # true, as fastavro reads any byte but 0
    (["null", "int"], _long(-1)),  # a negative branch: Python's index from the end
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, _long(-1)),
    ("string", _long(2) + b"\xed\xa0"),  # a surrogate
    ("bytes", _long(-1)),
    ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "double"}]}, struct.pack("<d", float("nan"))),
    ({"type": "record", "name": "Deep", "fields": [{"name": "d", "type": ["null", "Deep"]}]},
     _long(1) * 100 + _long(0)),  # recursive, deeper than C reads
    ({"type": "long", "logicalType": "timestamp-millis"}, _long(-1)),  # 1969-12-31T23:59:59.999
    ({"type": "long", "logicalType": "timestamp-millis"}, _long(MAX_US // 1000 + 1)),  # past 9999: fastavro fails
    ({"type": "long", "logicalType": "timestamp-micros"}, _long(MAX_US)),
    ({"type": "long", "logicalType": "timestamp-micros"}, _long(MIN_US)),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, _long(MIN_US - 1)),
    ({"type": "int", "logicalType": "date"}, _long(-719162)),  # 0001-01-01
    ({"type": "int", "logicalType": "date"}, _long(-719163)),
    ({"type": "string", "logicalType": "uuid"}, _long(36) + b"0E8C9F1A-8C1B-4C2D-9E3F-0A1B2C3D4E5F"),  # upper case
    ({"type": "string", "logicalType": "uuid"}, _long(38) + b"{0e8c9f1a-8c1b-4c2d-9e3f-0a1b2c3d4e5f}"),
    ({"type": "string", "logicalType": "uuid"}, _long(4) + b"nope"),
])
def test_encodings_fastavro_does_not_write(schema, payload):
    reg = registry(schema, "int")
    keys, values = arrays([None], [wire(1, payload)], 0)
    for mode in ("json", "struct"):
        got = both(mode, reg, keys, values)
        if got is not None:
            assert_same(*got)


def test_a_reason_names_no_address():
    """fastavro's error names its buffer object ("... from <_io.BytesIO object at 0x...>"): a reason leaves the
    address out, so the same bytes give the same reason at each read, in each process."""
    from lookupd.format.wire import ValueDecoder, WireError

    dec = ValueDecoder(Registry.from_json(registry("boolean", "int")))
    reasons = [dec.decode_many([wire(1, b"")])[2][0] for _ in range(2)]
    with pytest.raises(WireError) as err:
        dec.decode(wire(1, b""))
    assert reasons[0] == reasons[1] == str(err.value) == \
        "the payload does not match schema id 1 (AVRO schema of t-value version 1): EOFError: cannot read boolean"


def test_a_struct_of_avro_nulls_is_a_clear_type():
    """Avro's null in a struct is Spark's NullType (spark-avro's mapping), not a KeyError."""
    from spark_client.decoded import avro_type

    assert avro_type({"type": "array", "items": "null"}, {}).simpleString() == "array<void>"
    with pytest.raises(OptionError, match="not defined"):
        avro_type("a.Missing", {})
