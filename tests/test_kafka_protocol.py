"""The Kafka protocol layer (lookupd.kafka) against an independent codec: Aiven's kio, generated from
Kafka's own JSON schemas. Every message and version the listener speaks is encoded here and decoded by
kio, which must consume exactly those bytes and write the same bytes back; the hand-written hot codecs
(Fetch, ListOffsets) must give what the schema-driven codec gives; and hostile bytes cost a
MalformedRequest, never another error, a crash or memory out of proportion to their size."""

from __future__ import annotations

import io
import random
import struct

import pytest
from hypothesis import given, settings, strategies as st

from lookupd.kafka import fetch, framing, listoffsets
from lookupd.kafka.messages import MAX_REQUEST_ITEMS, REQUESTS, RESPONSES
from lookupd.message import wire
from lookupd.message.codec import Field, Message, has
from lookupd.message.wire import MessageError as MalformedRequest

kio_serial = pytest.importorskip("kio.serial")
from kio.index import load_payload_module  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402


def _within(v: int, versions) -> bool:
    return has(versions, v)


def _random_value(fields: tuple[Field, ...], v: int, rnd: random.Random, depth: int = 0) -> dict:
    out = {}
    for fld in fields:
        if not _within(v, fld.versions):
            continue
        if _within(v, fld.nullable) and rnd.random() < 0.2:
            out[fld.name] = None
            continue
        out[fld.name] = _random_of(fld, v, rnd, depth)
    return out


def _random_of(fld: Field, v: int, rnd: random.Random, depth: int):
    t = fld.type
    if fld.struct is not None and not fld.array:
        return _random_value(fld.struct.fields, v, rnd, depth + 1)
    if fld.struct is not None:
        return [_random_value(fld.struct.fields, v, rnd, depth + 1)
                for _ in range(rnd.randint(0, 3 if depth < 2 else 1))]
    if fld.array:
        return [_random_scalar(t, rnd) for _ in range(rnd.randint(0, 3))]
    if fld.name == "error_code":
        return rnd.choice([0, 1, 3, 29, 35])  # kio reads error codes as its enum of the known ones
    if fld.name.endswith("_ms"):
        return rnd.randint(0, 10**6)  # kio reads durations as timedeltas, which overflow on random int64s
    return _random_scalar(t, rnd)


def _random_scalar(t: str, rnd: random.Random):
    bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}.get(t)
    if bits:
        return rnd.randint(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if t == "bool":
        return rnd.random() < 0.5
    if t == "uuid":
        return rnd.randbytes(16)
    if t == "string":
        return "".join(rnd.choice("abcdefgh-_.é") for _ in range(rnd.randint(0, 12)))
    if t in ("bytes", "records"):
        return rnd.randbytes(rnd.randint(0, 20))
    raise AssertionError(t)


def _kio_entity(m: Message, v: int):
    kind = EntityType.request if m.name.endswith("Request") else EntityType.response
    module = load_payload_module(m.api_key, v, kind)
    return getattr(module, m.name)


def _cases():
    for table in (REQUESTS, RESPONSES):
        for m in table.values():
            for v in range(m.valid[0], m.valid[1] + 1):
                yield pytest.param(m, v, id=f"{m.name}-v{v}")


@pytest.mark.parametrize("m, v", list(_cases()))
def test_every_message_and_version_reads_back_in_kio_byte_for_byte(m, v):
    try:
        entity = _kio_entity(m, v)
    except Exception as err:  # noqa: BLE001 - kio lacks that version
        pytest.fail(f"kio has no {m.name} v{v}: {err}")
    read = kio_serial.entity_reader(entity)
    write = kio_serial.entity_writer(entity)
    rnd = random.Random(f"{m.name}{v}")
    for _ in range(20):
        value = _random_value(m.fields, v, rnd)
        data = m.encode(value, v)
        parsed, size = read(data, 0)
        assert size == len(data), f"kio read {size} of {len(data)} bytes"
        buf = io.BytesIO()
        write(buf, parsed)
        assert buf.getvalue() == data
        back = m.decode(data, v)
        again = m.encode(back, v)
        assert again == data


def test_fetch_response_by_hand_equals_the_schema_codec():
    rnd = random.Random(7)
    for v in range(fetch.MIN_VERSION, fetch.MAX_VERSION + 1):
        for _ in range(10):
            topics = []
            for t in range(rnd.randint(0, 3)):
                parts = []
                for p in range(rnd.randint(0, 3)):
                    aborted = None if rnd.random() < 0.5 else [(rnd.randint(0, 1 << 40), rnd.randint(0, 1 << 40))
                                                               for _ in range(rnd.randint(0, 2))]
                    parts.append(fetch.PartitionData(p, rnd.choice([0, 1, 3]), rnd.randint(-1, 1 << 50),
                                                     rnd.randint(-1, 1 << 50), rnd.randint(-1, 1 << 50), aborted,
                                                     rnd.randbytes(rnd.randint(0, 40))))
                topics.append((f"topic-{t}", rnd.randbytes(16), parts))
            session = rnd.choice([0, 5])
            pieces = fetch.encode_response(v, topics, session_id=session)
            by_hand = b"".join(pieces)
            value = {"session_id": session, "responses": [
                {"topic": name, "topic_id": tid, "partitions": [
                    {"partition_index": p.partition, "error_code": p.error_code, "high_watermark": p.high_watermark,
                     "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
                     "aborted_transactions": None if p.aborted is None else
                     [{"producer_id": a, "first_offset": b} for a, b in p.aborted],
                     "records": p.records} for p in parts]} for name, tid, parts in topics]}
            assert by_hand == RESPONSES[1].encode(value, v)


def test_fetch_response_leaves_file_regions_as_pieces():
    region = fetch.Region(handle=None, position=100, size=5000)
    pieces = fetch.encode_response(12, [("t", bytes(16), [fetch.PartitionData(0, 0, 10, 10, 0, None, region)])])
    assert pieces[1] is region
    assert sum(len(p) for p in pieces) == len(b"".join(p for p in pieces if isinstance(p, bytes))) + 5000


def _fetch_outcome(decode, data: bytes, at: int, v: int):
    try:
        return decode(data, at, v)
    except MalformedRequest as err:
        return ("error", str(err))


def test_fetch_request_legacy_fast_path_equals_the_schema_codec():
    """The struct-based decoder of legacy Fetch requests gives the schema codec's answer, and its error (the
    codec's, named by it) on cut, corrupted and oversized requests, which it leaves to the codec."""
    rnd = random.Random(41)
    req = REQUESTS[1]
    taken = 0
    for v in range(fetch.MIN_VERSION, fetch.FLEXIBLE):
        for i in range(60):
            value = _random_value(req.fields, v, rnd)
            if i % 3 == 0:  # a consumer's usual request: one topic, one partition, nothing forgotten
                value["topics"] = [{"topic": "bench", "partitions": [{
                    "partition": 0, "current_leader_epoch": 5, "fetch_offset": rnd.randint(0, 1 << 40),
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]
                value["forgotten_topics_data"] = []
            data = b"head" + req.encode(value, v) + (b"rest" if i % 2 else b"")
            expected = fetch.decode_request_reference(data, 4, v)
            assert fetch.decode_request(data, 4, v) == expected
            taken += fetch._decode_legacy(data, 4, v) is not None
            for cut in range(4, len(data), max(1, len(data) // 40)):
                assert _fetch_outcome(fetch.decode_request, data[:cut], 4, v) == \
                    _fetch_outcome(fetch.decode_request_reference, data[:cut], 4, v)
            for _ in range(20):  # hostile: any byte changed (lengths and counts among them)
                bad = bytearray(data)
                bad[rnd.randrange(4, len(bad))] = rnd.choice((0x00, 0x7F, 0x80, 0xFF))
                assert _fetch_outcome(fetch.decode_request, bytes(bad), 4, v) == \
                    _fetch_outcome(fetch.decode_request_reference, bytes(bad), 4, v)
        # more partitions than the fast path decodes: the codec's answer (and its item budget) apply
        many = {"max_wait_ms": 1, "min_bytes": 1, "isolation_level": 0, "topics": [{"topic": "t", "partitions": [
            {"partition": p, "fetch_offset": p, "partition_max_bytes": 1} for p in range(fetch.LEGACY_FAST_ITEMS)]}]}
        data = req.encode(many, v)
        assert fetch._decode_legacy(data, 0, v) is None
        assert fetch.decode_request(data, 0, v) == fetch.decode_request_reference(data, 0, v)
    assert taken >= 60  # the fast path answered, not only the reference


def test_list_offsets_by_hand_equals_the_schema_codec():
    rnd = random.Random(11)
    req, resp = REQUESTS[2], RESPONSES[2]
    for v in range(listoffsets.MIN_VERSION, listoffsets.MAX_VERSION + 1):
        for _ in range(20):
            value = {"replica_id": -1, "isolation_level": rnd.randint(0, 1), "timeout_ms": 100, "topics": [
                {"name": f"t{i}", "partitions": [
                    {"partition_index": rnd.randint(0, 99), "current_leader_epoch": rnd.randint(-1, 9),
                     "timestamp": rnd.randint(-5, 1 << 42)} for _ in range(rnd.randint(0, 3))]}
                for i in range(rnd.randint(0, 3))]}
            data = req.encode(value, v)
            mine = listoffsets.decode_request(data, 0, v)
            generic = req.decode(data, v)
            assert mine.replica_id == generic["replica_id"]
            assert mine.isolation_level == generic["isolation_level"]
            assert mine.topics == [(t["name"], [listoffsets.Target(p["partition_index"], p["current_leader_epoch"],
                                                                    p["timestamp"]) for p in t["partitions"]])
                                   for t in generic["topics"]]
            answers = [(f"t{i}", [listoffsets.Answer(rnd.randint(0, 9), rnd.choice([0, 3, 29]), rnd.randint(-1, 1 << 42),
                                                     rnd.randint(-1, 1 << 42), rnd.randint(-1, 9))
                                  for _ in range(rnd.randint(0, 3))]) for i in range(rnd.randint(0, 3))]
            generic_resp = resp.encode({"topics": [{"name": n, "partitions": [a._asdict() | {
                "partition_index": a.partition} for a in ans]} for n, ans in answers]}, v)
            assert listoffsets.encode_response(v, answers) == generic_resp


def test_list_offsets_one_partition_fast_path_equals_the_general_one():
    req = REQUESTS[2]
    for v in range(listoffsets.FLEXIBLE, listoffsets.MAX_VERSION + 1):
        for name in ("t", "topic-with-a-longer-name", "é" * 20):
            for ts in (-5, -1, 0, 1 << 40):
                data = b"pad" + req.encode({"replica_id": -1, "isolation_level": 1, "timeout_ms": 5, "topics": [
                    {"name": name, "partitions": [{"partition_index": 3, "current_leader_epoch": 7, "timestamp": ts}]}]},
                    v)
                assert listoffsets.decode_request(data, 3, v) == listoffsets._decode(data, 3, v) == \
                    listoffsets.ListOffsetsRequest(-1, 1, [(name, [listoffsets.Target(3, 7, ts)])])
                for cut in range(3, len(data)):
                    with pytest.raises(MalformedRequest):
                        listoffsets.decode_request(data[:cut], 3, v)


# ------------------------------------------------------------------ framing


def _frame(api_key: int, version: int, correlation: int, body: bytes, client_id: str | None = "c") -> bytes:
    head = struct.pack(">hhi", api_key, version, correlation) + wire.string(client_id, False)
    if framing.is_flexible(api_key, version):
        head += wire.NO_TAGS
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def test_framing_reads_pipelined_requests_split_anywhere():
    body = REQUESTS[18].encode({"client_software_name": "x", "client_software_version": "1"}, 3)
    data = _frame(18, 3, 1, body) + _frame(18, 0, 2, b"") + _frame(99, 0, 3, b"zz")
    for cut in range(len(data) + 1):
        conn = framing.Connection(1 << 20)
        if cut:
            conn.receive_data(data[:cut])  # (b"" would be the end of the stream)
        events = []
        while (e := conn.next_event()) is not framing.NEED_DATA:
            events.append(e)
        if cut < len(data):
            conn.receive_data(data[cut:])
        while (e := conn.next_event()) is not framing.NEED_DATA:
            events.append(e)
        assert [(e.api_key, e.correlation_id, e.supported) for e in events] == [(18, 1, True), (18, 2, True),
                                                                                (99, 3, False)]
        assert REQUESTS[18].decode(events[0].body, 3, events[0].body_at)["client_software_name"] == "x"


def test_framing_refuses_an_oversized_request_from_its_size_alone():
    conn = framing.Connection(1000)
    conn.receive_data(struct.pack(">i", 1001))
    event = conn.next_event()
    assert isinstance(event, framing.Violation) and "1000-byte limit" in event.message
    assert conn.next_event() is framing.CLOSED


@pytest.mark.parametrize("size", [-1, 0, 7, -(1 << 31)])
def test_framing_refuses_impossible_sizes(size):
    conn = framing.Connection(1000)
    conn.receive_data(struct.pack(">i", size))
    assert isinstance(conn.next_event(), framing.Violation)


def test_framing_end_of_stream_inside_a_request_is_a_violation():
    conn = framing.Connection(1000)
    conn.receive_data(_frame(18, 0, 1, b"")[:-1])
    assert conn.next_event() is framing.NEED_DATA
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), framing.Violation)
    clean = framing.Connection(1000)
    clean.receive_data(b"")
    assert clean.next_event() is framing.CLOSED


def test_api_versions_response_header_is_v0_even_when_flexible():
    req = framing.Request(18, 3, 77, "c", b"", 0, True, 0)
    assert b"".join(framing.response(req, b"xyz")) == struct.pack(">ii", 7, 77) + b"xyz"
    meta = framing.Request(3, 12, 78, "c", b"", 0, True, 0)
    assert b"".join(framing.response(meta, b"xyz")) == struct.pack(">ii", 8, 78) + b"\x00xyz"


# ------------------------------------------------------------------ hostile input


def test_huge_counts_are_refused_before_anything_is_allocated():
    # kio's native reader aborts the whole process on this (a 34 GB allocation from a count in 20 bytes).
    body = struct.pack(">iiiibii", -1, 500, 1, 1000, 0, 0, -1) + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(MalformedRequest):
        REQUESTS[1].decode(body, 12)
    legacy = struct.pack(">iiiibii", -1, 500, 1, 1000, 0, 0, -1) + struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(MalformedRequest):
        REQUESTS[1].decode(legacy, 11)
    with pytest.raises(MalformedRequest):
        listoffsets.decode_request(struct.pack(">ibi", -1, 0, 0x7FFFFFFF), 0, 5)


def test_many_tiny_elements_are_capped():
    n = MAX_REQUEST_ITEMS + 10
    body = struct.pack(">i", n) + b"\x00\x00" * n + b"\x01"  # Metadata v4: n empty topic names
    with pytest.raises(MalformedRequest, match="MAX_REQUEST_ITEMS"):
        REQUESTS[3].decode(body, 4)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(REQUESTS)), st.integers(0, 17), st.binary(max_size=200))
def test_random_bytes_are_malformed_or_valid_never_another_error(api_key, v, data):
    m = REQUESTS[api_key]
    v = min(max(v, m.valid[0]), m.valid[1])
    try:
        m.decode(data, v)
    except MalformedRequest:
        pass
    if api_key == 2:
        try:
            listoffsets.decode_request(data, 0, v)
        except MalformedRequest:
            pass


def test_every_truncation_of_a_valid_request_is_malformed():
    rnd = random.Random(3)
    for api_key, m in REQUESTS.items():
        for v in (m.valid[0], m.valid[1]):
            data = m.encode(_random_value(m.fields, v, rnd), v)
            for cut in range(len(data)):
                try:
                    m.decode(data[:cut], v)
                except MalformedRequest:
                    continue
                # a prefix can itself be a whole message only where the rest was optional bytes
                assert m.encode(m.decode(data[:cut], v), v) == data[:cut]
