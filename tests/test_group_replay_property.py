"""Generated `__consumer_offsets` logs (plain and transactional commits, markers, tombstones, group records,
rolls, compaction): the incremental replay the daemon keeps equals a full replay of the files, the C
reduction equals the record-by-record replay, and a compacted log gives the positions of the uncompacted one."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from coordinator_writer import (Cleaner, CoordinatorLog, Record, commit_key, commit_value, group_key, group_value,
                               replayed)
from lookupd.format.batch import Compression
from lookupd.log import coordinators as coordinators_module
from lookupd.log.coordinators import Coordinators
from lookupd.log.logmanager import LogManager

GROUPS = ["g0", "g1", "g2"]
TPS = [("t", 0), ("t", 1), ("u", 0)]
PIDS = [4000, 4001, 4002]

commit = st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(TPS), st.integers(0, 10_000),
                   st.integers(0, 4), st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4]))
op = st.one_of(
    st.lists(commit, min_size=1, max_size=4).map(lambda cs: ("plain", cs)),
    st.tuples(st.just("tombstone"), st.sampled_from(GROUPS), st.sampled_from(TPS)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.lists(commit, min_size=1, max_size=3)),
    st.tuples(st.just("marker"), st.sampled_from(PIDS + [9999]), st.booleans()),
    st.tuples(st.just("group"), st.sampled_from(GROUPS), st.integers(0, 2)),
    st.tuples(st.just("group_tombstone"), st.sampled_from(GROUPS)),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS)),  # DeleteGroups: its offsets' tombstones, then the group's
    st.just(("roll",)),
    st.just(("catch_up",)),
    st.just(("clean",)),
)


def value(c):
    _, _, _, offset, version, _ = c
    return commit_value(offset, metadata=f"m{offset % 7}", timestamp=offset, leader_epoch=offset % 5, version=version,
                        expire=offset + 1 if version == 1 else -1)


def records(cs):
    return [Record(commit_key(g, *tp), value(c)) for c in cs for (_, g, tp, *_) in [c]]


def positions(state):
    """What a consumer resumes from: committed offsets (with where their record is) and pending partitions."""
    committed = {g: {tp: tuple(o) for tp, o in state.committed(g).items()} for g in GROUPS}
    pending = {g: state.pending_partitions(g) for g in GROUPS if state.pending_partitions(g)}
    return {g: c for g, c in committed.items() if c}, pending


def groups_of(state):
    return {g: (x.type, x.state, x.protocol_type) for g, x in state.groups.items()}


def full(log_dir, python=False):
    return replayed([log_dir], python=python)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=40), chunk=st.sampled_from([1 << 20, 200, 97]))
def test_incremental_equals_full_and_compacted_equals_uncompacted(tmp_path_factory, monkeypatch, ops, chunk):
    monkeypatch.setattr(coordinators_module, "CHUNK_BYTES", chunk)  # batches across chunks, and larger than one
    monkeypatch.setattr(coordinators_module, "MAP_WINDOW_BYTES", chunk)  # (the mapped windows' the same)
    root = tmp_path_factory.mktemp("offsets")
    live, plain = root / "live", root / "plain"
    logs = [CoordinatorLog(str(d / "__consumer_offsets-0"), segment_bytes=400) for d in (live, plain)]
    manager = LogManager([live])
    coordinators = Coordinators(manager, 1)
    open_first: dict[int, int] = {}  # producer id -> first offset of its open transaction
    cleaned = False

    def catch_up():
        manager.refresh()
        r = coordinators.replay("__consumer_offsets", 0)
        with r.lock:
            r.catch_up()
        return r

    for o in ops:
        kind = o[0]
        if kind == "catch_up":
            catch_up()
            continue
        if kind == "clean":
            d = str(live / "__consumer_offsets-0")
            bases = sorted(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))
            if len(bases) < 2:
                continue
            stop = bases[-1]  # never the active segment, nor past the first open transaction
            if open_first:
                stop = min(stop, max(b for b in bases if b <= min(open_first.values())))
            logs[0].writer.close()
            Cleaner(d).clean(stop)
            logs[0].writer.__init__(d, segment_bytes=400, index_interval_bytes=1024, max_index_size=1 << 16)
            logs[0].writer.next_offset = logs[0].offset
            logs[0].writer.roll(logs[0].offset)  # the broker's active segment stays its own
            cleaned = True
            continue
        for log in logs:
            if kind == "plain":
                log.write(records(o[1]), compression=o[1][0][5])
            elif kind == "tombstone":
                log.write([Record(commit_key(o[1], *o[2]), None)])
            elif kind == "txn":
                at = log.write(records(o[2]), producer_id=o[1], producer_epoch=0, compression=o[2][0][5])
                if log is logs[0]:
                    open_first.setdefault(o[1], at)
            elif kind == "marker":
                log.marker(o[1], 0, commit=o[2])
                if log is logs[0]:
                    open_first.pop(o[1], None)
            elif kind == "group":
                log.write([Record(group_key(o[1]), group_value("consumer", 1, "range", [f"m{i}" for i in range(o[2])]))])
            elif kind == "group_tombstone":
                log.write([Record(group_key(o[1]), None)])
            elif kind == "delete":
                log.write([Record(commit_key(o[1], *tp), None) for tp in TPS] + [Record(group_key(o[1]), None)])
            elif kind == "roll":
                log.roll()
    for log in logs:
        log.close()

    incremental = catch_up()
    fresh = full(live)
    reference = full(live, python=True)
    uncompacted = full(plain)
    assert incremental.faults == fresh.faults == reference.faults == []
    assert positions(fresh.state) == positions(reference.state) == positions(incremental.state)
    assert groups_of(fresh.state) == groups_of(reference.state)
    assert positions(fresh.state) == positions(uncompacted.state)
    if not cleaned:  # (a tombstone cleaned away can leave a group made by an older commit: positions stay)
        assert groups_of(incremental.state) == groups_of(fresh.state) == groups_of(uncompacted.state)
    shutil.rmtree(root)


def test_segments_gone_from_the_front_are_replayed_again(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    log = CoordinatorLog(str(d), segment_bytes=200)
    for i in range(6):
        log.write([Record(commit_key("g", "t", i % 2), commit_value(i))])
    manager = LogManager([tmp_path])
    c = Coordinators(manager, 1)
    r = c.replay("__consumer_offsets", 0)
    with r.lock:
        r.catch_up()
    first = min(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))
    for n in os.listdir(d):
        if n.startswith(f"{first:020d}"):
            os.unlink(d / n)  # retention (or DeleteRecords) took the first segment
    log.write([Record(commit_key("g", "t", 2), commit_value(99))])
    log.close()
    manager.refresh()
    with r.lock:
        r.catch_up()
        assert r.full_replays == 1
        assert positions(r.state) == positions(full(tmp_path).state)


def test_the_cleaner_rewriting_the_segment_replayed_up_to_keeps_the_state(tmp_path):
    """The segment the replay stopped in grows, rolls and is cleaned (swapped under the same name, its
    batches elsewhere): the replay finds its offset again in the new file, keeps what it had, and replays
    only what came after."""
    d = tmp_path / "__consumer_offsets-0"
    log = CoordinatorLog(str(d))
    for i in range(4):
        log.write([Record(commit_key("g", "t", 0), commit_value(i))])
    manager = LogManager([tmp_path])
    c = Coordinators(manager, 1)
    r = c.replay("__consumer_offsets", 0)
    with r.lock:
        r.catch_up()
    for i in range(12):
        log.write([Record(commit_key("g", "t", 1 + i % 3), commit_value(10 + i))])
    log.roll()
    log.write([Record(commit_key("g", "t", 0), commit_value(50))])
    log.writer.close()
    Cleaner(str(d)).clean(log.offset - 1)  # the first segment, where the replay stopped
    log.writer.__init__(str(d), segment_bytes=1 << 30, index_interval_bytes=1024, max_index_size=1 << 16)
    log.writer.next_offset = log.offset
    log.writer.roll(log.offset)
    log.write([Record(commit_key("g", "t", 4), commit_value(60))])
    log.close()
    manager.refresh()
    with r.lock:
        r.catch_up()
        assert r.full_replays == 0 and r.faults == []
        assert positions(r.state) == positions(full(tmp_path).state)
        assert {tp[1]: o.committed_offset for tp, o in r.state.committed("g").items()} == \
               {0: 50, 1: 19, 2: 20, 3: 21, 4: 60}



@pytest.mark.parametrize("when", ["between windows", pytest.param("under a window", marks=pytest.mark.native)])
def test_a_segment_that_shrinks_while_it_is_replayed_is_no_fault(tmp_path, monkeypatch, when):
    """The active segment truncated (a follower's truncation) while the replay reads it in 8 KiB windows:
    between two windows (the next one is not mapped, pread's short read says the file shrank) or right
    after a window was mapped (its pages past the new end read as the SIGBUS guard's zeros, a broken batch
    taken for the shrink, not for a fault). No SIGBUS, no fault, and the next catch-up equals a full
    replay of the truncated log."""
    monkeypatch.setattr(coordinators_module, "MAP_WINDOW_BYTES", 8192)
    d = tmp_path / "__consumer_offsets-0"
    log = CoordinatorLog(str(d))
    for i in range(400):
        log.write([Record(commit_key(f"g{i % 7}", "t", p), commit_value(i * 10 + p)) for p in range(4)])
    log.close()
    active = d / f"{max(int(n[:20]) for n in os.listdir(d) if n.endswith('.log')):020d}.log"
    cut = os.path.getsize(active) // 2 + 5  # mid-batch, off a page boundary
    done = []

    def truncate_once():
        if not done:
            done.append(True)
            os.truncate(active, cut)

    class TruncatedUnder(coordinators_module.LogWindow):
        @classmethod
        def open(cls, handle, start, stop):
            window = super().open(handle, start, stop)
            if window is not None and stop > cut:
                truncate_once()
            return window

    r = Coordinators(LogManager([tmp_path]), 1).replay("__consumer_offsets", 0)
    if when == "under a window":
        monkeypatch.setattr(coordinators_module, "LogWindow", TruncatedUnder)
    else:
        r.progress = lambda n: truncate_once()
    with r.lock:
        r.catch_up()
        assert done and r.faults == [] and r.fault_count == 0
        r.progress = None
        r.catch_up()
        assert r.faults == []
        assert positions(r.state) == positions(full(tmp_path).state) == positions(full(tmp_path, python=True).state)
