"""Group positions replayed as Kafka's group coordinator loads them: Kafka's own replay of the corpus,
transactional commits at their markers, faults that stay with their group, and `lookupd groups`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

import reference as R
from coordinator_writer import CoordinatorLog, Record, commit_key, commit_value, group_key, group_value, replayed
from lookupd.format.batch import Compression
from lookupd.format.builder import build_batch
from lookupd.log import _accel
from lookupd.log.coordinators import Coordinators
from lookupd.log.fileio import LazyHandle, open_sizes
from lookupd.log.logmanager import LogManager
from lookupd.log.positions import group_offset_columns, group_offsets, groups, positions
from lookupd.tools.writer import LogWriter

PATHS = ["fast", "python"]


def replay(log_dirs, partition, path, partitions=50):
    return replayed(log_dirs, partition, python=path == "python", partitions=partitions)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("p", [7, 41])
def test_positions_and_groups_are_kafkas_replay(p, path):
    theirs = R.coordinator_answers(f"__consumer_offsets-{p}")["replayed_state"]
    r = replay([R.COORDINATOR / "logs"], p, path)
    assert r.faults == [] and r.next_offset == theirs["load_summary"]["last_written_offset"]
    state = r.state
    for e in theirs["committed_offsets"]:
        ours = state.committed(e["group"]).get((e["topic"], e["partition"]))
        k = e["offset"]
        if k is None:
            assert ours is None, e
            continue
        assert (ours.committed_offset, ours.leader_epoch, ours.metadata, ours.commit_timestamp, ours.expire_timestamp,
                ours.record_offset) == (k["committed_offset"], -1 if k["leader_epoch"] is None else k["leader_epoch"],
                                        k["metadata"], k["commit_timestamp_ms"], k["expire_timestamp_ms"],
                                        k["record_offset"]), e
    assert {g["groupId"]: (g["groupType"], g["groupState"], g["protocolType"]) for g in theirs["ListGroups"]["groups"]} == \
           {g: (x.type, x.state, x.protocol_type) for g, x in state.groups.items()}
    # OffsetFetch for every group: the same partitions and offsets
    for g in theirs["OffsetFetch_all_topics_at_committed_offset"]["groups"]:
        fetched = {(t["name"], x["partitionIndex"]): x["committedOffset"] for t in g["topics"] for x in t["partitions"]}
        assert {tp: o.committed_offset for tp, o in state.committed(g["groupId"]).items()} == fetched
    # consumer and share groups: members, epochs and assignments
    for kind in ("ConsumerGroupDescribe", "ShareGroupDescribe"):
        for g in theirs[kind]["groups"]:
            ours = state.groups[g["groupId"]]
            assert (ours.group_epoch, ours.assignment_epoch) == (g["groupEpoch"], g["assignmentEpoch"])
            for m in g["members"]:
                mine = ours.members[m["memberId"]]
                assert mine["memberEpoch"] == m["memberEpoch"]
                assert {(t["topicId"], p) for t in m["assignment"]["topicPartitions"] for p in t["partitions"]} == \
                       {(t, p) for t, ps in mine["assignedPartitions"].items() for p in ps}


# ------------------------------------------------------------------ transactional offset commits


def eos_log(tmp_path, compression=Compression.NONE):
    """A partition with the transactional cases of Kafka's TxnOffsetCommit path (as the held-back corpus log
    describes them), and what Kafka's replay makes of each."""
    d = tmp_path / "__consumer_offsets-0"
    log = CoordinatorLog(str(d), segment_bytes=700)
    c = lambda g, t, p, o, **kw: Record(commit_key(g, t, p), commit_value(o, **kw))  # noqa: E731
    log.write([c("g", "orders", 0, 10)])                                    # regular
    log.write([c("g", "orders", 1, 100)], producer_id=4000, producer_epoch=0, compression=compression)
    log.write([c("g", "orders", 2, 200)], producer_id=4001, producer_epoch=5, compression=compression)
    log.write([c("g", "orders", 0, 11)], producer_id=4001, producer_epoch=5)
    log.marker(4001, 5, commit=False)                                       # aborted: 200 and 11 dropped
    log.write([c("g", "orders", 3, 300)], producer_id=4002, producer_epoch=1)
    log.roll()
    log.marker(4000, 0, commit=True)                                        # across a roll: 100 committed
    log.write([c("g", "orders", 3, 301)], producer_id=4002, producer_epoch=3)  # epoch bumped, same txn by pid
    log.write([c("g", "orders", 3, 299)])                                   # regular, newer than 300/301
    log.marker(4002, 3, commit=True)                                        # the regular commit wins
    log.write([c("h", "orders", 0, 50)], producer_id=4005, producer_epoch=0)
    log.write([Record(commit_key("h", "orders", 0), None)])                 # tombstone before the marker
    log.marker(4005, 0, commit=True)                                        # nothing left to commit
    log.marker(9999, 0, commit=False)                                       # no transaction: ignored
    log.write([c("e", "orders", 0, 7, leader_epoch=4, metadata="m"), c("e", "orders", 1, 8)])
    log.write([c("e", "orders", 1, 9), c("e", "orders", 2, 5)], producer_id=4006, producer_epoch=0)  # left open
    log.close()
    return d


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_transactional_commits_apply_at_commit_markers_only(tmp_path, path, compression):
    d = eos_log(tmp_path, compression)
    assert len(os.listdir(d)) > 4  # it rolled
    state = replay([tmp_path], 0, path, partitions=1).state
    committed = lambda g: {tp[1]: o.committed_offset for tp, o in state.committed(g).items()}  # noqa: E731
    assert committed("g") == {0: 10, 1: 100, 3: 299}
    assert committed("h") == {}
    assert committed("e") == {0: 7, 1: 8}
    assert state.pending_partitions("e") == {("orders", 1), ("orders", 2)}
    assert state.pending_partitions("g") == set() and set(state.pending) == {4006}
    assert set(state.groups) == {"g", "h", "e"}  # each made by a commit: simple classic groups
    assert all(x.state == "Empty" and x.type == "classic" for x in state.groups.values())


def test_the_group_json_has_the_names_scripts_read(tmp_path):
    eos_log(tmp_path)
    data = LogWriter(str(tmp_path / "orders-0"))
    data.append(build_batch([(1, b"k", b"v", ())] * 20, base_offset=0))
    data.close()
    manager = LogManager([tmp_path])
    answer = group_offsets(Coordinators(manager, 1), "e")
    assert {"group", "type", "state", "offsets"} <= set(answer)
    assert (answer["group"], answer["type"], answer["state"]) == ("e", "classic", "Empty")
    rows = {o["partition"]: o for o in answer["offsets"]}
    keys = {"topic", "partition", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
            "pending_transaction", "log_end_offset", "lag"}
    assert all(keys <= set(o) for o in rows.values())
    assert (rows[0]["committed_offset"], rows[0]["leader_epoch"], rows[0]["metadata"], rows[0]["log_end_offset"],
            rows[0]["lag"], rows[0]["pending_transaction"]) == (7, 4, "m", 20, 13, False)
    assert (rows[1]["committed_offset"], rows[1]["leader_epoch"], rows[1]["pending_transaction"]) == (8, -1, True)
    assert (rows[2]["committed_offset"], rows[2]["pending_transaction"], rows[2]["lag"]) == (None, True, None)
    assert set(positions(manager, "e", partitions=1)) == {("orders", 0), ("orders", 1)}  # the Kafka listener's entry point


def test_lag_names_a_commit_below_the_log_start_and_a_partition_not_here(tmp_path):
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    log.write([Record(commit_key("g", t, p), commit_value(o)) for t, p, o in
               [("orders", 0, 3), ("orders", 1, 95), ("gone", 0, 3), ("orders", 2, 500)]])
    log.close()
    data = LogWriter(str(tmp_path / "orders-0"), segment_bytes=300)
    for i in range(10):
        data.append(build_batch([(i, b"k", b"v" * 50, ())] * 5, base_offset=i * 5))
    data.close()
    bases = sorted(int(n[:20]) for n in os.listdir(tmp_path / "orders-0") if n.endswith(".log"))
    for n in os.listdir(tmp_path / "orders-0"):
        if n.startswith(f"{bases[0]:020d}"):
            os.unlink(tmp_path / "orders-0" / n)  # retention took the first segment
    data = LogWriter(str(tmp_path / "orders-1"))
    data.append(build_batch([(1, b"k", b"v", ())] * 100, base_offset=0))
    data.close()
    data = LogWriter(str(tmp_path / "orders-2"))
    data.append(build_batch([(1, b"k", b"v", ())] * 10, base_offset=0))
    data.close()
    rows = {(o["topic"], o["partition"]): o for o in
            group_offsets(Coordinators(LogManager([tmp_path]), 1), "g")["offsets"]}
    below = rows[("orders", 0)]
    assert below["log_start_offset"] == bases[1] > 3 and below["out_of_range"] == "below_log_start"
    assert below["lag"] == 50 - 3
    assert (rows[("orders", 1)]["lag"], rows[("orders", 1)]["out_of_range"]) == (5, None)
    assert (rows[("gone", 0)]["log_end_offset"], rows[("gone", 0)]["lag"]) == (None, None)
    assert (rows[("orders", 2)]["out_of_range"], rows[("orders", 2)]["lag"]) == ("above_log_end", None)


def test_read_committed_lag_stops_at_the_last_stable_offset(tmp_path):
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    log.write([Record(commit_key("g", "pay", 0), commit_value(2))])
    log.close()
    data = LogWriter(str(tmp_path / "pay-0"))
    data.append(build_batch([(1, b"k", b"v", ())] * 5, base_offset=0))
    data.append(build_batch([(1, b"k", b"v", ())] * 3, base_offset=5, producer_id=7, producer_epoch=0,
                            base_sequence=0, transactional=True))
    data.append(build_batch([(1, b"k", b"v", ())] * 2, base_offset=8))
    data.close()
    c = Coordinators(LogManager([tmp_path]), 1)
    row = group_offsets(c, "g", "read_committed")["offsets"][0]
    assert (row["log_end_offset"], row["last_stable_offset"], row["lag"]) == (10, 5, 3)
    assert group_offsets(c, "g")["offsets"][0]["lag"] == 8


# ------------------------------------------------------------------ faults


def faulty_log(tmp_path):
    """Groups a and b in one partition; then a record of group a that does not decode (a newer value
    version), a record of an unknown type, and a batch whose bytes were damaged."""
    d = tmp_path / "__consumer_offsets-0"
    log = CoordinatorLog(str(d))
    log.write([Record(commit_key("a", "t", 0), commit_value(1)), Record(commit_key("b", "t", 0), commit_value(2))])
    log.write([Record(group_key("b"), group_value("consumer", 3, "range", ["m1"]))])
    bad_at = log.write([Record(commit_key("a", "t", 1), b"\x00\x09" + bytes(30))])
    log.write([Record(b"\x00\x63\x00\x01x", b"whatever")])
    log.write([Record(commit_key("b", "t", 1), commit_value(3))])
    damaged = log.write([Record(commit_key("c", "t", 0), commit_value(4))])
    log.close()
    seg = d / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    seg.write_bytes(bytes(data))
    return d, bad_at, damaged


@pytest.mark.parametrize("path", PATHS)
def test_a_record_that_does_not_decode_fails_its_group_only(tmp_path, path):
    d, bad_at, _ = faulty_log(tmp_path)
    r = replay([tmp_path], 0, path, partitions=1)
    mine, general = r.faults_for("a")
    assert len(mine) == 1 and f"record at offset {bad_at}" in str(mine[0].error)
    assert "00000000000000000000.log at byte" in str(mine[0].error) and "version 9" in str(mine[0].error)
    assert len(general) == 2 and "record type 99" in str(general[0].error) and "crc" in str(general[1].error)
    assert {tp[1]: o.committed_offset for tp, o in r.state.committed("b").items()} == {0: 2, 1: 3}


@pytest.mark.parametrize("path", PATHS)
def test_records_no_replay_can_keep_are_faults_of_their_group(tmp_path, path):
    """Damage bench/fuzz/fuzz_offsets.py found escaping the replay (so that no group of the partition answered):
    a record offset past Java's long (a damaged base offset: the C table cannot keep it), a group id longer than
    a key holds once its malformed UTF-8 is replaced, a value too short for its version of a record type with
    an earlier layout. Each is now a fault of its group, and the other records replay."""
    ts = 1_700_000_000_000
    long_name = b"h" * 32766 + b"\xff"  # 32769 bytes as Java reads it (U+FFFD for the 0xff)
    key = struct.pack(">hh", 1, len(long_name)) + long_name + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    d = tmp_path / "__consumer_offsets-0"
    d.mkdir()
    (d / f"{0:020d}.log").write_bytes(b"".join([
        build_batch([(ts, key, commit_value(1), ()), (ts, commit_key("ok", "t", 0), commit_value(2), ())],
                    base_offset=0),
        build_batch([(ts, struct.pack(">h", 15) + struct.pack(">h", 2) + b"sh", b"\x00", ()),
                     (ts, commit_key("ok", "t", 1), commit_value(3), ())], base_offset=2),
        build_batch([(ts, commit_key("big", "t", 0), commit_value(4), ()),
                     (ts, commit_key("big", "t", 1), commit_value(5), ())], base_offset=(1 << 63) - 1),
    ]))
    r = replay([tmp_path], 0, path, partitions=1)
    faults = {f.group: str(f.error) for f in r.faults}
    assert set(faults) == {long_name.decode("utf-8", "replace"), "sh", "big"} and len(r.faults) == 3
    assert "group id is 32769 bytes" in faults[long_name.decode("utf-8", "replace")]
    assert "too short" in faults["sh"]
    assert f"record at offset {1 << 63}: its offset is beyond the int64 range" in faults["big"]
    assert {tp: o.committed_offset for tp, o in r.state.committed("ok").items()} == {("t", 0): 2, ("t", 1): 3}
    assert {tp: o.record_offset for tp, o in r.state.committed("big").items()} == {("t", 0): (1 << 63) - 1}


@pytest.mark.parametrize("path", PATHS)
def test_a_broken_frame_in_the_active_segment_stays_a_fault_as_the_log_grows(tmp_path, path):
    """A frame broken in the active segment stops the replay there as a fault; caught up again once the segment
    grew, the replay had asked for the log end offset (to tell a truncation), whose walk of the segment raised
    at the broken frame, out of every later catch-up (found by bench/fuzz/fuzz_offsets.py)."""
    ts = 1_700_000_000_000
    d = tmp_path / "__consumer_offsets-0"
    d.mkdir()
    segment = d / f"{0:020d}.log"
    segment.write_bytes(build_batch([(ts, commit_key("g", "t", 0), commit_value(7), ())], base_offset=0) +
                        struct.pack(">qi", 1, -(2 ** 31)) + bytes(10))
    manager = LogManager([tmp_path])
    r = Coordinators(manager, 1).replay("__consumer_offsets", 0)
    with r.lock, _accel.python_only() if path == "python" else contextlib.nullcontext():
        r.catch_up()
        with open(segment, "ab") as f:
            f.write(build_batch([(ts, commit_key("g", "t", 1), commit_value(8), ())], base_offset=1))
        manager.refresh()
        r.catch_up()
    assert len(r.faults) == 1 and "batch size -2147483648" in str(r.faults[0].error)
    assert {tp: o.committed_offset for tp, o in r.state.committed("g").items()} == {("t", 0): 7}


def lookupd(*args):
    return subprocess.run([sys.executable, "-m", "lookupd", *args], capture_output=True, text=True)


def test_lookupd_groups_answers_every_other_group_and_names_the_fault(tmp_path):
    faulty_log(tmp_path)
    base = ["groups", "--log-dir", str(tmp_path), "--partitions", "1"]
    a = lookupd(*base, "--group", "a", "--json")
    assert a.returncode == 1 and a.stdout == ""
    assert "00000000000000000000.log at byte" in a.stderr and "version 9" in a.stderr
    b = lookupd(*base, "--group", "b", "--json")
    answer = json.loads(b.stdout)
    assert [o["committed_offset"] for o in answer["offsets"]] == [2, 3] and answer["state"] == "Stable"
    assert b.returncode == 1 and "crc" in b.stderr  # answered, with the faults no group can be told from
    listing = lookupd(*base, "--json")
    rows = {g["group"]: g for g in json.loads(listing.stdout)}
    assert "error" in rows["a"] and rows["b"]["members"][0]["member_id"] == "m1"
    text = lookupd(*base)
    assert "ERROR" in text.stdout and "Stable" in text.stdout


def test_a_group_that_is_not_there_is_an_error_naming_its_partition(tmp_path):
    eos_log(tmp_path)
    r = lookupd("groups", "--log-dir", str(tmp_path), "--partitions", "1", "--group", "nobody")
    assert r.returncode == 1 and "__consumer_offsets-0" in r.stderr
    r = lookupd("groups", "--log-dir", str(tmp_path), "--group", "g")  # 50 partitions: g lives elsewhere
    assert r.returncode == 1 and "is not in the log dirs" in r.stderr


def test_groups_lists_every_partition_present():
    listing, warnings = groups(Coordinators(LogManager([R.COORDINATOR / "logs"])))
    assert warnings == [] and {g["coordinator_partition"] for g in listing} == {7, 41}
    share = next(g for g in listing if g["type"] == "share")
    assert share["members"][0]["assignment"][0]["topic"] == "orders"


def test_lag_follows_the_data_partition_as_it_grows_and_rolls(tmp_path):
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    log.write([Record(commit_key("g", "orders", 0), commit_value(5))])
    log.close()
    data = LogWriter(str(tmp_path / "orders-0"))
    data.append(build_batch([(1, b"k", b"v" * 20, ())] * 5, base_offset=0))
    manager = LogManager([tmp_path])
    c = Coordinators(manager, 1)
    lag = lambda: group_offsets(c, "g")["offsets"][0]["lag"]  # noqa: E731
    assert lag() == 0
    data.append(build_batch([(1, b"k", b"v" * 20, ())] * 5, base_offset=5))  # grows: seen at once
    assert lag() == 5
    for b in range(2, 6):  # rolls: seen once the log dirs are listed again
        data.roll()
        data.append(build_batch([(1, b"k", b"v" * 20, ())] * 5, base_offset=5 * b))
    data.close()
    manager.refresh()
    assert len(manager.get("orders", 0).base_offsets) > 1 and lag() == 25


@pytest.mark.parametrize("path", PATHS)
def test_a_kept_answer_is_given_again_only_while_its_partitions_are_unchanged(tmp_path, path):
    """group_offset_columns keeps its answer and gives the same object again until a partition grows, rolls,
    is read_committed-asked or leaves the log dirs; each answer equals a fresh Coordinators' (no kept state)."""
    log = CoordinatorLog(str(tmp_path / "__consumer_offsets-0"))
    log.write([Record(commit_key("g", "orders", p), commit_value(2)) for p in range(3)])
    log.close()
    writers = [LogWriter(str(tmp_path / f"orders-{p}")) for p in range(3)]
    for w in writers:
        w.append(build_batch([(1, b"k", b"v", ())] * 4, base_offset=0))
    manager = LogManager([tmp_path])
    c = Coordinators(manager, 1)

    def answer(isolation="read_uncommitted"):
        fresh = group_offset_columns(Coordinators(manager, 1), "g", isolation)
        with (_accel.python_only() if path == "python" else contextlib.nullcontext()):
            kept = group_offset_columns(c, "g", isolation)
        assert kept == fresh
        return kept

    first = answer()
    assert answer() is first and first["offsets"]["lag"] == [2, 2, 2]
    writers[1].append(build_batch([(1, b"k", b"v", ())] * 3, base_offset=4))
    grown = answer()
    assert grown is not first and grown["offsets"]["lag"] == [2, 5, 2] and answer() is grown
    assert answer("read_committed") is not grown and answer() is grown  # each isolation its own
    writers[2].roll()
    writers[2].append(build_batch([(1, b"k", b"v", ())] * 2, base_offset=4))
    manager.refresh()
    rolled = answer()
    assert rolled is not grown and rolled["offsets"]["log_end_offset"] == [4, 7, 6]
    for w in writers:
        w.close()
    shutil.rmtree(tmp_path / "orders-0")
    manager.refresh()
    gone = answer()
    assert gone["offsets"]["log_end_offset"] == [None, 7, 6] and answer() is gone


def test_open_sizes_in_c_and_python_agree(tmp_path):
    paths = [tmp_path / f"f{i}" for i in range(3)]
    for i, p in enumerate(paths):
        p.write_bytes(b"x" * (i * 10))
    handles = [LazyHandle(str(p)) for p in paths]
    for h in handles[:2]:
        h.get()  # the third stays unopened: -1
    with _accel.python_only():
        python = open_sizes(handles)
    assert open_sizes(handles) == python == [0, 10, -1]
    with open(paths[1], "ab") as f:
        f.write(b"yy")
    assert open_sizes(handles) == [0, 12, -1]
