"""Answers from the replayed coordinator state: consumer groups, their positions and lag, transactional
ids and hanging transactions. Plain dicts and lists, as `lookupd groups`/`transactions --json` print
them and the daemon sends them.

`positions(manager, group)` is the committed offsets of a group, for any part of lookupd that needs
to resume a consumer where it was (the Kafka listener's OffsetFetch among them).
"""

from __future__ import annotations

import weakref
from typing import Any

from ..errors import InvalidArgument, UnknownGroup, UnknownPartition, Unavailable
from ..format.internal.consumer_protocol import decode_assignment
from ..format.internal.group_kinds import (MEMBER_STATES, STREAMS_MEMBER_STATES, ClassicGroup, ModernGroup,
                                           StreamsGroup)
from ..format.internal.group_state import GroupCoordinatorState, OffsetAndMetadata
from ..format.internal.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from ..format.internal.transactions import OPEN_STATES
from .coordinators import Coordinators, GroupReplay
from .fileio import open_sizes
from .locallog import LISTING_CHANGES

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# transaction.max.timeout.ms's default: an open transaction with no entry in __transaction_state is
# judged against it.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000

_coordinators: "weakref.WeakKeyDictionary[Any, Coordinators]" = weakref.WeakKeyDictionary()


def coordinators_of(manager, partitions: int | None = None) -> Coordinators:
    """The Coordinators of a LogManager, made on first use and kept with it (so replays are incremental)."""
    c = _coordinators.get(manager)
    if c is None or (partitions is not None and c.partitions != partitions):
        c = _coordinators[manager] = Coordinators(manager, *(() if partitions is None else (partitions,)))
    return c


def positions(manager, group: str, partitions: int | None = None) -> dict[tuple[str, int], OffsetAndMetadata]:
    """The group's committed offsets by (topic, partition), as its coordinator would answer OffsetFetch
    (pending transactional commits left out). Empty when the group has none; UnknownPartition when its
    `__consumer_offsets` partition (of `partitions`, default 50) is not in the log dirs; CorruptDataError
    when a record of the group could not be replayed."""
    def read(r: GroupReplay) -> dict:
        _raise_group_faults(r, group)
        return dict(r.state.committed(group))
    return coordinators_of(manager, partitions).with_group(group, read)


def _raise_group_faults(r: GroupReplay, group: str) -> None:
    mine, _ = r.faults_for(group)
    if mine:
        raise mine[0].error


def _warnings(r) -> list[str]:
    _, general = r.faults_for(None)
    out = [str(f.error) for f in general]
    if r.fault_count > len(r.faults):
        out.append(f"{r.fault_count - len(r.faults)} more faults in {r.llog.dir} (not kept)")
    return out


# ------------------------------------------------------------------ groups


def _topic_name(g: ModernGroup, topic_id: str) -> str | None:
    return g.topics.get(topic_id)


def _modern_assignment(g: ModernGroup, assignment: dict[str, list[int]]) -> list[dict]:
    return [{"topic": _topic_name(g, t), "topic_id": t, "partitions": list(ps)} for t, ps in sorted(
        assignment.items(), key=lambda kv: (_topic_name(g, kv[0]) or "", kv[0]))]


def _members(g) -> list[dict]:
    if isinstance(g, ClassicGroup):
        out = []
        for m in (g.value or {}).get("members", ()):
            assigned = None
            if g.protocol_type == "consumer":
                a = decode_assignment(m["assignment"])
                if isinstance(a, dict):
                    assigned = [{"topic": tp["topic"], "partitions": sorted(tp["partitions"])}
                                for tp in a["assignedPartitions"]]
            out.append({"member_id": m["memberId"], "group_instance_id": m.get("groupInstanceId"),
                        "client_id": m["clientId"], "client_host": m["clientHost"],
                        "session_timeout_ms": m["sessionTimeout"], "rebalance_timeout_ms": m.get("rebalanceTimeout", -1),
                        "assignment": assigned})
        return out
    if isinstance(g, StreamsGroup):
        return [_streams_member(g.members[member_id]) for member_id in sorted(g.members)]
    out = []
    for member_id in sorted(g.members):
        m = g.members[member_id]
        entry = {"member_id": member_id, "instance_id": m.get("instanceId"), "rack_id": m.get("rackId"),
                 "client_id": m["clientId"], "client_host": m["clientHost"], "member_epoch": m["memberEpoch"],
                 "state": MEMBER_STATES.get(m["state"], str(m["state"])),
                 "subscribed_topics": list(m.get("subscribedTopicNames") or ()),
                 "assignment": _modern_assignment(g, m["assignedPartitions"])}
        if "partitionsPendingRevocation" in m:
            entry["pending_revocation"] = _modern_assignment(g, m["partitionsPendingRevocation"])
        out.append(entry)
    return out


def _streams_member(m: dict) -> dict:
    """A streams group's member: its process, topology epoch and tasks (subtopology -> partitions)."""
    state = m["state"]
    return {"member_id": m["memberId"], "instance_id": m["instanceId"], "rack_id": m["rackId"],
            "client_id": m["clientId"], "client_host": m["clientHost"], "process_id": m["processId"],
            "topology_epoch": m["topologyEpoch"], "member_epoch": m["memberEpoch"],
            "state": None if state is None else STREAMS_MEMBER_STATES.get(state, str(state)),
            "assignment": m["assignedTasks"], "pending_revocation": m["tasksPendingRevocation"]}


def describe_group(g, partition: int) -> dict:
    """One group as `lookupd groups` lists it."""
    out: dict[str, Any] = {"group": g.group_id, "type": g.type, "protocol_type": g.protocol_type, "state": g.state,
                           "coordinator_partition": partition}
    if isinstance(g, ClassicGroup):
        v = g.value or {}
        out.update(protocol=v.get("protocol"), generation=v.get("generation", 0), leader=v.get("leader"))
    else:
        out.update(group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch)
    if isinstance(g, StreamsGroup):
        out.update(topology_epoch=g.topology["epoch"] if g.topology else None,
                   validated_topology_epoch=g.validated_topology_epoch)
    out["members"] = _members(g)
    return out


def groups(coordinators: Coordinators) -> tuple[list[dict], list[str]]:
    """(every group of the `__consumer_offsets` partitions in the log dirs, sorted by id; warnings). A group
    with a record that could not be replayed is listed with `error` naming it, and no state."""
    out: list[dict] = []
    warnings: list[str] = []
    for p, r in coordinators.each(CONSUMER_OFFSETS):
        state: GroupCoordinatorState = r.state
        for gid in state.group_ids():
            mine, _ = r.faults_for(gid)
            if mine:
                out.append({"group": gid, "coordinator_partition": p, "error": str(mine[0].error)})
            else:
                out.append(describe_group(state.groups[gid], p))
        warnings += _warnings(r)
    out.sort(key=lambda g: g["group"])
    return out, warnings


OFFSET_COLUMNS = ("topic", "partition", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
                  "pending_transaction", "log_start_offset", "log_end_offset", "last_stable_offset", "lag",
                  "out_of_range")
# Groups whose committed columns are kept per replayed partition (recomputed when its state changes).
MAX_CACHED_GROUPS = 1024


def group_offsets(coordinators: Coordinators, group: str, isolation: str = "read_uncommitted") -> dict:
    """The group's position on each partition it committed for, with lag:

        {group, type, state, coordinator_partition, isolation, offsets: [{topic, partition, committed_offset,
         leader_epoch, metadata, commit_timestamp, pending_transaction, log_start_offset, log_end_offset,
         last_stable_offset, lag, out_of_range}], warnings}

    Lag is the log end offset (read_committed: the last stable offset) minus the committed offset. A
    commit below the log start has `out_of_range` "below_log_start" and the lag to the end (the records
    it would have read are gone); one past the log end has "above_log_end" and no lag. A partition not
    in the log dirs has no log offsets and no lag; one with only a pending transactional commit has no
    committed offset."""
    answer = group_offset_columns(coordinators, group, isolation)
    cols = answer["offsets"]
    return {**answer, "offsets": [dict(zip(OFFSET_COLUMNS, row)) for row in zip(*(cols[c] for c in OFFSET_COLUMNS))]}


def group_offset_columns(coordinators: Coordinators, group: str, isolation: str = "read_uncommitted") -> dict:
    """`group_offsets` with `offsets` as columns (one list per field, a partition per index): what the
    daemon sends. The committed side is kept until the group's partition replays more; an answer is kept
    with it, and given again (the same object: the daemon keeps its packed bytes by it) while the log
    dirs' listing, each partition's segments and each active segment's size stay the same, which costs
    an lseek a partition (`_unchanged`)."""
    if isolation not in ISOLATION_LEVELS:
        raise InvalidArgument(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r:.40}")

    def read(r: GroupReplay) -> tuple:
        state: GroupCoordinatorState = r.state
        kept = r.cache.get(group)
        if kept is not None and kept[0] == state.generation and kept[1] == r.fault_count:
            return kept[2]
        _raise_group_faults(r, group)
        if not state.has(group):
            raise UnknownGroup(f"group {group!r:.300} is not in {CONSUMER_OFFSETS}-{r.llog.partition} "
                               f"(its coordinator partition with {coordinators.partitions} partitions)")
        g = state.groups.get(group)
        head = {"group": group, "type": g.type if g else None, "state": g.state if g else "Dead",
                "coordinator_partition": r.llog.partition}
        offsets = state.partition_offsets(group)
        committed = {"topic": [o.topic for o in offsets], "partition": [o.partition for o in offsets],
                     "committed_offset": [o.committed.committed_offset if o.committed else None for o in offsets],
                     "leader_epoch": [o.committed.leader_epoch if o.committed else -1 for o in offsets],
                     "metadata": [o.committed.metadata if o.committed else None for o in offsets],
                     "commit_timestamp": [o.committed.commit_timestamp if o.committed else None for o in offsets],
                     "pending_transaction": [o.pending_transaction for o in offsets]}
        found = (head, committed, _warnings(r), {})  # (the last: where its partitions' logs are, see _log_offsets)
        if len(r.cache) >= MAX_CACHED_GROUPS:
            r.cache.pop(next(iter(r.cache)))
        r.cache[group] = (state.generation, r.fault_count, found)
        return found

    head, committed, warnings, kept = coordinators.with_group(group, read)
    manager = coordinators.manager
    made = kept.get(isolation)
    if made is not None and _unchanged(manager, made[1]):
        return made[0]
    starts, ends, stables, lags, out_of_ranges = [], [], [], [], []
    log_offsets, probe = _log_offsets(manager, committed, kept)
    for (topic, partition, offset), (start, leo) in zip(
            zip(committed["topic"], committed["partition"], committed["committed_offset"]), log_offsets):
        lso = lag = out_of_range = None
        if leo is not None:
            end = leo
            if isolation == "read_committed":
                end = lso = last_stable_offset(coordinators, topic, partition)
            if offset is not None:
                if offset > leo:
                    out_of_range = "above_log_end"
                else:
                    if offset < start:
                        out_of_range = "below_log_start"
                    lag = max(end - offset, 0)
        starts.append(start)
        ends.append(leo)
        stables.append(lso)
        lags.append(lag)
        out_of_ranges.append(out_of_range)
    columns = {**committed, "log_start_offset": starts, "log_end_offset": ends, "last_stable_offset": stables,
               "lag": lags, "out_of_range": out_of_ranges}
    answer = {**head, "isolation": isolation, "offsets": columns, "warnings": warnings}
    if probe is not None:
        kept[isolation] = (answer, probe)  # given again while `_unchanged(probe)`
    return answer


def _log_offsets(manager, committed: dict, kept: dict) -> tuple[list[tuple[int | None, int | None]], tuple | None]:
    """(log start, log end offset) of each of the group's partitions, (None, None) where it is not in the
    log dirs. Where each partition's log and active segment are is kept in `kept` (kept with the group's
    committed columns until the group changes) while the manager's listing and each partition's
    segments stay the same objects: then only each active segment's end is read. With the offsets, what
    `_unchanged` compares to tell whether they still hold: (listing, LISTING_CHANGES, the active segments'
    files, their sizes), all noted before the offsets are read; None where a partition could not be read."""
    changes = LISTING_CHANGES.count  # (before the listings are read: a change after it shows)
    listing = manager.listing
    if kept.get("listing") is not listing:
        kept["listing"] = listing
        kept["places"] = [None if llog is None else [llog, None, None, None] for llog in
                          (listing.get(tp) for tp in zip(committed["topic"], committed["partition"]))]
    places = kept["places"]
    failed = False
    for place in places:
        if place is not None and place[1] is not place[0].base_offsets:
            llog = place[0]
            try:
                start, _ = llog.offset_range()
                bases = llog.base_offsets
                place[1:] = bases, (llog.segment(bases[-1]) if bases else None), start
            except (Unavailable, OSError):
                place[1] = None
                failed = True
    files = [place[2].log.file for place in places if place is not None and place[2] is not None]
    probe = None if failed else (listing, changes, files, open_sizes(files))
    out = []
    for place in places:
        if place is None or place[1] is None:
            out.append((None, None))
            continue
        _, _, active, start = place
        try:
            out.append((start, active.read_next_offset() if active is not None else start))
        except (Unavailable, OSError):
            place[1] = None
            probe = None
            out.append((None, None))
    return out, probe


def _unchanged(manager, probe: tuple) -> bool:
    """Whether the group's partitions are as when an answer was made (`probe`, from `_log_offsets`): the
    same listing, no segment listing replaced anywhere (LISTING_CHANGES), every active segment the size it
    was (a file not open now counts as changed)."""
    listing, changes, files, sizes = probe
    return listing is manager.listing and changes == LISTING_CHANGES.count and open_sizes(files) == sizes


def last_stable_offset(coordinators: Coordinators, topic: str, partition: int) -> int:
    """A data partition's last stable offset, from its open transactions (scanned once, then followed)."""
    with coordinators.caught_up(coordinators.replay(topic, partition)) as r:
        return r.last_stable_offset()


# ------------------------------------------------------------------ transactions


def transactions(coordinators: Coordinators) -> tuple[list[dict], list[str]]:
    """(every transactional id of the `__transaction_state` partitions in the log dirs, sorted; warnings)."""
    out: list[dict] = []
    warnings: list[str] = []
    for p, r in coordinators.each(TRANSACTION_STATE):
        out += [{**t.as_json(), "coordinator_partition": p} for t in r.state.listing()]
        warnings += _warnings(r)
    out.sort(key=lambda t: t["transactional_id"])
    return out, warnings


def hanging_transactions(coordinators: Coordinators, now_ms: int,
                         max_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS) -> tuple[list[dict], list[str]]:
    """Transactions open in a data partition's log (a transactional batch with no marker yet) that hold its
    last stable offset back for no live reason: the transaction log has no id with that producer id
    ("missing"; when some `__transaction_state` partitions are not in the log dirs, only once the
    transaction is older than `max_timeout_ms`), shows its transaction as complete or no longer holding
    this partition ("complete"), or the transaction began longer ago than its timeout ("timed_out").
    (warnings as `transactions`.)"""
    ids, warnings = transactions(coordinators)
    # With every __transaction_state partition here, a producer id no transactional id has is surely
    # missing; with some absent, its id may live in one of those, so only its age can tell.
    present = {l.partition for l in coordinators.manager.logs() if l.topic == TRANSACTION_STATE}
    complete_log = present >= set(range(coordinators.partitions))
    by_producer: dict[int, dict] = {}
    for t in ids:
        by_producer.setdefault(t["producer_id"], t)
        if t["previous_producer_id"] >= 0:
            by_producer.setdefault(t["previous_producer_id"], t)
    out = []
    for llog in coordinators.manager.logs():
        if llog.topic.startswith("__"):
            continue
        try:
            scan = coordinators.replay(llog.topic, llog.partition)
        except UnknownPartition:
            continue
        with coordinators.caught_up(scan):
            open_ = list(scan.state.values())
            warnings += _warnings(scan)
        tp = f"{llog.topic}-{llog.partition}"
        for o in sorted(open_, key=lambda o: o.first_offset):
            t = by_producer.get(o.producer_id)
            if t is None:
                reason = "missing"
            elif t["state"] not in OPEN_STATES or tp not in t["partitions"] or t["producer_id"] != o.producer_id:
                reason = "complete"
            elif now_ms - o.start_timestamp > t["timeout_ms"]:
                reason = "timed_out"
            else:
                continue
            if reason == "missing" and not complete_log and now_ms - o.start_timestamp <= max_timeout_ms:
                continue
            out.append({"topic": llog.topic, "partition": llog.partition, "producer_id": o.producer_id,
                        "producer_epoch": o.producer_epoch, "first_offset": o.first_offset,
                        "last_offset": o.last_offset, "start_timestamp": o.start_timestamp,
                        "transactional_id": t["transactional_id"] if t else None,
                        "state": t["state"] if t else None, "reason": reason})
    return out, warnings

