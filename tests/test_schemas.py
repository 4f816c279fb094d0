"""Values in Confluent's wire format decoded with the schemas of the `_schemas` topic, no registry running.

The values were serialized by libraries that are not ours (tests/schemas_fixture.py: fastavro and
confluent-kafka's Avro, Protobuf over protoc's generated classes, and JSON Schema serializers) and the
`_schemas` log is written in the registry's own format. The property everywhere a record is shown
(`lookupd dump --decode-values`, the mount's `.records.jsonl` and views, the daemon's `read_decoded`):
every decoded value equals the object serialized; a value whose id is unknown or whose bytes do not
match is shown raw with the reason; any other record is shown as without schemas.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from google.protobuf import json_format

import schemas_fixture as fx
from lookupd.format import render
from lookupd.format.builder import build_batch
from lookupd.format.batch import parse_header
from lookupd.format.protoschema import file_descriptor
from lookupd.format.schemas import MAX_REFERENCE_DEPTH, MAX_SCHEMA_BYTES, Registry
from lookupd.format.wire import ValueDecoder, WireError, avro_json
from lookupd.rpc.client import Client
from test_fusefs_helpers import mounted


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schemas")
    return fx.build(str(tmp / "logs"), str(tmp))


@pytest.fixture(scope="module")
def mnt(built):
    with mounted([built.root]) as (mount, daemon):
        yield mount, daemon


def lines(path: str) -> list[dict]:
    with open(path, "rb") as f:
        return [json.loads(line) for line in f]


def records_jsonl(mount, topic: str) -> list[dict]:
    return lines(mount.path(topic, "0", f"{0:020d}.records.jsonl"))


def expected(built, topic: str, rec: dict, obj) -> None:
    """`rec` (a record's JSON) shows `obj`, the object serialized into it."""
    if topic in ("users", "customers"):
        assert rec["value"] == avro_json(obj)
    elif topic == "orders":
        assert json_format.ParseDict(rec["value"], type(obj)()) == obj
    else:
        assert rec["value"] == obj


def check_topic(built, topic: str, recs: list[dict]) -> None:
    want = built.topics[topic].records
    assert [r["offset"] for r in recs] == list(range(len(want)))
    for rec, (key, value, obj) in zip(recs, want):
        if obj is not None:
            expected(built, topic, rec, obj)
            assert rec["value_schema_id"] == int.from_bytes(value[1:5], "big")
            assert "value_error" not in rec
        assert rec["key"] == (None if key is None else key.decode())  # keys here are text, not the wire format


# ------------------------------------------------------------------------------------------- the property


@pytest.mark.parametrize("topic", ["users", "customers", "orders", "events"])
def test_the_mounts_records_are_the_objects_serialized(mnt, built, topic):
    check_topic(built, topic, records_jsonl(mnt[0], topic))


def test_values_not_decoded_are_shown_raw_with_the_reason(mnt, built):
    recs = records_jsonl(mnt[0], "events")
    by_value = {r["offset"]: r for r in recs}
    raw = {i: (v, obj) for i, (_, v, obj) in enumerate(built.topics["events"].records)}
    unknown, bad, gone, purged, short, null = 6, 7, 8, 9, 10, 11
    assert by_value[5] == {**by_value[5], "value": "plain text, not the wire format"} and "value_schema_id" not in by_value[5]
    assert by_value[unknown]["value_schema_id"] == built.unknown_id
    assert by_value[unknown]["value_error"] == f"schema id {built.unknown_id} is not in _schemas"
    assert by_value[unknown]["value"] == render.payload(raw[unknown][0])
    assert by_value[bad]["value_schema_id"] == built.special["user1"]
    assert "does not match schema id" in by_value[bad]["value_error"]
    assert by_value[gone]["value"] == "gone"  # a soft-deleted subject's id still decodes, as the registry serves it
    assert by_value[purged]["value_error"] == f"schema id {built.special['purged']} is not in _schemas"  # hard-deleted
    for i in (short, null):
        assert set(by_value[i]) == set(by_value[0]) - {"value_schema_id"}
        assert by_value[i]["value"] == render.payload(raw[i][0])


def test_views_decode_too(mnt, built):
    mount, _ = mnt
    at = lines(mount.path("users", "0", "at-offset", "3-6.jsonl"))
    assert [r["offset"] for r in at] == [3, 4, 5]
    for rec in at:
        expected(built, "users", rec, built.topics["users"].records[rec["offset"]][2])
    by_key = lines(mount.path("orders", "by-key", "o-4.jsonl"))
    assert len(by_key) == 1
    expected(built, "orders", by_key[0], built.topics["orders"].records[4][2])
    times = lines(mount.path("customers", "0", "at-time", f"{fx.T0 + 2}.jsonl"))
    assert [r["value"]["id"] for r in times] == [10_000_000_002 + i for i in range(4)]


def test_dump_and_the_daemon_show_the_mounts_records(mnt, built):
    mount, daemon = mnt
    for topic in built.topics:
        mine = records_jsonl(mount, topic)
        out = subprocess.run([sys.executable, "-m", "lookupd", "dump", "--decode-values", "--json",
                              os.path.join(built.root, f"{topic}-0", f"{0:020d}.log")],
                             capture_output=True, text=True, check=True).stdout
        dumped = [json.loads(x) for x in out.splitlines() if '"type":"record"' in x]
        assert [{k: v for k, v in d.items() if k not in ("type", "file")} for d in dumped] == mine
        with Client(daemon.sock) as c:
            answer = c.call("read_decoded", topic, 0, 0, 1 << 20)
        assert answer["records"][:len(mine)] == mine[:len(answer["records"])]
        assert answer["records"]


def test_the_text_dump_shows_decoded_payloads(built):
    out = subprocess.run([sys.executable, "-m", "lookupd", "dump", "--decode-values",
                          os.path.join(built.root, "customers-0")], capture_output=True, text=True, check=True).stdout
    first = next(line for line in out.splitlines() if line.startswith("| offset: 0 "))
    obj = built.topics["customers"].records[0][2]
    assert f"payload: {json.dumps(obj, separators=(',', ':'))} (schema id {built.ids[('customers-value', 1)]})" in first


def test_the_mount_without_decoding_shows_bytes(built):
    with mounted([built.root], "--no-decode-values") as (mount, _):
        recs = records_jsonl(mount, "users")
        assert all("value_schema_id" not in r for r in recs)
        assert recs[0]["value"] == render.payload(built.topics["users"].records[0][1])
        assert sorted(os.listdir(mount.path("__schemas"))) == sorted(built.subjects_listed())


def test_schemas_are_files_in_the_mount(mnt, built):
    mount, _ = mnt
    assert "__schemas" in os.listdir(mount.root)
    assert sorted(os.listdir(mount.path("__schemas"))) == sorted(built.subjects_listed())
    assert os.listdir(mount.path("__schemas", "users-value")) == ["1.avsc", "2.avsc"]
    with open(mount.path("__schemas", "users-value", "2.avsc")) as f:
        assert json.loads(f.read()) == fx.USER_V2
    with open(mount.path("__schemas", "orders-value", "1.proto")) as f:
        assert f.read() == fx.ORDER_PROTO
    assert os.listdir(mount.path("__schemas", "gone-value")) == ["1.deleted.avsc"]
    assert "purged-value" not in os.listdir(mount.path("__schemas"))
    for missing in ("users-value/3.avsc", "users-value/1.proto", "nope/1.avsc", "users-value/1.deleted.avsc"):
        assert not os.path.exists(mount.path("__schemas", missing)), missing


def test_lookupd_schemas_lists_subjects_versions_and_ids(built):
    out = subprocess.run([sys.executable, "-m", "lookupd", "schemas", built.root, "--deleted"],
                         capture_output=True, text=True, check=True)
    listed = {tuple(line.split()[1:6:2]) for line in out.stdout.splitlines()}
    assert listed == {(s, str(v), str(i)) for (s, v), i in built.ids.items() if s != "purged-value"}
    assert "passed over" in out.stderr  # the garbage record, named by its offset


def test_a_missing_extra_is_one_clear_line(built, tmp_path):
    (tmp_path / "fastavro.py").write_text("raise ImportError('blocked by the test', name='fastavro')\n")
    r = subprocess.run([sys.executable, "-m", "lookupd", "dump", "--decode-values", os.path.join(built.root, "users-0")],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{os.getcwd()}"})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "lookupd dump: decoding schemas needs fastavro: pip install 'kafka-lookupd[schemas]' "
        "(fastavro, protobuf, proto-schema-parser)"]


# ------------------------------------------------------------------------------------------- the registry's rules


def _key(subject, version):
    return json.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).encode()


def _value(subject, version, sid, schema='"string"', **more):
    return json.dumps({"subject": subject, "version": version, "id": sid, "schema": schema, **more}).encode()


def test_registry_rules():
    log = fx.SchemasLog()
    log.schema("a", 1, 1, '"string"')
    log.schema("a", 2, 2, '"long"')
    log.schema("b", 1, 1, '"string"')  # the same schema under another subject: the same id
    log.schema("c", 1, 2, '"int"')  # id 2 is another schema already: refused, as the registry does
    log.delete_subject("a", 1)
    log.schema("d", 1, 3, '"int"', deleted=True)
    log.clear_subject("d")  # drops d's soft-deleted versions
    log.schema("e", 1, 4, '"int"')
    log.tombstone("e", 1)
    log.config("a")
    log.garbage()
    reg = Registry.from_records((i, k, v) for i, (k, v) in enumerate(log.records))
    assert {s: [v.version for v in vs] for s, vs in reg.subjects().items()} == {"a": [2], "b": [1]}
    assert [v.version for v in reg.subjects(include_deleted=True)["a"]] == [1, 2]
    assert reg.by_id(1).schema == '"string"' and reg.by_id(2).schema == '"long"'
    assert reg.by_id(3) is None and reg.by_id(4) is None
    assert reg.latest("a").version == 2 and reg.version("a", -1).version == 2
    assert reg.skipped_count == 2 and "already a version 2" in reg.skipped[0] and "not JSON" in reg.skipped[1]
    assert Registry.from_json(json.loads(json.dumps(reg.to_json()))).versions == reg.versions


def test_hostile_schemas_records_are_bounded():
    big = "x" * (MAX_SCHEMA_BYTES + 1)
    refs = [{"name": "n", "subject": "loop", "version": 1}]
    reg = Registry.from_records([
        (0, _key("big", 1), _value("big", 1, 1, json.dumps(big))),
        (1, _key("loop", 1), _value("loop", 1, 2, '"int"', references=refs)),  # references itself
        (2, b"[1]", b"{}"), (3, _key("neg", 1), _value("neg", 1, -1)), (4, _key("t", 1), _value("t", 1, 5, schemaType="XML")),
        (5, b'{"keytype":"SCHEMA","subject":"s","version":0}', _value("s", 0, 6)),
    ])
    assert set(reg.versions) == {("loop", 1)}
    assert reg.skipped_count == 5
    with pytest.raises(WireError, match=f"deeper than {MAX_REFERENCE_DEPTH}"):
        ValueDecoder(reg).decode(b"\0\0\0\0\x02\x02")


def test_a_protobuf_schema_stored_as_a_base64_descriptor_decodes_the_same(built):
    import base64

    pb2 = built.pb2
    order = built.topics["orders"].records[1]
    reg = Registry.from_records([
        (0, _key("common.proto", 1), _value("common.proto", 1, 5, fx.COMMON_PROTO, schemaType="PROTOBUF")),
        (1, _key("orders-value", 1), _value("orders-value", 1, 6, base64.b64encode(pb2.DESCRIPTOR.serialized_pb).decode(),
                                            schemaType="PROTOBUF",
                                            references=[{"name": "common.proto", "subject": "common.proto", "version": 1}])),
    ])
    assert json_format.ParseDict(ValueDecoder(reg).decode(order[1]).value, pb2.Order()) == order[2]


def test_the_pure_parser_gives_protocs_descriptor(built):
    """What a reader needs of the descriptor (names, numbers, labels, types, oneofs, map entries) is the
    same as protoc's for the fixture's schema."""
    from google.protobuf import descriptor_pb2

    mine = file_descriptor(fx.ORDER_PROTO, "order.proto")
    theirs = descriptor_pb2.FileDescriptorProto.FromString(built.pb2.DESCRIPTOR.serialized_pb)

    def shape(msgs, prefix=""):
        out = {}
        for m in msgs:
            out[prefix + m.name] = ([(f.name, f.number, f.label, f.type if f.type_name == "" or f.type != 0 else None,
                                      f.type_name.rsplit(".", 1)[-1], f.HasField("oneof_index") and f.oneof_index,
                                      f.proto3_optional) for f in m.field],
                                    [o.name for o in m.oneof_decl], m.options.map_entry)
            out.update(shape(m.nested_type, prefix + m.name + "."))
        return out

    def normal(d):  # protoc resolves every type; the runtime resolves ours by scope (type left 0)
        return {k: ([(n, num, lab, None, tn, oi, opt) for n, num, lab, _, tn, oi, opt in f], o, e)
                for k, (f, o, e) in d.items()}
    assert normal(shape(mine.message_type)) == normal(shape(theirs.message_type))
    assert [e.name for e in mine.enum_type] == [e.name for e in theirs.enum_type]
    assert list(mine.dependency) == list(theirs.dependency)


# ------------------------------------------------------------------------------------------- no schema, no change


def test_batches_without_the_wire_format_render_as_without_schemas():
    """The fast path's bytes are kept when no key or value starts with byte 0: the same lines as without a
    decoder; a batch with one is rendered by the reference path and only those records change."""
    reg = Registry.from_records([(0, _key("t-value", 1), _value("t-value", 1, 1))])
    dec = ValueDecoder(reg)
    plain = build_batch([(fx.T0 + i, b"k", f"v{i}".encode(), ()) for i in range(50)], base_offset=0)
    h = parse_header(plain, 0, 0)
    assert render.record_lines(h, plain, decoder=dec).data == render.record_lines(h, plain).data
    mixed = build_batch([(fx.T0, None, b"\0\0\0\0\x01\x06abc", ()), (fx.T0, b"k", b"v", ())], base_offset=0)
    h = parse_header(mixed, 0, 0)
    with_, without = (render.record_lines(h, mixed, decoder=d).data.splitlines() for d in (dec, None))
    assert json.loads(with_[0])["value"] == "abc" and with_[1] == without[1]
    keyed = build_batch([(fx.T0, b"\0\0\0\0\x01\x02k", b"v", ()), (fx.T0, b"\0\0\0\0", b"\0abc", ())], base_offset=0)
    h = parse_header(keyed, 0, 0)
    with_, without = (render.record_lines(h, keyed, decoder=d).data.splitlines() for d in (dec, None))
    assert json.loads(with_[0])["key"] == "k" and json.loads(with_[0])["key_schema_id"] == 1
    assert with_[1] == without[1]  # four bytes, and a value not starting the wire format: as without schemas


# ------------------------------------------------------------------------------------------- generated objects


def test_any_user_fastavro_writes_decodes_to_itself():
    """Property over generated objects: fastavro's serialization of any USER_V2 value decodes to that value."""
    import io

    import fastavro
    from hypothesis import given, settings, strategies as st

    parsed = fastavro.parse_schema(fx.USER_V2)
    dec = ValueDecoder(Registry.from_records([(0, _key("u", 1), _value("u", 1, 7, json.dumps(fx.USER_V2)))]))
    text = st.text(max_size=20)
    users = st.fixed_dictionaries({
        "name": text, "age": st.integers(-2**31, 2**31 - 1), "tags": st.lists(text, max_size=4),
        "email": st.none() | text, "score": st.floats(allow_nan=False), "kind": st.sampled_from(["FREE", "PAID"]),
        "attrs": st.dictionaries(text, st.integers(-2**63, 2**63 - 1), max_size=3), "blob": st.binary(max_size=16)})

    @settings(max_examples=200, deadline=None)
    @given(users)
    def check(obj):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, obj)
        got = dec.decode(b"\0\0\0\0\x07" + buf.getvalue())
        assert got.schema_id == 7 and got.value == avro_json(obj)
        assert json.loads(dec.decode(b"\0\0\0\0\x07" + buf.getvalue(), text=True).value) == avro_json(obj)
    check()


def test_the_decoded_fast_path_gives_the_reference_paths_bytes(built):
    """Lines decoded in place of the C renderer's (`decoded_lines`) are `reference_lines`' bytes, batch by
    batch, for every topic of the fixture: text and base64 forms, keys, errors, nulls."""
    from lookupd.log.locallog import LocalLog
    from lookupd.tools.schemas import load

    dec = ValueDecoder(load(os.path.join(built.root, "_schemas-0")))
    head = b'{"type":"record","file":"a \\"key\\": path",'
    seen = 0
    for topic in [*built.topics, "_schemas"]:
        llog = LocalLog(os.path.join(built.root, f"{topic}-0"), topic, 0)
        r = llog.read(0, 1 << 20)
        llog.close()
        from lookupd.format.batch import whole_frames
        for off, size in whole_frames(r.records, r.position, topic):
            batch = r.records[off:off + size]
            h = parse_header(batch, 0, r.position + off)
            fast = render.record_lines(h, batch, head=head, decoder=dec)
            ref = render.reference_lines(h, batch, head=head, decoder=dec)
            assert fast.data == ref.data and list(fast.starts) == list(ref.starts)
            seen += 1
    assert seen > 10


def test_the_daemons_schemas_follow_the_topic_and_its_acl(built, tmp_path):
    """`schemas` reads the topic named by schemas_topic, applies only what was appended since (a copy of the
    topic grows by a record: the new version shows), and asks `read` on that topic of the ACLs."""
    import shutil

    from lookupd.daemon.acl import Acl
    from lookupd.daemon.service import Service, Session
    from lookupd.errors import Unauthorized
    from lookupd.log.logmanager import LogManager

    root = tmp_path / "logs"
    shutil.copytree(os.path.join(built.root, "_schemas-0"), root / "registry-0")
    shutil.copytree(os.path.join(built.root, "users-0"), root / "users-0")
    lm = LogManager([str(root)])
    try:
        svc = Service(lm, schemas_topic="registry")
        trusted = Session(trusted=True)
        first = svc.call("schemas", [], trusted)
        assert {(v["subject"], v["version"]) for v in first["versions"]} == set(built.ids) - {("purged-value", 1)}
        log = fx.SchemasLog()
        log.schema("late-value", 1, 77, '"string"')
        from lookupd.tools.writer import LogWriter
        w = LogWriter(str(root / "registry-0"))
        w.append(build_batch([(fx.T0, k, v, ()) for k, v in log.records], base_offset=first["end_offset"]))
        w.close()
        lm.refresh()
        later = svc.call("schemas", [], trusted)
        assert later["end_offset"] == first["end_offset"] + 1 and ("late-value", 1) in {
            (v["subject"], v["version"]) for v in later["versions"]}
        assert svc.call("read_decoded", ["users", 0, 0, 1 << 20], trusted)["records"][1]["value_schema_id"] == 2
        acl = Acl.from_config([{"principal": "CN=app", "topics": ["users"], "operations": ["read", "describe"]}])
        guarded = Service(lm, schemas_topic="registry", acl=acl)
        app = Session(trusted=False, authenticated=True, principal="CN=app")
        for method, params in (("schemas", []), ("read_decoded", ["users", 0, 0, 1024])):
            with pytest.raises(Unauthorized, match="registry"):
                guarded.call(method, params, app)
        assert Service(lm).call("schemas", [], trusted) is None  # no _schemas here
    finally:
        lm.close()


def test_dump_filters_and_decodes(built):
    """`--offsets` keeps the records it names, decoded as the rest of dump's."""
    out = subprocess.run([sys.executable, "-m", "lookupd", "dump", "--decode-values", "--json", "--offsets", "1..2",
                          os.path.join(built.root, "users-0")], capture_output=True, text=True, check=True).stdout
    recs = [json.loads(x) for x in out.splitlines() if '"type":"record"' in x]
    assert [r["offset"] for r in recs] == [1, 2]
    for r in recs:
        expected(built, "users", r, built.topics["users"].records[r["offset"]][2])
