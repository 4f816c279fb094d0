"""The kinds of group a `__consumer_offsets` partition holds, each replaying its own records as Kafka's
GroupMetadataManager does (the 4.x line's newest). No I/O.

* ClassicGroup: a GroupMetadataValue (Empty without members, else Stable), or a "simple" group an offset
  commit made (no protocol type, no members), which any other kind's first record replaces.
* ConsumerGroup (KIP-848), ShareGroup (KIP-932) and StreamsGroup (KIP-1071): a group epoch, members
  (their metadata and current assignment), a target assignment and its epoch; consumer groups also own
  their partitions one member at a time and keep resolved regular expressions, streams groups keep their
  topology, and assign tasks (subtopology -> partitions) rather than partitions.

`replay(record type, key, value)` applies one record to a group that exists (the coordinator state makes
or finds it: a value makes one, a tombstone for a group that is not there is ignored) and says whether
the group is deleted. A record Kafka's replay refuses (IllegalStateException there) is a ReplayError
naming the group, with Kafka's message.
"""

from __future__ import annotations

from ...message import MessageError

# What a member's epochs become when its current assignment is deleted (the heartbeats' LEAVE_GROUP_MEMBER_EPOCH).
LEAVE_GROUP_MEMBER_EPOCH = -1
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}
STREAMS_MEMBER_STATES = {1: "STABLE", 2: "UNREVOKED_TASKS", 3: "UNRELEASED_TASKS", 127: "UNKNOWN"}
STREAMS_STABLE = 1
TASK_KINDS = ("active", "standby", "warmup")


class ReplayError(MessageError):
    """A record Kafka's replay would refuse (IllegalStateException and the like), for one group."""

    def __init__(self, group: str, reason: str):
        super().__init__(reason)
        self.group = group


def _assignment(items: list[dict], key: str = "topicId") -> dict[str, list[int]]:
    """topic id (or subtopology) -> sorted partitions (Kafka keeps sets: one listed twice counts once)."""
    out: dict[str, set[int]] = {}
    for item in items:
        out.setdefault(item[key], set()).update(item["partitions"])
    return {t: sorted(ps) for t, ps in out.items()}


class ClassicGroup:
    """A classic group as GroupMetadataValue loads it, or a simple group (value None)."""

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
    """What the KIP-848-style groups share: epochs, members (dicts of their records' fields) and a target
    assignment. Subclasses name their record types and the field their assignments are in."""

    type = protocol_type = ""
    METADATA = PARTITION_METADATA = MEMBER_METADATA = TARGET_METADATA = TARGET_MEMBER = CURRENT_ASSIGNMENT = -1
    # the ends of Kafka's errors for tombstones that come too early
    member_tombstone_errors = ("", "")
    group_tombstone_epoch_error = ""
    tombstone_needs_no_target = True  # (a streams group's tombstone does not look at its target assignment)

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = -1
        self.assignment_timestamp = 0
        self.members: dict[str, dict] = {}
        self.target_assignment: dict[str, dict] = {}  # member -> its target assignment
        self.topics: dict[str, str] = {}  # topic id -> name, where a partition metadata record names them

    # -------------------------------------------------------------- members

    def new_member(self, member_id: str) -> dict:
        raise NotImplementedError

    def update_member(self, member: dict) -> None:
        self.members[member["memberId"]] = member

    def remove_member(self, member_id: str) -> None:
        self.members.pop(member_id, None)

    def left(self, member: dict) -> dict:
        """The member once its current assignment is deleted."""
        raise NotImplementedError

    def current_assignment(self, member: dict, v: dict) -> dict:
        """The member with a current assignment value applied."""
        raise NotImplementedError

    def target(self, v: dict) -> dict:
        """A target assignment value as kept."""
        return _assignment(v["topicPartitions"])

    # -------------------------------------------------------------- replay

    def replay(self, t: int, key: dict, v: dict | None) -> bool:
        """One record of this kind; True when it deletes the group."""
        gid = self.group_id
        if t == self.METADATA:
            if v is not None:
                self.replay_metadata(v)
                return False
            self.check_deletable()
            return True
        if t == self.PARTITION_METADATA:
            self.topics = {} if v is None else {topic["topicId"]: topic["topicName"] for topic in v["topics"]}
        elif t == self.MEMBER_METADATA:
            member_id = key["memberId"]
            old = self.members.get(member_id)
            if v is not None:
                self.update_member({**(old or self.new_member(member_id)), **v})
            elif old is not None:
                if old["memberEpoch"] != LEAVE_GROUP_MEMBER_EPOCH:
                    raise ReplayError(gid, f"Received a tombstone record to delete member {member_id} "
                                           f"{self.member_tombstone_errors[0]}")
                if member_id in self.target_assignment:
                    raise ReplayError(gid, f"Received a tombstone record to delete member {member_id} "
                                           f"{self.member_tombstone_errors[1]}")
                self.remove_member(member_id)
        elif t == self.TARGET_METADATA:
            if v is not None:
                self.assignment_epoch, self.assignment_timestamp = v["assignmentEpoch"], v["assignmentTimestamp"]
            elif self.target_assignment:
                raise ReplayError(gid, f"Received a tombstone record to delete target assignment of {gid} but the "
                                       f"assignment still has {len(self.target_assignment)} members.")
            else:
                self.assignment_epoch, self.assignment_timestamp = -1, 0
        elif t == self.TARGET_MEMBER:
            if v is None:
                self.target_assignment.pop(key["memberId"], None)
            else:
                self.target_assignment[key["memberId"]] = self.target(v)
        elif t == self.CURRENT_ASSIGNMENT:
            member_id = key["memberId"]
            old = self.members.get(member_id)
            if v is not None:
                self.update_member(self.current_assignment(old or self.new_member(member_id), v))
            elif old is not None:
                self.update_member(self.left(old))
        else:
            self.replay_other(t, key, v)
        return False

    def replay_metadata(self, v: dict) -> None:
        self.group_epoch = v["epoch"]
        self.metadata_hash = v["metadataHash"] if "metadataHash" in v else 0

    def replay_other(self, t: int, key: dict, v: dict | None) -> None:
        raise AssertionError(f"record type {t} is not a {self.type} group's")

    def check_deletable(self) -> None:
        """A group tombstone needs the group empty, its target assignment and then its epoch gone first."""
        gid = self.group_id
        if self.members:
            raise ReplayError(gid, f"Received a tombstone record to delete group {gid} but the group still has "
                                   f"{len(self.members)} members.")
        if self.target_assignment and self.tombstone_needs_no_target:
            raise ReplayError(gid, f"Received a tombstone record to delete group {gid} but the target assignment "
                                   f"still has {len(self.target_assignment)} members.")
        if self.assignment_epoch != -1:
            raise ReplayError(gid, f"Received a tombstone record to delete group {gid} but "
                                   f"{self.group_tombstone_epoch_error}")


class ConsumerGroup(ModernGroup):
    type = protocol_type = "consumer"
    METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 3, 4, 5, 6, 7, 8
    REGULAR_EXPRESSION = 16
    member_tombstone_errors = ("but did not receive ConsumerGroupCurrentMemberAssignmentValue tombstone.",
                               "but did not receive ConsumerGroupTargetAssignmentMetadataValue tombstone.")
    group_tombstone_epoch_error = "did not receive ConsumerGroupTargetAssignmentMetadataValue tombstone."

    def __init__(self, group_id: str):
        super().__init__(group_id)
        self.partition_epochs: dict[tuple[str, int], int] = {}  # who owns what (ConsumerGroup.currentPartitionEpoch)
        self.regular_expressions: dict[str, dict] = {}  # regex -> {topics, version, timestamp}

    def new_member(self, member_id: str) -> dict:
        return {"memberId": member_id, "memberEpoch": 0, "previousMemberEpoch": -1, "state": 0,
                "instanceId": None, "rackId": None, "clientId": "", "clientHost": "", "subscribedTopicNames": [],
                "subscribedTopicRegex": "", "rebalanceTimeoutMs": -1, "serverAssignor": None,
                "classicMemberMetadata": None, "assignedPartitions": {}, "partitionsPendingRevocation": {}}

    def current_assignment(self, member: dict, v: dict) -> dict:
        return {**member, "memberEpoch": v["memberEpoch"], "previousMemberEpoch": v["previousMemberEpoch"],
                "state": v["state"], "assignedPartitions": _assignment(v["assignedPartitions"]),
                "partitionsPendingRevocation": _assignment(v["partitionsPendingRevocation"])}

    def left(self, member: dict) -> dict:
        return {**member, "memberEpoch": LEAVE_GROUP_MEMBER_EPOCH, "previousMemberEpoch": LEAVE_GROUP_MEMBER_EPOCH,
                "assignedPartitions": {}, "partitionsPendingRevocation": {}}

    def update_member(self, member: dict) -> None:
        """ConsumerGroup.updateMember's partition epochs: the old assignment is released (where it still holds
        them), the new one taken; a partition still owned at this epoch or a later one is an error."""
        old = self.members.get(member["memberId"])
        self.members[member["memberId"]] = member
        if old is not None:
            self._release(old)
        epoch = member["memberEpoch"]
        for owned in (member["assignedPartitions"], member["partitionsPendingRevocation"]):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    prev = self.partition_epochs.get((topic_id, p))
                    if prev is not None and prev >= epoch:
                        raise ReplayError(self.group_id, f"Cannot set the epoch of {topic_id}-{p} to {epoch} because "
                                                         f"the partition is still owned at epoch {prev}")
                    self.partition_epochs[(topic_id, p)] = epoch

    def _release(self, member: dict) -> None:
        """removePartitionEpochs: a partition owned at another epoch is left to its owner (Kafka logs it)."""
        epoch = member["memberEpoch"]
        for owned in (member["assignedPartitions"], member["partitionsPendingRevocation"]):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    if self.partition_epochs.get((topic_id, p)) == epoch:
                        del self.partition_epochs[(topic_id, p)]

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)

    def replay_other(self, t: int, key: dict, v: dict | None) -> None:
        """ConsumerGroupRegularExpression: the topics a subscription's regex resolved to."""
        if v is None:
            self.regular_expressions.pop(key["regularExpression"], None)
        else:
            self.regular_expressions[key["regularExpression"]] = v

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
    type = protocol_type = "share"
    # (9, the partition metadata, is Kafka 4.0's alone: its early-access share groups wrote it)
    METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = \
        11, 9, 10, 12, 13, 14
    member_tombstone_errors = ("with invalid leave group epoch.", "but member exists in target assignment.")
    group_tombstone_epoch_error = "target assignment epoch in invalid."

    def new_member(self, member_id: str) -> dict:
        return {"memberId": member_id, "memberEpoch": 0, "previousMemberEpoch": -1, "state": 0, "rackId": None,
                "clientId": "", "clientHost": "", "subscribedTopicNames": [], "assignedPartitions": {}}

    def current_assignment(self, member: dict, v: dict) -> dict:
        return {**member, "memberEpoch": v["memberEpoch"], "previousMemberEpoch": v["previousMemberEpoch"],
                "state": v["state"], "assignedPartitions": _assignment(v["assignedPartitions"])}

    def left(self, member: dict) -> dict:
        return {**member, "memberEpoch": LEAVE_GROUP_MEMBER_EPOCH, "previousMemberEpoch": LEAVE_GROUP_MEMBER_EPOCH,
                "assignedPartitions": {}}

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


def _tasks(v: dict, suffix: str = "") -> dict[str, dict[str, list[int]]]:
    """{active, standby, warmup} -> subtopology -> partitions, from a value's *Tasks{suffix} fields."""
    return {kind: _assignment(v[f"{kind}Tasks{suffix}"], "subtopologyId") for kind in TASK_KINDS}


NO_TASKS = {kind: {} for kind in TASK_KINDS}


class StreamsGroup(ModernGroup):
    type = protocol_type = "streams"
    METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 17, 19, 20, 21, 22
    TOPOLOGY = 23
    member_tombstone_errors = ("but did not receive StreamsGroupCurrentMemberAssignmentValue tombstone.",
                               "but did not receive StreamsGroupTargetAssignmentMetadataValue tombstone.")
    group_tombstone_epoch_error = "did not receive StreamsGroupTargetAssignmentMetadataValue tombstone."
    tombstone_needs_no_target = False

    def __init__(self, group_id: str):
        super().__init__(group_id)
        self.validated_topology_epoch = -1
        self.stored_description_topology_epoch = -1
        self.failed_description_topology_epoch = -1
        self.last_assignment_configs: dict[str, str] = {}
        self.topology: dict | None = None  # the StreamsGroupTopologyValue

    def new_member(self, member_id: str) -> dict:
        """getOrCreateUninitializedMember: nothing known until its records say (no state: not reconciled)."""
        return {"memberId": member_id, "memberEpoch": None, "previousMemberEpoch": None, "state": None,
                "instanceId": None, "rackId": None, "clientId": None, "clientHost": None, "rebalanceTimeoutMs": None,
                "topologyEpoch": None, "processId": None, "userEndpoint": None, "clientTags": [],
                "assignedTasks": NO_TASKS, "tasksPendingRevocation": NO_TASKS}

    def current_assignment(self, member: dict, v: dict) -> dict:
        return {**member, "memberEpoch": v["memberEpoch"], "previousMemberEpoch": v["previousMemberEpoch"],
                "state": v["state"], "assignedTasks": _tasks(v), "tasksPendingRevocation": _tasks(v, "PendingRevocation")}

    def left(self, member: dict) -> dict:
        return {**member, "memberEpoch": LEAVE_GROUP_MEMBER_EPOCH, "previousMemberEpoch": LEAVE_GROUP_MEMBER_EPOCH,
                "assignedTasks": NO_TASKS, "tasksPendingRevocation": NO_TASKS}

    def target(self, v: dict) -> dict:
        return _tasks(v)

    def replay_metadata(self, v: dict) -> None:
        super().replay_metadata(v)
        self.validated_topology_epoch = v["validatedTopologyEpoch"]
        self.stored_description_topology_epoch = v["storedDescriptionTopologyEpoch"]
        self.failed_description_topology_epoch = v["failedDescriptionTopologyEpoch"]
        configs = v["lastAssignmentConfigs"]
        self.last_assignment_configs = {c["key"]: c["value"] for c in configs} if configs is not None else {}

    def replay_other(self, t: int, key: dict, v: dict | None) -> None:
        """StreamsGroupTopology."""
        self.topology = v

    @property
    def state(self) -> str:
        """StreamsGroup.maybeUpdateGroupState, computed from the replayed fields."""
        if not self.members:
            return "Empty"
        if self.topology is None or self.topology["epoch"] != self.validated_topology_epoch:
            return "NotReady"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():
            if not (m["state"] == STREAMS_STABLE and m["memberEpoch"] == self.assignment_epoch):
                return "Reconciling"
        return "Stable"


Group = ClassicGroup | ConsumerGroup | ShareGroup | StreamsGroup
# record type -> the kind of group it belongs to (0-2, offsets and classic groups, are the state's own)
KINDS: dict[int, type[ModernGroup]] = {
    **dict.fromkeys((3, 4, 5, 6, 7, 8, 16), ConsumerGroup),
    **dict.fromkeys((9, 10, 11, 12, 13, 14), ShareGroup),
    **dict.fromkeys((17, 19, 20, 21, 22, 23), StreamsGroup),
}
