"""The C table of committed offsets (lookupd.format._decode.CommitTable) answers as its Python reference,
DictCommits, through puts, removals, re-commits and the rebuilds that drop dead bytes; a key whose
strings are not UTF-8 is kept as Kafka reads it on both paths; and damaged bytes replay the same through
the C commit scan as record by record."""

from __future__ import annotations

import os
import random
import struct
import tempfile

import crc32c
import pytest

from coordinator_writer import CoordinatorLog, Record, commit_key, commit_value, group_key, group_value, replayed
from damage import damaged
from lookupd.errors import CorruptRecordError
from lookupd.format.batch import Compression, parse_header
from lookupd.format.builder import build_batch, build_control_batch
from lookupd.format import _accel
from lookupd.format.internal.group_state import DictCommits, key_fields

pytestmark = pytest.mark.native


def test_the_c_table_answers_as_the_python_one():
    rnd = random.Random(5)
    c, p = _accel.CommitTable(), DictCommits()
    keys = [key_fields(f"g{i % 37}", f"t{i % 5}", i) for i in range(3000)]
    offset = 0
    for step in range(60_000):  # values up to 2 KiB: the arena passes 1 MiB and is rebuilt more than once
        k = rnd.choice(keys)
        offset += 1
        if rnd.random() < 0.2:
            assert c.remove(k) == p.remove(k)
        else:
            v = bytes([step % 251]) * rnd.choice((20, 40, 2048))
            c.put(k, offset, v)
            p.put(k, offset, v)
        if step % 5000 == 0:
            for g in (b"g0", b"g3", b"nope"):
                assert sorted(c.group(g)) == sorted(p.group(g))
    assert len(c) == len(p)
    for k in keys:
        assert c.get(k) == p.get(k) and c.offset_of(k) == p.offset_of(k)
    with pytest.raises(ValueError):
        c.put(b"\x00", 1, b"")



def test_partitions_sparse_negative_or_huge_answer_as_python(tmp_path):
    """A (group, topic)'s partitions are an array indexed by partition, grown only while dense: a sparse,
    negative or huge partition (2^31-1: no array of that size) is kept by its whole key, and moved into the
    array when the array grows over it; table and replay answer as Python all along."""
    c, p = _accel.CommitTable(), DictCommits()
    parts = [2**31 - 1, -1, -(2**31), 1000, 63, 17, *range(0, 70), 1000, 5000, 64, 300, *range(70, 400, 3)]
    for i, part in enumerate(parts):
        k = key_fields("g", "t", part)
        c.put(k, i, b"v%d" % i)
        p.put(k, i, b"v%d" % i)
        if i % 7 == 0:
            assert c.remove(key_fields("g", "t", parts[i // 2])) == p.remove(key_fields("g", "t", parts[i // 2]))
        assert len(c) == len(p)
        assert sorted(c.group(b"g")) == sorted(p.group(b"g"))
    for part in set(parts) | {1, 999, 2**31 - 2}:
        k = key_fields("g", "t", part)
        assert c.get(k) == p.get(k) and c.offset_of(k) == p.offset_of(k)
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    for i, part in enumerate(parts):
        log.write([Record(commit_key("g", "t", part), commit_value(i))])
        if i % 5 == 0:
            log.write([Record(commit_key("g", "t", parts[i // 2]), None)])
    log.close()
    answers = [{tp: o.committed_offset for tp, o in replayed([tmp_path], python=python).state.committed("g").items()}
               for python in (False, True)]
    assert answers[0] == answers[1] and len(answers[0]) > 100


@pytest.mark.parametrize("python", [False, True])
def test_a_group_id_that_is_not_utf8_is_one_group_as_kafka_reads_it(tmp_path, python):
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    for group, offset in ((b"g\xff", 1), (b"g\xfe", 2)):  # both read as "g\ufffd"
        key = struct.pack(">hh", 1, len(group)) + group + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
        log.write([Record(key, commit_value(offset))])
    log.write([Record(commit_key("ok", "t", 0), commit_value(3))])
    log.close()
    r = replayed([tmp_path], python=python)
    assert {tp: o.committed_offset for tp, o in r.state.committed("g\ufffd").items()} == {("t", 0): 2}
    assert set(r.state.groups) == {"g\ufffd", "ok"}


def _fuzz_log() -> bytes:
    """A partition's bytes with every record kind the commit scan takes or hands back: plain commits of a few
    groups, DeleteGroups' batches (offset tombstones, then the group's), a group record, transactional
    commits and their COMMIT and ABORT markers (taken by the scan too), a marker with nothing pending."""
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "__consumer_offsets-0")
        log = CoordinatorLog(d)
        for i in range(6):
            g = f"g{i % 3}"
            log.write([Record(commit_key(g, "t", p), commit_value(10 * i + p, metadata="m" * (i % 2))) for p in range(3)])
        log.write([Record(commit_key("g1", "t", p), None) for p in range(2)] + [Record(group_key("g1"), None)])
        log.write([Record(commit_key("g1", "t", 0), commit_value(99))])
        log.write([Record(group_key("g2"), group_value("consumer", 1, "range", ["m0"]))])
        log.write([Record(commit_key("g0", "u", 0), commit_value(5))], producer_id=4000, producer_epoch=0)
        log.marker(4000, 0, commit=True)
        log.write([Record(commit_key("g2", "t", 1), None), Record(group_key("g0"), None)])
        log.write([Record(commit_key("g1", "u", 1), commit_value(6))], producer_id=4001, producer_epoch=0)
        log.marker(4001, 0, commit=False)
        log.marker(4002, 0, commit=True)  # (a producer with nothing pending)
        log.write([Record(commit_key("g1", "u", 2), commit_value(7))])
        log.close()
        with open(os.path.join(d, f"{0:020d}.log"), "rb") as f:
            return f.read()


def _outcome(tmp_path, data: bytes, python: bool):
    d = tmp_path / "__consumer_offsets-0"  # (the same path on both: faults name it)
    d.mkdir(exist_ok=True)
    (d / f"{0:020d}.log").write_bytes(data)
    r = replayed([d.parent], python=python)
    groups = sorted(r.state.groups)
    committed = {}
    for g in groups + ["g0", "g1", "g2"]:
        try:
            committed[g] = sorted((tp, tuple(o)) for tp, o in r.state.committed(g).items())
        except Exception as err:  # a value the scan took but that does not decode: named the same on both paths
            committed[g] = repr(err)
    return groups, committed, r.next_offset, [(f.group, str(f.error)) for f in r.faults]


def test_damaged_offsets_logs_replay_the_same_in_c_and_python(tmp_path):
    """Bytes flipped, cut or inserted anywhere in a `__consumer_offsets` segment (the first batch's CRC made
    right again half the time, so that the damage reaches the record parsers): the C commit scan and the
    record-by-record replay give the same groups, positions, log position and faults."""
    rnd = random.Random(11)
    base = _fuzz_log()
    for _ in range(400):
        b = damaged(rnd, base, 3)
        if rnd.random() < 0.5:  # the CRC of the batch holding the first change made right
            pos = 0
            try:
                while pos + 61 <= len(b):
                    h = parse_header(b, pos)
                    if bytes(b[pos:pos + h.size]) != base[pos:pos + h.size]:
                        if h.size >= 61 and pos + h.size <= len(b):
                            b[pos + 17:pos + 21] = struct.pack(">I", crc32c.crc32c(bytes(b[pos + 21:pos + h.size])))
                        break
                    pos += h.size
            except CorruptRecordError:
                pass
        assert _outcome(tmp_path, bytes(b), False) == _outcome(tmp_path, bytes(b), True)


# Control batches of a transaction's producer as the scan may meet them: (key, value) records, compression.
_CONTROL = {
    "commit": ([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3))], Compression.NONE),
    "abort, longer key and value": ([(struct.pack(">hhh", 0, 0, 9), struct.pack(">hih", 0, 3, 1))], Compression.NONE),
    "key of 3 bytes": ([(b"\x00\x00\x01", struct.pack(">hi", 0, 3))], Compression.NONE),
    "no key": ([(None, struct.pack(">hi", 0, 3))], Compression.NONE),
    "key version -1": ([(struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 3))], Compression.NONE),
    "unknown type": ([(struct.pack(">hh", 0, 5), struct.pack(">hi", 0, 3))], Compression.NONE),
    "value of 4 bytes": ([(struct.pack(">hh", 0, 1), b"\x00\x00\x00\x03")], Compression.NONE),
    "no value": ([(struct.pack(">hh", 0, 1), None)], Compression.NONE),
    "value version -1": ([(struct.pack(">hh", 0, 1), struct.pack(">hi", -1, 3))], Compression.NONE),
    "two markers": ([(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3))] * 2, Compression.NONE),
    "compressed": ([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3))], Compression.GZIP),
}


@pytest.mark.parametrize("kind", list(_CONTROL))
def test_control_batches_replay_the_same_in_c_and_python(tmp_path, kind):
    """A transactional commit, then a control batch of its producer (a marker the C scan takes, or one it
    hands to the Python replay: malformed, of another type, of two records, compressed), then plain
    commits: the same groups, positions, log position and faults on both paths."""
    records, codec = _CONTROL[kind]
    ts = 1_700_000_000_000
    txn = dict(producer_id=4000, producer_epoch=0, transactional=True)
    data = b"".join([  # (as bytes: the log writer refuses a malformed control record)
        build_batch([(ts, commit_key("g0", "t", p), commit_value(10 + p), ()) for p in range(2)], base_offset=0),
        build_batch([(ts, commit_key("g0", "t", p), commit_value(50 + p), ()) for p in range(3)], base_offset=2, **txn),
        build_batch([(ts, k, v, ()) for k, v in records], base_offset=5, control=True, compression=codec, **txn),
        build_batch([(ts, commit_key("g0", "t", 1), commit_value(70), ())], base_offset=5 + len(records)),
        build_control_batch(6 + len(records), ts, producer_id=4000, producer_epoch=0, commit=True,
                            coordinator_epoch=3),
    ])
    c, python = _outcome(tmp_path, data, False), _outcome(tmp_path, data, True)
    assert c == python
    assert c[2] == 7 + len(records)  # (every batch replayed)


def test_a_log_of_new_keys_grows_the_table_at_once_and_answers_as_python(tmp_path, monkeypatch):
    """Nearly every record a new key (a compacted log): the C table, told the bytes to come, grows its slots
    several times over at once (Table.expect) and answers as the record-by-record replay."""
    from lookupd.log import coordinators

    monkeypatch.setattr(coordinators, "CHUNK_BYTES", 1 << 16)  # several scans, each projecting the rest
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    for g in range(6000):
        if g % 700 == 0:  # (a batch the Python replay takes between scans)
            log.write([Record(group_key(f"g{g}"), group_value("consumer", 1, "range", ["m"]))])
        log.write([Record(commit_key(f"g{g}", "t", p), commit_value(g + p)) for p in range(3)])
    log.close()
    c, p = replayed([tmp_path]), replayed([tmp_path], python=True)
    assert len(c.state.commits) == len(p.state.commits) == 18_000
    assert set(c.state.groups) == set(p.state.groups)
    for g in range(0, 6000, 7):
        assert c.state.committed(f"g{g}") == p.state.committed(f"g{g}")


def test_a_reservation_refused_leaves_the_table_growing_as_it_fills():
    """CommitTable.reserve only makes room: where the address space is refused (here an RLIMIT_AS, as
    vm.overcommit_memory=2 would), the replay goes on and the table grows as it fills."""
    import subprocess
    import sys

    code = """if True:
        import resource
        from lookupd.format import _decode
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
        t = _decode.CommitTable()
        t.reserve(1 << 40)  # (4 GiB an array at most: more than the limit)
        for i in range(20000):
            t.put(b"\\x00\\x01g" + i.to_bytes(4, "big"), i, b"v" * 20)
        assert len(t) == 20000 and t.get(b"\\x00\\x01g" + (7).to_bytes(4, "big")) == (7, b"v" * 20)
        print("ok")
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_tables_made_after_others_were_freed_answer_as_python():
    """A freed table's mapped arena and entries are kept as spares and written over by the next tables
    (not zeroed): tables of other sizes and contents, made one after another, each reserved or not, answer
    as DictCommits, with none of the bytes an earlier table left."""
    rnd = random.Random(11)
    for round_, (keys, value_len, reserve) in enumerate([(20_000, 30, 1 << 22), (3_000, 200, 0),
                                                         (40_000, 8, 1 << 20), (9_000, 60, 1 << 24)]):
        c, p = _accel.CommitTable(), DictCommits()
        if reserve:
            c.reserve(reserve)
        for i in range(keys):
            k = key_fields(f"g{round_}-{i % 91}", "t", i)
            v = bytes([rnd.randrange(256)]) * rnd.randrange(value_len)
            c.put(k, i, v)
            p.put(k, i, v)
        assert len(c) == len(p) == keys
        for i in range(0, keys, 13):
            k = key_fields(f"g{round_}-{i % 91}", "t", i)
            assert c.get(k) == p.get(k)
            assert c.get(key_fields(f"g{round_ - 1}-{i % 91}", "t", i)) is None
        assert sorted(c.group(f"g{round_}-5".encode())) == sorted(p.group(f"g{round_}-5".encode()))
        del c
