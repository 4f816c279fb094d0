"""The Kafka listener against its anchors, in the same run (issue 41's targets):

* Fetch MB/s from a warm log, a raw Fetch client discarding the bytes, against reading the same segment
  bytes from the files (target >= 0.5x): plaintext, so the listener's records go out by sendfile.
  Beside them, a by-hand server of the same bytes: one that does nothing but sendfile the asked range over
  loopback TCP (no protocol, no lookup) to the same kind of client, to tell what the transport costs here
  from what the listener adds: with the host's congestion control, and again with its listening
  socket on reno, as the listener's is (lookupd.daemon.kafkasocket: no packet pacing); and that one again
  to a client doing the raw Fetch client's own work for each answer (building the request, hopping over the
  answer's whole batches to where the next fetch starts): the most a server that sleeps between requests can
  give that client here. And the listener again with its busy poll off (kafka.busy_poll_us = 0), MB/s and the
  listener's CPU per MB both ways: what polling for a consumer's next request gains and costs.
* ListOffsets by timestamp, one round trip, against the msgpack `offset_for_timestamp` round trip, both
  over loopback TCP to the same daemon (target p50 <= 1.2x); msgpack over its Unix socket too, for scale.
* confluent-kafka consuming a topic: records/s, and the listener's CPU per MB against the consumer's CPU
  per MB (target <= 0.25x: the listener is not what limits a consumer).

    python bench/bench_kafka.py [--quick]
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
from common import Figure, main, ratio  # noqa: E402
from lookupd.daemon import kafkasocket  # noqa: E402

TOPIC = "bench"
RECORD_BYTES = 150  # a typical small event
RECORDS_PER_BATCH = 100  # ~16 KB batches, as a producer with linger and batch.size 16 KiB makes
FETCH_BYTES = 1 << 20  # max.partition.fetch.bytes' default
LARGE_FETCH_BYTES = 8 << 20  # the daemon's max_read_bytes: the most one Fetch answer holds
TIMESTAMP_LOOKUPS = 2000
# The by-hand server with the congestion control the listener gives loopback connections: the transport
# without the pacing a host default such as BBR brings.
LOCAL_CONGESTION_CONTROL = kafkasocket.LOCAL_CONGESTION_CONTROL.decode()
UNPACED_SERVER = "the same segment bytes sent by the minimal sendfile server, its listening socket on reno, warm"
CONSUMER_CEILING = "the same segment bytes sent by the minimal sendfile server on reno to a client doing the Fetch " \
                   "client's work, warm"


def write_partition(root: str, megabytes: int) -> tuple[str, int, list[int]]:
    """A partition of about `megabytes` MB of uncompressed batches; (log dir, records, batch max timestamps)."""
    from lookupd.format.builder import build_batch
    from lookupd.tools.writer import LogWriter

    part = os.path.join(root, f"{TOPIC}-0")
    w = LogWriter(part, segment_bytes=64 << 20)
    rnd = random.Random(41)
    payload = rnd.randbytes(RECORD_BYTES * 64)
    offset, ts, stamps = 0, 1_700_000_000_000, []
    while offset * (RECORD_BYTES + 20) < megabytes << 20:
        recs = []
        for j in range(RECORDS_PER_BATCH):
            at = rnd.randrange(len(payload) - RECORD_BYTES)
            recs.append((ts + j, None, payload[at:at + RECORD_BYTES], ()))
        w.append(build_batch(recs, base_offset=offset))
        stamps.append(ts + RECORDS_PER_BATCH - 1)
        offset += RECORDS_PER_BATCH
        ts += RECORDS_PER_BATCH
    w.close(trim_active=True)
    return root, offset, stamps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(tmp: str, logs: str, kafka_settings: str = "") -> tuple[subprocess.Popen, int, int, str]:
    """The daemon serving `logs`, its [kafka] table the listen address and `kafka_settings` (TOML lines)."""
    kafka, tcp = free_port(), free_port()
    sock = os.path.join(tmp, "s.sock")
    conf = os.path.join(tmp, "c.toml")
    with open(conf, "w") as f:
        f.write(f'log_dirs = ["{logs}"]\nsocket = "{sock}"\ntcp = "127.0.0.1:{tcp}"\n'
                f'[kafka]\nlisten = "127.0.0.1:{kafka}"\n{kafka_settings}')
    proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--config", conf], cwd=tmp,
                            env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", kafka), timeout=1).close()
            return proc, kafka, tcp, sock
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the daemon did not listen")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_fine(pid: int) -> float:
    """The time a process's threads have run on a CPU, to the nanosecond (/proc/PID/task/*/schedstat): a raw
    client's pass over the partition lasts tens of milliseconds, a few of /proc/PID/stat's clock ticks."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


# ---------------------------------------------------------------------- raw Kafka requests


def _request(api_key: int, version: int, correlation: int, body: bytes, flexible: bool) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation, 3) + b"raw" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


def _fetch_body(offset: int, fetch_bytes: int) -> bytes:
    """Fetch v11 (not flexible): one partition from `offset`, `fetch_bytes` at most, no wait."""
    return struct.pack(">iiiibiii", -1, 0, 1, 64 << 20, 0, 0, -1, 1) + struct.pack(">h", len(TOPIC)) + \
        TOPIC.encode() + struct.pack(">iiiqqi", 1, 0, -1, offset, -1, fetch_bytes) + struct.pack(">ih", 0, 0)


def _recv_exact(s: socket.socket, buf: memoryview) -> None:
    got = 0
    while got < len(buf):
        n = s.recv_into(buf[got:], len(buf) - got, socket.MSG_WAITALL)  # one call, woken once it is all there
        if not n:
            raise ConnectionError("closed")
        got += n


def _past_whole_batches(buf, pos: int, stop: int, offset: int) -> tuple[int, int]:
    """(the next fetch offset, where the batches whole in buf[pos:stop] end): what a consumer works out from
    each answer, hopping over whole batches ([base offset, size], then size bytes) to the last one's last
    offset; `offset` unchanged where none is whole."""
    while pos + 12 <= stop:
        base, blen = struct.unpack_from(">qi", buf, pos)
        if pos + 12 + blen > stop:
            break
        last_delta = struct.unpack_from(">i", buf, pos + 23)[0]
        offset = base + last_delta + 1
        pos += 12 + blen
    return offset, pos


def fetch_throughput(port: int, end: int, fetch_bytes: int = FETCH_BYTES) -> tuple[float, int]:
    """(MB/s, bytes) of Fetch requests reading the partition from 0 to `end`, the bytes discarded but for the
    batch headers that say where the next fetch starts."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(fetch_bytes + (1 << 16))
    size4 = bytearray(4)
    offset, total, n = 0, 0, 0
    t0 = time.perf_counter()
    while offset < end:
        n += 1
        s.sendall(_request(1, 11, n, _fetch_body(offset, fetch_bytes), False))
        _recv_exact(s, memoryview(size4))
        size = struct.unpack(">i", size4)[0]
        if size > len(buf):
            buf = bytearray(size)
        view = memoryview(buf)[:size]
        _recv_exact(s, view)
        # v11: correlation 4, throttle 4, error 2, session 4, topics 4, name 2+5, partitions 4, partition 4,
        # error 2, hw 8, lso 8, log start 8, aborted 4, preferred replica 4, records size 4
        at = 4 + 4 + 2 + 4 + 4 + 2 + len(TOPIC) + 4 + 4 + 2 + 8 + 8 + 8 + 4 + 4
        length = struct.unpack_from(">i", buf, at)[0]
        offset, _ = _past_whole_batches(buf, at + 4, at + 4 + length, offset)
        total += length
    s.close()
    return total / (time.perf_counter() - t0) / 1e6, total


def file_throughput(part_dir: str) -> tuple[float, int]:
    """MB/s of reading the partition's .log files in FETCH_BYTES reads (the page cache warm), bytes discarded."""
    buf = bytearray(FETCH_BYTES)
    total = 0
    t0 = time.perf_counter()
    for name in sorted(os.listdir(part_dir)):
        if not name.endswith(".log"):
            continue
        fd = os.open(os.path.join(part_dir, name), os.O_RDONLY)
        try:
            pos = 0
            while (n := os.preadv(fd, [buf], pos)) > 0:
                pos += n
            total += pos
        finally:
            os.close(fd)
    return total / (time.perf_counter() - t0) / 1e6, total


# A by-hand server of the same bytes: it only answers "(segment, position, length)" with a 4-byte length and
# sendfile of that range, as the listener's records go out, with no protocol and no lookup around it (the
# length sent with MSG_MORE, so it leaves in the same segment as the first bytes, as the listener's header does).
# Its listening socket has the host's congestion control, or the one named in $LISTEN_CONGESTION.
SENDFILE_SERVER = """
import os, socket, struct, sys
files = [os.open(p, os.O_RDONLY) for p in sys.argv[2:]]
with socket.create_server(("127.0.0.1", int(sys.argv[1]))) as srv:
    if os.environ.get("LISTEN_CONGESTION"):
        srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, os.environ["LISTEN_CONGESTION"].encode())
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while len(req := conn.recv(16, socket.MSG_WAITALL)) == 16:
                seg, pos, length = struct.unpack(">iqi", req)
                size = max(0, min(length, os.fstat(files[seg]).st_size - pos))
                conn.sendall(struct.pack(">i", size), socket.MSG_MORE)  # leaves with the first bytes of the range
                sent = 0
                while sent < size:
                    sent += os.sendfile(conn.fileno(), files[seg], pos + sent, size - sent)
"""


def start_sendfile_server(part_dir: str, congestion: str = "") -> tuple[subprocess.Popen, int]:
    """The by-hand server, its listening socket with `congestion` control (the host's default if "")."""
    port = free_port()
    logs = sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log"))
    proc = subprocess.Popen([sys.executable, "-c", SENDFILE_SERVER, str(port), *logs], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, LISTEN_CONGESTION=congestion))
    proc.stdout.readline()
    return proc, port


def sendfile_throughput(port: int, part_dir: str, fetch_bytes: int = FETCH_BYTES) -> tuple[float, int]:
    """(MB/s, bytes) of the minimal server sending every .log of the partition in `fetch_bytes` pieces to a
    client that receives them as fetch_throughput does (into one reused buffer, discarded)."""
    sizes = [os.path.getsize(os.path.join(part_dir, n)) for n in sorted(os.listdir(part_dir)) if n.endswith(".log")]
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, size4, total = bytearray(fetch_bytes), bytearray(4), 0
    t0 = time.perf_counter()
    for seg, end in enumerate(sizes):
        for pos in range(0, end, fetch_bytes):
            s.sendall(struct.pack(">iqi", seg, pos, fetch_bytes))
            _recv_exact(s, memoryview(size4))
            size = struct.unpack(">i", size4)[0]
            _recv_exact(s, memoryview(buf)[:size])
            total += size
    s.close()
    return total / (time.perf_counter() - t0) / 1e6, total


def sendfile_consumer_throughput(port: int, part_dir: str, fetch_bytes: int = FETCH_BYTES) -> tuple[float, int]:
    """(MB/s, bytes) of the by-hand server sending every .log of the partition to a client that does a Fetch
    client's own work for each answer, as fetch_throughput does: it builds the Fetch request it would send,
    and hops over the answer's whole batches to find where the next one starts (the next request asks from
    there, as a consumer asks again for a batch cut off at the end). What a server that adds nothing to the
    transport and sleeps between requests gives such a client here (the listener's busy poll can give more)."""
    sizes = [os.path.getsize(os.path.join(part_dir, n)) for n in sorted(os.listdir(part_dir)) if n.endswith(".log")]
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, size4, total, n, offset = bytearray(fetch_bytes), bytearray(4), 0, 0, 0
    t0 = time.perf_counter()
    for seg, end in enumerate(sizes):
        pos = 0
        while pos < end:
            n += 1
            _request(1, 11, n, _fetch_body(offset, fetch_bytes), False)  # built as the Fetch client builds it
            s.sendall(struct.pack(">iqi", seg, pos, fetch_bytes))
            _recv_exact(s, memoryview(size4))
            size = struct.unpack(">i", size4)[0]
            _recv_exact(s, memoryview(buf)[:size])
            offset, whole = _past_whole_batches(buf, 0, size, offset)
            pos += whole or size
            total += size
    s.close()
    return total / (time.perf_counter() - t0) / 1e6, total


# ---------------------------------------------------------------------- round trips


def list_offsets_p50(port: int, stamps: list[int]) -> float:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, out = bytearray(1 << 16), []
    for i, ts in enumerate(stamps):
        # ListOffsets v7 (flexible): replica, isolation, topics[name, partitions[partition, epoch, ts]]
        body = struct.pack(">ib", -1, 0) + b"\x02" + bytes((len(TOPIC) + 1,)) + TOPIC.encode() + b"\x02" + \
            struct.pack(">iiq", 0, -1, ts) + b"\x00\x00\x00"
        req = _request(2, 7, i, body, True)
        t0 = time.perf_counter()
        s.sendall(req)
        got = s.recv_into(buf)  # one read, as the msgpack client's: the answer is a few dozen bytes
        while got < 4 or got < 4 + struct.unpack_from(">i", buf)[0]:
            got += s.recv_into(memoryview(buf)[got:])
        out.append(time.perf_counter() - t0)
    s.close()
    return statistics.median(out) * 1e6


def msgpack_p50(sock: socket.socket, stamps: list[int]) -> float:
    sock.setblocking(True)
    unpacker = msgpack.Unpacker(raw=False)
    out = []
    for i, ts in enumerate(stamps):
        req = msgpack.packb([0, i, "offset_for_timestamp", [TOPIC, 0, ts]])
        t0 = time.perf_counter()
        sock.sendall(req)
        while True:
            unpacker.feed(sock.recv(1 << 16))
            got = next(unpacker, None)
            if got is not None:
                break
        out.append(time.perf_counter() - t0)
        assert got[2] is None, got
    sock.close()
    return statistics.median(out) * 1e6


# ---------------------------------------------------------------------- confluent-kafka

CONSUMER = """
import sys, time
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "bench", "enable.auto.commit": False,
              "fetch.message.max.bytes": 1048576})
end = int(sys.argv[2])
c.assign([TopicPartition("bench", 0, -2)])
n, size, t0 = 0, 0, time.perf_counter()
while n < end:
    for m in c.consume(10000, timeout=1):
        if not m.error():
            n += 1
            size += len(m.value())
print(n, size, time.perf_counter() - t0)
c.close()
"""


def confluent_consume(port: int, end: int, daemon_pid: int) -> dict:
    before = cpu_seconds(daemon_pid)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER, f"127.0.0.1:{port}", str(end)], stdout=subprocess.PIPE,
                            text=True)
    out, _ = proc.communicate(timeout=600)
    n, size, seconds = out.split()
    return {"records": int(n), "seconds": float(seconds), "wall": time.perf_counter() - t0,
            "daemon_cpu": cpu_seconds(daemon_pid) - before}


def run(quick: bool = False) -> list[Figure]:
    import resource

    tmp = tempfile.mkdtemp(prefix="lkbk", dir="/tmp")
    megabytes = 48 if quick else 192
    repeats = 3 if quick else 5
    logs, end, stamps = write_partition(os.path.join(tmp, "logs"), megabytes)
    part = os.path.join(logs, f"{TOPIC}-0")
    proc, kafka, tcp, unix = start_daemon(tmp, logs)
    os.makedirs(os.path.join(tmp, "no-busy-poll"))
    still, still_port, _, _ = start_daemon(os.path.join(tmp, "no-busy-poll"), logs, "busy_poll_us = 0\n")
    plain, plain_port = start_sendfile_server(part)
    unpaced, unpaced_port = start_sendfile_server(part, LOCAL_CONGESTION_CONTROL)
    figures: list[Figure] = []
    try:
        file_throughput(part)  # warm the page cache
        fetch_throughput(kafka, end)
        fetch_throughput(still_port, end)
        sendfile_throughput(plain_port, part)
        sendfile_throughput(unpaced_port, part)
        sendfile_consumer_throughput(unpaced_port, part)
        fetch, large, files, ceiling, unpaced_ceiling, consumer_ceiling = [], [], [], [], [], []
        unpolled, cpu, unpolled_cpu = [], [], []
        for _ in range(repeats):
            for port, pid, rate, per_mb in ((kafka, proc.pid, fetch, cpu), (still_port, still.pid, unpolled, unpolled_cpu)):
                before = cpu_seconds_fine(pid)
                mbs, total = fetch_throughput(port, end)
                rate.append(mbs)
                per_mb.append((cpu_seconds_fine(pid) - before) / (total / 1e6) * 1000)
            large.append(fetch_throughput(kafka, end, LARGE_FETCH_BYTES)[0])
            files.append(file_throughput(part)[0])
            ceiling.append(sendfile_throughput(plain_port, part)[0])
            unpaced_ceiling.append(sendfile_throughput(unpaced_port, part)[0])
            consumer_ceiling.append(sendfile_consumer_throughput(unpaced_port, part)[0])
        figures.append(Figure("kafka listener: Fetch MB/s, warm, raw client", "MB/s", fetch, "kafka",
                              {"megabytes": megabytes, "fetch_bytes": FETCH_BYTES}, True))
        figures.append(Figure("kafka listener: Fetch MB/s, warm, raw client, busy poll off", "MB/s", unpolled, "kafka",
                              {"megabytes": megabytes, "fetch_bytes": FETCH_BYTES, "busy_poll_us": 0}, True))
        figures.append(Figure("kafka listener CPU per MB fetched, raw client", "ms/MB", cpu, "kafka",
                              {"fetch_bytes": FETCH_BYTES}))
        figures.append(Figure("kafka listener CPU per MB fetched, raw client, busy poll off", "ms/MB", unpolled_cpu,
                              "kafka", {"fetch_bytes": FETCH_BYTES, "busy_poll_us": 0}))
        figures.append(Figure("kafka listener: Fetch MB/s, warm, raw client, 8 MiB fetches", "MB/s", large, "kafka",
                              {"megabytes": megabytes, "fetch_bytes": LARGE_FETCH_BYTES}, True))
        figures.append(Figure("the same segment bytes read from the files, warm", "MB/s", files, "kafka",
                              {"megabytes": megabytes, "read_bytes": FETCH_BYTES}, True))
        figures.append(Figure("the same segment bytes sent by a minimal sendfile server over loopback TCP, warm", "MB/s",
                              ceiling, "kafka", {"megabytes": megabytes, "read_bytes": FETCH_BYTES}, True))
        figures.append(Figure(UNPACED_SERVER, "MB/s", unpaced_ceiling, "kafka",
                              {"megabytes": megabytes, "read_bytes": FETCH_BYTES,
                               "congestion_control": LOCAL_CONGESTION_CONTROL}, True))
        figures.append(Figure(CONSUMER_CEILING, "MB/s", consumer_ceiling, "kafka",
                              {"megabytes": megabytes, "read_bytes": FETCH_BYTES,
                               "congestion_control": LOCAL_CONGESTION_CONTROL}, True))

        rnd = random.Random(7)
        probes = [rnd.choice(stamps) - rnd.randrange(RECORDS_PER_BATCH) for _ in range(TIMESTAMP_LOOKUPS)]
        list_offsets_p50(kafka, probes[:200])  # warm
        lo, mp_tcp, mp_unix = [], [], []
        for _ in range(repeats):
            lo.append(list_offsets_p50(kafka, probes))
            mp_tcp.append(msgpack_p50(socket.create_connection(("127.0.0.1", tcp)), probes))
            u = socket.socket(socket.AF_UNIX)
            u.connect(unix)
            mp_unix.append(msgpack_p50(u, probes))
        figures.append(Figure("kafka listener: ListOffsets by timestamp round trip p50, TCP", "us", lo, "kafka"))
        figures.append(Figure("msgpack offset_for_timestamp round trip p50, TCP", "us", mp_tcp, "kafka"))
        figures.append(Figure("msgpack offset_for_timestamp round trip p50, Unix socket", "us", mp_unix, "kafka"))

        rate, listener_mb, consumer_mb = [], [], []
        for _ in range(max(2, repeats - 2)):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            got = confluent_consume(kafka, end, proc.pid)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            consumer_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            mb = sum(os.path.getsize(os.path.join(part, n)) for n in os.listdir(part) if n.endswith(".log")) / 1e6
            rate.append(got["records"] / got["seconds"])
            listener_mb.append(got["daemon_cpu"] / mb * 1000)
            consumer_mb.append(consumer_cpu / mb * 1000)
        figures.append(Figure("confluent-kafka consuming from the listener: records/s", "records/s", rate, "kafka",
                              {"records": end}, True))
        figures.append(Figure("kafka listener CPU per MB consumed", "ms/MB", listener_mb, "kafka"))
        figures.append(Figure("confluent-kafka consumer CPU per MB consumed", "ms/MB", consumer_mb, "kafka"))
    finally:
        for server in (plain, unpaced):
            server.kill()
            server.wait(30)
        still.terminate()
        still.wait(30)
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    return [
        ratio("kafka Fetch vs file reads, warm", figures, "kafka listener: Fetch MB/s, warm, raw client",
              "the same segment bytes read from the files, warm",
              "Fetch throughput through the listener, 1 MiB a request, over reading the segment files directly "
              "(target >= 0.5)"),
        ratio("kafka Fetch of 8 MiB vs file reads, warm", figures,
              "kafka listener: Fetch MB/s, warm, raw client, 8 MiB fetches",
              "the same segment bytes read from the files, warm",
              "Fetch throughput through the listener, 8 MiB a request, over reading the segment files directly"),
        ratio("minimal sendfile server vs file reads, warm", figures,
              "the same segment bytes sent by a minimal sendfile server over loopback TCP, warm",
              "the same segment bytes read from the files, warm",
              "a by-hand server sending the same bytes over loopback TCP, 1 MiB a request, over reading the "
              "segment files directly: what the transport alone leaves of the file reads, as a simple server meets it"),
        ratio("minimal sendfile server on reno vs file reads, warm", figures, UNPACED_SERVER,
              "the same segment bytes read from the files, warm",
              "the by-hand server again, its listening socket on reno as the listener's is "
              "(lookupd.daemon.kafkasocket): what the transport leaves of the file reads with no packet pacing"),
        ratio("minimal sendfile server on reno to a Fetch client vs file reads, warm", figures, CONSUMER_CEILING,
              "the same segment bytes read from the files, warm",
              "the by-hand server on reno again, its client doing the raw Fetch client's own work for each answer "
              "(building the request, hopping over the answer's whole batches): the most a server that sleeps "
              "between requests gives that client here"),
        ratio("kafka Fetch vs the minimal sendfile server to a Fetch client, warm", figures,
              "kafka listener: Fetch MB/s, warm, raw client", CONSUMER_CEILING,
              "Fetch throughput through the listener, 1 MiB a request, over the by-hand server's on reno to a "
              "client doing the same work per answer: above 1 where the listener's busy poll catches requests "
              "the by-hand server sleeps through"),
        ratio("kafka Fetch with busy poll off vs file reads, warm", figures,
              "kafka listener: Fetch MB/s, warm, raw client, busy poll off",
              "the same segment bytes read from the files, warm",
              "the same, from a daemon with kafka.busy_poll_us = 0: what the listener gives when it sleeps "
              "between requests"),
        ratio("kafka Fetch CPU per MB, busy poll on vs off", figures, "kafka listener CPU per MB fetched, raw client",
              "kafka listener CPU per MB fetched, raw client, busy poll off",
              "the listener's CPU per MB fetched by the raw client, with its default busy poll over without: what "
              "polling for the next request costs beside the wake-ups it saves"),
        ratio("kafka Fetch vs the minimal sendfile server, warm", figures, "kafka listener: Fetch MB/s, warm, raw client",
              "the same segment bytes sent by a minimal sendfile server over loopback TCP, warm",
              "Fetch throughput through the listener, 1 MiB a request, over the by-hand sendfile server's, both "
              "to the same kind of client"),
        ratio("kafka ListOffsets vs msgpack offset_for_timestamp, p50", figures,
              "kafka listener: ListOffsets by timestamp round trip p50, TCP",
              "msgpack offset_for_timestamp round trip p50, TCP",
              "round trip of one lookup by timestamp, Kafka protocol over msgpack, both TCP (target <= 1.2)"),
        ratio("kafka listener vs consumer CPU per MB", figures, "kafka listener CPU per MB consumed",
              "confluent-kafka consumer CPU per MB consumed",
              "the listener's CPU per MB over confluent-kafka's while it consumes (target <= 0.25)"),
    ]


if __name__ == "__main__":
    main(run, __doc__)
