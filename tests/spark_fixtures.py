"""Shared by the Spark tests: one local Spark session, lookupd daemons run as subprocesses, and
the records each test partition holds, taken from Kafka's reference answers or from what the
test wrote with lookupd's writer.

Import the fixtures into a test module (`from spark_fixtures import spark, ...`). Each
resource is made once per pytest process however many modules import it: Spark's local
session takes ~10 s to start.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import struct
import sys
import tempfile
from contextlib import ExitStack

import pytest

import reference as R

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from lookupd.format.batch import TimestampType, parse_header, whole_frames  # noqa: E402
from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.format.names import segment_file_name  # noqa: E402
from lookupd.format.records import decode_batch  # noqa: E402
from lookupd.tools.demo import generate  # noqa: E402
from lookupd.tools.writer import LogWriter, SegmentWriter  # noqa: E402

DEMO_RECORDS = 3000  # per partition of the sample topics
TRIMMED_SEGMENTS_DELETED = 2

_state: dict = {}
_stack = ExitStack()
atexit.register(_stack.close)


def _once(name: str, make):
    if name not in _state:
        _state[name] = make()
    return _state[name]


# ---------------------------------------------------------------- Spark


def _session():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME): local Spark cannot start")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run this interpreter, with lookupd installed
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_client

    spark = (SparkSession.builder.master("local[2]").appName("kafka-lookupd tests")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_client.register(spark)
    _stack.callback(spark.stop)
    return spark


@pytest.fixture(scope="session")
def spark():
    return _once("spark", _session)


# ---------------------------------------------------------------- data and daemons


def _short_dir() -> str:
    """A private dir with a short path: Unix socket paths are limited to 107 bytes."""
    d = tempfile.mkdtemp(prefix="lkspark", dir="/tmp")
    _stack.callback(shutil.rmtree, d, True)
    return d


def _daemon(name: str, log_dirs: list[str]) -> str:
    from spark_client.examples.with_daemon import running_daemon

    sock = os.path.join(_once("sockets", _short_dir), f"{name}.sock")
    _stack.enter_context(running_daemon(log_dirs, sock))
    return sock


def write_trimmed(root: str) -> list[tuple]:
    """trimmed-0: 60 batches of 5 records in 4 KiB segments, then its first segments deleted as
    retention deletes them. Returns every record written: (offset, timestamp, key, value)."""
    w = LogWriter(os.path.join(root, "trimmed-0"), segment_bytes=4096)
    written = []
    for b in range(60):
        recs = [(1_767_225_600_000 + 1000 * (5 * b + i), f"k{5 * b + i}".encode(), b"v" * 60, ())
                for i in range(5)]
        w.append(build_batch(recs, base_offset=5 * b))
        written += [(5 * b + i, ts, k, v) for i, (ts, k, v, _) in enumerate(recs)]
    w.close()
    part = os.path.join(root, "trimmed-0")
    bases = sorted({name.split(".")[0] for name in os.listdir(part)})
    for base in bases[:TRIMMED_SEGMENTS_DELETED]:
        for suffix in (".log", ".index", ".timeindex"):
            os.remove(os.path.join(part, base + suffix))
    return written


def _written():
    root = os.path.join(_once("sockets", _short_dir), "data")
    generate(root, records=DEMO_RECORDS)
    return root, write_trimmed(root)


@pytest.fixture(scope="session")
def written_dir() -> str:
    """A log dir written by lookupd's writer: the sample topics (orders x3, payments, clicks) and trimmed-0."""
    return _once("written", _written)[0]


@pytest.fixture(scope="session")
def trimmed_records() -> list[tuple]:
    return _once("written", _written)[1]


@pytest.fixture(scope="session")
def ref_daemon() -> str:
    """Socket of a daemon over Kafka's reference corpus (skips without the corpus)."""
    R.require()
    return _once("ref_daemon", lambda: _daemon("ref", [str(R.LOGS)]))


@pytest.fixture(scope="session")
def written_daemon(written_dir) -> str:
    """Socket of a daemon over the log dir written by lookupd's writer."""
    return _once("written_daemon", lambda: _daemon("written", [written_dir]))


def unreachable_socket() -> str:
    """A socket path nothing listens on."""
    return os.path.join(_once("sockets", _short_dir), "nobody.sock")


# ---------------------------------------------------------------- expected records


def _b64(text):
    return None if text is None else base64.b64decode(text)


def reference_rows(partition: str) -> list[tuple]:
    """(offset, timestamp, timestampType, key, value, headers) of every non-control record Kafka
    reported for a reference partition; headers as Spark shows them (None when there are none)."""
    batches = R.batches(partition)
    control = set()
    types = []
    for b in batches:
        t = 1 if b["timestamp_type"] == "LogAppendTime" else 0
        types.append((b["base_offset"], b["last_offset"], t))
        if b.get("is_control"):
            control.update(range(b["base_offset"], b["last_offset"] + 1))
    type_of = {}
    for base, last, t in types:
        for o in range(base, last + 1):
            type_of[o] = t
    out = []
    for r in R.answers(partition)["records"]:
        if r["offset"] in control:
            continue
        headers = [(k, _b64(v)) for k, v in r["headers"]] or None
        out.append((r["offset"], r["timestamp"], type_of[r["offset"]], _b64(r["key"]), _b64(r["value"]), headers))
    return out


def aborted_offsets(partition: str) -> set[int]:
    """Offsets of records in aborted transactions, from Kafka's completed-transaction list and batches."""
    spans = {}
    for t in R.answers(partition)["completed_transactions_fed_to_updateTxnIndex"]:
        if t["is_aborted"]:
            spans.setdefault(t["producer_id"], []).append((t["first_offset"], t["last_offset"]))
    out = set()
    for b in R.batches(partition):
        if b.get("is_transactional") and not b.get("is_control"):
            for first, last in spans.get(b["producer_id"], ()):
                if first <= b["base_offset"] <= last:
                    out.update(range(b["base_offset"], b["last_offset"] + 1))
    return out


def core_rows(log_dir: str, topic: str, partition: int) -> list[tuple]:
    """Rows like reference_rows for a partition lookupd's writer wrote, read with the core library."""
    from lookupd.log.logmanager import LogManager
    from lookupd.format.records import decode_batch

    manager = LogManager([log_dir])
    try:
        out = []
        for seg in manager.get(topic, partition).segments():
            for h in seg.log.batches():
                if h.is_control:
                    continue
                t = 1 if h.timestamp_type is TimestampType.LOG_APPEND_TIME else 0
                for r in decode_batch(h, seg.log.read(h.position, h.size)):
                    out.append((r.offset, r.timestamp, t, r.key, r.value, list(r.headers) or None))
        return out
    finally:
        manager.close()


def spark_rows(df) -> list[tuple]:
    """A DataFrame's rows as (offset, timestamp ms, timestampType, key, value, headers), sorted by offset."""
    return arrow_rows(df.toArrow())


def arrow_rows(table) -> list[tuple]:
    """Rows of an Arrow table of the data source's schema, as spark_rows gives them."""
    import pyarrow as pa

    millis = [None if us is None else us // 1000 for us in table["timestamp"].cast(pa.int64()).to_pylist()]
    headers = table["headers"].to_pylist() if "headers" in table.column_names else [None] * table.num_rows
    return sorted(zip(table["offset"].to_pylist(), millis, table["timestampType"].to_pylist(),
                      table["key"].to_pylist(), table["value"].to_pylist(),
                      [None if h is None else [(x["key"], x["value"]) for x in h] for h in headers]))


def list_offsets(partition: str, timestamp: int) -> int | None:
    """Kafka's ListOffsets for a timestamp, from the reference records and batches: the first segment
    whose largest timestamp reaches it, then the first record there (offset order) at or after it."""
    segment_of, largest = {}, {}
    for b in R.batches(partition):
        largest[b["segment"]] = max(largest.get(b["segment"], -1), b["max_timestamp"])
        for o in range(b["base_offset"], b["last_offset"] + 1):
            segment_of[o] = b["segment"]
    target = next((s for s in sorted(largest) if largest[s] >= timestamp), None)
    if target is None:
        return None
    return next((r["offset"] for r in R.answers(partition)["records"]
                 if segment_of[r["offset"]] == target and r["timestamp"] >= timestamp), None)


# ---------------------------------------------------------------- live logs (streaming)

LIVE_RESCAN_S = 0.2  # the live daemon rescans often, so rolled, deleted and new segments show quickly
VISIBLE_TIMEOUT_S = 20.0


def _live():
    root = os.path.join(_once("sockets", _short_dir), "live")
    os.makedirs(root)
    config = os.path.join(root, "..", "live.toml")
    with open(config, "w") as f:
        f.write(f"rescan_interval_s = {LIVE_RESCAN_S}\n")
    from spark_client.examples.with_daemon import running_daemon

    sock = os.path.join(_once("sockets", _short_dir), "live.sock")
    _stack.enter_context(running_daemon([root], sock, config=config))
    return root, sock


@pytest.fixture(scope="session")
def live_log() -> tuple[str, str]:
    """(log dir, daemon socket): an initially empty log dir that tests write while queries run.
    Each test uses its own topics."""
    return _once("live", _live)


class LiveTopic:
    """A topic the test writes with lookupd's writer, as a broker would: appends, rolls and
    retention deleting the oldest segments. `records[p]` is every (offset, key, value) written."""

    def __init__(self, root: str, address: str, name: str, partitions: int = 1, segment_bytes: int = 4096):
        self.root, self.address, self.name, self.segment_bytes = root, address, name, segment_bytes
        self.writers: dict[int, LogWriter] = {}
        self.records: dict[int, list[tuple[int, bytes, bytes]]] = {}
        self.log_end: dict[int, int] = {}  # partitions truncated: their log end offset
        for p in range(partitions):
            self.add_partition(p)

    def add_partition(self, p: int) -> None:
        self.writers[p] = LogWriter(os.path.join(self.root, f"{self.name}-{p}"), segment_bytes=self.segment_bytes)
        self.records[p] = []

    def append(self, p: int, n: int, per_batch: int = 5, keys: int | None = None) -> None:
        """n records to partition p, in batches of per_batch records; keys unique, or `keys` distinct ones
        over and over (updates, as on a compacted topic)."""
        w = self.writers[p]
        for i in range(0, n, per_batch):
            base = w.next_offset
            recs = [(1_767_225_600_000 + base + j, self._key(p, base + j, keys), b"v" * 40, ())
                    for j in range(min(per_batch, n - i))]
            w.append(build_batch(recs, base_offset=base))
            self.records[p] += [(base + j, k, v) for j, (_, k, v, _) in enumerate(recs)]

    def roll(self, p: int) -> None:
        self.writers[p].roll()

    def delete_oldest(self, p: int, segments: int) -> int:
        """Retention: delete the oldest `segments` segments of p; returns the new log start offset."""
        d = os.path.join(self.root, f"{self.name}-{p}")
        bases = sorted({int(f.split(".")[0]) for f in os.listdir(d) if f.endswith(".log")})
        for base in bases[:segments]:
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                path = os.path.join(d, f"{base:020d}{suffix}")
                if os.path.exists(path):
                    os.remove(path)
        return bases[segments]

    def _key(self, p: int, offset: int, keys: int | None) -> bytes:
        return (f"{self.name}-{p}-{offset}" if keys is None else f"key{offset % keys}").encode()

    def segment_path(self, p: int, base: int, suffix: str = ".log") -> str:
        return os.path.join(self.root, f"{self.name}-{p}", segment_file_name(base, suffix))

    def compact(self, p: int, base: int) -> None:
        """The log cleaner on segment `base` of p: a copy keeping each key's latest record (batches keep their
        base offset; emptied ones go), written with lookupd's writer and swapped in under the same names."""
        latest = {key: offset for offset, key, _ in self.records[p]}
        with open(self.segment_path(p, base), "rb") as f:
            data = f.read()
        cleaned_dir = os.path.join(self.root, f"{self.name}-{p}.cleaned")
        os.makedirs(cleaned_dir)
        cleaned = SegmentWriter(cleaned_dir, base)
        for off, size in whole_frames(data):
            h = parse_header(data, off)
            kept = [r for r in decode_batch(h, data[off:off + size]) if latest[r.key] == r.offset]
            if kept:
                cleaned.append(build_batch([(r.timestamp, r.key, r.value, r.headers) for r in kept],
                                           base_offset=h.base_offset, offsets=[r.offset for r in kept]))
        cleaned.roll()  # trims the indexes as a rolled segment's
        for suffix in (".log", ".index", ".timeindex"):
            os.replace(os.path.join(cleaned_dir, segment_file_name(base, suffix)), self.segment_path(p, base, suffix))
        os.rmdir(cleaned_dir)
        self.records[p] = [r for r in self.records[p] if latest[r[1]] == r[0]]

    def truncate(self, p: int, offset: int) -> None:
        """A follower's truncateTo(offset) on p, whose records all sit in its one (active) segment: the log
        ends at `offset` (a batch's base offset), index entries at or past it are gone. No appends after it."""
        self.writers[p].close()
        log_path = self.segment_path(p, 0)
        with open(log_path, "rb") as f:
            data = f.read()
        cut = next(off for off, _ in whole_frames(data) if parse_header(data, off).base_offset == offset)
        os.truncate(log_path, cut)
        for suffix, entry, stale in ((".index", ">ii", lambda rel, pos: pos >= cut),
                                     (".timeindex", ">qi", lambda ts, rel: rel >= offset)):
            with open(self.segment_path(p, 0, suffix), "r+b") as f:
                raw = f.read()
                kept = b"".join(struct.pack(entry, *e) for e in struct.iter_unpack(entry, raw)
                                if any(e) and not stale(*e))
                f.seek(0)
                f.write(kept + bytes(len(raw) - len(kept)))  # the preallocated rest stays zeros
        self.records[p] = [r for r in self.records[p] if r[0] < offset]
        self.log_end[p] = offset

    def wait_visible(self, p: int, log_start: int | None = None) -> None:
        """Until the daemon reports p's log end offset (and log start, if given) as written."""
        import time

        from lookupd.rpc.client import Client

        want_end = self.log_end.get(p, self.writers[p].next_offset)
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        with Client(self.address) as c:
            while True:
                info = next((x for x in c.partitions() if (x["topic"], x["partition"]) == (self.name, p)), None)
                if info is not None and info["log_end_offset"] == want_end and \
                        (log_start is None or info["log_start_offset"] == log_start):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the daemon does not show {self.name}-{p} as written: {info}")
                time.sleep(0.05)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
