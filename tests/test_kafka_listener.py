"""The Kafka listener as Kafka's own rules state it, through raw requests to an in-process daemon: Fetch's
limits (KIP-74's first batch whole, max_bytes, partition_max_bytes, min_bytes and max_wait_ms), the bytes as
stored, log start, high watermark and last stable offset, aborted transactions from the .txnindex, offsets
out of range, declined fetch sessions; ListOffsets' special timestamps; Metadata naming the listener; and
bad input (oversized, malformed, unknown or unsupported requests) closing one connection, never the daemon."""

from __future__ import annotations

import os
import socket
import struct

import pytest
import trio

import reference as R
from daemon_helpers import running, short_dir  # noqa: F401 - fixture
from test_kafka_clients import free_port

from lookupd.daemon import kafkasocket
from lookupd.daemon.kafkaconn import KafkaConnection
from lookupd.daemon.kafkasettings import KafkaSettings
from lookupd.kafka import errors as E
from lookupd.message import wire
from lookupd.kafka.messages import REQUESTS, RESPONSES
from lookupd.log.locallog import LocalLog

pytestmark = pytest.mark.trio


class RawKafka:
    """A Kafka client of a few lines: framed requests out, responses decoded by lookupd.kafka's schemas."""

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.buf = b""
        self.correlation = 0

    @classmethod
    async def connect(cls, port: int) -> "RawKafka":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def frame(self) -> bytes | None:
        """The next response frame, None once the daemon closed the connection."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">i", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return frame
            try:
                data = await self.stream.receive_some(1 << 20)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.buf += data

    async def call(self, api_key: int, version: int, value: dict) -> dict:
        self.correlation += 1
        m = REQUESTS[api_key]
        head = struct.pack(">hhi", api_key, version, self.correlation) + wire.string("raw", False)
        if m.is_flexible(version):
            head += wire.NO_TAGS
        body = head + m.encode(value, version)
        await self.send_raw(struct.pack(">i", len(body)) + body)
        frame = await self.frame()
        assert frame is not None, "the daemon closed the connection"
        assert struct.unpack(">i", frame[:4])[0] == self.correlation
        at = 5 if m.is_flexible(version) and api_key != 18 else 4
        return RESPONSES[api_key].decode(frame, version, at)

    async def aclose(self) -> None:
        await self.stream.aclose()


def fetch_request(topic: str, offset: int, *, max_bytes=1 << 20, partition_max_bytes=1 << 20, min_bytes=1,
                  max_wait_ms=0, isolation=0, partitions=None, session_id=0) -> dict:
    parts = partitions or [(0, offset, partition_max_bytes)]
    return {"max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": isolation,
            "session_id": session_id, "session_epoch": -1, "topics": [
                {"topic": topic, "partitions": [{"partition": p, "fetch_offset": o, "partition_max_bytes": m}
                                                for p, o, m in parts]}]}


def segment_bytes(name: str, base: int, position: int, size: int, part_dir: str | None = None) -> bytes:
    """`size` bytes from `position` of the segment at `base` of the corpus partition `name` (or of `part_dir`)."""
    with open(os.path.join(part_dir or R.log_dir(name), f"{base:020d}.log"), "rb") as f:
        f.seek(position)
        return f.read(size)


async def _listener(short_dir):  # noqa: F811
    port = free_port()
    return port, running(os.path.join(short_dir, "s"), kafka=KafkaSettings(listen=[f"127.0.0.1:{port}"]))


async def test_fetch_serves_the_stored_bytes_within_kafkas_limits(short_dir):  # noqa: F811
    port, daemon = await _listener(short_dir)
    async with daemon:
        c = await RawKafka.connect(port)
        llog = LocalLog(R.log_dir("plain-0"), "plain", 0)
        try:
            loc = llog.resolve_offset(1000)
            # max_bytes of 1: the first batch whole anyway (KIP-74), from the batch holding the offset
            r = await c.call(1, 12, fetch_request("plain", 1000, max_bytes=1))
            p = r["responses"][0]["partitions"][0]
            assert p["error_code"] == E.NONE and p["records"] == segment_bytes("plain-0", loc.segment, loc.position,
                                                                                loc.size)
            assert (p["high_watermark"], p["last_stable_offset"], p["log_start_offset"]) == (5000, 5000, 0)
            # partition_max_bytes: exactly that many bytes (ending mid-batch, as Kafka's slice does)
            r = await c.call(1, 11, fetch_request("plain", 1000, partition_max_bytes=loc.size + 100))
            assert r["responses"][0]["partitions"][0]["records"] == segment_bytes("plain-0", loc.segment,
                                                                                  loc.position, loc.size + 100)
            # a second partition's limit is what max_bytes has left, with no first-batch exception
            both = fetch_request("plain", 0, max_bytes=loc.size + 50, partitions=[(0, 1000, 1 << 20)])
            both["topics"].append({"topic": "compressed", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]})
            r = await c.call(1, 12, both)
            assert len(r["responses"][0]["partitions"][0]["records"]) == loc.size + 50
            assert r["responses"][1]["partitions"][0]["records"] == b""
            # out of range, past the end and for an unknown partition
            for offset in (5001, 10 ** 12):
                r = await c.call(1, 12, fetch_request("plain", offset))
                assert r["responses"][0]["partitions"][0]["error_code"] == E.OFFSET_OUT_OF_RANGE
            r = await c.call(1, 12, fetch_request("nope", 0))
            assert r["responses"][0]["partitions"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
            # sessions are declined
            r = await c.call(1, 12, fetch_request("plain", 0, session_id=7))
            assert r["error_code"] == E.FETCH_SESSION_ID_NOT_FOUND and r["session_id"] == 0
        finally:
            llog.close()
            await c.aclose()


async def test_fetch_at_the_log_end_waits_max_wait_ms_then_answers_empty(short_dir):  # noqa: F811
    port, daemon = await _listener(short_dir)
    async with daemon:
        c = await RawKafka.connect(port)
        started = trio.current_time()
        r = await c.call(1, 12, fetch_request("plain", 5000, max_wait_ms=300))
        waited = trio.current_time() - started
        assert r["responses"][0]["partitions"][0]["records"] == b"" and waited >= 0.3
        started = trio.current_time()
        r = await c.call(1, 12, fetch_request("plain", 4990, max_wait_ms=10_000))  # data: at once
        assert r["responses"][0]["partitions"][0]["records"] and trio.current_time() - started < 5
        await c.aclose()


async def test_read_committed_stops_at_the_stable_offset_and_lists_the_aborted(short_dir):  # noqa: F811
    port, daemon = await _listener(short_dir)
    async with daemon:
        c = await RawKafka.connect(port)
        llog = LocalLog(R.log_dir("txn-0"), "txn", 0)
        try:
            aborted = [t for seg in llog.segments() for t in seg.txn_index.all_aborted_txns()]
            offset, seen = 0, set()
            while offset < llog.log_end_offset:
                r = await c.call(1, 12, fetch_request("txn", offset, isolation=1, partition_max_bytes=4096))
                p = r["responses"][0]["partitions"][0]
                assert p["error_code"] == E.NONE and p["last_stable_offset"] == llog.log_end_offset
                seen.update((a["producer_id"], a["first_offset"]) for a in p["aborted_transactions"])
                from lookupd.format.batch import whole_batches
                whole, offset = whole_batches(p["records"], 0)
                assert whole
            assert seen == {(t.producer_id, t.first_offset) for t in aborted}
        finally:
            llog.close()
            await c.aclose()


async def test_list_offsets_answers_the_special_timestamps_as_the_log_does(short_dir):  # noqa: F811
    port, daemon = await _listener(short_dir)
    async with daemon:
        c = await RawKafka.connect(port)
        llog = LocalLog(R.log_dir("ooo-time-0"), "ooo-time", 0)
        try:
            for ts in (-1, -2, -3, -4, -5, 0, 1700172771262, 1 << 50):
                r = await c.call(2, 9, {"replica_id": -1, "topics": [
                    {"name": "ooo-time", "partitions": [{"partition_index": 0, "timestamp": ts}]}]})
                got = r["topics"][0]["partitions"][0]
                want = llog.offset_for_timestamp(ts)
                assert got["error_code"] == E.NONE
                assert got["offset"] == (-1 if want is None else want.offset), ts
                if ts >= 0 and want is not None:
                    assert got["timestamp"] == want.timestamp
        finally:
            llog.close()
            await c.aclose()


async def test_metadata_names_the_listener_as_the_only_broker(short_dir):  # noqa: F811
    port, daemon = await _listener(short_dir)
    async with daemon:
        c = await RawKafka.connect(port)
        for version in (0, 4, 9, 12):
            r = await c.call(3, version, {"topics": None if version else []})
            assert [(b["host"], b["port"]) for b in r["brokers"]] == [("127.0.0.1", port)]
            topics = {t["name"]: t for t in r["topics"]}
            assert set(topics) >= {"plain", "txn", "large"}
            p = topics["plain"]["partitions"][0]
            assert p["leader_id"] == r["brokers"][0]["node_id"] == p["replica_nodes"][0]
        await c.aclose()


async def test_connections_write_a_whole_answer_unpaced(short_dir):  # noqa: F811
    """The socket options of lookupd.daemon.kafkasocket, on the connection the daemon accepted: reno from the
    listener (a pacing congestion control without the fq qdisc times every packet of a loopback answer), and
    the host's TCP_NOTSENT_LOWAT rather than trio's 16 KiB (which stops a corked sendfile after 64 KiB)."""
    port, daemon = await _listener(short_dir)
    async with daemon as d:
        c = await RawKafka.connect(port)
        r = await c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert r["error_code"] == E.NONE
        [conn] = [k for k in d.connections if isinstance(k, KafkaConnection)]
        assert kafkasocket.congestion_control(conn.stream.socket) == kafkasocket.LOCAL_CONGESTION_CONTROL
        assert conn.stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT) == 0
        assert all(kafkasocket.congestion_control(b.sock) == kafkasocket.LOCAL_CONGESTION_CONTROL
                   for b in d.listeners if b.protocol == "kafka")
        # and a whole 1 MiB answer still arrives as stored
        big = LocalLog(R.log_dir("large-0"), "large", 0)
        try:
            loc = big.resolve_offset(0)
            r = await c.call(1, 11, fetch_request("large", 0, partition_max_bytes=1 << 20))
            got = r["responses"][0]["partitions"][0]["records"]
            assert got == segment_bytes("large-0", loc.segment, loc.position, len(got))
        finally:
            big.close()
        await c.aclose()


# ---------------------------------------------------------------------- bad input


async def _closed_then_served(port: int, data: bytes) -> None:
    """`data` gets the connection closed, with nothing answered; the daemon goes on serving others."""
    c = await RawKafka.connect(port)
    await c.send_raw(data)
    with trio.fail_after(10):
        assert await c.frame() is None
    await c.aclose()
    ok = await RawKafka.connect(port)
    r = await ok.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert r["error_code"] == E.NONE
    await ok.aclose()


def _frame(api_key: int, version: int, body: bytes, flexible: bool = False) -> bytes:
    head = struct.pack(">hhi", api_key, version, 1) + wire.string("bad", False) + (wire.NO_TAGS if flexible else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


async def test_bad_requests_close_their_connection_and_nothing_else(short_dir):  # noqa: F811
    port, daemon = await _listener(short_dir)
    async with daemon:
        await _closed_then_served(port, struct.pack(">i", 200 << 20))  # longer than max_frame_bytes
        await _closed_then_served(port, struct.pack(">i", 3) + b"abc")  # shorter than a header
        # a Fetch claiming 2**31 topics in a few bytes
        await _closed_then_served(port, _frame(1, 12, struct.pack(">iiiibii", -1, 500, 1, 1000, 0, 0, -1)
                                                + b"\xff\xff\xff\xff\x0f", flexible=True))
        await _closed_then_served(port, _frame(1, 11, b"\x00" * 5))  # cut short
        await _closed_then_served(port, _frame(57, 0, b""))  # an API the listener does not speak
        await _closed_then_served(port, _frame(1, 99, b""))  # a version it does not
        await _closed_then_served(port, _frame(0, 9, REQUESTS[0].encode({"acks": 0, "topic_data": []}, 9),
                                               flexible=True))  # acks=0 produce: no answer awaited, so closed
        # ApiVersions of an unknown version: UNSUPPORTED_VERSION with the versions, in a v0 body (KIP-511)
        c = await RawKafka.connect(port)
        await c.send_raw(_frame(18, 9, b""))
        frame = await c.frame()
        r = RESPONSES[18].decode(frame, 0, 4)
        assert r["error_code"] == E.UNSUPPORTED_VERSION and {k["api_key"] for k in r["api_keys"]} >= {0, 1, 2, 3}
        await c.aclose()


async def _unread_fetches(port: int, requests: list[tuple[int, dict]]) -> list[bytes]:
    """The response frames to `requests` (version, Fetch request), each sent on its own (a pause between) and
    none read until all are sent: the daemon's socket buffers fill, and answers are left part-written."""
    c = await RawKafka.connect(port)
    try:
        await c.call(1, *requests[0])  # the indexes read once: then every answer is in memory
        for i, (v, value) in enumerate(requests):
            body = struct.pack(">hhi", 1, v, i) + wire.string("raw", False) + (wire.NO_TAGS if v >= 12 else b"") + \
                REQUESTS[1].encode(value, v)
            await c.send_raw(struct.pack(">i", len(body)) + body)
            await trio.sleep(0.02)
        return [await c.frame() for _ in requests]
    finally:
        await c.aclose()


@pytest.mark.native  # in memory means the indexes' native view: without it every Fetch is the task's
async def test_fetch_answered_on_the_reactor_equals_the_connection_tasks_answer(short_dir, monkeypatch):  # noqa: F811
    """A plaintext Fetch whose answer is in memory is written by the reactor's handler, the rest of what the
    socket does not take (bytes, or a file Region part-sent) by the connection's task: pipelined fetches of every
    partition of the corpus, at every legacy and flexible version, sent while earlier answers are unread, give
    the bytes the task alone writes."""
    from lookupd.daemon.kafkaconn import KafkaConnection
    from lookupd.kafka import fetch as F

    partitions = sorted(os.listdir(R.require() / "logs"))
    rnd = __import__("random").Random(41)
    requests = []
    for i in range(24):
        value = fetch_request("plain", 0, max_bytes=64 << 20)
        value["topics"] = [{"topic": name.rsplit("-", 1)[0], "partitions": [
            {"partition": 0, "fetch_offset": rnd.choice((0, 0, 1, 230, 1000, 4999)), "partition_max_bytes": 1 << 20}]}
            for name in partitions]
        requests.append((4 + i % 9, value))  # versions 4 to 12 (12: flexible, a tail after each Region)
    left_regions = []
    write_now = KafkaConnection._write_parts_now

    def spy(self, parts, coalesced=False):
        write_now(self, parts, coalesced)
        left_regions.extend(p for p in self.unsent if isinstance(p, F.Region))

    monkeypatch.setattr(KafkaConnection, "_write_parts_now", spy)
    # trio's 16 KiB TCP_NOTSENT_LOWAT (what the Kafka connections give up): a socket that takes part of an answer
    monkeypatch.setattr(kafkasocket, "NOTSENT_LOWAT", 1 << 14)
    answers = {}
    for inline in (True, False):  # (without inline_hot_lookups every Fetch is the task's)
        port = free_port()
        async with running(os.path.join(short_dir, f"s{inline}"), inline_hot_lookups=inline,
                           kafka=KafkaSettings(listen=[f"127.0.0.1:{port}"])):
            answers[inline] = await _unread_fetches(port, requests)
        if inline:
            assert left_regions, "no answer was left part-sent by the reactor's handler: the test missed its case"
    assert answers[True] == answers[False]
    assert all(a is not None and len(a) > 1000 for a in answers[True])


@pytest.mark.native  # the C path is what is compared
async def test_fetch_finds_each_batch_as_translate_offset_does():
    """The Fetch's batch lookup (one native call where it can answer) equals LogSegment.translate_offset, the
    answer of record, at each batch's first, middle and last offset in every segment of the corpus, before
    its first (a gap) and one past the segment's last."""
    from lookupd.daemon.kafkabroker import _batch_at

    for name in sorted(os.listdir(R.require() / "logs")):
        llog = LocalLog(R.log_dir(name), name.rsplit("-", 1)[0], 0)
        try:
            for base in llog.base_offsets:
                seg = llog.segment(base)
                offset = base
                while True:
                    found = seg.translate_offset(offset)
                    assert _batch_at(seg, offset) == ((found.position, found.size) if found else None), (name, offset)
                    if found is None:
                        break
                    first, last = found.base_offset, found.offset
                    for probe in {first - 1, first, (first + last) // 2, last} - {offset}:
                        if probe >= base:
                            again = seg.translate_offset(probe)
                            assert _batch_at(seg, probe) == (again.position, again.size), (name, probe)
                    offset = last + 1
        finally:
            llog.close()


# ---------------------------------------------------------------------- Fetch read ahead


def _next_offset(records: bytes, offset: int) -> int:
    """Where a consumer fetches next after `records` (fetched from `offset`): one past the last offset of the
    last batch whole in them (v2: base offset + last offset delta; a legacy entry's offset is its last)."""
    pos = 0
    while pos + 27 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break
        offset = base + (struct.unpack_from(">i", records, pos + 23)[0] if records[pos + 16] >= 2 else 0) + 1
        pos += 12 + length
    return offset


async def _consume(port: int, topic: str, version: int, partition_max_bytes: int, isolation: int = 0) -> list[bytes]:
    """Every Fetch answer's frame (correlation id on) of a consumer reading partition 0 of `topic` from its
    log start (told by an OFFSET_OUT_OF_RANGE for offset 0 where it is later) to its end, each next request
    from one past the last batch it got whole."""
    c = await RawKafka.connect(port)
    frames, offset = [], 0
    try:
        while True:
            c.correlation += 1
            value = fetch_request(topic, offset, partition_max_bytes=partition_max_bytes, isolation=isolation)
            body = struct.pack(">hhi", 1, version, c.correlation) + wire.string("raw", False) + \
                (wire.NO_TAGS if version >= 12 else b"") + REQUESTS[1].encode(value, version)
            await c.send_raw(struct.pack(">i", len(body)) + body)
            frame = await c.frame()
            assert frame is not None
            frames.append(frame)
            p = RESPONSES[1].decode(frame, version, 5 if version >= 12 else 4)["responses"][0]["partitions"][0]
            if p["error_code"] == E.OFFSET_OUT_OF_RANGE and len(frames) == 1:  # the log starts later
                offset = p["log_start_offset"]
                continue
            assert p["error_code"] == E.NONE, (topic, offset, p["error_code"])
            if not p["records"]:
                return frames
            offset = _next_offset(p["records"], offset)
    finally:
        await c.aclose()


def _counting_read_ahead(monkeypatch) -> list:
    """The FetchAhead of every connection made from now on (their `hits`: answers read ahead that went out)."""
    from lookupd.daemon.fetchahead import FetchAhead

    made, init = [], FetchAhead.__init__

    def collect(self, *args):
        init(self, *args)
        made.append(self)

    monkeypatch.setattr(FetchAhead, "__init__", collect)
    return made


@pytest.mark.native  # read ahead only where the reactor answers, which needs the indexes' native view
async def test_fetches_read_ahead_are_the_answers_read_when_asked(short_dir, monkeypatch):  # noqa: F811
    """A consumer reading each partition of the corpus from start to end, each answer cut mid-batch by
    partition_max_bytes as Kafka's slice is, at a legacy and a flexible version (and txn-0 under
    read_committed): the answers the reactor read ahead (lookupd.daemon.fetchahead) are the bytes a daemon that
    never reads ahead sends (inline_hot_lookups off), and most answers were read ahead."""
    made = _counting_read_ahead(monkeypatch)
    cases = [(name.rsplit("-", 1)[0], v, 1 << 20 if name == "large-0" else 7000, 0)
             for name in sorted(os.listdir(R.require() / "logs")) for v in (11, 12)] + [("txn", 12, 5000, 1)]
    answers = {}
    for inline in (True, False):
        port = free_port()
        async with running(os.path.join(short_dir, f"s{inline}"), inline_hot_lookups=inline,
                           kafka=KafkaSettings(listen=[f"127.0.0.1:{port}"])):
            answers[inline] = [await _consume(port, *case) for case in cases]
        if inline:
            hits = sum(a.hits for a in made)
    assert answers[True] == answers[False]
    requests = sum(len(frames) for frames in answers[True])
    assert hits >= requests // 2, f"{hits} of {requests} answers were read ahead"


@pytest.mark.native
async def test_an_answer_read_ahead_is_not_sent_once_the_log_grew(short_dir, monkeypatch):  # noqa: F811
    """What was read ahead for a consumer's next Fetch holds the log end and high watermark of then: after an
    append it is read again, and the answer names the new log end; unchanged, it goes out as read."""
    from lookupd.format.builder import build_batch
    from lookupd.tools.writer import LogWriter

    made = _counting_read_ahead(monkeypatch)
    logs = os.path.join(short_dir, "logs")
    w = LogWriter(os.path.join(logs, "grow-0"))
    batch = [(1_700_000_000_000 + j, None, b"v" * 200, ()) for j in range(10)]
    for base in range(0, 100, 10):
        w.append(build_batch(batch, base_offset=base))
    one = len(build_batch(batch, base_offset=0))
    port = free_port()
    try:
        async with running(os.path.join(short_dir, "s"), log_dirs=[logs],
                           kafka=KafkaSettings(listen=[f"127.0.0.1:{port}"])):
            c = await RawKafka.connect(port)
            try:
                async def fetch(offset):
                    r = await c.call(1, 11, fetch_request("grow", offset, partition_max_bytes=2 * one + 10))
                    return r["responses"][0]["partitions"][0]

                first = await fetch(0)  # two batches and a piece of the third: the next fetch is from 20
                assert (first["high_watermark"], _next_offset(first["records"], 0)) == (100, 20)
                await fetch(20)  # the indexes in memory now, the reactor answers, and reads the fetch from 40 ahead
                hits = made[-1].hits
                w.append(build_batch(batch, base_offset=100))  # the broker appends meanwhile
                second = await fetch(40)
                assert second["high_watermark"] == 110 and made[-1].hits == hits
                third = await fetch(60)  # nothing changed since the last answer: what was read ahead goes out
                assert third["high_watermark"] == 110 and made[-1].hits == hits + 1
                assert third["records"] == segment_bytes("grow-0", 0, 6 * one, 2 * one + 10,
                                                         part_dir=os.path.join(logs, "grow-0"))
            finally:
                await c.aclose()
    finally:
        w.close()


async def test_next_fetch_offset_is_where_a_consumer_fetches_next():
    """LogSegment.next_fetch_offset (what the listener reads ahead for) for the bytes from a batch of each
    segment of the corpus to an end at, past or inside a later batch: the offset a consumer fetches next from
    those bytes, None only where no batch in them is whole."""
    import random

    rnd = random.Random(50)
    checked = 0
    for name in sorted(os.listdir(R.require() / "logs")):
        llog = LocalLog(R.log_dir(name), name.rsplit("-", 1)[0], 0)
        try:
            for base in llog.base_offsets:
                seg = llog.segment(base)
                batches, offset = [], base
                while (found := seg.translate_offset(offset)) is not None:
                    batches.append((found.position, found.size))
                    offset = found.offset + 1
                size = seg.size()
                for i in sorted(rnd.sample(range(len(batches)), min(len(batches), 12))):
                    position = batches[i][0]
                    later = batches[i:i + 40]
                    ends = {p + n for p, n in later} | {p + n // 2 for p, n in later} | {position + 1, size}
                    for end in ends:
                        with open(os.path.join(R.log_dir(name), f"{base:020d}.log"), "rb") as f:
                            f.seek(position)
                            records = f.read(end - position)
                        want = _next_offset(records, None)
                        assert seg.next_fetch_offset(position, end) == want, (name, base, position, end)
                        checked += want is not None
        finally:
            llog.close()
    assert checked > 1000


@pytest.mark.native
async def test_a_client_that_asks_for_something_else_gets_little_read_ahead(short_dir, monkeypatch):  # noqa: F811
    """A client whose next Fetch is never the one expected (here: offsets going backwards) has the listener read
    ahead for it only MISSES_BEFORE_PAUSE times, then for one answer in PAUSED_EVERY; its answers are as ever."""
    from lookupd.daemon import fetchahead
    from lookupd.daemon.kafkabroker import KafkaBroker

    calls, next_fetch = [], KafkaBroker.next_fetch

    def counted(self, req, plan):
        calls.append(req)
        return next_fetch(self, req, plan)

    monkeypatch.setattr(KafkaBroker, "next_fetch", counted)
    port, daemon = await _listener(short_dir)
    async with daemon:
        c = await RawKafka.connect(port)
        try:
            await c.call(1, 11, fetch_request("plain", 0, partition_max_bytes=3000))  # the indexes read
            calls.clear()
            for offset in range(4000, 0, -50):  # 80 requests, each before the last
                r = await c.call(1, 11, fetch_request("plain", offset, partition_max_bytes=3000))
                assert r["responses"][0]["partitions"][0]["records"]
        finally:
            await c.aclose()
    paused = fetchahead.MISSES_BEFORE_PAUSE + 80 // fetchahead.PAUSED_EVERY
    assert fetchahead.MISSES_BEFORE_PAUSE <= len(calls) <= paused + 1, len(calls)


async def test_a_topic_named_by_id_is_found_and_so_is_one_listed_later(tmp_path):
    """KafkaBroker.topic_by_id (what Fetch and Metadata naming topics by id, from version 13, ask) finds a topic
    by the id in its partition.metadata; one made after the map was, once the log dirs are listed again; and
    none for an id no topic has."""
    import base64

    from lookupd.daemon.kafkabroker import Endpoint, KafkaBroker
    from lookupd.log.logmanager import LogManager
    from lookupd.tools.tieredwriter import write_partition_metadata

    def make(topic: str, raw: bytes) -> None:
        directory = tmp_path / f"{topic}-0"
        directory.mkdir()
        write_partition_metadata(directory, base64.urlsafe_b64encode(raw).decode().rstrip("="))

    ids = {name: bytes([i + 1]) * 16 for i, name in enumerate(("alpha", "beta", "gamma"))}
    make("alpha", ids["alpha"])
    make("beta", ids["beta"])
    manager = LogManager([str(tmp_path)])
    try:
        broker = KafkaBroker(manager, None, Endpoint(0, "127.0.0.1", 9092), "c")
        assert [broker.topic_by_id(ids[t]) for t in ("beta", "alpha", "gamma")] == ["beta", "alpha", None]
        make("gamma", ids["gamma"])
        assert broker.topic_by_id(ids["gamma"]) is None  # not listed yet
        manager.refresh()
        assert broker.topic_by_id(ids["gamma"]) == "gamma" and broker.topic_by_id(bytes(16)) is None
    finally:
        manager.close()


@pytest.mark.native
async def test_fetches_read_ahead_over_lying_indexes_are_the_answers_read_when_asked(  # noqa: F811
        short_dir, monkeypatch, tmp_path):
    """The same over a copy of plain-0 whose offset indexes lie (each entry pointing at the batch of the entry
    before it) or are gone: the next request is told from a walk that starts elsewhere or takes the bounded
    walk from the answer's first batch, and every answer is still the one read when asked."""
    import shutil

    part = tmp_path / "logs" / "damaged-0"
    shutil.copytree(R.log_dir("plain-0"), part)
    indexes = sorted(part.glob("*.index"))
    for index in indexes[::2]:
        raw = bytearray(index.read_bytes())
        before = 0
        for at in range(0, len(raw) - 7, 8):
            rel, position = struct.unpack_from(">ii", raw, at)
            if rel or position:
                struct.pack_into(">ii", raw, at, rel, before)
                before = position
        index.write_bytes(bytes(raw))
    for index in indexes[1::4]:
        index.unlink()
    made = _counting_read_ahead(monkeypatch)
    answers = {}
    for inline in (True, False):
        port = free_port()
        async with running(os.path.join(short_dir, f"s{inline}"), log_dirs=[tmp_path / "logs"],
                           inline_hot_lookups=inline, kafka=KafkaSettings(listen=[f"127.0.0.1:{port}"])):
            answers[inline] = [await _consume(port, "damaged", v, 7000) for v in (11, 12)]
        if inline:
            hits = sum(a.hits for a in made)
    assert answers[True] == answers[False]
    requests = sum(len(frames) for frames in answers[True])
    assert hits >= requests // 2, f"{hits} of {requests} answers were read ahead"


def _kafka_counters(metrics_port: int) -> dict[str, float]:
    """The lookupd_kafka_* counters a daemon's metrics endpoint serves."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("lookupd_kafka_") and line.split("{")[0].endswith("_total")}


@pytest.mark.native  # read ahead only where the reactor answers, which needs the indexes' native view
async def test_busy_poll_finds_a_consumers_next_requests_and_changes_no_answer(tmp_path):
    """A consumer keeping up, against the daemon as a subprocess: with kafka.busy_poll_us the reactor finds some
    of its requests by polling for them after an answer read ahead, rather than by being woken (the metrics'
    lookupd_kafka_requests_caught_polling); with 0 it never polls; and the answers are the same bytes."""
    from daemon_helpers import start_daemon, stop_daemon

    answers, counters = {}, {}
    for busy_poll_us in (1000, 0):
        d = tmp_path / str(busy_poll_us)
        d.mkdir()
        port, metrics, sock = free_port(), free_port(), str(d / "s.sock")
        (d / "c.toml").write_text(f'log_dirs = ["{R.require() / "logs"}"]\nsocket = "{sock}"\n'
                                  f'metrics = "127.0.0.1:{metrics}"\n'
                                  f'[kafka]\nlisten = "127.0.0.1:{port}"\nbusy_poll_us = {busy_poll_us}\n')
        proc = await trio.to_thread.run_sync(start_daemon, ["--config", str(d / "c.toml")], str(d), sock)
        try:
            answers[busy_poll_us] = [await _consume(port, topic, 12, 7000) for topic in ("plain", "large")]
            counters[busy_poll_us] = await trio.to_thread.run_sync(_kafka_counters, metrics)
        finally:
            code, err = await trio.to_thread.run_sync(stop_daemon, proc)
        assert code == 0, err
    assert answers[1000] == answers[0]
    requests = sum(len(frames) for frames in answers[0])
    on, off = counters[1000], counters[0]
    assert on["lookupd_kafka_fetches_read_ahead_total"] >= requests // 2, (on, requests)
    assert off["lookupd_kafka_fetches_read_ahead_total"] >= requests // 2, (off, requests)
    assert on["lookupd_kafka_requests_caught_polling_total"] > 0, (on, requests)
    assert off["lookupd_kafka_requests_caught_polling_total"] == 0, off


async def test_busy_poll_setting_is_checked_and_off_on_one_cpu():
    """kafka.busy_poll_us: 200 µs by default, 0 to MAX_BUSY_POLL_S, an error naming the key past either end; and
    no busy poll at all where the daemon may run on one CPU only (the client it waits for would need that CPU)."""
    import subprocess
    import sys

    from lookupd.daemon.kafkasettings import busy_poll_seconds
    from lookupd.errors import InvalidArgument

    assert KafkaSettings().busy_poll_us == 200
    for good in (0, 1000):
        KafkaSettings.from_table({"busy_poll_us": good}, None).check()
    for bad in (-1, 1001):
        with pytest.raises(InvalidArgument, match=r"kafka.busy_poll_us must be 0-1000 \(microseconds\), got"):
            KafkaSettings.from_table({"busy_poll_us": bad}, None).check()
    with pytest.raises(InvalidArgument, match="kafka.busy_poll_us"):
        KafkaSettings.from_table({"busy_poll_us": "fast"}, None)
    assert len(os.sched_getaffinity(0)) > 1, "this test needs two CPUs, as CI has"
    assert busy_poll_seconds(KafkaSettings()) == 200e-6
    assert busy_poll_seconds(KafkaSettings(busy_poll_us=0)) == 0
    one_cpu = subprocess.run(
        [sys.executable, "-c", "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
         "from lookupd.daemon.kafkasettings import KafkaSettings, busy_poll_seconds; "
         "print(busy_poll_seconds(KafkaSettings()))"], capture_output=True, text=True, check=True,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert one_cpu.stdout.strip() == "0.0"
