"""The groups and committed offsets of one `__consumer_offsets` partition, replayed as Kafka's group
coordinator loads them (GroupCoordinatorShard.replay, GroupMetadataManager, OffsetMetadataManager). No I/O.

Records are fed in offset order with their batch's producer id:

* an OffsetCommit value with no producer id (-1) is the group's committed offset for that
  partition; with one, it waits in that producer's pending store until its COMMIT marker moves it
  in (only if its record offset is past the committed one's: a newer regular commit wins), and an
  ABORT marker drops it; a marker of a producer with nothing pending does nothing;
* a tombstone removes the committed offset and that partition's pending offsets of the group's
  open transactions;
* a commit for a group that does not exist creates an empty classic group with no protocol type
  (a "simple" group), which a consumer group's record then replaces;
* group records (classic, consumer and share) create, update and delete groups, as strictly as
  Kafka: a record Kafka's replay would refuse (a member tombstone before its assignment's, a
  partition owned by two members, ...) raises ReplayError naming the group.

Committed offsets are kept by the bytes of their key's fields (group, topic, partition, the strings
as UTF-8, malformed bytes replaced as Java reads them): (record offset, value bytes), decoded when
first read. Where the C extension is built they are in its CommitTable, and the C scan applies runs
of plain commits to it itself; `apply_commits` does the rest with what it noted: the keys with a
tombstone and the groups with a value. That gives the same state as record by record (DictCommits
is the table in Python): commits only create groups, and within such a run tombstones only remove
pending offsets, which nothing adds there.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .. import _accel
from .groups import GROUP_METADATA, OFFSET_COMMIT_TYPES, OFFSET_COMMIT_VALUE, decode_key, decode_value, record_type
from .schema import MessageError

NO_PRODUCER_ID = -1
LEAVE_GROUP_MEMBER_EPOCH = -2
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ReplayError(MessageError):
    """A record Kafka's replay would refuse (IllegalStateException and the like), for one group."""

    def __init__(self, group: str, reason: str):
        super().__init__(reason)
        self.group = group


class OffsetAndMetadata(NamedTuple):
    """A committed (or pending) offset, as OffsetAndMetadata.fromRecord makes it."""

    committed_offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None
    record_offset: int  # where the commit record is in __consumer_offsets

    @classmethod
    def from_value(cls, record_offset: int, v: dict) -> "OffsetAndMetadata":
        expire = v.get("expireTimestamp", -1)
        return cls(v["offset"], v.get("leaderEpoch", -1), v["metadata"], v["commitTimestamp"],
                   None if expire == -1 else expire, record_offset)


def commit_key(fields: bytes) -> tuple[str, str, int]:
    """(group, topic, partition) from an OffsetCommit key's fields (after the record type): two
    int16-length strings and an int32, nothing else."""
    n = _I16.unpack_from(fields)[0]
    group = fields[2:2 + n].decode("utf-8", "replace")
    p = 2 + n
    m = _I16.unpack_from(fields, p)[0]
    topic = fields[p + 2:p + 2 + m].decode("utf-8", "replace")
    return group, topic, _I32.unpack_from(fields, p + 2 + m)[0]


def key_fields(group: str, topic: str, partition: int) -> bytes:
    """An OffsetCommit key's fields as committed offsets are kept by them (what the C scan takes from a key
    whose strings are valid UTF-8, byte for byte)."""
    g, t = group.encode(), topic.encode()
    return _I16.pack(len(g)) + g + _I16.pack(len(t)) + t + _I32.pack(partition)


def _group_bytes(fields: bytes) -> bytes:
    return fields[2:2 + _I16.unpack_from(fields)[0]]


def _group_of(fields: bytes) -> str:
    return _group_bytes(fields).decode("utf-8", "replace")


# ------------------------------------------------------------------ groups


class ClassicGroup:
    """A classic group as GroupMetadataValue loads it (Empty without members, else Stable), or a simple
    group an offset commit made (no protocol type, no members)."""

    type = "classic"

    def __init__(self, group_id: str, value: dict | None = None):
        self.group_id = group_id
        self.value = value  # the GroupMetadataValue, None for a simple group

    @property
    def simple(self) -> bool:
        return self.value is None or (not self.value["protocolType"] and not self.value["members"])

    @property
    def protocol_type(self) -> str:
        return (self.value or {}).get("protocolType") or ""

    @property
    def state(self) -> str:
        return "Stable" if self.value and self.value["members"] else "Empty"


class ModernGroup:
    """What KIP-848 consumer groups and KIP-932 share groups share: epochs, members, target assignment."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = -1
        self.members: dict[str, dict] = {}
        self.target_assignment: dict[str, dict[str, list[int]]] = {}  # member -> topic id -> partitions
        self.topics: dict[str, str] = {}  # topic id -> name, from the partition metadata record

    def member(self, member_id: str, create: bool) -> dict:
        m = self.members.get(member_id)
        if m is None:
            if not create:
                raise ReplayError(self.group_id, f"member {member_id} is not a member of group {self.group_id}")
            m = self.new_member(member_id)
        return dict(m)

    def new_member(self, member_id: str) -> dict:
        return {"memberId": member_id, "memberEpoch": 0, "previousMemberEpoch": -1, "state": 0,
                "assignedPartitions": {}, "clientId": "", "clientHost": "", "rackId": None,
                "subscribedTopicNames": []}

    def update_member(self, member: dict) -> None:
        self.members[member["memberId"]] = member

    def remove_member(self, member_id: str) -> None:
        self.members.pop(member_id, None)

    # What consumer and share groups replay alike (GroupMetadataManager's replay of their records).
    epoch_tombstone_left = ""  # the end of the error of a group tombstone before its assignment epoch's

    def check_deletable(self) -> None:
        """A group tombstone needs the group empty, its target assignment and then its epoch gone first."""
        gid = self.group_id
        if self.members:
            raise ReplayError(gid, f"Received a tombstone record to delete group {gid} but the group still has "
                                   f"{len(self.members)} members.")
        if self.target_assignment:
            raise ReplayError(gid, f"Received a tombstone record to delete group {gid} but the target assignment "
                                   f"still has {len(self.target_assignment)} members.")
        if self.assignment_epoch != -1:
            raise ReplayError(gid, f"Received a tombstone record to delete group {gid} but {self.epoch_tombstone_left}")

    def replay_partition_metadata(self, v: dict | None) -> None:
        self.topics = {} if v is None else {topic["topicId"]: topic["topicName"] for topic in v["topics"]}

    def replay_target_epoch(self, v: dict | None) -> None:
        if v is not None:
            self.assignment_epoch = v["assignmentEpoch"]
            return
        if self.target_assignment:
            raise ReplayError(self.group_id, f"Received a tombstone record to delete target assignment of "
                                             f"{self.group_id} but the assignment still has "
                                             f"{len(self.target_assignment)} members.")
        self.assignment_epoch = -1

    def replay_target_member(self, member_id: str, v: dict | None) -> None:
        if v is None:
            self.target_assignment.pop(member_id, None)
        else:
            self.target_assignment[member_id] = _assignment(v["topicPartitions"])


class ConsumerGroup(ModernGroup):
    type = "consumer"
    protocol_type = "consumer"
    epoch_tombstone_left = "did not receive ConsumerGroupTargetAssignmentMetadataValue tombstone."

    def __init__(self, group_id: str):
        super().__init__(group_id)
        self.partition_epochs: dict[tuple[str, int], int] = {}  # who owns what (ConsumerGroup.currentPartitionEpoch)

    def new_member(self, member_id: str) -> dict:
        return {**super().new_member(member_id), "instanceId": None, "subscribedTopicRegex": "",
                "rebalanceTimeoutMs": -1, "serverAssignor": None, "classicMemberMetadata": None,
                "partitionsPendingRevocation": {}}

    def update_member(self, member: dict) -> None:
        """ConsumerGroup.updateMember's partition epochs: the old assignment is released, the new one
        taken, and a partition may be owned (assigned or pending revocation) by one member only."""
        old = self.members.get(member["memberId"])
        self.members[member["memberId"]] = member
        if old is not None:
            self._release(old)
        epoch = member["memberEpoch"]
        for owned in (member["assignedPartitions"], member["partitionsPendingRevocation"]):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    prev = self.partition_epochs.get((topic_id, p))
                    if prev is not None:
                        raise ReplayError(self.group_id, f"Cannot set the epoch of {topic_id}-{p} to {epoch} because "
                                                         f"the partition is still owned at epoch {prev}")
                    self.partition_epochs[(topic_id, p)] = epoch

    def _release(self, member: dict) -> None:
        epoch = member["memberEpoch"]
        for owned in (member["assignedPartitions"], member["partitionsPendingRevocation"]):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    prev = self.partition_epochs.pop((topic_id, p), None)
                    if prev != epoch:
                        raise ReplayError(self.group_id, f"Cannot remove the epoch {epoch} from {topic_id}-{p} "
                                                         f"because the partition is still owned at a different "
                                                         f"epoch {prev}")

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)

    @property
    def state(self) -> str:
        """ConsumerGroup.maybeUpdateGroupState, computed from the replayed fields."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():
            if not (m["state"] == 0 and m["memberEpoch"] == self.assignment_epoch):
                return "Reconciling"
        return "Stable"


class ShareGroup(ModernGroup):
    type = "share"
    protocol_type = "share"
    epoch_tombstone_left = "target assignment epoch in invalid."

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


Group = ClassicGroup | ConsumerGroup | ShareGroup


def _assignment(topic_partitions: list[dict]) -> dict[str, list[int]]:
    """topic id -> sorted partitions (Kafka keeps sets: a partition listed twice counts once)."""
    out: dict[str, set[int]] = {}
    for tp in topic_partitions:
        out.setdefault(tp["topicId"], set()).update(tp["partitions"])
    return {t: sorted(ps) for t, ps in out.items()}


class PartitionOffset(NamedTuple):
    """One partition of a group's offsets: the committed offset (None: none) and whether an open
    transaction holds a pending commit for it."""

    topic: str
    partition: int
    committed: OffsetAndMetadata | None
    pending_transaction: bool


class DictCommits:
    """Committed offsets by key fields: (record offset, value bytes). The C CommitTable's reference,
    with its methods."""

    def __init__(self) -> None:
        self._d: dict[bytes, tuple[int, bytes]] = {}
        self._groups: dict[bytes, set[bytes]] = {}  # group name -> its keys

    def get(self, fields: bytes) -> tuple[int, bytes] | None:
        return self._d.get(fields)

    def offset_of(self, fields: bytes) -> int:
        e = self._d.get(fields)
        return -1 if e is None else e[0]

    def put(self, fields: bytes, record_offset: int, value: bytes) -> None:
        self._d[fields] = (record_offset, bytes(value))
        self._groups.setdefault(_group_bytes(fields), set()).add(fields)

    def remove(self, fields: bytes) -> bool:
        if self._d.pop(fields, None) is None:
            return False
        keys = self._groups[_group_bytes(fields)]
        keys.discard(fields)
        if not keys:
            del self._groups[_group_bytes(fields)]
        return True

    def group(self, name: bytes) -> list[tuple[bytes, int]]:
        return [(f, self._d[f][0]) for f in self._groups.get(name, ())]

    def __len__(self) -> int:
        return len(self._d)


def commit_table():
    """The C table of committed offsets, or DictCommits without the extension or on a reference path."""
    if _accel.CommitTable is not None and not _accel.mode.python:
        return _accel.CommitTable()
    return DictCommits()


class GroupCoordinatorState:
    """The groups, committed offsets and pending transactional offsets of one `__consumer_offsets`
    partition (a GroupCoordinatorShard after its load)."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.commits = commit_table()  # key fields -> (record offset, value bytes); a group's keys
        self._decoded: dict[bytes, OffsetAndMetadata] = {}  # values read so far (checked by record offset)
        # producer id -> group -> key fields -> (record offset, value bytes) its COMMIT marker would commit
        self.pending: dict[int, dict[str, dict[bytes, tuple[int, bytes]]]] = {}
        self.open_transactions: dict[str, set[int]] = {}  # group -> producer ids with pending offsets
        self.generation = 0  # counts the changes replayed: an answer made at one generation holds until the next

    # -------------------------------------------------------------- replay

    def replay(self, offset: int, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """One data record (GroupCoordinatorShard.replay). MessageError for bytes that do not decode,
        ReplayError for a record Kafka's replay refuses."""
        self.generation += 1
        t, k = decode_key(key)
        version, v = decode_value(t, value)
        if t in OFFSET_COMMIT_TYPES:
            self._offset_commit(offset, producer_id, k["group"], key_fields(k["group"], k["topic"], k["partition"]),
                                v, value)
        elif t == GROUP_METADATA:
            self._group_metadata(k["group"], v)
        elif t <= 8:
            self._consumer_group(t, k["groupId"], k.get("memberId"), v)
        elif t <= 14:
            self._share_group(t, k["groupId"], k.get("memberId"), v)
        else:  # 15, ShareGroupStatePartitionMetadata: GroupCoordinatorShard.replay has no case for it
            raise ReplayError(k["groupId"], f"Received an unknown record type {t} (ShareGroupStatePartitionMetadata): "
                                            f"Kafka's group coordinator fails its load on it")

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker (OffsetMetadataManager.replayEndTransactionMarker)."""
        self.generation += 1
        pending = self.pending.pop(producer_id, None)
        if pending is None:
            return
        for group in pending:
            open_ = self.open_transactions.get(group)
            if open_ is not None:
                open_.discard(producer_id)
                if not open_:
                    del self.open_transactions[group]
        if not commit:
            return
        for group, partitions in pending.items():
            for fields, (record_offset, value) in partitions.items():
                if record_offset > self.commits.offset_of(fields):  # none there: -1
                    self._put(group, fields, record_offset, value)

    def apply_commits(self, tombstoned: list[bytes], groups: list[bytes]) -> None:
        """What the C scan noted of a run of plain (no producer id) OffsetCommit records it applied to
        `commits`: the keys with a tombstone, and the groups with a value (their names' bytes)."""
        self.generation += 1
        for g in groups:
            name = g.decode()
            if name not in self.groups:
                self.groups[name] = ClassicGroup(name)
        if self.open_transactions:
            for fields in tombstoned:
                self._drop_pending(_group_of(fields), fields)

    def apply_transactional(self, producer_id: int, records: list[tuple[bytes, int, bytes | None]]) -> None:
        """A transactional batch of OffsetCommit records the C scan checked: (key fields, record offset,
        value bytes or None), replayed as `replay` does them."""
        self.generation += 1
        for fields, offset, value in records:
            self._offset_commit(offset, producer_id, _group_of(fields), fields, value, value)

    def _offset_commit(self, offset: int, producer_id: int, group: str, fields: bytes, v: dict | bytes | None,
                       value: bytes | None) -> None:
        if v is None:
            self._remove(fields)
            self._drop_pending(group, fields)
            return
        if group not in self.groups:
            self.groups[group] = ClassicGroup(group)
        if producer_id == NO_PRODUCER_ID:
            self._put(group, fields, offset, value)
        else:  # (v: the decoded value, or its bytes from the C scan: only the record offset is used)
            self.pending.setdefault(producer_id, {}).setdefault(group, {})[fields] = (offset, bytes(value))
            self.open_transactions.setdefault(group, set()).add(producer_id)

    def _put(self, group: str, fields: bytes, record_offset: int, value: bytes) -> None:
        self.commits.put(fields, record_offset, value)

    def _remove(self, fields: bytes) -> None:
        self.commits.remove(fields)
        self._decoded.pop(fields, None)

    def _drop_pending(self, group: str, fields: bytes) -> None:
        for pid in self.open_transactions.get(group, ()):
            partitions = self.pending.get(pid, {}).get(group)
            if partitions is not None:
                partitions.pop(fields, None)

    def _group_metadata(self, group: str, v: dict | None) -> None:
        if v is None:
            self.groups.pop(group, None)
        else:
            self.groups[group] = ClassicGroup(group, v)

    def _modern(self, cls: type, group_id: str, create: bool, tombstone_ok: bool) -> ModernGroup | None:
        """getOrMaybeCreatePersisted{Consumer,Share}Group: None where Kafka ignores the record."""
        g = self.groups.get(group_id)
        if g is None:
            if not create:
                if tombstone_ok:
                    return None
                raise ReplayError(group_id, f"{cls.type.capitalize()} group {group_id} not found")
        elif isinstance(g, cls):
            return g
        elif cls is ConsumerGroup and isinstance(g, ClassicGroup) and g.simple:
            pass  # a simple group only holds offsets: the consumer group takes its place
        elif cls is ConsumerGroup:
            raise ReplayError(group_id, f"Group {group_id} is not a consumer group")
        else:
            raise ReplayError(group_id, f"Group {group_id} is not a share group.")
        g = self.groups[group_id] = cls(group_id)
        return g

    def _consumer_group(self, t: int, group_id: str, member_id: str | None, v: dict | None) -> None:
        g = self._modern(ConsumerGroup, group_id, v is not None, tombstone_ok=True)
        if g is None:
            return
        if t == 3:  # ConsumerGroupMetadata
            self._group_epoch(g, v)
        elif t == 4:  # ConsumerGroupPartitionMetadata
            g.replay_partition_metadata(v)
        elif t == 5:  # ConsumerGroupMemberMetadata
            if v is not None:
                g.update_member({**g.member(member_id, True), **v})
                return
            old = g.members.get(member_id)
            if old is None:
                return
            if old["memberEpoch"] != LEAVE_GROUP_MEMBER_EPOCH:
                raise ReplayError(group_id, f"Received a tombstone record to delete member {member_id} but did not "
                                            f"receive ConsumerGroupCurrentMemberAssignmentValue tombstone.")
            if member_id in g.target_assignment:
                raise ReplayError(group_id, f"Received a tombstone record to delete member {member_id} but did not "
                                            f"receive ConsumerGroupTargetAssignmentMetadataValue tombstone.")
            g.remove_member(member_id)
        elif t == 6:  # ConsumerGroupTargetAssignmentMetadata
            g.replay_target_epoch(v)
        elif t == 7:  # ConsumerGroupTargetAssignmentMember
            g.replay_target_member(member_id, v)
        else:  # 8, ConsumerGroupCurrentMemberAssignment
            if v is not None:
                g.update_member({**g.member(member_id, True), "memberEpoch": v["memberEpoch"],
                                 "previousMemberEpoch": v["previousMemberEpoch"], "state": v["state"],
                                 "assignedPartitions": _assignment(v["assignedPartitions"]),
                                 "partitionsPendingRevocation": _assignment(v["partitionsPendingRevocation"])})
            elif member_id in g.members:
                g.update_member({**g.members[member_id], "memberEpoch": LEAVE_GROUP_MEMBER_EPOCH,
                                 "previousMemberEpoch": LEAVE_GROUP_MEMBER_EPOCH, "assignedPartitions": {},
                                 "partitionsPendingRevocation": {}})

    def _group_epoch(self, g: ModernGroup, v: dict | None) -> None:
        """A consumer or share group's metadata record: its epoch, or (a tombstone) its deletion."""
        if v is not None:
            g.group_epoch = v["epoch"]
            return
        g.check_deletable()
        del self.groups[g.group_id]

    def _share_group(self, t: int, group_id: str, member_id: str | None, v: dict | None) -> None:
        # Share groups: only a member metadata or group metadata value creates one; anything else for a
        # missing group fails Kafka's load.
        g = self._modern(ShareGroup, group_id, v is not None and t in (10, 11), tombstone_ok=False)
        if t == 11:  # ShareGroupMetadata
            self._group_epoch(g, v)
        elif t == 9:  # ShareGroupPartitionMetadata
            g.replay_partition_metadata(v)
        elif t == 10:  # ShareGroupMemberMetadata
            if v is not None:
                g.update_member({**g.member(member_id, True), **v})
                return
            old = g.member(member_id, False)
            if old["memberEpoch"] != LEAVE_GROUP_MEMBER_EPOCH:
                raise ReplayError(group_id, f"Received a tombstone record to delete member {member_id} with invalid "
                                            f"leave group epoch.")
            if member_id in g.target_assignment:
                raise ReplayError(group_id, f"Received a tombstone record to delete member {member_id} but member "
                                            f"exists in target assignment.")
            g.remove_member(member_id)
        elif t == 12:  # ShareGroupTargetAssignmentMetadata
            g.replay_target_epoch(v)
        elif t == 13:  # ShareGroupTargetAssignmentMember
            g.replay_target_member(member_id, v)
        else:  # 14, ShareGroupCurrentMemberAssignment
            old = g.member(member_id, False)
            if v is not None:
                g.update_member({**old, "memberEpoch": v["memberEpoch"], "previousMemberEpoch": v["previousMemberEpoch"],
                                 "state": v["state"], "assignedPartitions": _assignment(v["assignedPartitions"])})
            else:
                g.update_member({**old, "memberEpoch": LEAVE_GROUP_MEMBER_EPOCH,
                                 "previousMemberEpoch": LEAVE_GROUP_MEMBER_EPOCH, "assignedPartitions": {}})

    # -------------------------------------------------------------- answers

    def group_ids(self) -> list[str]:
        """Every group, sorted."""
        return sorted(self.groups)

    def committed(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The group's committed offsets by (topic, partition)."""
        out = {}
        for fields, record_offset in self.commits.group(group.encode()):
            oam = self._decoded.get(fields)
            if oam is None or oam.record_offset != record_offset:  # read first, or committed again since
                _, value = self.commits.get(fields)
                version = _I16.unpack_from(value)[0]  # its bytes were checked when it was replayed
                oam = self._decoded[fields] = OffsetAndMetadata.from_value(
                    record_offset, OFFSET_COMMIT_VALUE.read(value, version, 2)[0])
            _, topic, partition = commit_key(fields)
            out[(topic, partition)] = oam
        return out

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """The group's partitions with a pending transactional commit (hasPendingTransactionalOffsets)."""
        out: set[tuple[str, int]] = set()
        for pid in self.open_transactions.get(group, ()):
            out.update(commit_key(f)[1:] for f in self.pending.get(pid, {}).get(group, {}))
        return out

    def partition_offsets(self, group: str) -> list[PartitionOffset]:
        """Every partition the group has a committed or pending offset for, sorted by topic and partition."""
        committed = self.committed(group)
        pending = self.pending_partitions(group)
        return [PartitionOffset(tp[0], tp[1], committed.get(tp), tp in pending)
                for tp in sorted(set(committed) | pending)]

    def has(self, group: str) -> bool:
        return group in self.groups or bool(self.commits.group(group.encode())) or bool(self.pending_partitions(group))


def key_group(key: bytes | None) -> str | None:
    """The group a record's key names, when its type is known and its first field reads (for naming
    which group a record that does not decode belongs to); None otherwise."""
    try:
        t = record_type(key)
        if not 0 <= t <= 15:
            return None
        n = _I16.unpack_from(key, 2)[0]
        if n < 0 or 4 + n > len(key):
            return None
        return key[4:4 + n].decode("utf-8", "replace")
    except (MessageError, struct.error):
        return None
