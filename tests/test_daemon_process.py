"""The real `lookupd serve` process, spoken to by a raw msgpack-rpc client written here, checked
against Apache Kafka's own answers; then SIGHUP (rescan now) and SIGTERM (clean exit)."""

from __future__ import annotations

import bisect
import json
import os
import signal
import socket
import subprocess
import sys
import time

import msgpack
import pytest

import reference as R
from daemon_helpers import REPO, copy_partition, short_dir, start_daemon as start, stop_daemon as stop  # noqa: F401

class Raw:
    """Blocking msgpack-rpc over a Unix socket: pipelines many requests, matches answers by msgid."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False)

    def many(self, calls: list[tuple]) -> list:
        """[(error, result)] for [(method, *params)], all sent in one write (pipelined)."""
        out = b"".join(msgpack.packb([0, i, c[0], list(c[1:])]) for i, c in enumerate(calls))
        self.sock.sendall(out)
        got: dict[int, tuple] = {}
        while len(got) < len(calls):
            data = self.sock.recv(1 << 20)
            assert data, "daemon closed the connection"
            self.unpacker.feed(data)
            for msg in self.unpacker:
                assert msg[0] == 1
                got[msg[1]] = (msg[2], msg[3])
        return [got[i] for i in range(len(calls))]

    def call(self, method: str, *params):
        err, result = self.many([(method, *params)])[0]
        assert err is None, err
        return result

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    R.require()
    d = tmp_path_factory.mktemp("proc")
    cwd = str(d)
    sock = os.path.join(cwd, "run", "lookupd.sock")  # the default socket, relative to the working dir
    proc = start(["--log-dir", str(R.LOGS)], cwd, sock)
    client = Raw(sock)
    yield client, proc, sock
    client.close()
    if proc.poll() is None:
        stop(proc)


def split(p: str) -> tuple[str, int]:
    topic, part = p.rsplit("-", 1)
    return topic, int(part)


def sample(items: list, n: int) -> list:
    return items[::max(1, len(items) // n)]


def largest_timestamps(p: str) -> list[int]:
    out = []
    for s in R.answers(p)["segments"]:
        m = s["live_view_before_handles_released"]["max_timestamp_so_far"] if s["active"] else s["max_timestamp_so_far"]
        out.append(m["timestamp"])
    return out


WITH_DATA = [p for p in R.PARTITIONS if p != "empty-0"]  # empty-0 has no record to look up


@pytest.mark.parametrize("p", WITH_DATA)
def test_resolve_offset_matches_translate_offset(daemon, p):
    client = daemon[0]
    topic, part = split(p)
    segs = R.answers(p)["segments"]
    bases = [s["base_offset"] for s in segs]
    start, end = bases[0], segs[-1]["read_next_offset"]
    qs = [q for q in R.answers(p)["queries"] if q["op"] == "LogSegment.translateOffset" and q["result"] is not None
          and start <= q["offset"] < end and bases[bisect.bisect_right(bases, q["offset"]) - 1] == q["segment"]]
    qs = sample(qs, 150)
    assert qs, f"{p}: the reference has no translateOffset query inside the log"
    answers = client.many([("resolve_offset", topic, part, q["offset"]) for q in qs])
    for q, (err, got) in zip(qs, answers):
        assert err is None, (q, err)
        r = q["result"]
        assert (got["segment"], got["last_offset"], got["position"], got["size"]) == \
               (q["segment"], r["offset"], r["position"], r["size"]), q


@pytest.mark.parametrize("p", WITH_DATA)
def test_offset_for_timestamp_matches_find_offset_by_timestamp(daemon, p):
    client = daemon[0]
    topic, part = split(p)
    segs = R.answers(p)["segments"]
    bases = [s["base_offset"] for s in segs]
    largest = largest_timestamps(p)

    def first_segment(t):
        for b, L in zip(bases, largest):
            if L < 0:
                return None  # Kafka would use the .log's mtime: not comparable
            if L >= t:
                return b
        return None

    qs = [q for q in R.answers(p)["queries"] if q["op"] == "LogSegment.findOffsetByTimestamp" and q["timestamp"] >= 0
          and q["starting_offset"] <= q["segment"] and first_segment(q["timestamp"]) == q["segment"]]
    qs = sample(qs, 150)
    assert qs, f"{p}: the reference has no findOffsetByTimestamp query in the segment ListOffsets picks"
    answers = client.many([("offset_for_timestamp", topic, part, q["timestamp"]) for q in qs])
    for q, (err, got) in zip(qs, answers):
        assert err is None, (q, err)
        want = q["result"]
        assert (None if got is None else {"timestamp": got["timestamp"], "offset": got["offset"]}) == \
               (None if want is None else {"timestamp": want["timestamp"], "offset": want["offset"]}), q
        if got is not None:
            assert got["segment"] == q["segment"]


def test_aborted_transactions_match_collect_aborted_txns(daemon):
    client = daemon[0]
    p = "txn-0"
    by_range: dict[tuple, dict] = {}
    for q in R.answers(p)["queries"]:
        if q["op"] == "TransactionIndex.collectAbortedTxns" and q["view"] == "reopened":
            by_range.setdefault((q["fetch_offset"], q["upper_bound_offset"]), {})[q["segment"]] = q["result"]
    bases = [s["base_offset"] for s in R.answers(p)["segments"]]
    calls, wants = [], []
    for (fetch, upper), per_seg in sorted(by_range.items()):
        if fetch < 0 or upper < fetch:
            continue
        want, ok = [], True
        for b in bases[max(bisect.bisect_right(bases, fetch) - 1, 0):]:
            if b not in per_seg:
                ok = False
                break
            want.extend(per_seg[b]["aborted_transactions"])
            if per_seg[b]["is_complete"]:
                break
        if ok:
            calls.append(("aborted_transactions", "txn", 0, fetch, upper))
            wants.append(want)
    calls, wants = sample(calls, 300), sample(wants, 300)
    assert calls
    for want, (err, got) in zip(wants, client.many(calls)):
        assert err is None and got == want


def test_errors_and_listing(daemon):
    client = daemon[0]
    answers = client.many([("resolve_offset", "plain", 0, 10**9), ("lookup_offset", "../etc", 0, 0, "floor"),
                           ("nope",), ("partitions",)])
    assert [a[0]["code"] if a[0] else None for a in answers] == \
           ["OFFSET_OUT_OF_RANGE", "INVALID_ARGUMENT", "UNKNOWN_METHOD", None]
    assert {(x["topic"], x["partition"]) for x in answers[3][1]} == {split(p) for p in R.PARTITIONS}


def test_sighup_rescans_and_sigterm_exits_cleanly(short_dir):
    R.require()
    logs = os.path.join(short_dir, "logs")
    os.mkdir(logs)
    copy_partition("plain-0", logs)
    conf = os.path.join(short_dir, "lookupd.toml")
    with open(conf, "w") as f:
        f.write(f'log_dirs = ["{logs}"]\nrescan_interval_s = 3600.0\n')
    sock = os.path.join(short_dir, "d.sock")
    proc = start(["--config", conf, "--socket", sock], short_dir, sock)
    try:
        c = Raw(sock)
        assert len(c.call("partitions")) == 1
        copy_partition("txn-0", logs)
        time.sleep(0.2)
        assert len(c.call("partitions")) == 1  # the periodic rescan is an hour away
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while len(c.call("partitions")) != 2:
            assert time.monotonic() < deadline, "SIGHUP did not rescan"
            time.sleep(0.05)
        c.close()
    finally:
        code, stderr = stop(proc)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert not os.path.exists(sock)


def test_refuses_a_second_daemon_on_the_same_socket(daemon):
    _, _, sock = daemon
    env = dict(os.environ, PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-m", "lookupd", "serve", "--log-dir", str(R.LOGS), "--socket", sock],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "already listening" in r.stderr and "Traceback" not in r.stderr
    assert os.path.exists(sock)


def test_query_command(daemon):
    _, _, sock = daemon
    env = dict(os.environ, PYTHONPATH=REPO, LOOKUPD_SOCKET=sock)
    r = subprocess.run([sys.executable, "-m", "lookupd", "query", "lookup_offsets", "plain", "0", "[100,0]", "floor"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"segment": [0, 0], "offset": [89, 0], "position": [13079, 0]}
    r = subprocess.run([sys.executable, "-m", "lookupd", "query", "read", "plain", "0", "100", "1"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert set(json.loads(r.stdout)["records"]) == {"$base64"}
    r = subprocess.run([sys.executable, "-m", "lookupd", "query", "resolve_offset", "plain", "0", "99999999"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stderr.startswith("lookupd query: OFFSET_OUT_OF_RANGE")
