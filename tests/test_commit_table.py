"""The C table of committed offsets (lookupd.format._decode.CommitTable) answers as its Python reference,
DictCommits, through puts, removals, re-commits and the rebuilds that drop dead bytes; and a key whose
strings are not UTF-8 is kept as Kafka reads it on both paths."""

from __future__ import annotations

import random
import struct

import pytest

from coordinator_writer import CoordinatorLog, Record, commit_key, commit_value, replayed
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
