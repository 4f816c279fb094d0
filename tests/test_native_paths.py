"""The one-call native lookups (`LogSegment.locate`, `_accel.locate`) answer as the Python path does.

`LocalLog.lookup_offset` (floor and ceiling), `resolve_offset`, `read`, `lookup_timestamp` and
`offset_for_timestamp` answer from one native call per segment (two or three for timestamps) when
they can, and leave the rest to their `*_reference` methods, the answers of record. Here both are
asked the same questions, on every partition Kafka wrote for the reference corpus, on `lookupd
demo-data` (every codec) and on damaged copies, and must give the same answers or raise the same
errors. Each test also checks that the native path did answer most questions, so a native path that
always declined would fail it.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

import reference as R
from lookupd.format import _accel as format_accel
from lookupd.format.batch import whole_batches, whole_batches_reference
from lookupd.log import _accel
from lookupd.log.locallog import LocalLog
from lookupd.log.logmanager import LogManager
from lookupd.tools.demo import generate

pytestmark = pytest.mark.skipif(not _accel.NATIVE and os.environ.get("CI") is None,
                                reason="the C extension is not built")

def outcome(fn, *args):
    """An answer, or the type and message of the error raised."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - the error itself is what is compared
        return type(err).__name__, str(err)


def reference(fn, *args):
    """`outcome` of a reference path, run in Python alone (no C function of lookupd's on this thread)."""
    with _accel.python_only():
        return outcome(fn, *args)


class Counted:
    """Counts calls of `_accel.locate` and `_accel.locate_time` that answered (not None)."""

    def __init__(self, monkeypatch):
        self.answered = 0
        self.by_time = 0  # of which locate_time's

        def counting(name):
            real = getattr(_accel, name)

            def call(*args):
                got = real(*args)
                answered = got is not None and got is not False
                self.answered += answered
                self.by_time += answered and name == "locate_time"
                return got

            monkeypatch.setattr(_accel, name, call)

        counting("locate")
        counting("locate_time")


def questions(llog: LocalLog, rnd: random.Random, n: int) -> tuple[list[int], list[int]]:
    """Offsets and timestamps to ask about: the edges of 150 batches (and of the first and last three), the
    log's ends, beyond, and random ones."""
    offsets, stamps = {0, 1, llog.log_start_offset, llog.log_end_offset, llog.log_end_offset + 1}, {0, 1}
    headers = [h for seg in llog.segments() for h in seg.log.batches()]
    for h in rnd.sample(headers, min(len(headers), 150)) + headers[:3] + headers[-3:]:
        offsets |= {h.base_offset - 1, h.base_offset, h.last_offset, h.last_offset + 1}
        if h.max_timestamp >= 0:
            stamps |= {h.max_timestamp - 1, h.max_timestamp, h.max_timestamp + 1}
    end = max(llog.log_end_offset, 1)
    offsets |= {rnd.randrange(end) for _ in range(n)}
    top = max(stamps)
    stamps |= {rnd.randint(0, top + 1) for _ in range(n)}
    return sorted(o for o in offsets if o >= 0), sorted(stamps)


def compare(llog: LocalLog, offsets: list[int], stamps: list[int]) -> int:
    """Ask both paths everything; return how many questions were asked."""
    asked = 0
    for o in offsets:
        for mode in ("floor", "ceiling"):
            assert outcome(llog.lookup_offset, o, mode) == reference(llog.lookup_offset_reference, o, mode), \
                ("lookup_offset", o, mode)
        assert outcome(llog.resolve_offset, o) == reference(llog.resolve_offset_reference, o), ("resolve_offset", o)
        for max_bytes in (0, 1, 5000):
            assert outcome(llog.read, o, max_bytes) == reference(llog.read_reference, o, max_bytes), \
                ("read", o, max_bytes)
        asked += 6
    for t in stamps:
        assert outcome(llog.offset_for_timestamp, t) == reference(llog.offset_for_timestamp_reference, t), \
            ("offset_for_timestamp", t)
        assert outcome(llog.lookup_timestamp, t) == reference(llog.lookup_timestamp_reference, t), \
            ("lookup_timestamp", t)
        asked += 2
    return asked


def warm(llog: LocalLog) -> None:
    """Open every segment and map its indexes (the native path answers only for segments in use)."""
    for seg in llog.segments():
        seg.offset_index.entries
        seg.time_index.entries
        seg.log.handle()


def compare_partitions(log_dir: str, monkeypatch, seed: int, randoms: int) -> tuple[int, int, int]:
    """Both paths over every partition of `log_dir`, warm: (questions the native path answered, of which
    by `locate_time`, asked)."""
    counted = Counted(monkeypatch)
    lm = LogManager([log_dir])
    rnd = random.Random(seed)
    asked = 0
    try:
        for llog in lm.logs():
            warm(llog)
            offsets, stamps = questions(llog, rnd, randoms)
            asked += compare(llog, offsets, stamps)
    finally:
        lm.close()
    return counted.answered, counted.by_time, asked


def test_native_and_python_paths_agree_on_kafka_written_partitions(monkeypatch):
    R.require()
    answered, by_time, asked = compare_partitions(R.LOGS, monkeypatch, 7, 200)
    assert answered > asked // 3 and by_time > asked // 20, (answered, by_time, asked)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("native") / "demo")
    generate(d, records=6000)
    return d


def test_native_and_python_paths_agree_on_every_codec(demo, monkeypatch):
    answered, by_time, asked = compare_partitions(demo, monkeypatch, 3, 300)
    assert answered > asked // 2 and by_time > asked // 20, (answered, by_time, asked)


@pytest.mark.parametrize("seed", range(12))
def test_native_and_python_paths_agree_on_damaged_logs(demo, tmp_path, seed):
    """A copy of a demo partition with bytes of a `.log` and its offset index damaged: the same answers,
    or the same CorruptRecordError or CorruptIndexError naming file and position."""
    rnd = random.Random(seed)
    src = os.path.join(demo, "orders-1")
    clean = LogManager([demo])
    try:
        whole = clean.get("orders", 1)
        end = whole.log_end_offset
        first, last = whole.offset_for_timestamp(0).timestamp, whole.offset_for_timestamp(-3).timestamp
    finally:
        clean.close()
    dst = tmp_path / "logs" / "orders-1"
    shutil.copytree(src, dst)
    bases = sorted(int(n[:20]) for n in os.listdir(dst) if n.endswith(".log"))
    base = rnd.choice(bases[:-1])  # a rolled segment
    for suffix, hits in ((".log", rnd.randint(1, 4)), (".index", rnd.randint(0, 2))):
        path = dst / f"{base:020d}{suffix}"
        data = bytearray(path.read_bytes())
        for _ in range(hits):
            if data:
                i = rnd.randrange(min(len(data), 4096))  # near the start, where the headers and entries are
                data[i] ^= 1 << rnd.randrange(8)
        path.write_bytes(bytes(data))
    lm = LogManager([str(tmp_path / "logs")])
    try:
        llog = lm.get("orders", 1)
        try:
            warm(llog)
        except Exception:  # noqa: BLE001 - a damaged index may refuse to map; the paths still must agree
            pass
        # random questions in the partition's range: its damaged batches may not parse
        compare(llog, sorted({rnd.randrange(end + 2) for _ in range(150)}),
                sorted({rnd.randint(first - 1, last + 1) for _ in range(60)}))
    finally:
        lm.close()


def test_reads_batch_walk_in_c_agrees_with_python():
    """`read`'s walk over the batches it hands out (`batch.whole_batches`: `_accel.sound_batches` in one C call)
    against the Python walk, on pieces of every Kafka-written `.log` cut at batch edges and inside batches,
    and on damaged copies: the same (bytes, next offset) or the same error; C must take the sound pieces."""
    R.require()
    rnd = random.Random(11)
    taken = pieces = 0
    for p in R.PARTITIONS:
        for name in sorted(os.listdir(R.log_dir(p))):
            if not name.endswith(".log"):
                continue
            data = (R.log_dir(p) / name).read_bytes()
            lm = LogManager([str(R.LOGS)])
            try:
                topic, part = p.rsplit("-", 1)
                seg = lm.get(topic, int(part)).segment(int(name[:20]))
                for _ in range(25):
                    start = rnd.randrange(len(data)) if data and rnd.random() < 0.3 else 0
                    piece = bytearray(data[start:start + rnd.randrange(1, 20000)])
                    if piece and rnd.random() < 0.3:
                        piece[rnd.randrange(len(piece))] ^= 1 << rnd.randrange(8)
                    piece = bytes(piece)
                    fast = outcome(whole_batches, piece, start, seg.log.path)
                    assert fast == reference(whole_batches_reference, piece, start, seg.log.path), (p, name, start)
                    pieces += 1
                    taken += format_accel.sound_batches(piece) is not None
            finally:
                lm.close()
    assert taken > pieces // 2, (taken, pieces)
