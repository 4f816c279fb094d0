"""Kafka clients we did not write (confluent-kafka's librdkafka, kafka-python, aiokafka), each a subprocess,
against one real daemon's Kafka listener over the reference corpus and a few partitions written here:
records equal our own reader's, offsets_for_times equals offset_for_timestamp, read_committed skips exactly
the aborted records, a live log is followed as it grows and rolls, and a produce is refused as read-only."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import reference as R
from coordinator_writer import CoordinatorLog, Record, commit_key, commit_value
from daemon_helpers import start_daemon, stop_daemon
from kafka_clients import canonical, digest
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.format.builder import build_batch, build_legacy
from lookupd.format.batch import Compression
from lookupd.format.internal.topics import partition_for
from lookupd.format.records import decode_batch
from lookupd.log.locallog import LocalLog
from lookupd.tools.writer import LogWriter

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = ("confluent", "kafka-python", "aiokafka")
CORPUS = ("plain", "compressed", "ooo-time", "txn", "bigbase", "large", "logappend", "empty", "closed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_client(client: str, bootstrap: str, command: str, *args: str, timeout: float = 180) -> object:
    out = subprocess.run([sys.executable, os.path.join(HERE, "kafka_clients.py"), client, bootstrap, command, *args],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{client} {command} failed:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- our own reader


def our_records(part_dir: str, topic: str, partition: int, committed: bool) -> list:
    """Every record a consumer gets, by lookupd's own reader: control records never; under read_committed
    not the data of aborted transactions (a producer's records from its transaction's first offset to its
    ABORT marker, as the `.txnindex` lists them)."""
    llog = LocalLog(part_dir, topic, partition)
    try:
        aborted = []
        for seg in llog.segments():
            aborted.extend(seg.txn_index.all_aborted_txns())
        out = []
        for seg in llog.segments():
            for h in seg.log.batches(0, seg.size()):
                for rec in decode_batch(h, seg.log.read(h.position, h.size)):
                    if rec.is_control:
                        continue
                    if committed and h.is_transactional and any(
                            t.producer_id == h.producer_id and t.first_offset <= rec.offset <= t.last_offset
                            for t in aborted):
                        continue
                    out.append(canonical(rec.offset, rec.timestamp, rec.key, rec.value,
                                         list(rec.headers)))
        return out
    finally:
        llog.close()


def span(part_dir: str, topic: str, partition: int) -> str:
    """"START:END", the partition's log start and end offsets (the clients' consume takes them)."""
    llog = LocalLog(part_dir, topic, partition)
    try:
        return f"{llog.log_start_offset}:{llog.log_end_offset}"
    finally:
        llog.close()


# ---------------------------------------------------------------------- partitions written here


def write_legacy(root: str, magic: int) -> None:
    """legacy<magic>-0: magic 0 or 1 message sets, plain and compressed, as a broker upgraded from 0.10 keeps
    them. (One magic a partition: aiokafka reads every message set of a response with the first one's magic,
    so a magic 1 wrapper after magic 0 messages loses its relative offsets there.)"""
    w = LogWriter(os.path.join(root, f"legacy{magic}-0"), segment_bytes=2048)
    offset, t = 0, 1_600_000_000_000
    for i in range(20):
        codec = (Compression.NONE, Compression.GZIP, Compression.SNAPPY)[i % 3]
        n = 1 + i % 4
        msgs = [(t + 10 * (offset + j), b"k%d" % (offset + j) if j % 2 else None, b"v" * (j + 1) + b"%d" % i, ())
                for j in range(n)]
        w.append(build_legacy(msgs, magic=magic, base_offset=offset, compression=codec))
        offset += n
    w.close(trim_active=True)


@pytest.fixture(scope="module")
def kafka_daemon():
    """One daemon over the corpus and a log dir of partitions written here; (bootstrap, extra log dir)."""
    d = tempfile.mkdtemp(prefix="lkk", dir="/tmp")
    extra = os.path.join(d, "logs")
    os.makedirs(extra)
    write_legacy(extra, 0)
    write_legacy(extra, 1)
    LogWriter(os.path.join(extra, "live-0"), segment_bytes=4096).close()
    port = free_port()
    sock = os.path.join(d, "s.sock")
    proc = start_daemon(["--log-dir", str(R.require() / "logs"), "--log-dir", extra, "--socket", sock,
                         "--kafka-listen", f"127.0.0.1:{port}"], cwd=d, sock=sock)
    try:
        yield f"127.0.0.1:{port}", extra
    finally:
        code, err = stop_daemon(proc)
        shutil.rmtree(d, ignore_errors=True)
        assert code == 0, err
        assert "Traceback" not in err, err


def _targets(extra: str, names=CORPUS) -> dict[str, tuple[str, str]]:
    """target "topic:partition:start:end" -> (partition dir, topic) for the corpus partitions and legacy*-0."""
    out = {}
    for name in names:
        part_dir = str(R.log_dir(f"{name}-0"))
        out[f"{name}:0:{span(part_dir, name, 0)}"] = (part_dir, name)
    for topic in ("legacy0", "legacy1"):
        part_dir = os.path.join(extra, f"{topic}-0")
        out[f"{topic}:0:{span(part_dir, topic, 0)}"] = (part_dir, topic)
    return out


@pytest.mark.parametrize("client", CLIENTS)
def test_every_partition_consumed_equals_our_reader(kafka_daemon, client):
    bootstrap, extra = kafka_daemon
    targets = _targets(extra)
    got = run_client(client, bootstrap, "consume", "read_uncommitted", *targets)
    assert "error" not in got, got
    for target, (part_dir, topic) in targets.items():
        want = our_records(part_dir, topic, 0, committed=False)
        assert got[target]["count"] == len(want), (target, got[target]["head"], want[:3])
        assert got[target]["digest"] == digest(want), (target, got[target]["head"], want[:3], got[target]["tail"],
                                                       want[-3:])


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_skips_exactly_the_aborted_records(kafka_daemon, client):
    bootstrap, extra = kafka_daemon
    part_dir = str(R.log_dir("txn-0"))
    target = f"txn:0:{span(part_dir, 'txn', 0)}"
    got = run_client(client, bootstrap, "consume", "read_committed", target)[target]
    committed = our_records(part_dir, "txn", 0, committed=True)
    everything = our_records(part_dir, "txn", 0, committed=False)
    assert len(committed) < len(everything)  # the corpus aborts 35 transactions
    assert got["count"] == len(committed)
    assert got["digest"] == digest(committed)


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_for_times_equals_offset_for_timestamp(kafka_daemon, client):
    bootstrap, _ = kafka_daemon
    for name in ("plain", "ooo-time", "logappend", "bigbase"):
        part_dir = str(R.log_dir(f"{name}-0"))
        llog = LocalLog(part_dir, name, 0)
        try:
            stamps = sorted({h.max_timestamp for seg in llog.segments() for h in seg.log.batches(0, seg.size())})
            probes = [0, stamps[0] - 1, stamps[len(stamps) // 3] + 1, stamps[len(stamps) // 2], stamps[-1],
                      stamps[-1] + 1]
            want = []
            for ts in probes:
                found = llog.offset_for_timestamp(ts)
                want.append(-1 if found is None else found.offset)
        finally:
            llog.close()
        got = run_client(client, bootstrap, "times", name, "0", ",".join(map(str, probes)))
        assert got == want, (name, probes)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_produce_gets_the_read_only_error(kafka_daemon, client):
    bootstrap, _ = kafka_daemon
    errors = run_client(client, bootstrap, "produce", "plain")["errors"]
    assert len(errors) == 1 and errors[0] not in ("None", ""), errors
    assert "read-only" in errors[0] or "POLICY_VIOLATION" in errors[0].upper().replace(" ", "_") or \
        "PolicyViolation" in errors[0], errors


def test_a_live_log_is_followed_as_it_grows_and_rolls(kafka_daemon):
    """A consumer at the log end gets each append (the long poll wakes on it) across segment rolls."""
    bootstrap, extra = kafka_daemon
    part_dir = os.path.join(extra, "live-0")
    total, stop = 600, threading.Event()

    def broker():
        w = LogWriter(part_dir, segment_bytes=4096)
        try:
            for i in range(0, total, 20):
                if stop.is_set():
                    return
                w.append(build_batch([(1_700_000_000_000 + i + j, None, b"live-%d" % (i + j), ())
                                      for j in range(20)], base_offset=i))
                time.sleep(0.02)
        finally:
            w.close()

    writer = threading.Thread(target=broker)
    writer.start()
    try:
        got = run_client("confluent", bootstrap, "follow", "live", "0", str(total), "60")
    finally:
        stop.set()
        writer.join()
    assert len(os.listdir(part_dir)) > 6  # it rolled
    want = our_records(part_dir, "live", 0, committed=False)
    assert len(want) == total
    assert got["count"] == total and got["digest"] == digest(want)


def test_a_tiered_partition_is_consumed_end_to_end(s3_server, tmp_path):  # noqa: F811
    """txn-0 with its first eight segments only in the bucket (the suite's S3 server): consumed from its log
    start across both tiers, read_uncommitted and read_committed, as our reader reads the whole local copy."""
    t = tier_partition(tmp_path, R.log_dir("txn-0"), s3_server, cut=8)
    d = tempfile.mkdtemp(prefix="lkt", dir="/tmp")
    port = free_port()
    sock, conf = os.path.join(d, "s"), os.path.join(d, "c.toml")
    cfg = t.config
    with open(conf, "w") as f:
        f.write(f'log_dirs = ["{t.tiered_dir}"]\nsocket = "{sock}"\n[remote]\nbucket = "{cfg.bucket}"\n'
                f'endpoint_url = "{cfg.endpoint_url}"\ncache_dir = "{cfg.cache_dir}"\nprefix = "{cfg.prefix}"\n'
                f'[kafka]\nlisten = "127.0.0.1:{port}"\n')
    proc = start_daemon(["--config", conf], d, sock)
    local = str(t.local_dir / "txn-0")
    try:
        target = f"txn:0:{span(local, 'txn', 0)}"
        for isolation, committed in (("read_uncommitted", False), ("read_committed", True)):
            got = run_client("confluent", f"127.0.0.1:{port}", "consume", isolation, target)[target]
            want = our_records(local, "txn", 0, committed=committed)
            assert got["count"] == len(want) and got["digest"] == digest(want), isolation
    finally:
        code, err = stop_daemon(proc)
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, err


def write_multi(d: str) -> str:
    """A log dir under `d` holding topic "multi": 4 partitions of 200 records each; returns its path."""
    logs = os.path.join(d, "logs")
    for p in range(4):
        w = LogWriter(os.path.join(logs, f"multi-{p}"))
        w.append(build_batch([(1_700_000_000_000 + i, None, b"p%d-%d" % (p, i), ()) for i in range(200)],
                             base_offset=0))
        w.close(trim_active=True)
    return logs


def _group_daemon(d: str, log_dir: str, port: int, delay_ms: int = 0):
    """A daemon whose groups' first rebalance waits `delay_ms` for more members (0: a lone member, at once)."""
    sock, conf = os.path.join(d, "s"), os.path.join(d, "c.toml")
    with open(conf, "w") as f:
        f.write(f'log_dirs = ["{log_dir}"]\nsocket = "{sock}"\n[kafka]\nlisten = "127.0.0.1:{port}"\n'
                f'state_dir = "{os.path.join(d, "state")}"\ngroup_initial_rebalance_delay_ms = {delay_ms}\n')
    return start_daemon(["--config", conf], d, sock)


def test_a_group_of_two_splits_the_partitions_and_resumes_from_its_commits_after_a_restart():
    """Two confluent-kafka consumers in one group share a 4-partition topic (range: two each); each commits
    what it consumed; after the daemon restarts, a third member of the group starts at those commits."""
    d = tempfile.mkdtemp(prefix="lkg", dir="/tmp")
    logs = write_multi(d)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = _group_daemon(d, logs, port, delay_ms=3000)  # Kafka's default: both members join one generation
    try:
        members = [subprocess.Popen([sys.executable, os.path.join(HERE, "kafka_clients.py"), "confluent", bootstrap,
                                     "group", "split", "multi", "150", "9"], stdout=subprocess.PIPE, text=True)
                   for _ in range(2)]
        answers = [json.loads(m.communicate(timeout=120)[0].strip().splitlines()[-1]) for m in members]
    finally:
        code, err = stop_daemon(proc)
    assert code == 0, err
    a, b = (set(x["assigned"]) for x in answers)
    assert len(a) == len(b) == 2 and a | b == {0, 1, 2, 3}, answers
    # where the group stands: what each member committed (-1001: nothing yet, so the start)
    committed = {int(p): max(o, 0) for x in answers for p, o in x["committed"].items()}
    assert sorted(committed) == [0, 1, 2, 3] and all(0 <= o <= 200 for o in committed.values()), committed
    assert sum(committed.values()) == 300  # each member consumed 150 of its partitions' records and committed them

    proc = _group_daemon(d, logs, port)  # a restart: the commits come back from state_dir
    try:
        resumed = run_client("confluent", bootstrap, "group", "split", "multi", "10000", "6")
    finally:
        code, err = stop_daemon(proc)
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, err
    assert resumed["assigned"] == [0, 1, 2, 3]
    first = {}
    for p, o in resumed["seen"]:
        first.setdefault(p, o)
    assert {p: first.get(p, 200) for p in range(4)} == committed
    assert len(resumed["seen"]) == 800 - 300


def test_a_group_resumes_from_its_commits_in_consumer_offsets():
    """A log dir from a lost cluster: its __consumer_offsets partition holds group "lost"'s commits (two
    partitions of four, one of them committed twice). A confluent-kafka member of "lost" starts at those
    offsets (the others at the earliest), and once it has committed here its own commits win."""
    d = tempfile.mkdtemp(prefix="lkr", dir="/tmp")
    logs = write_multi(d)
    offsets = CoordinatorLog(os.path.join(logs, f"__consumer_offsets-{partition_for('lost')}"))
    offsets.write([Record(commit_key("lost", "multi", 0), commit_value(50)),
                   Record(commit_key("lost", "multi", 1), commit_value(30, metadata="m", leader_epoch=2))])
    offsets.write([Record(commit_key("lost", "multi", 0), commit_value(120, version=4))])
    offsets.write([Record(commit_key("other", "multi", 2), commit_value(7))])
    offsets.close()
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = _group_daemon(d, logs, port)
    try:
        resumed = run_client("confluent", bootstrap, "group", "lost", "multi", "10000", "6")
        again = run_client("confluent", bootstrap, "group", "lost", "multi", "10000", "4")
    finally:
        code, err = stop_daemon(proc)
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, err
    assert resumed["assigned"] == [0, 1, 2, 3] and resumed["errors"] == []
    first = {}
    for p, o in resumed["seen"]:
        first.setdefault(p, o)
    assert first == {0: 120, 1: 30, 2: 0, 3: 0}
    assert len(resumed["seen"]) == 80 + 170 + 200 + 200
    assert resumed["committed"] == {"0": 200, "1": 200, "2": 200, "3": 200}
    assert again["seen"] == []  # its commits here (200 each) win over the replayed 120 and 30


@pytest.mark.parametrize("client", ("kafka-python", "aiokafka"))
def test_a_group_member_commits_and_the_next_one_resumes_there(kafka_daemon, client):
    """kafka-python and aiokafka run the same group protocol: subscribe alone, consume, commit; the group's
    next member starts where the commit says."""
    bootstrap, _ = kafka_daemon
    first = run_client(client, bootstrap, "group", f"solo-{client}", "plain", "100", "20")
    assert first["assigned"] == [0] and [o for _, o in first["seen"]] == list(range(len(first["seen"])))
    again = run_client(client, bootstrap, "group", f"solo-{client}", "plain", "10", "20")
    assert again["seen"][0] == [0, len(first["seen"])]


def test_with_workers_one_coordinator_keeps_the_groups_commits():
    """workers = 2: only worker 0 serves the Kafka listener, so every connection of a group meets the same
    coordinator and commits. (Two would each keep their own: a member landing on the other worker would
    start again from the beginning, as three in a row here would show three times in four.)"""
    d = tempfile.mkdtemp(prefix="lkw", dir="/tmp")
    port = free_port()
    sock, conf = os.path.join(d, "s"), os.path.join(d, "c.toml")
    with open(conf, "w") as f:  # one member at a time: no first rebalance waiting for others
        f.write("[kafka]\ngroup_initial_rebalance_delay_ms = 0\n")
    proc = start_daemon(["--config", conf, "--log-dir", str(R.require() / "logs"), "--socket", sock, "--workers", "2",
                         "--kafka-listen", f"127.0.0.1:{port}"], cwd=d, sock=sock)
    try:
        starts = [run_client("confluent", f"127.0.0.1:{port}", "group", "workers", "plain", "10", "3")["seen"][0]
                  for _ in range(3)]
    finally:
        code, err = stop_daemon(proc)
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, err
    assert starts == [[0, 0], [0, 10], [0, 20]]
