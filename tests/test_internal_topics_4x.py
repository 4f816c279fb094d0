"""The records Kafka 4.1-4.4 added to its internal topics, and their replay: each decodes from bytes
assembled here by hand from the message schemas (independent of lookupd.message's encoder), and streams
groups, regular expressions and share-partition state replay as Kafka's GroupMetadataManager does."""

from __future__ import annotations

import base64
import struct

import pytest

from coordinator_writer import CoordinatorLog, Record, commit_key, replayed, uvarint
from lookupd.format.internal import groups, metadata, remote, transactions
from lookupd.format.internal.group_kinds import ReplayError
from lookupd.format.internal.group_state import GroupCoordinatorState
from lookupd.log.coordinators import Coordinators
from lookupd.log.logmanager import LogManager
from lookupd.log.positions import groups as list_groups
from lookupd.message import MessageError, UnknownRecordType

# ------------------------------------------------------------------ bytes by hand


def i8(v): return struct.pack(">b", v)
def i16(v): return struct.pack(">h", v)
def u16(v): return struct.pack(">H", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)


def s16(text: str) -> bytes:
    """A legacy string: int16 length."""
    b = text.encode()
    return i16(len(b)) + b


def cs(text: str | None) -> bytes:
    """A compact string: varint length + 1, 0 for null."""
    if text is None:
        return b"\x00"
    b = text.encode()
    return uvarint(len(b) + 1) + b


def carr(*items: bytes) -> bytes:
    """A compact array of items already encoded."""
    return uvarint(len(items) + 1) + b"".join(items)


def ints(*values: int) -> bytes:
    return carr(*(i32(v) for v in values))


def tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section: count, then per field its tag, size and bytes."""
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(d)) + d for t, d in fields)


NO_TAGS = b"\x00"
TOPIC_ID = bytes(range(16))
TOPIC_ID_TEXT = base64.urlsafe_b64encode(TOPIC_ID).rstrip(b"=").decode()


def key(t: int, *strings: str) -> bytes:
    return i16(t) + b"".join(s16(s) for s in strings)


def value(body: bytes, version: int = 0) -> bytes:
    return i16(version) + body


def task_ids(subtopology: str, partitions: list[int], epochs: list[int] | None = None) -> bytes:
    return cs(subtopology) + ints(*partitions) + (tags((0, ints(*epochs))) if epochs is not None else NO_TAGS)


def topic_partitions(partitions: list[int], epochs: list[int] | None = None) -> bytes:
    return TOPIC_ID + ints(*partitions) + (tags((0, ints(*epochs))) if epochs is not None else NO_TAGS)


# record type -> (key bytes, value bytes, the decoded key, the decoded value)
NEW_RECORDS = {
    "ConsumerGroupRegularExpression": (
        key(16, "g", "orders-.*"),
        value(carr(cs("orders-1"), cs("orders-2")) + i64(7) + i64(1_700_000_000_000) + NO_TAGS),
        {"groupId": "g", "regularExpression": "orders-.*"},
        {"topics": ["orders-1", "orders-2"], "version": 7, "timestamp": 1_700_000_000_000}),
    "StreamsGroupMetadata": (
        key(17, "app"),
        value(i32(5) + i64(99) + tags((0, i32(3)), (1, carr(cs("num.standby.replicas") + cs("1") + NO_TAGS)),
                                      (2, i32(4)), (3, i32(2)))),
        {"groupId": "app"},
        {"epoch": 5, "metadataHash": 99, "validatedTopologyEpoch": 3,
         "lastAssignmentConfigs": [{"key": "num.standby.replicas", "value": "1"}],
         "storedDescriptionTopologyEpoch": 4, "failedDescriptionTopologyEpoch": 2}),
    "StreamsGroupMemberMetadata": (
        key(19, "app", "m1"),
        value(cs(None) + cs("rack-a") + cs("client-1") + cs("/10.0.0.1") + i32(30000) + i32(2) + cs("proc-1") +
              i8(1) + cs("host-1") + u16(8080) + NO_TAGS + carr(cs("zone") + cs("z1") + NO_TAGS) + NO_TAGS),
        {"groupId": "app", "memberId": "m1"},
        {"instanceId": None, "rackId": "rack-a", "clientId": "client-1", "clientHost": "/10.0.0.1",
         "rebalanceTimeoutMs": 30000, "topologyEpoch": 2, "processId": "proc-1",
         "userEndpoint": {"host": "host-1", "port": 8080}, "clientTags": [{"key": "zone", "value": "z1"}]}),
    "StreamsGroupTargetAssignmentMetadata": (
        key(20, "app"),
        value(i32(4) + tags((0, i64(1234)))),
        {"groupId": "app"},
        {"assignmentEpoch": 4, "assignmentTimestamp": 1234}),
    "StreamsGroupTargetAssignmentMember": (
        key(21, "app", "m1"),
        value(carr(cs("0") + ints(0, 1) + NO_TAGS) + carr() + carr(cs("1") + ints(2) + NO_TAGS) + NO_TAGS),
        {"groupId": "app", "memberId": "m1"},
        {"activeTasks": [{"subtopologyId": "0", "partitions": [0, 1]}], "standbyTasks": [],
         "warmupTasks": [{"subtopologyId": "1", "partitions": [2]}]}),
    "StreamsGroupCurrentMemberAssignment": (
        key(22, "app", "m1"),
        value(i32(4) + i32(3) + i8(1) + carr(task_ids("0", [0, 1], [4, 3])) + carr() + carr() +
              carr(task_ids("0", [5])) + carr() + carr() + NO_TAGS),
        {"groupId": "app", "memberId": "m1"},
        {"memberEpoch": 4, "previousMemberEpoch": 3, "state": 1,
         "activeTasks": [{"subtopologyId": "0", "partitions": [0, 1], "assignmentEpochs": [4, 3]}],
         "standbyTasks": [], "warmupTasks": [],
         "activeTasksPendingRevocation": [{"subtopologyId": "0", "partitions": [5], "assignmentEpochs": None}],
         "standbyTasksPendingRevocation": [], "warmupTasksPendingRevocation": []}),
    "StreamsGroupTopology": (
        key(23, "app"),
        value(i32(0) + carr(cs("0") + carr(cs("input")) + carr() +
                            carr(cs("app-store-changelog") + i32(0) + i16(0) +
                                 carr(cs("cleanup.policy") + cs("compact") + NO_TAGS) + NO_TAGS) +
                            carr() + carr() + carr(carr(i16(0)) + carr() + carr() + NO_TAGS) + NO_TAGS) + NO_TAGS),
        {"groupId": "app"},
        {"epoch": 0, "subtopologies": [{
            "subtopologyId": "0", "sourceTopics": ["input"], "sourceTopicRegex": [],
            "stateChangelogTopics": [{"name": "app-store-changelog", "partitions": 0, "replicationFactor": 0,
                                      "topicConfigs": [{"key": "cleanup.policy", "value": "compact"}]}],
            "repartitionSinkTopics": [], "repartitionSourceTopics": [],
            "copartitionGroups": [{"sourceTopics": [0], "sourceTopicRegex": [], "repartitionSourceTopics": []}]}]}),
    # fields 4.1-4.3 added to records 4.0 had (tagged: 4.0's bytes still read, with the defaults)
    "OffsetCommit": (
        commit_key("g", "orders", 3),
        value(i64(10) + i32(2) + cs("m") + i64(1_700_000_000_001) + tags((0, TOPIC_ID)), 4),
        {"group": "g", "topic": "orders", "partition": 3},
        {"offset": 10, "leaderEpoch": 2, "metadata": "m", "commitTimestamp": 1_700_000_000_001,
         "topicId": TOPIC_ID_TEXT}),
    "ConsumerGroupMetadata": (
        key(3, "c"),
        value(i32(8) + tags((0, i64(-5)))),
        {"groupId": "c"},
        {"epoch": 8, "metadataHash": -5}),
    "ConsumerGroupTargetAssignmentMetadata": (
        key(6, "c"),
        value(i32(8) + tags((0, i64(99)))),
        {"groupId": "c"},
        {"assignmentEpoch": 8, "assignmentTimestamp": 99}),
    "ConsumerGroupCurrentMemberAssignment": (
        key(8, "c", "m"),
        value(i32(8) + i32(7) + i8(0) + carr(topic_partitions([0, 1], [8, 7])) + carr() + NO_TAGS),
        {"groupId": "c", "memberId": "m"},
        {"memberEpoch": 8, "previousMemberEpoch": 7, "state": 0,
         "assignedPartitions": [{"topicId": TOPIC_ID_TEXT, "partitions": [0, 1], "assignmentEpochs": [8, 7]}],
         "partitionsPendingRevocation": []}),
    "ShareGroupMetadata": (  # 4.1's layout: the metadata hash after the epoch
        key(11, "s"),
        value(i32(3) + i64(42) + NO_TAGS),
        {"groupId": "s"},
        {"epoch": 3, "metadataHash": 42}),
    "ShareGroupTargetAssignmentMetadata": (
        key(12, "s"),
        value(i32(3) + tags((0, i64(7)))),
        {"groupId": "s"},
        {"assignmentEpoch": 3, "assignmentTimestamp": 7}),
    "ShareGroupStatePartitionMetadata": (  # 4.1's layout: initializing topics first
        key(15, "s"),
        value(carr(TOPIC_ID + cs("orders") + ints(4) + NO_TAGS) + carr(TOPIC_ID + cs("orders") + ints(0, 1) + NO_TAGS)
              + carr(TOPIC_ID + cs("gone") + NO_TAGS) + NO_TAGS),
        {"groupId": "s"},
        {"initializingTopics": [{"topicId": TOPIC_ID_TEXT, "topicName": "orders", "partitions": [4]}],
         "initializedTopics": [{"topicId": TOPIC_ID_TEXT, "topicName": "orders", "partitions": [0, 1]}],
         "deletingTopics": [{"topicId": TOPIC_ID_TEXT, "topicName": "gone"}]}),
}


@pytest.mark.parametrize("name", sorted(NEW_RECORDS))
def test_a_record_kafka_4x_added_decodes_from_its_schema(name):
    k, v, want_key, want_value = NEW_RECORDS[name]
    r = groups.decode(k, v)
    assert (r.type_name, r.key, r.value) == (name, want_key, want_value)
    for cut in (len(v) - 1, 3):  # cut short anywhere: an error naming what was missing, never a decode
        with pytest.raises(MessageError):
            groups.decode(k, v[:cut])


def test_share_group_records_of_4_0_early_access_still_read():
    """4.0 wrote ShareGroupMetadataValue and ShareGroupStatePartitionMetadataValue at version 0 in another
    layout than 4.1's (a non-tagged field fewer): those bytes never read in 4.1's layout, and read in 4.0's."""
    r = groups.decode(key(11, "s"), value(i32(3) + NO_TAGS))
    assert r.value == {"epoch": 3}
    r = groups.decode(key(15, "s"), value(carr(TOPIC_ID + cs("orders") + ints(0) + NO_TAGS) + carr() + NO_TAGS))
    assert r.value == {"initializedTopics": [{"topicId": TOPIC_ID_TEXT, "topicName": "orders", "partitions": [0]}],
                       "deletingTopics": []}
    with pytest.raises(MessageError):  # neither layout
        groups.decode(key(11, "s"), value(i32(3)))


def test_tagged_fields_4x_added_default_where_4_0_wrote_none():
    r = groups.decode(key(6, "c"), value(i32(8) + NO_TAGS))
    assert r.value == {"assignmentEpoch": 8, "assignmentTimestamp": 0}
    r = groups.decode(commit_key("g", "t", 0), value(i64(1) + i32(-1) + cs("") + i64(5) + NO_TAGS, 4))
    assert r.value["topicId"] == "AAAAAAAAAAAAAAAAAAAAAA"
    with pytest.raises(MessageError, match="topicId: uuid needs 16 bytes"):  # a tagged field's size bounds it
        groups.decode(commit_key("g", "t", 0), value(i64(1) + i32(-1) + cs("") + i64(5) + tags((0, i64(0))), 4))


def test_unknown_types_stay_errors_naming_them():
    for t in (18, 24, 0x7FFF):
        with pytest.raises(UnknownRecordType, match=f"record type {t} .*0-17, 19-23"):
            groups.decode(key(t, "g"), None)


def test_transaction_log_next_producer_epoch():
    body = i64(1000) + i16(3) + i32(60000) + i8(1) + carr(cs("orders") + ints(0) + NO_TAGS) + i64(2) + i64(1)
    _, v = transactions.decode_value(value(body + tags((0, i64(999)), (3, i16(4))), 1))
    assert (v["previousProducerId"], v["nextProducerEpoch"], v["nextProducerId"]) == (999, 4, -1)
    _, v = transactions.decode_value(value(body + NO_TAGS, 1))
    assert v["nextProducerEpoch"] == -1


def frame(api_key: int, version: int, body: bytes) -> bytes:
    """An ApiMessageAndVersion frame: frame version 1, api key, version (unsigned varints), the message."""
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body


def test_cluster_metadata_records_4x_added():
    dirs = carr(TOPIC_ID)
    register = (i32(1) + b"\x00" + TOPIC_ID + i64(7) + carr(cs("PLAINTEXT") + cs("h") + u16(9092) + i16(0) + NO_TAGS)
                + carr() + cs(None) + b"\x01" + b"\x00")
    r = metadata.decode(frame(0, 4, register + tags((0, dirs), (1, dirs))))
    assert (r.type_name, r.version, r.data["logDirs"], r.data["cordonedLogDirs"]) == \
           ("REGISTER_BROKER_RECORD", 4, [TOPIC_ID_TEXT], [TOPIC_ID_TEXT])
    r = metadata.decode(frame(0, 4, register + tags((0, dirs))))
    assert r.data["cordonedLogDirs"] is None
    r = metadata.decode(frame(17, 3, i32(1) + i64(7) + tags((3, dirs))))
    assert (r.type_name, r.data["cordonedLogDirs"]) == ("BROKER_REGISTRATION_CHANGE_RECORD", [TOPIC_ID_TEXT])
    r = metadata.decode(frame(29, 0, i32(3000) + NO_TAGS))
    assert (r.type_name, r.data) == ("UNREGISTER_CONTROLLER_RECORD", {"controllerId": 3000})
    with pytest.raises(UnknownRecordType, match="record type 30"):
        metadata.decode(frame(30, 0, NO_TAGS))


def test_remote_log_segment_metadata_txn_index_empty():
    seg_id = cs("t") + TOPIC_ID + i32(0) + NO_TAGS + TOPIC_ID + NO_TAGS  # topicIdPartition (name, id, partition), id
    body = (seg_id + i64(0) + i64(99) + i32(1) + i64(5) + i64(6) + carr(i32(0) + i64(0) + NO_TAGS) + i32(1024) +
            cs(None) + i8(1))
    r = remote.decode(frame(0, 0, body + tags((0, b"\x01"))))
    assert (r.data["txnIndexEmpty"], r.data["endOffset"]) == (True, 99)
    assert remote.decode(frame(0, 0, body + NO_TAGS)).data["txnIndexEmpty"] is False


# ------------------------------------------------------------------ replay


def replay_all(records: list[tuple[bytes, bytes | None]]) -> GroupCoordinatorState:
    state = GroupCoordinatorState()
    for offset, (k, v) in enumerate(records):
        state.replay(offset, -1, k, v)
    return state


def streams_member(member: str, epoch: int, state: int, active: list[int]) -> tuple[bytes, bytes]:
    return key(22, "app", member), value(i32(epoch) + i32(epoch - 1) + i8(state) + carr(task_ids("0", active)) +
                                         carr() * 5 + NO_TAGS)


def streams_metadata(epoch: int, validated: int) -> tuple[bytes, bytes]:
    return key(17, "app"), value(i32(epoch) + i64(0) + tags((0, i32(validated))))


def test_a_streams_group_replays_through_its_states():
    """StreamsGroup.maybeUpdateGroupState: Empty, NotReady until its topology is validated, Assigning while
    the group epoch is ahead of the assignment's, Reconciling until every member is Stable at it."""
    k_meta, _, _, _ = NEW_RECORDS["StreamsGroupMemberMetadata"]
    steps = [
        (streams_metadata(1, -1), "Empty"),
        (NEW_RECORDS["StreamsGroupMemberMetadata"][:2], "NotReady"),
        (NEW_RECORDS["StreamsGroupTopology"][:2], "NotReady"),  # topology epoch 0, validated -1
        (streams_metadata(2, 0), "Assigning"),
        ((key(20, "app"), value(i32(2) + NO_TAGS)), "Reconciling"),  # the member has no assignment yet
        (NEW_RECORDS["StreamsGroupTargetAssignmentMember"][:2], "Reconciling"),
        (streams_member("m1", 2, 2, [0]), "Reconciling"),  # UNREVOKED_TASKS
        (streams_member("m1", 2, 1, [0, 1]), "Stable"),
    ]
    state = GroupCoordinatorState()
    for offset, ((k, v), want) in enumerate(steps):
        state.replay(offset, -1, k, v)
        assert state.groups["app"].state == want, offset
    g = state.groups["app"]
    assert (g.type, g.protocol_type, g.group_epoch, g.assignment_epoch) == ("streams", "streams", 2, 2)
    m = g.members["m1"]
    assert (m["processId"], m["memberEpoch"], m["assignedTasks"]["active"]) == ("proc-1", 2, {"0": [0, 1]})
    assert g.target_assignment["m1"]["warmup"] == {"1": [2]}
    # leaving: the member's metadata goes last, after its current and target assignments
    with pytest.raises(ReplayError, match="did not receive StreamsGroupCurrentMemberAssignmentValue tombstone"):
        state.replay(100, -1, k_meta, None)
    state.replay(101, -1, key(22, "app", "m1"), None)
    with pytest.raises(ReplayError, match="did not receive StreamsGroupTargetAssignmentMetadataValue tombstone"):
        state.replay(102, -1, k_meta, None)
    state.replay(103, -1, key(21, "app", "m1"), None)
    state.replay(104, -1, k_meta, None)
    assert g.members == {} and g.state == "Empty"
    with pytest.raises(ReplayError, match="did not receive StreamsGroupTargetAssignmentMetadataValue tombstone"):
        state.replay(105, -1, key(17, "app"), None)
    state.replay(106, -1, key(20, "app"), None)
    state.replay(107, -1, key(17, "app"), None)
    assert "app" not in state.groups
    state.replay(108, -1, key(23, "app"), None)  # a tombstone for a group that is not there: ignored
    assert "app" not in state.groups


def test_a_streams_group_takes_a_simple_groups_place_and_not_another_kind():
    state = replay_all([(commit_key("app", "input", 0), value(i64(5) + i32(-1) + s16("") + i64(1), 3)),
                        streams_metadata(1, -1)])
    assert state.groups["app"].type == "streams" and state.committed("app")[("input", 0)].committed_offset == 5
    state.replay(9, -1, key(3, "c"), value(i32(1) + NO_TAGS))
    with pytest.raises(ReplayError, match="Group c is not a streams group."):
        state.replay(10, -1, key(17, "c"), streams_metadata(1, -1)[1])


def test_a_consumer_groups_regular_expressions_replay():
    k, v, _, _ = NEW_RECORDS["ConsumerGroupRegularExpression"]
    state = replay_all([(k, v)])
    g = state.groups["g"]
    assert g.type == "consumer" and g.regular_expressions["orders-.*"]["topics"] == ["orders-1", "orders-2"]
    state.replay(1, -1, k, None)
    assert g.regular_expressions == {}
    state.replay(2, -1, key(16, "nope", "x"), None)  # no such group: ignored
    assert "nope" not in state.groups


def test_share_partition_state_is_kept_by_group():
    k, v, _, _ = NEW_RECORDS["ShareGroupStatePartitionMetadata"]
    state = replay_all([(k, v)])
    assert state.groups["s"].type == "share"  # a value makes the share group
    assert state.share_state_partitions["s"]["initializedTopics"][0]["partitions"] == [0, 1]
    state.replay(1, -1, k, None)
    assert "s" not in state.share_state_partitions
    with pytest.raises(ReplayError, match="Group c is not a share group."):
        replay_all([(key(3, "c"), value(i32(1) + NO_TAGS)), (key(15, "c"), v)])


def consumer_assignment(member: str, epoch: int, partitions: list[int]) -> tuple[bytes, bytes]:
    return key(8, "c", member), value(i32(epoch) + i32(epoch - 1) + i8(0) + carr(topic_partitions(partitions)) +
                                      carr() + NO_TAGS)


def test_a_member_leaves_at_epoch_minus_one_as_kafka_has_it():
    """LEAVE_GROUP_MEMBER_EPOCH is -1: a member whose current assignment says -2 (a static member's
    temporary leave) is still there for Kafka, and its metadata tombstone is refused."""
    member_metadata = (key(5, "c", "m"), value(cs(None) + cs(None) + cs("cl") + cs("/h") + carr() + cs(None) +
                                               i32(-1) + cs(None) + NO_TAGS))
    static_leave = (key(8, "c", "m"), value(i32(-2) + i32(3) + i8(0) + carr() + carr() + NO_TAGS))
    with pytest.raises(ReplayError, match="did not receive ConsumerGroupCurrentMemberAssignmentValue tombstone"):
        replay_all([member_metadata, static_leave, (member_metadata[0], None)])
    state = replay_all([member_metadata, (static_leave[0], None), (member_metadata[0], None)])
    assert state.groups["c"].members == {}


def test_a_partition_moves_to_a_member_at_a_later_epoch():
    """ConsumerGroup.addPartitionEpochs refuses only an owner at the same epoch or a later one."""
    state = replay_all([consumer_assignment("a", 3, [0]), consumer_assignment("b", 4, [0])])
    assert state.groups["c"].partition_epochs[(TOPIC_ID_TEXT, 0)] == 4
    with pytest.raises(ReplayError, match="still owned at epoch 3"):
        replay_all([consumer_assignment("a", 3, [0]), consumer_assignment("b", 3, [0])])


@pytest.mark.parametrize("path", ["fast", "python"])
def test_streams_and_tagged_records_replay_from_a_log(tmp_path, path):
    """Through the partition's files: `lookupd groups` lists the streams group with its state and members,
    a v4 commit with a topic id is committed, and one whose topicId is the wrong size fails its group only."""
    d = tmp_path / "__consumer_offsets-0"
    log = CoordinatorLog(str(d))
    for name in ("StreamsGroupMetadata", "StreamsGroupTopology", "StreamsGroupMemberMetadata",
                 "StreamsGroupTargetAssignmentMetadata", "StreamsGroupTargetAssignmentMember",
                 "StreamsGroupCurrentMemberAssignment", "OffsetCommit"):
        log.write([Record(*NEW_RECORDS[name][:2])])
    bad = value(i64(1) + i32(-1) + cs("") + i64(5) + tags((0, i64(0))), 4)
    log.write([Record(commit_key("h", "orders", 0), bad)])
    log.close()
    r = replayed([tmp_path], python=path == "python")
    assert r.state.committed("g")[("orders", 3)].committed_offset == 10
    assert [f.group for f in r.faults] == ["h"]
    assert "topicId" in str(r.faults[0].error)
    listed, warnings = list_groups(Coordinators(LogManager([tmp_path]), 1))
    app = next(g for g in listed if g["group"] == "app")
    # (its metadata says topology epoch 3 was validated, its topology is epoch 0: not ready)
    assert (app["type"], app["state"], app["group_epoch"], app["topology_epoch"]) == ("streams", "NotReady", 5, 0)
    assert app["members"][0]["assignment"]["active"] == {"0": [0, 1]} and app["members"][0]["state"] == "STABLE"
    assert warnings == [] and [g["group"] for g in listed] == ["app", "g"]
