"""A preallocated active segment (Kafka's log.preallocate=true): the `.log` is zero-filled past its
data. As Kafka's recovery does, the first all-zero batch header ends the data; every answer is the one
the file would give if it ended there, whatever lookups ran before. A partition whose files cannot be
read never fails `partitions` for the others: its entry carries an `error`."""

from __future__ import annotations

import os
import shutil

import pytest

import reference as R
from lookupd.log.logmanager import LogManager
from lookupd.rpc.client import Client
from test_fusefs import lines
from test_fusefs_helpers import Daemon, mounted, workdir

PARTITIONS = ["plain-0", "txn-0", "compressed-0", "ooo-time-0"]
PADDING = 1 << 20  # what the broker preallocates is far more (segment.bytes); a MiB of zeros is enough


def active_log(part_dir) -> str:
    return os.path.join(part_dir, max(n for n in os.listdir(part_dir) if n.endswith(".log")))


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    """Copies of reference partitions whose active `.log` is extended with zeros."""
    R.require()
    root = tmp_path_factory.mktemp("preallocated")
    for p in PARTITIONS:
        shutil.copytree(R.log_dir(p), root / p)
        path = active_log(root / p)
        os.truncate(path, os.path.getsize(path) + PADDING)
    return root


def queries(partition: str) -> list[tuple]:
    """(method, args) over every method of LocalLog, at offsets and timestamps across the partition."""
    batches = R.batches(partition)
    end = batches[-1]["last_offset"] + 1
    offsets = sorted({0, 1, end - 1, end, end + 5} | {b["base_offset"] for b in batches[::7]}
                     | {b["last_offset"] for b in batches[-3:]})
    stamps = sorted({b["max_timestamp"] for b in batches[::5]} | {batches[-1]["max_timestamp"] + 1})
    out: list[tuple] = [("info", ()), ("segments_info", ()), ("log_end_offset", None), ("log_start_offset", None)]
    for o in offsets:
        out += [("resolve_offset", (o,)), ("lookup_offset", (o, "floor")), ("lookup_offset", (o, "ceiling")),
                ("read", (o, 300)), ("read", (o, 1 << 20)), ("aborted_transactions", (o, end))]
    for t in stamps + [-1, -2, -3]:
        out += [("offset_for_timestamp", (t,))]
    for t in stamps:
        out += [("lookup_timestamp", (t, "floor")), ("lookup_timestamp", (t, "ceiling"))]
    out += [("lookup_offsets", (offsets, "floor")), ("lookup_offsets", (offsets, "ceiling")),
            ("resolve_offsets", (offsets,)), ("offsets_for_timestamps", (stamps + [-1, -2, -3],))]
    return out


def answer(llog, method: str, args):
    """The answer, or the error's type and message, comparable across log dirs (paths and log dirs dropped)."""
    try:
        got = getattr(llog, method) if args is None else getattr(llog, method)(*args)
    except Exception as err:  # noqa: BLE001 - an error is an answer to compare too
        return ("error", type(err).__name__, str(err).replace(os.path.dirname(llog.dir), "<logs>"))
    if isinstance(got, dict):
        got = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in got.items() if k != "log_dir"}
    return got


def answers(log_dir, partition: str, order) -> dict:
    """Every query's answer from a fresh LogManager, asked in `order`."""
    manager = LogManager([log_dir])
    try:
        llog = manager.get(*partition.rsplit("-", 1)[:1], int(partition.rsplit("-", 1)[1]))
        return {i: answer(llog, *q) for i, q in order(list(enumerate(queries(partition))))}
    finally:
        manager.close()


def forward(items):
    return [(i, q) for i, q in items]


def backward(items):
    return [(i, q) for i, q in reversed(items)]


@pytest.mark.parametrize("partition", PARTITIONS)
def test_answers_equal_the_unpadded_partition_in_any_order(padded, partition):
    want = answers(R.LOGS, partition, forward)
    assert not any(isinstance(a, tuple) and a[:2] == ("error", "CorruptRecordError") for a in want.values())
    first = answers(padded, partition, forward)
    second = answers(padded, partition, backward)
    for i, q in enumerate(queries(partition)):
        assert first[i] == want[i], q
        assert second[i] == want[i], q


def test_through_the_daemon(padded, tmp_path):
    """A fresh daemon over the padded copies answers as over the originals, `partitions` included; a
    partition whose active segment is corrupt has an `error` in its entry and the others are listed."""
    logs = tmp_path / "logs"
    shutil.copytree(padded, logs)
    broken = logs / "broken-0"
    shutil.copytree(R.log_dir("plain-0"), broken)
    with open(active_log(broken), "r+b") as f:  # the last batch's size field: 5, below any batch
        last = R.batches("plain-0")[-1]
        f.seek(last["position"] + 8)
        f.write((5).to_bytes(4, "big"))
    reference = LogManager([R.LOGS])
    with workdir() as d:
        daemon = Daemon([logs], d)
        try:
            daemon.start()
            with Client(daemon.sock, timeout=10) as c:
                listed = {p["topic"]: p for p in c.call("partitions")}
                assert listed["broken"]["error"].startswith("CORRUPT_DATA: ") and "broken-0" in listed["broken"]["error"]
                assert listed["broken"]["log_end_offset"] is None
                for p in PARTITIONS:
                    topic = p.rsplit("-", 1)[0]
                    llog = reference.get(topic, 0)
                    assert "error" not in listed[topic]
                    assert listed[topic]["log_end_offset"] == llog.log_end_offset
                    end = llog.log_end_offset
                    for o in (0, end - 1, end):
                        got = c.call("resolve_offset", topic, 0, o)
                        want = llog.resolve_offset(o)
                        assert got == (None if want is None else dict(zip(want._fields, want))), (p, o)
                        got = c.call("read", topic, 0, o, 1 << 20)
                        assert got["records"] == llog.read(o, 1 << 20).records, (p, o)
                    want = llog.offset_for_timestamp(-1)
                    assert c.call("offset_for_timestamp", topic, 0, -1)["offset"] == want.offset
                    assert c.call("segments", topic, 0) == llog.segments_info()
        finally:
            daemon.stop()
            reference.close()


def test_mount_views_of_the_active_segment_end_at_its_data(padded):
    """The mount's decoded view of a preallocated active segment ends with its last record, no EIO."""
    with mounted([padded]) as (mnt, _):
        for p in PARTITIONS:
            active = os.path.basename(active_log(padded / p))[:20]
            got = lines(mnt.path(p.rsplit("-", 1)[0], "0", active + ".records.jsonl"))
            assert got[-1]["offset"] == R.answers(p)["records"][-1]["offset"], p
