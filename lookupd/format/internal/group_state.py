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
  (a "simple" group), which a consumer or streams group's record then replaces;
* group records (classic, consumer, share and streams: group_kinds) create, update and delete groups,
  as strictly as Kafka: a record Kafka's replay would refuse (a member tombstone before its
  assignment's, a partition owned at a later epoch, ...) raises ReplayError naming the group.

Committed offsets are kept by the bytes of their key's fields (group, topic, partition, the strings
as UTF-8, malformed bytes replaced as Java reads them): (record offset, value bytes), decoded when
first read; beside them, the simple groups (made by a commit: a name each). Where the C extension is
built they are in its CommitTable, and the C scan applies runs of plain commits and of DeleteGroups'
tombstones (offsets, then the group) to it itself; `apply_commits` does the rest with what it noted:
the keys with a tombstone (while transactions are open) and the groups removed. That gives the same
state as record by record (DictCommits is the table in Python): commits only create groups, a group
tombstone only removes one, and within such a run tombstones only remove pending offsets, which
nothing adds there.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Iterator, NamedTuple

from ...errors import INT64_MAX, INT64_MIN
from ...message import MessageError
from .. import _accel
from .group_kinds import KINDS, ClassicGroup, ConsumerGroup, Group, ReplayError, ShareGroup, StreamsGroup
from .groups import (GROUP_METADATA, OFFSET_COMMIT_TYPES, OFFSET_COMMIT_VALUE, RECORD_TYPES, decode_key, decode_value,
                     record_type)

NO_PRODUCER_ID = -1
SHARE_GROUP_STATE_PARTITION_METADATA = 15
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# Bytes of a group id or topic name in a key's fields (an int16-length string): one Kafka wrote fits, but its
# malformed UTF-8 bytes, each replaced by U+FFFD (three bytes) as Java reads them, may take it past that.
MAX_NAME_BYTES = 0x7FFF


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
    if len(g) > MAX_NAME_BYTES or len(t) > MAX_NAME_BYTES:
        raise MessageError(f"its {'group id' if len(g) > MAX_NAME_BYTES else 'topic name'} is "
                           f"{max(len(g), len(t))} bytes once its malformed UTF-8 is replaced, more than a key's "
                           f"int16-length string holds ({MAX_NAME_BYTES}), by which its offsets are kept")
    return _I16.pack(len(g)) + g + _I16.pack(len(t)) + t + _I32.pack(partition)


def _group_bytes(fields: bytes) -> bytes:
    return fields[2:2 + _I16.unpack_from(fields)[0]]


def _group_of(fields: bytes) -> str:
    return _group_bytes(fields).decode("utf-8", "replace")


class PartitionOffset(NamedTuple):
    """One partition of a group's offsets: the committed offset (None: none) and whether an open
    transaction holds a pending commit for it."""

    topic: str
    partition: int
    committed: OffsetAndMetadata | None
    pending_transaction: bool


class DictCommits:
    """Committed offsets by key fields: (record offset, value bytes), and the simple groups. The C
    CommitTable's reference, with its methods."""

    def __init__(self) -> None:
        self._d: dict[bytes, tuple[int, bytes]] = {}
        self._groups: dict[bytes, set[bytes]] = {}  # group name -> its keys
        self._simple: set[bytes] = set()  # names of the groups commits made

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

    def add_simple_group(self, name: bytes) -> None:
        self._simple.add(name)

    def discard_simple_group(self, name: bytes) -> None:
        self._simple.discard(name)

    def has_simple_group(self, name: bytes) -> bool:
        return name in self._simple

    def simple_groups(self) -> list[bytes]:
        return list(self._simple)

    def __len__(self) -> int:
        return len(self._d)


def commit_table():
    """The C table of committed offsets, or DictCommits without the extension or on a reference path."""
    if _accel.CommitTable is not None and not _accel.mode.python:
        return _accel.CommitTable()
    return DictCommits()


class Groups(Mapping):
    """The partition's groups by id: those its group records made, and the simple groups its commits made
    (kept as names alone, in the commit table, where the C scan makes them: a compacted log makes one a
    batch, and an object each would cost more than the replay of their commits). A name with a group
    record is that group, whatever the commits say."""

    def __init__(self, commits) -> None:
        self.recorded: dict[str, Group] = {}
        self.commits = commits  # a CommitTable or DictCommits: its simple groups

    def __getitem__(self, group_id: str) -> Group:
        g = self.recorded.get(group_id)
        if g is not None:
            return g
        if self.commits.has_simple_group(group_id.encode()):
            return ClassicGroup(group_id)
        raise KeyError(group_id)

    def __contains__(self, group_id: object) -> bool:
        return group_id in self.recorded or (isinstance(group_id, str) and
                                             self.commits.has_simple_group(group_id.encode()))

    def _ids(self) -> set[str]:
        return self.recorded.keys() | {name.decode() for name in self.commits.simple_groups()}

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._ids()))

    def __len__(self) -> int:
        return len(self._ids())

    def add_simple(self, group_id: str) -> None:
        """A commit made the group (an empty classic group with no protocol type)."""
        self.commits.add_simple_group(group_id.encode())

    def remove(self, group_id: str) -> None:
        """GroupMetadataManager.removeGroup."""
        self.recorded.pop(group_id, None)
        self.commits.discard_simple_group(group_id.encode())


class GroupCoordinatorState:
    """The groups, committed offsets and pending transactional offsets of one `__consumer_offsets`
    partition (a GroupCoordinatorShard after its load)."""

    def __init__(self) -> None:
        self.commits = commit_table()  # key fields -> (record offset, value bytes); a group's keys; simple groups
        self.groups = Groups(self.commits)
        self._decoded: dict[bytes, OffsetAndMetadata] = {}  # values read so far (checked by record offset)
        # producer id -> group -> key fields -> (record offset, value bytes) its COMMIT marker would commit
        self.pending: dict[int, dict[str, dict[bytes, tuple[int, bytes]]]] = {}
        self.open_transactions: dict[str, set[int]] = {}  # group -> producer ids with pending offsets
        self.share_state_partitions: dict[str, dict] = {}  # share group -> its ShareGroupStatePartitionMetadata
        self.generation = 0  # counts the changes replayed: an answer made at one generation holds until the next

    # -------------------------------------------------------------- replay

    def replay(self, offset: int, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """One data record (GroupCoordinatorShard.replay). MessageError for bytes that do not decode or an
        offset past Java's long (which the C table cannot keep either), ReplayError for a record Kafka's replay
        refuses."""
        self.generation += 1
        if not INT64_MIN <= offset <= INT64_MAX:  # (a base offset, which no CRC covers, damaged near the end)
            raise MessageError("its offset is beyond the int64 range of Kafka's offsets")
        t, k = decode_key(key)
        version, v = decode_value(t, value)
        if t in OFFSET_COMMIT_TYPES:
            self._offset_commit(offset, producer_id, k["group"], key_fields(k["group"], k["topic"], k["partition"]),
                                v, value)
        elif t == GROUP_METADATA:
            self._group_metadata(k["group"], v)
        elif t == SHARE_GROUP_STATE_PARTITION_METADATA:
            self._share_state_partitions(k["groupId"], v)
        else:
            self._modern(t, k, v)

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

    def apply_commits(self, tombstoned: list[bytes] | None, removed: list[bytes]) -> None:
        """What the C scan noted of a run of plain (no producer id) OffsetCommit records and group tombstones
        it applied to `commits`: the keys with a tombstone (None: not asked for, no transaction being open),
        and the groups removed (their names' bytes), which it removed as simple groups. Removing them from
        the recorded ones after the run is as good as at their place in it: none of its records reads or
        makes one."""
        self.generation += 1
        for name in removed:
            self.groups.recorded.pop(name.decode(), None)
        if tombstoned:
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
            self.groups.add_simple(group)
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
            self.groups.remove(group)
        else:
            self.groups.recorded[group] = ClassicGroup(group, v)

    def _persisted(self, cls: type, group_id: str, create: bool):
        """getOrMaybeCreatePersisted{Consumer,Share,Streams}Group: the group, made where `create` (a value)
        and none is there; None for a tombstone of a group that is not there (Kafka ignores it)."""
        g = self.groups.get(group_id)
        if g is None:
            if not create:
                return None
        elif isinstance(g, cls):
            return g
        elif cls in (ConsumerGroup, StreamsGroup) and isinstance(g, ClassicGroup) and g.simple:
            pass  # a simple group only holds offsets: the group of the record's kind takes its place
        else:
            raise ReplayError(group_id, f"Group {group_id} is not a {cls.type} group" +
                              ("." if cls is not ConsumerGroup else ""))
        g = self.groups.recorded[group_id] = cls(group_id)
        return g

    def _modern(self, t: int, key: dict, v: dict | None) -> None:
        """A record of a consumer, share or streams group, replayed by its group (group_kinds)."""
        g = self._persisted(KINDS[t], key["groupId"], v is not None)
        if g is not None and g.replay(t, key, v):
            self.groups.remove(g.group_id)

    def _share_state_partitions(self, group_id: str, v: dict | None) -> None:
        """ShareGroupStatePartitionMetadata: which share partitions are initialized, kept by group (a value
        makes the share group; a tombstone removes what was kept, group or not)."""
        if v is None:
            self.share_state_partitions.pop(group_id, None)
        else:
            self._persisted(ShareGroup, group_id, True)
            self.share_state_partitions[group_id] = v

    # -------------------------------------------------------------- answers

    def group_ids(self) -> list[str]:
        """Every group, sorted."""
        return list(self.groups)

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
        if t not in RECORD_TYPES:
            return None
        n = _I16.unpack_from(key, 2)[0]
        if n < 0 or 4 + n > len(key):
            return None
        return key[4:4 + n].decode("utf-8", "replace")
    except (MessageError, struct.error):
        return None
