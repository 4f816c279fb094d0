"""The Spark source's `lookupd.decodeValues`: wire-format values decoded to JSON text or to a struct.

The values are those of tests/schemas_fixture.py, serialized by fastavro and confluent-kafka's
serializers; the property is the same as the mount's: every decoded value equals the object serialized.
"""

from __future__ import annotations

import json
import os

import pytest
from google.protobuf import json_format

import schemas_fixture as fx
from lookupd.format.wire import avro_json
from spark_fixtures import _daemon, _once, _short_dir, spark  # noqa: F401 - the shared session
from spark_client.errors import OptionError


@pytest.fixture(scope="module")
def schemas_daemon():
    def make():
        d = _once("sockets", _short_dir)
        built = fx.build(os.path.join(d, "schemas-logs"), os.path.join(d, "schemas-tmp"))
        return built, _daemon("schemas", [built.root])
    return _once("schemas_daemon", make)


def load(spark, sock, topic, mode, **more):  # noqa: F811
    reader = spark.read.format("kafka-segments").option("lookupd.address", sock).option("subscribe", topic)
    for k, v in {"lookupd.decodeValues": mode, **more}.items():
        reader = reader.option(k, v)
    return reader.load()


def test_json_values_are_the_objects_serialized(spark, schemas_daemon):  # noqa: F811
    built, sock = schemas_daemon
    rows = load(spark, sock, "users,customers,orders,events", "json").orderBy("topic", "offset").collect()
    for topic, written in built.topics.items():
        want = written.records
        mine = [r for r in rows if r.topic == topic]
        assert [r.offset for r in mine] == list(range(len(want))), topic
        for row, (key, value, obj) in zip(mine, want):
            assert row.value == value and row.decodedKey is None and row.keySchemaId is None
            if obj is None:
                continue
            got = json.loads(row.decodedValue)
            if topic == "orders":
                assert json_format.ParseDict(got, type(obj)()) == obj
            else:
                assert got == (avro_json(obj) if topic in ("users", "customers") else obj)
            assert row.valueSchemaId == int.from_bytes(value[1:5], "big") and row.decodeError is None


def test_json_reasons_for_values_that_do_not_decode(spark, schemas_daemon):  # noqa: F811
    built, sock = schemas_daemon
    rows = {r.offset: r for r in load(spark, sock, "events", "json").collect()}
    assert rows[5].decodedValue is None and rows[5].valueSchemaId is None and rows[5].decodeError is None
    assert rows[6].valueSchemaId == built.unknown_id
    assert rows[6].decodeError == f"value: schema id {built.unknown_id} is not in _schemas"
    assert "does not match" in rows[7].decodeError and rows[7].decodedValue is None
    assert json.loads(rows[8].decodedValue) == "gone"


def test_struct_values_fill_the_latest_versions_struct(spark, schemas_daemon):  # noqa: F811
    built, sock = schemas_daemon
    df = load(spark, sock, "users", "struct")
    fields = df.schema["decodedValue"].dataType.names
    assert fields == [f["name"] for f in fx.USER_V2["fields"]]
    rows = df.orderBy("offset").collect()
    for row, (_, _, obj) in zip(rows, built.topics["users"].records):
        got = row.decodedValue.asDict(recursive=True)
        defaults = {f["name"]: f.get("default") for f in fx.USER_V2["fields"]}
        want = {**defaults, **obj}  # v1 values resolved to v2: v2's fields take their defaults
        want["blob"] = want["blob"].encode("latin-1") if isinstance(want["blob"], str) else want["blob"]
        assert got == want
    orders = load(spark, sock, "orders", "struct").orderBy("offset").collect()
    order = built.topics["orders"].records[2][2]
    got = orders[2].decodedValue
    assert got.id == order.id and got.total.units == order.total.units and got.status == "SHIPPED"
    assert [line.raw for line in got.lines] == [line.raw for line in order.lines]
    assert got.labels == dict(order.labels)
    refund = orders[7]  # message index [1]: a Refund, not the struct's Order
    assert refund.decodedValue is None and refund.valueSchemaId == built.ids[("orders-value", 1)]
    assert "is a acme.orders.Refund, not the struct's acme.orders.Order" in refund.decodeError


def test_struct_needs_one_subject(spark, schemas_daemon):  # noqa: F811
    _, sock = schemas_daemon
    with pytest.raises(Exception, match="reads one topic"):
        load(spark, sock, "users,orders", "struct").schema
    with pytest.raises(Exception, match="JSON Schema"):
        load(spark, sock, "events", "struct").schema
    with pytest.raises(Exception, match="must be json or struct"):
        load(spark, sock, "events", "yes").schema
    assert OptionError
