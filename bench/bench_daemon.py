"""Benchmark: every single-request lookup of the daemon over its Unix socket, beside redis-server.

Both serve large-0 of the Kafka reference corpus (200,025 index points: every segment start and
offset-index entry). lookupd answers each of its single-request methods (msgpack-rpc):
`lookup_offset` floor and ceiling, `resolve_offset`, `lookup_timestamp`, `offset_for_timestamp`
and a `read` of one batch, each for random targets. redis answers the question a user would
otherwise deploy it for, the floor of a random offset in a sorted set (ZADD key offset
"offset:position", then `ZREVRANGEBYSCORE key target -inf LIMIT 0 1`, RESP). The same Python
load generator, with raw sockets and hand-written framing for both, drives each server in turn.

Concurrency: N concurrent clients are N connections, each with one request outstanding
(closed loop), driven by at most 2 load processes using `selectors`. One process per
client would spend the 2 cores on 64 Python interpreters rather than on the servers;
several connections per process keep the generator cheap and the numbers about the servers.
Server CPU per request comes from the server's utime+stime in /proc/PID/stat over a run.

One client's round trip is measured with lookupd and redis driven alternately, in slices, so
both see the same moments of a VM whose speed drifts. It is measured three ways: unpinned, as a
user would run it, and with the client and the server pinned to one core and to two. On this VM
a round trip between two vCPUs costs about three times one within a vCPU (each wake is an
interrupt to a halted vCPU), and unpinned the scheduler picks one or the other for reasons of
its own, so the unpinned p50 can differ by 3x between two runs of the same code; the pinned
figures say what each server costs in each case.

Over TLS (issue 34): lookupd with tls_cert_file on loopback TCP and redis-server with
--tls-port, the same self-signed ECDSA certificate (made with `openssl`) and the same client
code (ssl.SSLContext over the same sockets and framing): one client's p50 (the two alternately,
in slices) and 1 and 8 closed-loop clients, each single-lookup method against redis's floor.

    python bench/bench_daemon.py [--quick] [--json FILE]

prints a table and the results as JSON (`--quick` finishes in about a minute);
`bench/run.py --only daemon` runs the same measurements repeated, as figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import selectors
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

import msgpack

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
import reference  # noqa: E402
from common import Figure, dump, print_table, ratio  # noqa: E402

from lookupd.tools.demo import generate  # noqa: E402

TOPIC, PARTITION = "large", 0
REDIS_KEY = b"idx:large-0"
DEFAULT_LOGS = str(reference.LOGS)
LAST_OFFSET = 200_025  # large-0 holds offsets [0, LAST_OFFSET)
CLIENTS = (1, 8, 64)
TLS_CLIENTS = (1, 8)
PIPELINE_DEPTH = 64

# The single-request methods measured, and how one random request's params are made. Timestamps
# are drawn from the partition's time range (TIME_RANGE, set from the files before any load runs).
TIME_RANGE = [0, 1]
METHODS = {
    "lookup_offset floor": ("lookup_offset", lambda r: [TOPIC, PARTITION, r.randrange(LAST_OFFSET), "floor"]),
    "lookup_offset ceiling": ("lookup_offset", lambda r: [TOPIC, PARTITION, r.randrange(LAST_OFFSET), "ceiling"]),
    "resolve_offset": ("resolve_offset", lambda r: [TOPIC, PARTITION, r.randrange(LAST_OFFSET)]),
    "lookup_timestamp": ("lookup_timestamp", lambda r: [TOPIC, PARTITION, r.randint(*TIME_RANGE), "floor"]),
    "offset_for_timestamp": ("offset_for_timestamp", lambda r: [TOPIC, PARTITION, r.randint(*TIME_RANGE)]),
    "read one batch": ("read", lambda r: [TOPIC, PARTITION, r.randrange(LAST_OFFSET), 1]),
}
FLOOR = "lookup_offset floor"  # the method that asks redis's question


# ====================================================================== wire framing for both servers


class LookupdWire:
    """msgpack-rpc requests of one method; answers as (msgid, result), in arrival order (which need not
    be request order: a call waiting for a worker thread is overtaken)."""

    def __init__(self, method: str = FLOOR):
        self.unpacker = msgpack.Unpacker(raw=False)
        self.msgid = 0
        self.name, self.params = METHODS[method]

    def request(self, rnd: random.Random) -> bytes:
        return self.call(self.name, self.params(rnd))

    def floor(self, target: int) -> bytes:
        return self.call("lookup_offset", [TOPIC, PARTITION, target, "floor"])

    def call(self, name: str, params: list) -> bytes:
        self.msgid = (self.msgid + 1) & 0xFFFFFFFF
        return msgpack.packb([0, self.msgid, name, params])

    def feed(self, data: bytes) -> list:
        self.unpacker.feed(data)
        out = []
        for msg in self.unpacker:
            if msg[2] is not None:
                raise RuntimeError(f"lookupd error: {msg[2]}")
            r = msg[3]
            if isinstance(r, dict) and "position" in r and not isinstance(r["position"], list):
                r = (r["offset"], r["position"]) if "offset" in r else r
            out.append((msg[1], r))
        return out


class RespWire:
    """RESP commands and an incremental reply parser (arrays of bulk strings, integers, status)."""

    def __init__(self):
        self.buf = bytearray()

    @staticmethod
    def command(*args: bytes) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def request(self, rnd: random.Random) -> bytes:
        return self.floor(rnd.randrange(LAST_OFFSET))

    def floor(self, target: int) -> bytes:
        return self.command(b"ZREVRANGEBYSCORE", REDIS_KEY, b"%d" % target, b"-inf", b"LIMIT", b"0", b"1")

    def _parse(self, pos: int):
        """(value, next position) or None when incomplete."""
        end = self.buf.find(b"\r\n", pos)
        if end < 0:
            return None
        kind, line = self.buf[pos:pos + 1], bytes(self.buf[pos + 1:end])
        pos = end + 2
        if kind in (b"+", b":"):
            return (int(line) if kind == b":" else line), pos
        if kind == b"-":
            raise RuntimeError(f"redis error: {line.decode()}")
        if kind == b"$":
            n = int(line)
            if n < 0:
                return None, pos
            if len(self.buf) < pos + n + 2:
                return None
            return bytes(self.buf[pos:pos + n]), pos + n + 2
        if kind == b"*":
            items = []
            for _ in range(int(line)):
                got = self._parse(pos)
                if got is None:
                    return None
                item, pos = got
                items.append(item)
            return items, pos
        raise RuntimeError(f"unexpected RESP type {kind!r}")

    def feed(self, data: bytes) -> list:
        self.buf += data
        out, pos = [], 0
        while pos < len(self.buf):
            got = self._parse(pos)
            if got is None:
                break
            value, pos = got
            if isinstance(value, list):
                value = tuple(int(x) for x in value[0].split(b":")) if value else None
            out.append(value)
        del self.buf[:pos]
        return out


def wire_for(kind: str, method: str = FLOOR):
    return LookupdWire(method) if kind == "lookupd" else RespWire()


TLS_CONTEXT: list[ssl.SSLContext] = []  # the clients' context once the TLS servers run (verifies their certificate)


def connect(path: str) -> socket.socket:
    """A Unix socket path, or `tls://HOST:PORT`: TCP with TLS, the server's certificate verified."""
    if path.startswith("tls://"):
        host, port = path[len("tls://"):].rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return TLS_CONTEXT[0].wrap_socket(s, server_hostname=host)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def receive(s: socket.socket) -> bytes:
    """What a readable socket holds now (b"" when a TLS record is not complete yet: the peer has not closed)."""
    try:
        data = s.recv(65536)
    except ssl.SSLWantReadError:
        return b""
    if not data:
        raise RuntimeError("server closed the connection")
    if isinstance(s, ssl.SSLSocket):
        while s.pending():  # decrypted bytes the selector cannot see
            data += s.recv(65536)
    return data


def roundtrip(sock: socket.socket, wire, data: bytes, n: int) -> list:
    sock.sendall(data)
    out: list = []
    while len(out) < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        out += wire.feed(chunk)
    return out


# ====================================================================== measurements


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process and its live children (workers) have used so far
    (/proc/PID/stat fields 14 and 15)."""
    total = 0
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    for p in [pid, *children]:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def latency(kind: str, path: str, method: str, seconds: float, seed: int = 1) -> dict:
    """Sequential single requests on one connection: round-trip percentiles."""
    return latencies([(kind, path, method)], seconds, seed)[0]


# Slices per server when latencies are measured alternately (see `latencies`).
LATENCY_SLICES = 10


def latencies(servers: list[tuple[str, str, str]], seconds: float, seed: int = 1) -> list[dict]:
    """Round-trip percentiles of sequential single requests, one connection to each (kind, path,
    method), `seconds` each. With several servers, each is driven in turn for a tenth of its time
    (LATENCY_SLICES slices, the order reversed every round): one client's round trip here is mostly
    the VM waking its vCPUs, which drifts by tens of percent within a minute, and a ratio of two
    servers' latencies should see the same drift on both sides, not one server's quiet second
    beside the other's busy one."""
    conns = [(connect(path), wire_for(kind, method), random.Random(seed)) for kind, path, method in servers]
    samples: list[list[float]] = [[] for _ in servers]
    slices = 1 if len(servers) == 1 else LATENCY_SLICES
    for round_ in range(slices):
        order = range(len(conns)) if round_ % 2 == 0 else reversed(range(len(conns)))
        for i in order:
            sock, wire, rnd = conns[i]
            lat = samples[i]
            end = time.perf_counter() + seconds / slices
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                roundtrip(sock, wire, wire.request(rnd), 1)
                lat.append(time.perf_counter() - t0)
    for sock, _, _ in conns:
        sock.close()
    out = []
    for lat in samples:
        lat.sort()
        out.append({"n": len(lat), "p50_us": round(lat[len(lat) // 2] * 1e6, 1),
                    "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6, 1), "per_s": round(len(lat) / seconds)})
    return out


# The two placements of the pinned latency figures: (the servers' CPUs, the client's CPUs). Unpinned,
# the scheduler moves between them as it likes, and one client's round trip here is about three
# times as long when the two ends run on different vCPUs (each wake is an IPI to a halted vCPU)
# as when they share one: the unpinned p50 is mostly which of the two the scheduler chose.
PLACEMENTS = {"one core": ({0}, {0}), "two cores": ({0}, {1})}


@contextlib.contextmanager
def placed(pids: list[int], server_cpus: set[int], client_cpus: set[int]):
    """Every thread of the processes `pids` on `server_cpus` and this thread on `client_cpus`,
    until the block ends (then all back on every CPU this process may use)."""
    everywhere = os.sched_getaffinity(0)

    def pin(cpus: set[int]) -> None:
        for pid in pids:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(tid), cpus)

    pin(server_cpus)
    os.sched_setaffinity(0, client_cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, everywhere)
        pin(everywhere)


def _load_worker(kind: str, path: str, method: str, conns: int, seconds: float, seed: int, out) -> None:
    """Closed loop over `conns` connections, one request outstanding on each."""
    rnd = random.Random(seed)
    sel = selectors.DefaultSelector()
    state = {}
    for _ in range(conns):
        s = connect(path)
        s.setblocking(False)
        state[s] = wire_for(kind, method)
        sel.register(s, selectors.EVENT_READ)
    lat_sample, done = [], 0
    sent_at = {}
    end = time.perf_counter() + seconds
    for s, wire in state.items():
        sent_at[s] = time.perf_counter()
        s.sendall(wire.request(rnd))
    while time.perf_counter() < end:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            got = state[s].feed(receive(s))
            if got:
                now = time.perf_counter()
                done += len(got)
                if len(lat_sample) < 200_000:
                    lat_sample.append(now - sent_at[s])
                sent_at[s] = now
                s.sendall(state[s].request(rnd))
    for s in state:
        s.close()
    out.put((done, lat_sample))


def throughput(kind: str, path: str, pid: int, method: str, clients: int, seconds: float) -> dict:
    """`clients` closed-loop connections for `seconds`: requests/s, latency and the server's CPU per request."""
    procs_n = min(2, clients)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    per = [clients // procs_n + (1 if i < clients % procs_n else 0) for i in range(procs_n)]
    procs = [ctx.Process(target=_load_worker, args=(kind, path, method, n, seconds, i, q)) for i, n in enumerate(per)]
    cpu0 = cpu_seconds(pid)
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    cpu = cpu_seconds(pid) - cpu0
    done = sum(r[0] for r in results)
    lat = sorted(x for r in results for x in r[1])
    return {"clients": clients, "per_s": round(done / seconds),
            "p50_us": round(lat[len(lat) // 2] * 1e6, 1) if lat else None,
            "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6, 1) if lat else None,
            "server_cpu_us": round(cpu / done * 1e6, 2) if done else None}


def pipelined(kind: str, path: str, method: str, seconds: float, depth: int = PIPELINE_DEPTH) -> dict:
    """One connection, `depth` requests written at once, then their answers read."""
    sock, wire, rnd = connect(path), wire_for(kind, method), random.Random(2)
    done = 0
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < end:
        roundtrip(sock, wire, b"".join(wire.request(rnd) for _ in range(depth)), depth)
        done += depth
    took = time.perf_counter() - t0
    sock.close()
    return {"depth": depth, "per_s": round(done / took)}


def columnar(path: str, targets: list[int], seconds: float, size: int) -> dict:
    """lookup_offsets calls of `size` targets each (one frame must stay under max_frame_bytes)."""
    sock, wire = connect(path), LookupdWire()
    done, calls = 0, 0
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < end or calls == 0:
        chunk = targets[(calls * size) % len(targets):][:size]
        roundtrip(sock, wire, wire.call("lookup_offsets", [TOPIC, PARTITION, chunk, "floor"]), 1)
        done += len(chunk)
        calls += 1
    took = time.perf_counter() - t0
    sock.close()
    return {"targets_per_call": size, "calls": calls, "per_s": round(done / took)}


IDLE_BEFORE_S = 0.0002  # about the time one client takes between its requests here
IDLE_CALLS = 1000


def policy_micro(logs: str, seconds: float) -> dict:
    """In-process: a hot lookup_offset on the event loop vs the same call via trio.to_thread, and
    single calls each after IDLE_BEFORE_S idle (the median)."""
    import trio

    from lookupd.log.logmanager import LogManager
    from lookupd.daemon.service import Service, Session

    lm = LogManager([logs])
    svc, session = Service(lm), Session(trusted=True)
    rnd = random.Random(3)
    params = [[TOPIC, PARTITION, rnd.randrange(200_000), "floor"] for _ in range(10_000)]
    svc.call("lookup_offset", params[0], session)  # map the index
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds / 2:
        svc.call("lookup_offset", params[n % len(params)], session)
        n += 1
    inline_us = (time.perf_counter() - t0) / n * 1e6

    async def threaded():
        limiter = trio.CapacityLimiter(16)
        m, s0 = 0, time.perf_counter()
        while time.perf_counter() - s0 < seconds / 2:
            await trio.to_thread.run_sync(svc.call, "lookup_offset", params[m % len(params)], session,
                                          limiter=limiter)
            m += 1
        return (time.perf_counter() - s0) / m * 1e6

    thread_us = trio.run(threaded)
    # One call at a time after the CPU sat idle, as between the requests of one waiting client.
    idle = []
    for p in params[:IDLE_CALLS]:
        time.sleep(IDLE_BEFORE_S)
        t = time.perf_counter()
        svc.call("lookup_offset", p, session)
        idle.append(time.perf_counter() - t)
    lm.close()
    return {"inline_us": round(inline_us, 2), "via_thread_us": round(thread_us, 2),
            "after_idle_us": round(statistics.median(idle) * 1e6, 2)}


# ====================================================================== servers


# Issue 11's targets for partition-level calls in process (microseconds), on `lookupd demo-data`.
IN_PROCESS_TARGETS_US = {"lookup_offset": 1.5, "resolve_offset": 4, "lookup_timestamp": 5, "offset_for_timestamp": 10}


def in_process(demo_dir: str, calls: int) -> dict:
    """Microseconds per partition-level call on LocalLog, warm, random targets within each demo-data
    partition: the median over its partitions (no daemon, no socket)."""
    from lookupd.log.logmanager import LogManager

    lm = LogManager([demo_dir])
    per: dict[str, list[float]] = {m: [] for m in IN_PROCESS_TARGETS_US}
    for llog in lm.logs():
        end, start = llog.log_end_offset, llog.log_start_offset
        if end - start < 10:
            continue
        first, last = llog.offset_for_timestamp(0).timestamp, llog.offset_for_timestamp(-3).timestamp
        rnd = random.Random(1)
        offsets = [rnd.randrange(start, end) for _ in range(calls)]
        stamps = [rnd.randint(first, last) for _ in range(calls)]
        for method, args in (("lookup_offset", offsets), ("resolve_offset", offsets), ("lookup_timestamp", stamps),
                             ("offset_for_timestamp", stamps)):
            fn = getattr(llog, method)
            for a in args[:200]:
                fn(a)
            t0 = time.perf_counter()
            for a in args:
                fn(a)
            per[method].append((time.perf_counter() - t0) / calls * 1e6)
    lm.close()
    return {m: round(statistics.median(v), 2) for m, v in per.items()}


def start_lookupd(tmp: str, logs: str, inline: bool, name: str = "", extra: str = "") -> tuple[subprocess.Popen, str]:
    name = name or f"lookupd-{int(inline)}"
    sock = os.path.join(tmp, f"{name}.sock")
    conf = os.path.join(tmp, f"{name}.toml")
    with open(conf, "w") as f:
        f.write(f"log_dirs = [{json.dumps(logs)}]\ninline_hot_lookups = {str(inline).lower()}\n{extra}")
    proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--config", conf, "--socket", sock],
                            cwd=tmp, env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.DEVNULL)
    wait_for(sock, proc)
    return proc, sock


def start_redis(tmp: str, name: str = "redis", tls: list[str] = ()) -> tuple[subprocess.Popen, str] | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    sock = os.path.join(tmp, f"{name}.sock")
    proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                             "--dir", tmp, *tls], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(sock, proc)
    return proc, sock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certificate(tmp: str) -> tuple[str, str] | None:
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 (cert, key), both servers' and the clients' CA."""
    exe = shutil.which("openssl")
    if exe is None:
        return None
    cert, key = os.path.join(tmp, "tls.pem"), os.path.join(tmp, "tls.key")
    subprocess.run([exe, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def start_tls_servers(tmp: str, logs: str) -> dict:
    """lookupd and redis-server, each on loopback TCP with TLS and the same certificate: {name: (proc, address,
    Unix socket)}; {} without openssl or redis-server."""
    made = make_certificate(tmp)
    if made is None or shutil.which("redis-server") is None:
        return {}
    cert, key = made
    TLS_CONTEXT[:] = [ssl.create_default_context(cafile=cert)]
    out = {}
    port = free_port()
    proc, sock = start_lookupd(tmp, logs, inline=True, name="lookupd-tls",
                               extra=f'tcp = "127.0.0.1:{port}"\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"\n')
    out["lookupd"] = (proc, f"tls://127.0.0.1:{port}", sock)
    port = free_port()
    proc, sock = start_redis(tmp, "redis-tls", ["--tls-port", str(port), "--tls-cert-file", cert, "--tls-key-file",
                                                key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no"])
    out["redis"] = (proc, f"tls://127.0.0.1:{port}", sock)
    return out


def wait_for(sock: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            connect(sock).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.args[0]} did not listen on {sock}")


def index_points(logs: str) -> list[tuple[int, int]]:
    """Every (offset, position) index point of large-0: segment starts and offset-index entries."""
    from lookupd.log.logmanager import LogManager

    lm = LogManager([logs])
    llog = lm.get(TOPIC, PARTITION)
    pts = []
    for seg in llog.segments():
        pts.append((seg.base_offset, 0))
        offsets, positions = seg.offset_index.entries_array(limit=seg.size())
        pts.extend(zip(offsets.tolist(), positions.tolist()))
    lm.close()
    return pts


def load_redis(sock_path: str, points: list[tuple[int, int]]) -> None:
    sock, wire = connect(sock_path), RespWire()
    roundtrip(sock, wire, wire.command(b"DEL", REDIS_KEY), 1)
    step, cmds = 5000, 0
    batch = []
    for i in range(0, len(points), step):
        args = [b"ZADD", REDIS_KEY]
        for o, p in points[i:i + step]:
            args += [b"%d" % o, b"%d:%d" % (o, p)]
        batch.append(wire.command(*args))
        cmds += 1
    roundtrip(sock, wire, b"".join(batch), cmds)
    sock.close()


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


# ====================================================================== one run


def time_range(logs: str) -> tuple[int, int]:
    """The first and last record timestamps of large-0, for random timestamp targets."""
    from lookupd.log.logmanager import LogManager

    lm = LogManager([logs])
    llog = lm.get(TOPIC, PARTITION)
    first = llog.offset_for_timestamp(0)    # the first record at or after the epoch
    last = llog.offset_for_timestamp(-3)   # ListOffsets MAX_TIMESTAMP
    lm.close()
    return first.timestamp, last.timestamp


class Servers:
    """lookupd (inline hot lookups), redis-server loaded with the same index points, and lookupd
    with every lookup in a worker thread, for the length of a `with` block."""

    def __init__(self, logs: str):
        self.logs = logs

    def __enter__(self) -> "Servers":
        self.tmp = tempfile.mkdtemp(prefix="lkdbench", dir="/tmp")
        self.procs: list[subprocess.Popen] = []
        self.pid: dict[str, int] = {}
        TIME_RANGE[:] = time_range(self.logs)
        self.demo = os.path.join(self.tmp, "demo")
        generate(self.demo, records=20_000)
        try:
            proc, self.lookupd = start_lookupd(self.tmp, self.logs, inline=True)
            self.procs.append(proc)
            self.pid[self.lookupd] = proc.pid
            proc, self.threaded = start_lookupd(self.tmp, self.logs, inline=False)
            self.procs.append(proc)
            self.pid[self.threaded] = proc.pid
            proc, self.workers2 = start_lookupd(self.tmp, self.logs, inline=True, name="workers2", extra="workers = 2\n")
            self.procs.append(proc)
            self.pid[self.workers2] = proc.pid
            proc, self.metered = start_lookupd(self.tmp, self.logs, inline=True, name="metered",
                                               extra='metrics = "127.0.0.1:0"\n')
            self.procs.append(proc)
            self.pid[self.metered] = proc.pid
            rd = start_redis(self.tmp)
            self.redis = None
            if rd is not None:
                self.procs.append(rd[0])
                load_redis(rd[1], index_points(self.logs))
                self.redis = rd[1]
                self.pid[self.redis] = rd[0].pid
            tls = start_tls_servers(self.tmp, self.logs)
            self.tls: dict[str, str] = {}  # "lookupd"/"redis" -> tls://127.0.0.1:PORT
            for name, (proc, address, sock) in tls.items():
                self.procs.append(proc)
                self.tls[name] = address
                self.pid[address] = proc.pid
                if name == "redis":
                    load_redis(sock, index_points(self.logs))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            stop(p)
        shutil.rmtree(self.tmp, ignore_errors=True)


def answers_agree(servers: Servers, targets: list[int]) -> bool | None:
    """Whether lookupd and redis give the same floor points (this also maps lookupd's indexes: every
    method is called once on both lookupd servers first)."""
    for path in (servers.lookupd, servers.threaded, servers.workers2, servers.metered, *servers.tls.values()):
        for method in METHODS:
            if path == servers.tls.get("redis"):
                continue
            w = LookupdWire(method)
            roundtrip(connect(path), w, b"".join(w.request(random.Random(i)) for i in range(50)), 50)
    lw = LookupdWire()
    lk = [a for _, a in sorted(roundtrip(connect(servers.lookupd), lw, b"".join(lw.floor(t) for t in targets),
                                         len(targets)))]
    if servers.redis is None:
        return None
    rw = RespWire()
    return lk == roundtrip(connect(servers.redis), rw, b"".join(rw.floor(t) for t in targets), len(targets))


def measure(kind: str, path: str, pid: int, method: str, secs: float, lat: dict | None = None) -> dict:
    """Latency (unless measured already, as `lat`), throughput at each of CLIENTS and pipelined."""
    return {"latency": lat or latency(kind, path, method, secs),
            "throughput": [throughput(kind, path, pid, method, c, secs) for c in CLIENTS],
            "pipelined": pipelined(kind, path, method, secs)}


def one_pass(servers: Servers, targets: list[int], secs: float) -> dict:
    """Every method on lookupd, the floor lookup on redis, and the all-threaded lookupd at 8 clients.

    Redis is measured beside each lookupd method (a list of measurements), not once a pass: on a
    shared VM the machine's speed drifts within a minute, and each ratio should see the same drift."""
    results: dict = {"lookupd": {}, "redis": {FLOOR: []}}
    for m in METHODS:
        if servers.redis is None:
            results["lookupd"][m] = measure("lookupd", servers.lookupd, servers.pid[servers.lookupd], m, secs)
            continue
        # the two latencies alternately, in slices (see `latencies`); throughputs each in turn
        ours, theirs = latencies([("lookupd", servers.lookupd, m), ("redis", servers.redis, FLOOR)], secs)
        results["lookupd"][m] = measure("lookupd", servers.lookupd, servers.pid[servers.lookupd], m, secs, ours)
        results["redis"][FLOOR].append(measure("redis", servers.redis, servers.pid[servers.redis], FLOOR, secs, theirs))
    if servers.redis is None:
        results["redis"] = {"skipped": "redis-server not found (apt-get install redis-server)"}
    if servers.redis is not None and len(os.sched_getaffinity(0)) >= 2:
        pids = [servers.pid[servers.lookupd], servers.pid[servers.redis]]
        for where, (server_cpus, client_cpus) in PLACEMENTS.items():
            with placed(pids, server_cpus, client_cpus):
                for m in METHODS:
                    ours, theirs = latencies([("lookupd", servers.lookupd, m), ("redis", servers.redis, FLOOR)], secs)
                    for key, method, lat in (("lookupd_placed", m, ours), ("redis_placed", FLOOR, theirs)):
                        results.setdefault(key, {}).setdefault(where, {}).setdefault(method, []).append(lat)
    if servers.tls:  # over TLS: the two latencies alternately, then 1 and 8 clients, beside each method
        lk, rd = servers.tls["lookupd"], servers.tls["redis"]
        results["lookupd_tls"], results["redis_tls"] = {}, {FLOOR: []}
        for m in METHODS:
            ours, theirs = latencies([("lookupd", lk, m), ("redis", rd, FLOOR)], secs)
            results["lookupd_tls"][m] = {"latency": ours, "throughput": [
                throughput("lookupd", lk, servers.pid[lk], m, c, secs) for c in TLS_CLIENTS]}
            results["redis_tls"][FLOOR].append({"latency": theirs, "throughput": [
                throughput("redis", rd, servers.pid[rd], FLOOR, c, secs) for c in TLS_CLIENTS]})
    results["lookupd_columnar"] = columnar(servers.lookupd, targets, secs, 100_000)
    results["lookupd_all_threaded"] = {FLOOR: {
        "latency": latency("lookupd", servers.threaded, FLOOR, secs),
        "throughput": [throughput("lookupd", servers.threaded, servers.pid[servers.threaded], FLOOR, 8, secs)]}}
    results["lookupd_workers2"] = {FLOOR: {
        "latency": latency("lookupd", servers.workers2, FLOOR, secs),
        "throughput": [throughput("lookupd", servers.workers2, servers.pid[servers.workers2], FLOOR, c, secs)
                       for c in CLIENTS]}}
    # Metrics on and off are measured back to back, twice each, alternating: what metrics cost is a
    # few percent, less than this machine's drift over the minutes between other measurements.
    on, off = [], []
    for _ in range(2):
        off.append(throughput("lookupd", servers.lookupd, servers.pid[servers.lookupd], FLOOR, 8, secs))
        on.append(throughput("lookupd", servers.metered, servers.pid[servers.metered], FLOOR, 8, secs))
    results["lookupd_metrics_on"] = {FLOOR: [{"latency": latency("lookupd", servers.metered, FLOOR, secs),
                                              "throughput": [t]} for t in on]}
    results["lookupd_metrics_off"] = {FLOOR: [{"latency": latency("lookupd", servers.lookupd, FLOOR, secs),
                                               "throughput": [t]} for t in off]}
    results["policy_in_process"] = policy_micro(servers.logs, min(secs, 2.0))
    results["in_process"] = in_process(servers.demo, 2000 if secs >= 1 else 500)
    return results


def targets_list() -> list[int]:
    rnd = random.Random(1)
    return [rnd.randrange(LAST_OFFSET) for _ in range(200_000)]


# ====================================================================== bench/run.py suite


SERVER_LABELS = {"lookupd": "lookupd", "redis": "redis", "lookupd_all_threaded": "lookupd, every lookup in a thread",
                 "lookupd_workers2": "lookupd, workers=2", "lookupd_metrics_on": "lookupd, metrics on",
                 "lookupd_metrics_off": "lookupd, metrics off, beside metrics on",
                 "lookupd_tls": "lookupd over TLS", "redis_tls": "redis over TLS"}
TLS_KEYS = ("lookupd_tls", "redis_tls")


def label(server: str, method: str) -> str:
    """Figure-name prefix; the floor lookup keeps its historic names ("lookupd: ...", "redis: ...")."""
    base = SERVER_LABELS[server]
    return base if method == FLOOR else f"{base} {method}"


def run(quick: bool = False) -> list:
    """Figures for bench/run.py: every measurement of `one_pass`, repeated."""
    repeats, secs = (2, 0.4) if quick else (3, 1.5)
    targets = targets_list()
    with Servers(os.environ.get("KAFKA_REFERENCE_LOGS", DEFAULT_LOGS)) as servers:
        if answers_agree(servers, targets[:500]) is False:
            raise RuntimeError("lookupd and redis answered differently: the benchmark would compare nonsense")
        passes = [one_pass(servers, targets, secs) for _ in range(repeats)]
    figures = []
    for key in SERVER_LABELS:
        for method, got in passes[0].get(key, {}).items():
            if not isinstance(got, list) and "latency" not in got:
                continue
            # every measurement of this server and method, in all passes (redis: several a pass)
            runs = [r for p in passes for r in (p[key][method] if isinstance(got, list) else [p[key][method]])]
            first = runs[0]
            name = label(key, method)
            params = {"server": SERVER_LABELS[key], "method": method}
            noun = "floor lookup" if method == FLOOR else method
            tls = key in TLS_KEYS
            for pct in (50, 99):
                figures.append(Figure(f"{name}: {noun} round trip p{pct}" if method == FLOOR else
                                      f"{name}: round trip p{pct}", "us",
                                      [r["latency"][f"p{pct}_us"] for r in runs],
                                      group="daemon-tls" if tls else "daemon-latency",
                                      params={**params, "percentile": pct}))
            for i, t in enumerate(first["throughput"]):
                figures.append(Figure(f"{name}: lookups/s, {t['clients']} concurrent clients", "lookups/s",
                                      [r["throughput"][i]["per_s"] for r in runs],
                                      group="daemon-tls" if tls else "daemon-throughput",
                                      params={**params, "clients": t["clients"]}, higher_is_better=True))
                figures.append(Figure(f"{name}: server CPU per request, {t['clients']} concurrent clients", "us",
                                      [r["throughput"][i]["server_cpu_us"] for r in runs],
                                      group="daemon-cpu", params={**params, "clients": t["clients"]}))
            if "pipelined" in first:
                figures.append(Figure(f"{name}: lookups/s, one connection pipelining {PIPELINE_DEPTH}", "lookups/s",
                                      [r["pipelined"]["per_s"] for r in runs], group="daemon-throughput",
                                      params={**params, "clients": 1, "depth": PIPELINE_DEPTH}, higher_is_better=True))
    for key in ("lookupd_placed", "redis_placed"):
        server = key.split("_")[0]
        for where, by_method in passes[0].get(key, {}).items():
            for method in by_method:  # every measurement in all passes (redis: one beside each method)
                runs = [r for p in passes for r in p[key][where][method]]
                figures.append(Figure(placed_p50(server, method, where), "us", [r["p50_us"] for r in runs],
                                      group="daemon-placement",
                                      params={"server": server, "method": method, "placement": where}))
    figures.append(Figure("lookupd: lookups/s in lookup_offsets calls of 100,000", "lookups/s",
                          [p["lookupd_columnar"]["per_s"] for p in passes], group="daemon-throughput",
                          params={"targets_per_call": 100_000, "server": "lookupd"}, higher_is_better=True))
    for method, target in IN_PROCESS_TARGETS_US.items():
        figures.append(Figure(f"{method} in process, demo-data partitions (target {target} us)", "us",
                              [p["in_process"][method] for p in passes], group="daemon-inprocess",
                              params={"method": method, "target_us": target}))
    for key, where in (("inline_us", "on the event loop"), ("via_thread_us", "through trio.to_thread"),
                       ("after_idle_us", f"each after {IDLE_BEFORE_S * 1e6:.0f} us idle")):
        figures.append(Figure(f"hot lookup_offset in process, {where}", "us",
                              [p["policy_in_process"][key] for p in passes], group="daemon-policy",
                              params={"where": key}))
    return figures


def placed_p50(server: str, method: str, where: str) -> str:
    return f"{label(server, method)}: round trip p50, client and server pinned to {where}"


def ratios(figures: list) -> list:
    out = [ratio("lookupd vs redis, single-client p50 latency", figures, "lookupd: floor lookup round trip p50",
                 "redis: floor lookup round trip p50", "round trip of one floor lookup over a Unix socket"),
           ratio("lookupd vs redis, 8 clients", figures, "lookupd: lookups/s, 8 concurrent clients",
                 "redis: lookups/s, 8 concurrent clients", "lookups per second with 8 closed-loop clients"),
           ratio("inline vs threaded hot lookups, 8 clients", figures, "lookupd: lookups/s, 8 concurrent clients",
                 "lookupd, every lookup in a thread: lookups/s, 8 concurrent clients",
                 "daemon throughput with hot lookups on the event loop over all lookups in worker threads"),
           ratio("workers=2 vs workers=1, 64 clients", figures, "lookupd, workers=2: lookups/s, 64 concurrent clients",
                 "lookupd: lookups/s, 64 concurrent clients", "floor lookups/s with two worker processes over one"),
           ratio("workers=2 vs redis, 64 clients", figures, "lookupd, workers=2: lookups/s, 64 concurrent clients",
                 "redis: lookups/s, 64 concurrent clients", "floor lookups/s, two lookupd workers over redis"),
           ratio("lookup after idle vs in a loop", figures,
                 f"hot lookup_offset in process, each after {IDLE_BEFORE_S * 1e6:.0f} us idle",
                 "hot lookup_offset in process, on the event loop",
                 "time of one in-process floor lookup after the CPU sat idle over one in a tight loop (cold caches)"),
           ratio("metrics on vs off, 8 clients", figures, "lookupd, metrics on: lookups/s, 8 concurrent clients",
                 "lookupd, metrics off, beside metrics on: lookups/s, 8 concurrent clients",
                 "floor lookups/s with Prometheus metrics on over off, measured alternately"),
           ratio("metrics on vs off, server CPU per request", figures,
                 "lookupd, metrics on: server CPU per request, 8 concurrent clients",
                 "lookupd, metrics off, beside metrics on: server CPU per request, 8 concurrent clients",
                 "server CPU microseconds per floor lookup with Prometheus metrics on over off, measured alternately")]
    for method in METHODS:
        name = label("lookupd", method)
        p50 = f"{name}: floor lookup round trip p50" if method == FLOOR else f"{name}: round trip p50"
        out += [ratio(f"lookupd {method} vs redis, 8 clients", figures, f"{name}: lookups/s, 8 concurrent clients",
                      "redis: lookups/s, 8 concurrent clients",
                      f"{method} requests/s over redis's floor lookups/s, 8 closed-loop clients each (target >= 0.5)"),
                ratio(f"lookupd {method} vs redis, single-client p50", figures, p50,
                      "redis: floor lookup round trip p50",
                      f"{method} round-trip p50 over redis's, one client (target <= 1.5)"),
                *[ratio(f"lookupd {method} vs redis, single-client p50, {where}", figures,
                        placed_p50("lookupd", method, where), placed_p50("redis", FLOOR, where),
                        f"{method} round-trip p50 over redis's, one client, client and server pinned to {where}")
                  for where in PLACEMENTS],
                ratio(f"lookupd {method} vs redis over TLS, 8 clients", figures,
                      f"{label('lookupd_tls', method)}: lookups/s, 8 concurrent clients",
                      "redis over TLS: lookups/s, 8 concurrent clients",
                      f"{method} requests/s over redis's floor lookups/s, both over TLS, 8 closed-loop clients each "
                      f"(target >= 0.5)"),
                ratio(f"lookupd {method} vs redis over TLS, single-client p50", figures,
                      f"{label('lookupd_tls', method)}: " + ("floor lookup round trip p50" if method == FLOOR else
                                                             "round trip p50"),
                      "redis over TLS: floor lookup round trip p50",
                      f"{method} round-trip p50 over redis's, both over TLS, one client (target <= 1.5)"),
                ratio(f"lookupd {method} vs redis, server CPU per request", figures,
                      f"{name}: server CPU per request, 8 concurrent clients",
                      "redis: server CPU per request, 8 concurrent clients",
                      f"{method} server CPU microseconds per request over redis's, 8 clients (target <= 4)")]
    return out


# ====================================================================== main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = ap.parse_args(argv)
    figures = run(args.quick)
    print_table(figures)
    for r in ratios(figures):
        if r is not None:
            print(f"{r['name']}: {r['value']:.2f}x  ({r['meaning']})")
    if args.json:
        dump(figures, args.json)


if __name__ == "__main__":
    main()
