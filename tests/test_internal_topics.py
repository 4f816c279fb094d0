"""Kafka's internal topics decode as Kafka decoded them: every record of the coordinator corpus (written
by Kafka's serdes, answers from its JsonConverters), and the interpreter's rules on hand-made bytes."""

from __future__ import annotations

import base64
import random
import struct

import pytest

import reference as R
from coordinator_writer import uvarint
from lookupd.format.internal import consumer_protocol, groups, metadata, remote, transactions
from lookupd.format.internal import MAX_RECORD_ITEMS, record as message
from lookupd.message import MessageError, UnknownRecordType, UnsupportedVersion
from lookupd.format.internal.topics import decode_record, java_hash, partition_for

LOGS = ["__consumer_offsets-7", "__consumer_offsets-41", "__transaction_state-12", "__cluster_metadata-0",
        "__remote_log_metadata-15"]


def b64(s):
    return None if s is None else base64.b64decode(s)


def as_json(x):
    """Decoded fields as Kafka's JsonConverters write them (bytes base64)."""
    if isinstance(x, bytes):
        return base64.b64encode(x).decode()
    if isinstance(x, dict):
        return {k: as_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [as_json(v) for v in x]
    return x


def assert_like_kafka(ours: dict, theirs: dict, msg, where, struct_=None):
    """Every field Kafka wrote is ours, equal; a field it left out (a tagged one: its JsonConverter
    writes those only when set) has the table's default. Structs within are held to the same."""
    struct_ = struct_ or msg.struct
    assert set(theirs) <= set(ours), where
    fields = {f.name: f for f in struct_.fields}
    for k, v in theirs.items():
        f = fields[k]
        if f.struct is not None and v is not None and ours[k] is not None:
            mine, kafkas = (ours[k], v) if f.array else ([ours[k]], [v])
            assert len(mine) == len(kafkas), (where, k)
            for o, t in zip(mine, kafkas):
                assert_like_kafka(o, t, msg, where, f.struct)
            continue
        assert ours[k] == v, (where, k)
    defaults = {f.name: f.default for f in struct_.fields if f.tag is not None}
    for k in set(ours) - set(theirs):
        assert k in defaults and ours[k] == defaults[k], (where, k, ours[k])


def records(log):
    return [r for r in R.coordinator_answers(log)["records"] if "control" not in r]


@pytest.mark.parametrize("log", ["__consumer_offsets-7", "__consumer_offsets-41"])
def test_every_group_coordinator_record_decodes_as_kafka_decoded_it(log):
    seen = set()
    for r in records(log):
        rec = groups.decode(b64(r["key_b64"]), b64(r["value_b64"]))
        where = (log, r["offset"])
        assert (rec.type, rec.type_name, rec.key, rec.value_version) == \
               (r["record_type"], r["record_type_name"], r["key"], r["value_version"]), where
        if r["value"] is None:
            assert rec.value is None, where
        else:
            assert_like_kafka(as_json(rec.value), r["value"], groups.RECORD_TYPES[rec.type].value, where)
        seen.add((rec.type, rec.value_version))
    if log.endswith("-7"):  # every OffsetCommit key and value version, every GroupMetadata value version
        assert {(0, 0), (1, 0), (1, 1), (1, 2), (1, 3), (1, 4)} <= seen and {(2, v) for v in range(5)} <= seen


def test_the_transaction_log_decodes_as_kafka_and_its_dump_text_is_kafkas():
    for r in records("__transaction_state-12"):
        key_version, key = transactions.decode_key(b64(r["key_b64"]))
        value_version, value = transactions.decode_value(b64(r["value_b64"]))
        assert (key_version, key, value_version) == (r["key_version"], r["key"], r["value_version"]), r["offset"]
        if value is None:
            assert r["value"] is None
            continue
        assert_like_kafka(value, r["value"], transactions.TRANSACTION_LOG_VALUE, r["offset"])
        meta = transactions.metadata(key["transactionalId"], value)
        theirs = r["metadata"]
        assert (meta.producer_id, meta.previous_producer_id, meta.next_producer_id, meta.producer_epoch,
                meta.txn_timeout_ms, meta.state, sorted(meta.partitions), meta.txn_start_timestamp,
                meta.txn_last_update_timestamp, meta.client_transaction_version) == \
               (theirs["producer_id"], theirs["previous_producer_id"], theirs["next_producer_id"],
                theirs["producer_epoch"], theirs["txn_timeout_ms"], theirs["state"], sorted(theirs["topic_partitions"]),
                theirs["txn_start_timestamp"], theirs["txn_last_update_timestamp"],
                theirs["client_transaction_version"]), r["offset"]
        if len(meta.partitions) < 2:  # Kafka prints a set in its own order
            assert transactions.format_record(key["transactionalId"], meta) == r["formatRecordKeyAndValue"]


def test_the_transaction_log_replays_to_kafkas_transactions():
    log = transactions.TransactionLog()
    for r in records("__transaction_state-12"):
        log.replay(b64(r["key_b64"]), b64(r["value_b64"]))
    theirs = R.coordinator_answers("__transaction_state-12")["replayed_state"]["transactions"]
    assert [t.transactional_id for t in log.listing()] == sorted(theirs)
    for t in log.listing():
        k = theirs[t.transactional_id]
        assert (t.producer_id, t.producer_epoch, t.state, sorted(t.partitions), t.txn_timeout_ms) == \
               (k["producer_id"], k["producer_epoch"], k["state"], sorted(k["topic_partitions"]), k["txn_timeout_ms"])


@pytest.mark.parametrize("log,decode,tables", [
    ("__cluster_metadata-0", metadata.decode, metadata.METADATA_RECORDS),
    ("__remote_log_metadata-15", remote.decode, remote.REMOTE_LOG_METADATA_RECORDS)])
def test_metadata_records_decode_as_kafka_decoded_them(log, decode, tables):
    types = set()
    for r in records(log):
        f = decode(b64(r["value_b64"]))
        assert (f.api_key, f.type_name, f.version) == (r["api_key"], r["record_type"], r["version"]), r["offset"]
        assert_like_kafka(as_json(f.data), r["data"], tables[f.api_key], (log, r["offset"]))
        types.add(f.type_name)
    assert len(types) >= 3


def test_raft_control_records_decode():
    for r in R.coordinator_answers("__cluster_metadata-0")["records"]:
        if "control" in r:
            data = metadata.decode_control(r["control"]["type"], b64(r["value_b64"]))
            assert data["leaderId"] in {v["voterId"] for v in data["voters"]}


def test_a_classic_groups_assignment_decodes_from_the_consumer_protocol():
    r = next(r for r in records("__consumer_offsets-7") if r["record_type"] == 2 and r["value"])
    value = groups.with_assignments(groups.decode(b64(r["key_b64"]), b64(r["value_b64"])).value)
    m = value["members"][0]
    assert m["subscription"]["topics"] and m["assignment"]["assignedPartitions"][0]["partitions"]
    assert consumer_protocol.decode_assignment(b"\x00") == b"\x00"  # not an assignment: the bytes stay


def test_groups_and_transactional_ids_live_where_kafka_put_them():
    for log in ("__consumer_offsets-7", "__consumer_offsets-41", "__transaction_state-12"):
        p = int(log.rsplit("-", 1)[1])
        for r in records(log):
            ident = r["key"].get("group") or r["key"].get("groupId") or r["key"].get("transactionalId")
            assert partition_for(ident) == p, ident
    assert java_hash("") == 0 and java_hash("polygenelubricants") == -(1 << 31)  # String.hashCode's MIN_VALUE
    assert partition_for("polygenelubricants") == 0  # Kafka's Utils.abs(MIN_VALUE) is 0
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two chars


def test_unknown_types_and_newer_versions_are_errors_naming_them():
    for t in (18, 24):  # (16, the last unknown here, is Kafka 4.x's regular expression record now)
        key = struct.pack(">h", t) + struct.pack(">h", 1) + b"g"
        with pytest.raises(UnknownRecordType, match=f"record type {t}"):
            groups.decode(key, None)
    commit_key = struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    with pytest.raises(UnsupportedVersion, match="OffsetCommitValue version 5"):
        groups.decode(commit_key, struct.pack(">hq", 5, 1))
    with pytest.raises(MessageError, match="metadata"):  # a v3 value cut off in its metadata string
        groups.decode(commit_key, struct.pack(">hqih", 3, 1, 0, 10) + b"abc")
    with pytest.raises(UnknownRecordType, match="record type 99"):
        metadata.decode(bytes([1, 99, 0]))
    with pytest.raises(MessageError, match="garbage"):
        metadata.decode(bytes([1, 20, 0, 0, 7]))  # a NoOpRecord and a byte after it
    with pytest.raises(MessageError, match="frame version 0"):
        metadata.decode(bytes([0, 20, 0, 0]))
    with pytest.raises(UnsupportedVersion, match="TransactionLogValue version 2"):
        transactions.decode_value(struct.pack(">h", 2) + bytes(40))
    with pytest.raises(MessageError, match="state id 9"):
        transactions.metadata("t", {"transactionStatus": 9})
    assert decode_record("__consumer_offsets", commit_key, None)["value"] is None


T = message("T", "0-2", "1+", """
    a       int32     0+
    names   []string  0+  null=0+
    inner   Inner     0+
      x       int64   0+
      y       string  1+  null=1+ default=null
    extra   int64     1+  tag=0@1+ default=-1
    more    Opt       2+  null=2+ tag=1@2+ default=null
      z       int16   2+
""")


def test_flexible_versions_read_compact_types_and_tagged_fields():
    v0 = struct.pack(">ii", 7, 2) + struct.pack(">h", 1) + b"a" + struct.pack(">h", 2) + b"bc" + struct.pack(">q", 9)
    assert T.read(v0, 0) == ({"a": 7, "names": ["a", "bc"], "inner": {"x": 9}}, len(v0))
    # v1: compact array and string, the struct's own (empty) tagged fields, then tag 0
    v1 = struct.pack(">i", 7) + uvarint(0) + struct.pack(">q", 9) + uvarint(3) + b"hi" + uvarint(0) + \
        uvarint(1) + uvarint(0) + uvarint(8) + struct.pack(">q", 42)
    assert T.read(v1, 1)[0] == {"a": 7, "names": None, "inner": {"x": 9, "y": "hi"}, "extra": 42}
    # v2: absent tags keep their defaults; an unknown tag is skipped; a nullable tagged struct
    v2 = struct.pack(">i", 7) + uvarint(1) + struct.pack(">q", 9) + uvarint(0) + uvarint(0) + \
        uvarint(2) + uvarint(5) + uvarint(2) + b"zz" + uvarint(1) + uvarint(4) + uvarint(1) + struct.pack(">h", 3) + \
        uvarint(0)
    assert T.read(v2, 2)[0] == {"a": 7, "names": [], "inner": {"x": 9, "y": None}, "extra": -1, "more": {"z": 3}}
    # a tagged field whose size is not what its value takes is an error, not a guess
    bad = struct.pack(">i", 7) + uvarint(1) + struct.pack(">q", 9) + uvarint(0) + uvarint(0) + \
        uvarint(1) + uvarint(0) + uvarint(9) + struct.pack(">q", 42) + b"!"
    with pytest.raises(MessageError, match="tagged field 0 is 9 bytes"):
        T.read(bad, 1)
    with pytest.raises(MessageError, match="claims 1000000 elements"):
        T.read(struct.pack(">ii", 7, 1000000), 0)
    with pytest.raises(MessageError, match="non-nullable field y"):
        message("U", "0", "0+", "y string 0+").read(uvarint(0), 0)
    with pytest.raises(UnsupportedVersion, match="T version 3"):
        T.read(v0, 3)


def test_records_are_read_with_the_listeners_bounds():
    """One bounded reader for requests and records: a count or a number of tagged fields is checked against
    the bytes left before anything is made, and one record decodes into at most MAX_RECORD_ITEMS elements."""
    with pytest.raises(MessageError, match="claims 268435454 elements"):  # 5 bytes of count, nothing after
        groups.decode_value(7, struct.pack(">h", 0) + b"\xff\xff\xff\x7f\x00")
    with pytest.raises(MessageError, match="1000 tagged fields claimed"):
        groups.decode_value(3, struct.pack(">hi", 0, 1) + uvarint(1000) + b"\x00\x00")
    tiny = message("Tiny", "0", "0+", "names []string 0+")
    n = MAX_RECORD_ITEMS + 1
    with pytest.raises(MessageError, match="MAX_RECORD_ITEMS"):
        tiny.read(uvarint(n + 1) + b"\x01" * n + b"\x00", 0)
    assert tiny.read(uvarint(4) + b"\x01" * 3 + b"\x00", 0)[0] == {"names": ["", "", ""]}


def _value_outcome(decode, t: int, data: bytes):
    try:
        return decode(t, data)
    except MessageError as err:
        return ("error", type(err).__name__, str(err))


def _random_group_metadata(rnd: random.Random) -> dict:
    """A GroupMetadataValue of a consumer group: members with real subscriptions and assignments, strings
    null, empty or non-ASCII."""
    def text() -> str:
        return rnd.choice(("", "range", "consumer-1-ä€", "m" * rnd.randrange(1, 40)))

    def member(i: int) -> dict:
        sub = consumer_protocol.SUBSCRIPTION.encode({"topics": [f"t{j}" for j in range(rnd.randrange(3))],
                                                     "userData": rnd.choice((None, b"u"))}, rnd.randrange(4))
        assign = consumer_protocol.ASSIGNMENT.encode({"assignedPartitions": [
            {"topic": "t0", "partitions": list(range(rnd.randrange(4)))}]}, rnd.randrange(4))
        return {"memberId": f"member-{i}-{text()}", "groupInstanceId": rnd.choice((None, text())),
                "clientId": text(), "clientHost": "/10.0.0.1", "rebalanceTimeout": rnd.randrange(-1, 1 << 31),
                "sessionTimeout": rnd.randrange(1 << 31), "subscription": struct.pack(">h", 1) + sub,
                "assignment": rnd.choice((b"", struct.pack(">h", 0) + assign))}
    return {"protocolType": rnd.choice(("consumer", "", "connect")), "generation": rnd.randrange(-1, 1 << 31),
            "protocol": rnd.choice((None, text())), "leader": rnd.choice((None, "member-0")),
            "currentStateTimestamp": rnd.randrange(-1, 1 << 62),
            "members": [member(i) for i in range(rnd.choice((0, 1, 3, 12)))]}


def test_group_metadata_fast_path_equals_the_schema_codec():
    """The struct-based reader of GroupMetadata values (versions 0-3) gives the schema codec's answer, and its
    error (the codec's, named by it) on cut and corrupted values, which it leaves to the codec; version 4
    (flexible) and a value of more members than it reads are the codec's alone."""
    rnd = random.Random(42)
    taken = 0
    for v in range(5):
        for i in range(40):
            raw = struct.pack(">h", v) + groups.GROUP_METADATA_VALUE.encode(_random_group_metadata(rnd), v)
            if i % 4 == 0:
                raw = raw.replace(b"range", b"ra\xffge")  # bytes that are not UTF-8: replaced, as Java reads them
            data = raw + (b"rest" if i % 2 else b"")
            expected = groups.decode_value_reference(groups.GROUP_METADATA, data)
            assert groups.decode_value(groups.GROUP_METADATA, data) == expected
            assert list(groups.decode_value(groups.GROUP_METADATA, data)[1]) == list(expected[1])  # field order
            fast = groups._group_metadata_fast(data)
            assert (fast is None) == (v == 4)
            taken += fast is not None
            for cut in range(0, len(data), max(1, len(data) // 40)):
                assert _value_outcome(groups.decode_value, groups.GROUP_METADATA, data[:cut]) == \
                    _value_outcome(groups.decode_value_reference, groups.GROUP_METADATA, data[:cut])
            for _ in range(20):  # hostile: any byte changed (the version, lengths and counts among them)
                bad = bytearray(data)
                bad[rnd.randrange(len(bad))] = rnd.choice((0x00, 0x7F, 0x80, 0xFF))
                assert _value_outcome(groups.decode_value, groups.GROUP_METADATA, bytes(bad)) == \
                    _value_outcome(groups.decode_value_reference, groups.GROUP_METADATA, bytes(bad))
    many = {"protocolType": "consumer", "generation": 1, "protocol": "range", "leader": "m",
            "members": [{"memberId": f"m{i}", "clientId": "c", "clientHost": "h", "sessionTimeout": 1,
                         "subscription": b"", "assignment": b""}
                        for i in range(groups.GROUP_METADATA_FAST_MEMBERS + 1)]}
    data = struct.pack(">h", 3) + groups.GROUP_METADATA_VALUE.encode(many, 3)
    assert groups._group_metadata_fast(data) is None
    assert groups.decode_value(groups.GROUP_METADATA, data) == groups.decode_value_reference(groups.GROUP_METADATA,
                                                                                            data)
    assert taken >= 150  # the fast path answered, not only the reference


def test_group_metadata_key_read_in_place_equals_the_schema_codec():
    """A GroupMetadata key (the group alone) is read in place where it is whole; cut, corrupted or trailing
    bytes give the codec's answer or error."""
    rnd = random.Random(43)

    def outcome(read, key):
        try:
            return read(key)
        except MessageError as err:
            return ("error", type(err).__name__, str(err))

    def reference(key):
        return 2, groups.RECORD_TYPES[2].key.read(key, 2, 2)[0]

    for name in ("", "g", "consumer-ä€", "x" * 300, "ra\udcffge"):
        key = struct.pack(">hh", 2, len(name.encode("utf-8", "surrogateescape"))) + \
            name.encode("utf-8", "surrogateescape") + rnd.choice((b"", b"rest"))
        assert groups.decode_key(key) == reference(key)
        for cut in range(2, len(key)):
            assert outcome(groups.decode_key, key[:cut]) == outcome(reference, key[:cut])
        for _ in range(30):
            bad = bytearray(key)
            bad[rnd.randrange(2, len(bad))] = rnd.choice((0x00, 0x7F, 0x80, 0xFF))
            assert outcome(groups.decode_key, bytes(bad)) == outcome(reference, bytes(bad))
