"""msgpack-rpc framing without sockets: bytes in, events out."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from lookupd.rpc import protocol as rpc


def pack(*values) -> bytes:
    return b"".join(msgpack.packb(v, use_bin_type=True) for v in values)


def drain(conn: rpc.Connection) -> list:
    out = []
    while True:
        ev = conn.next_event()
        if ev is rpc.NEED_DATA or ev is rpc.CLOSED:
            return out
        out.append(ev)
        if isinstance(ev, rpc.ProtocolError) and ev.fatal:
            return out


MESSAGES = [[0, 1, "ping", []], [2, "nvim_subscribe", ["x"]], [0, 4294967295, "lookup_offset", ["t", 0, 5, "floor"]],
            [0, 3, "read", ["t", 0, 0, 1 << 20]]]
EXPECTED = [rpc.Request(1, "ping", []), rpc.Notification("nvim_subscribe", ["x"]),
            rpc.Request(4294967295, "lookup_offset", ["t", 0, 5, "floor"]), rpc.Request(3, "read", ["t", 0, 0, 1 << 20])]


def test_coalesced_messages_in_one_chunk():
    c = rpc.Connection()
    c.receive_data(pack(*MESSAGES))
    assert drain(c) == EXPECTED
    assert c.next_event() is rpc.NEED_DATA


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64])
def test_split_frames(step):
    data = pack(*MESSAGES)
    c = rpc.Connection()
    got = []
    for i in range(0, len(data), step):
        c.receive_data(data[i:i + step])
        got += drain(c)
    assert got == EXPECTED


def test_end_of_stream_between_and_inside_messages():
    c = rpc.Connection()
    c.receive_data(pack([0, 1, "ping", []]))
    c.receive_data(b"")
    assert drain(c) == [rpc.Request(1, "ping", [])]
    assert c.next_event() is rpc.CLOSED
    c = rpc.Connection()
    c.receive_data(pack([0, 1, "ping", []])[:-1])
    c.receive_data(b"")
    ev = c.next_event()
    assert isinstance(ev, rpc.ProtocolError) and ev.fatal and "middle" in ev.message


def test_oversized_message_is_fatal_and_bounded():
    c = rpc.Connection(max_frame_bytes=1024)
    c.receive_data(pack([0, 1, "ping", []]))
    c.receive_data(pack([0, 2, "x", ["a" * 5000]]))
    evs = drain(c)
    assert evs[0] == rpc.Request(1, "ping", [])
    assert evs[1].fatal and evs[1].code == "TOO_LARGE"
    assert c.next_event() == evs[1]  # broken for good
    # the peer is told by an error notification
    err = msgpack.unpackb(c.send_error(evs[1]))
    assert err[0] == 2 and err[1] == "error" and err[2][0]["code"] == "TOO_LARGE"


def test_many_small_values_cannot_exceed_the_frame():
    """A huge array of tiny elements is parsed incrementally: the limit counts wire bytes."""
    c = rpc.Connection(max_frame_bytes=4096)
    c.receive_data(b"\x94\x00\x01\xa1x\xdc\x0b\xb8" + b"\x91\xc0" * 3000)  # 3000 arrays of one nil
    ev = c.next_event()
    assert ev.fatal and ev.code == "TOO_LARGE" and "4096-byte" in ev.message
    c = rpc.Connection(max_frame_bytes=4096)
    c.receive_data(b"\x94\x00\x01\xa1x\xdd\x00\x10\x00\x00")  # a header claiming 1M elements
    ev = c.next_event()
    assert ev.fatal and ev.code == "TOO_LARGE"


def test_big_chunks_of_small_messages_are_fine():
    """A chunk larger than the frame limit holding many small messages is not an oversized frame."""
    c = rpc.Connection(max_frame_bytes=256)
    msgs = [[0, i, "ping", []] for i in range(1000)]
    c.receive_data(pack(*msgs))
    assert [e.msgid for e in drain(c)] == list(range(1000))


def test_malformed_msgpack_is_fatal():
    c = rpc.Connection()
    c.receive_data(pack([0, 1, "ping", []]) + b"\xc1" + pack([0, 2, "ping", []]))
    evs = drain(c)
    assert evs[0] == rpc.Request(1, "ping", [])
    assert evs[1].fatal and evs[1].code == "INVALID_ARGUMENT", evs[1]
    assert "malformed msgpack" in evs[1].message and "0xc1" in evs[1].message, evs[1]  # says which byte is wrong


@pytest.mark.parametrize("value, msgid, fragment", [
    ({"a": 1}, None, "non-empty array, got map"),
    ("hello", None, "got str"),
    ([], None, "non-empty array"),
    ([0, 5, "ping"], 5, "array of 3"),
    ([0, 5, "ping", [], 1], 5, "array of 5"),
    ([0, -1, "ping", []], None, "unsigned 32-bit"),
    ([0, 1 << 32, "ping", []], None, "unsigned 32-bit"),
    ([0, True, "ping", []], None, "unsigned 32-bit"),
    ([0, 7, 12, []], 7, "method must be a string"),
    ([0, 7, "ping", {"a": 1}], 7, "params must be an array"),
    ([0, 7, "ping", "x"], 7, "params must be an array"),
    ([1, 7, None, "x"], None, "does not accept a response"),
    ([9, 7, "x", []], None, "type must be 0, 1 or 2"),
    ([2, "x"], None, "notification"),
    ([2, "x", 5], None, "notification"),
])
def test_invalid_messages_are_not_fatal(value, msgid, fragment):
    c = rpc.Connection()
    c.receive_data(pack(value, [0, 99, "ping", []]))
    evs = drain(c)
    assert len(evs) == 2, evs
    assert isinstance(evs[0], rpc.ProtocolError) and not evs[0].fatal
    assert evs[0].msgid == msgid and fragment in evs[0].message
    assert evs[1] == rpc.Request(99, "ping", [])
    answer = msgpack.unpackb(c.send_error(evs[0]))
    if msgid is None:
        assert answer[:2] == [2, "error"]
    else:
        assert answer[:2] == [1, msgid] and answer[2]["code"] == "INVALID_ARGUMENT" and answer[3] is None


def test_bytes_method_names_and_bad_utf8():
    c = rpc.Connection()
    c.receive_data(pack([0, 1, b"ping", []]) + b"\x94\x00\x02\xa2\xff\xfe\x90")
    evs = drain(c)
    assert evs[0] == rpc.Request(1, "ping", [])
    assert isinstance(evs[1], rpc.Request) and evs[1].method == "\udcff\udcfe"  # fails dispatch, not framing


def test_client_side_round_trip():
    client, server = rpc.Connection("client"), rpc.Connection("server")
    ids = []
    for method in ("ping", "stats"):
        msgid, data = client.send_request(method, ())
        ids.append(msgid)
        server.receive_data(data)
    reqs = drain(server)
    assert [r.method for r in reqs] == ["ping", "stats"] and [r.msgid for r in reqs] == ids
    # answered out of order
    client.receive_data(server.send_response(ids[1], None, {"uptime": 1.5}) +
                        server.send_response(ids[0], None, "pong") +
                        server.send_notification("error", [rpc.error_map("X", "y")]))
    assert drain(client) == [rpc.Response(ids[1], None, {"uptime": 1.5}), rpc.Response(ids[0], None, "pong"),
                             rpc.Notification("error", [{"code": "X", "message": "y"}])]
    client.receive_data(pack([0, 1, "ping", []]))
    assert "does not accept a request" in client.next_event().message


def test_binary_results_are_bin():
    raw = rpc.Connection().send_response(1, None, {"records": b"\x00\x01"})
    assert b"\xc4\x02\x00\x01" in raw
    with pytest.raises((TypeError, ValueError, OverflowError)):
        rpc.Connection().send_response(1, None, object())


def test_a_request_msgpack_cannot_carry_is_an_invalid_argument():
    from lookupd.errors import InvalidArgument

    conn = rpc.Connection()
    with pytest.raises(InvalidArgument, match="cannot send resolve_offset"):
        conn.send_request("resolve_offset", ["t", 0, 2 ** 70])
    msgid, data = conn.send_request("ping", [])  # the connection is still usable
    assert msgpack.unpackb(data) == [0, msgid, "ping", []]


class _IncrementalOnly(rpc.Connection):
    """The reference framing: every received byte through the incremental unpacker, never the
    one-call unpacking of a receive that starts between messages."""

    def receive_data(self, data: bytes) -> None:
        if not data:
            self._eof = True
        else:
            self._receive(data)


def _events(conn: rpc.Connection, chunks: list[bytes], eof: bool) -> list:
    out = []
    for chunk in chunks:
        conn.receive_data(chunk)
        out += drain(conn)
        if out and isinstance(out[-1], rpc.ProtocolError) and out[-1].fatal:
            return out
    if eof:
        conn.receive_data(b"")
        out += drain(conn)
        out.append(conn.next_event())
    return out


_VALUES = st.one_of(
    st.builds(lambda i, m, p: [0, i, m, p], st.integers(0, rpc.MAX_MSGID), st.sampled_from(["ping", "read", "x"]),
              st.lists(st.one_of(st.integers(-2 ** 63, 2 ** 64 - 1), st.text(max_size=5), st.none()), max_size=4)),
    st.builds(lambda m, p: [2, m, p], st.text(max_size=4), st.lists(st.integers(-9, 9), max_size=2)),
    st.recursive(st.one_of(st.integers(0, 9), st.text(max_size=3), st.none()),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                 max_leaves=30),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_VALUES, max_size=8), tail=st.sampled_from([b"", b"\xc1", b"\x94\x00", b"\xdd\xff\xff\xff\xff"]),
       cuts=st.lists(st.integers(0, 400), max_size=6), eof=st.booleans(), frame=st.sampled_from([24, 64, 1 << 20]))
def test_any_chunking_frames_as_the_incremental_unpacker_does(values, tail, cuts, eof, frame):
    """A receive between messages is unpacked in one call when it can be; events, errors included,
    must be those of the incremental unpacker alone, however the stream is cut."""
    data = pack(*values) + tail
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    want = _events(_IncrementalOnly(max_frame_bytes=frame), [data[i:i + 1] for i in range(len(data))], eof)
    assert _events(rpc.Connection(max_frame_bytes=frame), chunks, eof) == want


# ------------------------------------------------------------------ int64 columns packed from numpy

_EDGES = sorted({v + d for b in (0, 31, 32, 127, 128, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 32) - 1,
                                 1 << 32, (1 << 63) - 1)
                 for v in (b, -b) for d in (-1, 0, 1) if -(1 << 63) <= v + d < 1 << 63} | {-(1 << 63)})


def test_columns_pack_as_msgpack_packs_their_lists():
    """Issue 40: columnar answers are packed straight from numpy (lookupd.rpc.columns), byte for byte what
    msgpack-python makes of the same list of ints, at every boundary of its integer encodings."""
    import numpy as np
    from lookupd.rpc.columns import pack_int64_array, pack_int64_array_reference

    for values in ([], [0], _EDGES, _EDGES * 700, list(range(-40, 300)) * 300):
        a = np.array(values, dtype=np.int64)
        assert pack_int64_array(a) == pack_int64_array_reference(a) == msgpack.packb(values)
    assert pack_int64_array(np.array([1, 2, 3], dtype=np.uint32)) == msgpack.packb([1, 2, 3])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=40), st.integers(0, 70_000))
def test_columns_pack_like_msgpack_for_any_int64s(values, repeat):
    import numpy as np
    from lookupd.rpc.columns import pack_int64_array

    values = values * (repeat // max(len(values), 1) if len(values) else 0) or values
    assert pack_int64_array(np.array(values, dtype=np.int64)) == msgpack.packb(values)


def test_a_response_with_packed_columns_is_the_response_with_their_lists():
    import numpy as np
    from lookupd.rpc.columns import pack_int64_array
    from lookupd.rpc.protocol import Packed

    conn = rpc.Connection("server")
    columns = [np.arange(20) * 1000, np.arange(70_000) - 5, [None, "bad"]]
    for n in (1, 3, 17):  # a map header of each size class
        values = {f"k{i}": columns[i % 3] for i in range(n)}
        plain = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in values.items()}
        packed = {k: Packed(pack_int64_array(v)) if isinstance(v, np.ndarray) else v for k, v in values.items()}
        assert conn.send_response(7, None, packed) == conn.send_response(7, None, plain)


def test_a_packed_result_is_sent_as_the_same_bytes():
    """A result packed once (`rpc.pack`) makes the response bytes packing it with the response would."""
    conn = rpc.Connection("server")
    for result in ({"offsets": {"lag": [1, None, 3]}, "group": "g"}, [b"\x00" * 300], None, "x" * 70000):
        for msgid in (0, 7, rpc.MAX_MSGID):
            assert conn.send_response(msgid, None, rpc.pack(result)) == conn.send_response(msgid, None, result)
            assert msgpack.unpackb(conn.send_response(msgid, None, rpc.pack(result))) == [1, msgid, None, result]
