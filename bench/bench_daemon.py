"""Benchmark: lookupd's floor lookups over its Unix socket, side by side with redis-server.

Both answer the same question for large-0 of the Kafka reference corpus (200,025 index
points: every segment start and offset-index entry): the greatest index point <= a random
target offset. lookupd: `lookup_offset [topic, partition, target, "floor"]` (msgpack-rpc).
redis: the points in a sorted set (ZADD key offset "offset:position"), queried with
`ZREVRANGEBYSCORE key target -inf LIMIT 0 1` (RESP). The same Python load generator, with
raw sockets and hand-written framing for both, drives each server in turn.

Concurrency: N concurrent clients are N connections, each with one request outstanding
(closed loop), driven by at most 2 load processes using `selectors`. One process per
client would spend the 2 cores on 64 Python interpreters rather than on the servers;
several connections per process keep the generator cheap and the numbers about the servers.
Both servers are single-threaded for these lookups (lookupd's are inline on its event loop
once the index is mapped), and they share the machine's cores with the load generator.

    python bench/bench_daemon.py [--quick] [--json FILE]

prints a table and the results as JSON (`--quick` finishes in well under a minute);
`bench/run.py --only daemon` runs the same measurements repeated, as figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import msgpack

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Figure, ratio  # noqa: E402

TOPIC, PARTITION = "large", 0
REDIS_KEY = b"idx:large-0"
DEFAULT_LOGS = os.path.join(os.path.dirname(REPO), "shared", "kafka-reference", "logs")


# ====================================================================== wire framing for both servers


class LookupdWire:
    """msgpack-rpc lookup_offset requests; answers as (msgid, (offset, position)), in arrival order
    (which need not be request order: a call waiting for a worker thread is overtaken)."""

    def __init__(self):
        self.unpacker = msgpack.Unpacker(raw=False)
        self.msgid = 0

    def request(self, target: int) -> bytes:
        self.msgid = (self.msgid + 1) & 0xFFFFFFFF
        return msgpack.packb([0, self.msgid, "lookup_offset", [TOPIC, PARTITION, target, "floor"]])

    def columnar(self, targets: list[int]) -> bytes:
        self.msgid = (self.msgid + 1) & 0xFFFFFFFF
        return msgpack.packb([0, self.msgid, "lookup_offsets", [TOPIC, PARTITION, targets, "floor"]])

    def feed(self, data: bytes) -> list:
        self.unpacker.feed(data)
        out = []
        for msg in self.unpacker:
            if msg[2] is not None:
                raise RuntimeError(f"lookupd error: {msg[2]}")
            r = msg[3]
            out.append((msg[1], r if r is None or isinstance(r["segment"], list) else (r["offset"], r["position"])))
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

    def request(self, target: int) -> bytes:
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


def wire_for(kind: str):
    return LookupdWire() if kind == "lookupd" else RespWire()


def connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


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


def latency(kind: str, path: str, targets: list[int], seconds: float) -> dict:
    """Sequential single lookups on one connection: round-trip percentiles."""
    sock, wire = connect(path), wire_for(kind)
    lat = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        roundtrip(sock, wire, wire.request(targets[i % len(targets)]), 1)
        lat.append(time.perf_counter() - t0)
        i += 1
    sock.close()
    lat.sort()
    return {"n": len(lat), "p50_us": round(lat[len(lat) // 2] * 1e6, 1),
            "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6, 1), "per_s": round(len(lat) / seconds)}


def _load_worker(kind: str, path: str, conns: int, seconds: float, seed: int, out) -> None:
    """Closed loop over `conns` connections, one request outstanding on each."""
    rnd = random.Random(seed)
    sel = selectors.DefaultSelector()
    state = {}
    for _ in range(conns):
        s = connect(path)
        s.setblocking(False)
        wire = wire_for(kind)
        state[s] = wire
        sel.register(s, selectors.EVENT_READ)
    lat_sample, done = [], 0
    sent_at = {}
    end = time.perf_counter() + seconds
    for s, wire in state.items():
        sent_at[s] = time.perf_counter()
        s.sendall(wire.request(rnd.randrange(200_025)))
    while time.perf_counter() < end:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            got = state[s].feed(s.recv(65536))
            if got:
                now = time.perf_counter()
                done += len(got)
                if len(lat_sample) < 200_000:
                    lat_sample.append(now - sent_at[s])
                sent_at[s] = now
                s.sendall(state[s].request(rnd.randrange(200_025)))
    for s in state:
        s.close()
    out.put((done, lat_sample))


def throughput(kind: str, path: str, clients: int, seconds: float) -> dict:
    procs_n = min(2, clients)
    q = mp.get_context("fork").Queue()
    per = [clients // procs_n + (1 if i < clients % procs_n else 0) for i in range(procs_n)]
    procs = [mp.get_context("fork").Process(target=_load_worker, args=(kind, path, n, seconds, i, q))
             for i, n in enumerate(per)]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    lat = sorted(x for r in results for x in r[1])
    return {"clients": clients, "per_s": round(done / seconds),
            "p50_us": round(lat[len(lat) // 2] * 1e6, 1) if lat else None,
            "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6, 1) if lat else None}


def pipelined(kind: str, path: str, targets: list[int], seconds: float, depth: int = 64) -> dict:
    """One connection, `depth` requests written at once, then their answers read."""
    sock, wire = connect(path), wire_for(kind)
    done, i = 0, 0
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < end:
        batch = b"".join(wire.request(targets[(i + k) % len(targets)]) for k in range(depth))
        roundtrip(sock, wire, batch, depth)
        done += depth
        i += depth
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
        roundtrip(sock, wire, wire.columnar(chunk), 1)
        done += len(chunk)
        calls += 1
    took = time.perf_counter() - t0
    sock.close()
    return {"targets_per_call": size, "calls": calls, "per_s": round(done / took)}


def policy_micro(logs: str, seconds: float) -> dict:
    """In-process: a hot lookup_offset on the event loop vs the same call via trio.to_thread."""
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
    lm.close()
    return {"inline_us": round(inline_us, 2), "via_thread_us": round(thread_us, 2)}


# ====================================================================== servers


def start_lookupd(tmp: str, logs: str, inline: bool) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(tmp, f"lookupd-{int(inline)}.sock")
    conf = os.path.join(tmp, f"lookupd-{int(inline)}.toml")
    with open(conf, "w") as f:
        f.write(f"log_dirs = [{json.dumps(logs)}]\ninline_hot_lookups = {str(inline).lower()}\n")
    proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--config", conf, "--socket", sock],
                            cwd=tmp, env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.DEVNULL)
    wait_for(sock, proc)
    return proc, sock


def start_redis(tmp: str) -> tuple[subprocess.Popen, str] | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    sock = os.path.join(tmp, "redis.sock")
    proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(sock, proc)
    return proc, sock


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


class Servers:
    """lookupd (inline hot lookups), redis-server loaded with the same index points, and lookupd
    with every lookup in a worker thread, for the length of a `with` block."""

    def __init__(self, logs: str):
        self.logs = logs

    def __enter__(self) -> "Servers":
        self.tmp = tempfile.mkdtemp(prefix="lkdbench", dir="/tmp")
        self.procs: list[subprocess.Popen] = []
        try:
            proc, self.lookupd = start_lookupd(self.tmp, self.logs, inline=True)
            self.procs.append(proc)
            proc, self.threaded = start_lookupd(self.tmp, self.logs, inline=False)
            self.procs.append(proc)
            rd = start_redis(self.tmp)
            self.redis = None
            if rd is not None:
                self.procs.append(rd[0])
                load_redis(rd[1], index_points(self.logs))
                self.redis = rd[1]
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            stop(p)
        shutil.rmtree(self.tmp, ignore_errors=True)


def answers_agree(servers: Servers, targets: list[int]) -> bool | None:
    """Whether lookupd and redis give the same floor points (this also maps lookupd's index)."""
    lw = LookupdWire()
    lk = [a for _, a in sorted(roundtrip(connect(servers.lookupd), lw, b"".join(lw.request(t) for t in targets),
                                         len(targets)))]
    lw = LookupdWire()
    roundtrip(connect(servers.threaded), lw, b"".join(lw.request(t) for t in targets), len(targets))
    if servers.redis is None:
        return None
    rw = RespWire()
    return lk == roundtrip(connect(servers.redis), rw, b"".join(rw.request(t) for t in targets), len(targets))


def one_pass(servers: Servers, targets: list[int], secs: float) -> dict:
    results: dict = {"lookupd": {}, "redis": {}}
    runs = {"lookupd": servers.lookupd}
    if servers.redis is None:
        results["redis"] = {"skipped": "redis-server not found (apt-get install redis-server)"}
    else:
        runs["redis"] = servers.redis
    for name, path in runs.items():
        r = results[name]
        r["latency"] = latency(name, path, targets, secs)
        r["throughput"] = [throughput(name, path, c, secs) for c in (1, 8, 64)]
        r["pipelined"] = pipelined(name, path, targets, secs)
    results["lookupd"]["columnar"] = columnar(servers.lookupd, targets, secs, 100_000)
    results["lookupd_all_threaded"] = {"latency": latency("lookupd", servers.threaded, targets, secs),
                                       "throughput": [throughput("lookupd", servers.threaded, 8, secs)]}
    results["policy_in_process"] = policy_micro(servers.logs, min(secs, 2.0))
    return results


def targets_list() -> list[int]:
    rnd = random.Random(1)
    return [rnd.randrange(200_025) for _ in range(200_000)]


# ====================================================================== bench/run.py suite


def run(quick: bool = False) -> list:
    """Figures for bench/run.py: every measurement of `one_pass`, repeated."""
    repeats, secs = (3, 0.6) if quick else (5, 2.0)
    targets = targets_list()
    with Servers(os.environ.get("KAFKA_REFERENCE_LOGS", DEFAULT_LOGS)) as servers:
        if answers_agree(servers, targets[:500]) is False:
            raise RuntimeError("lookupd and redis answered differently: the benchmark would compare nonsense")
        passes = [one_pass(servers, targets, secs) for _ in range(repeats)]
    figures = []
    names = {"lookupd": "lookupd", "redis": "redis", "lookupd_all_threaded": "lookupd, every lookup in a thread"}
    for key, label in names.items():
        if "latency" not in passes[0].get(key, {}):
            continue
        for pct in (50, 99):
            figures.append(Figure(f"{label}: floor lookup round trip p{pct}", "us",
                                  [p[key]["latency"][f"p{pct}_us"] for p in passes], group="daemon-latency",
                                  params={"percentile": pct, "server": label}))
        for i, t in enumerate(passes[0][key]["throughput"]):
            figures.append(Figure(f"{label}: lookups/s, {t['clients']} concurrent clients", "lookups/s",
                                  [p[key]["throughput"][i]["per_s"] for p in passes], group="daemon-throughput",
                                  params={"clients": t["clients"], "server": label}, higher_is_better=True))
        if "pipelined" in passes[0][key]:
            figures.append(Figure(f"{label}: lookups/s, one connection pipelining 64", "lookups/s",
                                  [p[key]["pipelined"]["per_s"] for p in passes], group="daemon-throughput",
                                  params={"clients": 1, "depth": 64, "server": label}, higher_is_better=True))
    figures.append(Figure("lookupd: lookups/s in lookup_offsets calls of 100,000", "lookups/s",
                          [p["lookupd"]["columnar"]["per_s"] for p in passes], group="daemon-throughput",
                          params={"targets_per_call": 100_000, "server": "lookupd"}, higher_is_better=True))
    for key, label in (("inline_us", "on the event loop"), ("via_thread_us", "through trio.to_thread")):
        figures.append(Figure(f"hot lookup_offset in process, {label}", "us",
                              [p["policy_in_process"][key] for p in passes], group="daemon-policy",
                              params={"where": key}))
    return figures


def ratios(figures: list) -> list:
    return [ratio("lookupd vs redis, single-client p50 latency", figures, "lookupd: floor lookup round trip p50",
                  "redis: floor lookup round trip p50", "round trip of one floor lookup over a Unix socket"),
            ratio("lookupd vs redis, 8 clients", figures, "lookupd: lookups/s, 8 concurrent clients",
                  "redis: lookups/s, 8 concurrent clients", "lookups per second with 8 closed-loop clients"),
            ratio("inline vs threaded hot lookups, 8 clients", figures, "lookupd: lookups/s, 8 concurrent clients",
                  "lookupd, every lookup in a thread: lookups/s, 8 concurrent clients",
                  "daemon throughput with hot lookups on the event loop over all lookups in worker threads")]


# ====================================================================== main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs (under a minute in all)")
    ap.add_argument("--logs", default=os.environ.get("KAFKA_REFERENCE_LOGS", DEFAULT_LOGS),
                    help="log dir holding large-0 (default: the shared Kafka reference corpus)")
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    args = ap.parse_args(argv)
    secs = 1.5 if args.quick else 5.0
    targets = targets_list()
    with Servers(args.logs) as servers:
        agree = answers_agree(servers, targets[:500])
        results = {"machine": {"cpus": os.cpu_count()}, "seconds_per_run": secs, "answers_agree": agree,
                   **one_pass(servers, targets, secs)}
    print_table(results)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


def print_table(r: dict) -> None:
    rows = [("", "lookupd", "redis", "lookupd all-threaded")]

    def get(server, *path):
        v = r.get(server, {})
        for p in path:
            if isinstance(v, list):
                v = v[p] if p < len(v) else {}
            else:
                v = v.get(p, {}) if isinstance(v, dict) else {}
        return "-" if v in ({}, None) else f"{v:,}"

    rows.append(("1 client p50 us", get("lookupd", "latency", "p50_us"), get("redis", "latency", "p50_us"),
                 get("lookupd_all_threaded", "latency", "p50_us")))
    rows.append(("1 client p99 us", get("lookupd", "latency", "p99_us"), get("redis", "latency", "p99_us"),
                 get("lookupd_all_threaded", "latency", "p99_us")))
    for i, c in enumerate((1, 8, 64)):
        rows.append((f"{c} clients lookups/s", get("lookupd", "throughput", i, "per_s"),
                     get("redis", "throughput", i, "per_s"),
                     get("lookupd_all_threaded", "throughput", 0, "per_s") if c == 8 else ""))
    rows.append(("pipelined (64) lookups/s", get("lookupd", "pipelined", "per_s"), get("redis", "pipelined", "per_s"), ""))
    rows.append(("columnar lookups/s", get("lookupd", "columnar", "per_s"), "", ""))
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    if "policy_in_process" in r:
        p = r["policy_in_process"]
        print(f"hot lookup_offset in process: {p['inline_us']} us inline, {p['via_thread_us']} us via trio.to_thread")
    if "answers_agree" in r:
        print(f"lookupd and redis answers agree: {r['answers_agree']}")


if __name__ == "__main__":
    main()
