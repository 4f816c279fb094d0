"""Consumer groups, classic protocol: Kafka's group coordinator for JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, with no I/O (the clock is passed in) and nothing of the network.

As Kafka's ClassicGroup and GroupMetadataManager run a group: states Empty, PreparingRebalance,
CompletingRebalance and Stable; a join (or a leave, a changed subscription, an expired session) starts a
rebalance; the rebalance completes once every member has rejoined or the rebalance timeout passed (members
that did not rejoin are removed), with the next generation, the protocol every member supports (by vote),
and a leader (the old one if it stayed); the leader's SyncGroup hands out the assignments and the group is
Stable. A JoinGroup v4+ without a member id gets MEMBER_ID_REQUIRED and an id to join with (KIP-394). A
new group waits INITIAL_REBALANCE_DELAY_S for more members before its first generation
(group.initial.rebalance.delay.ms). Members are dynamic: a group instance id is accepted but no static
membership is kept for it.

A request that must wait for the group (a JoinGroup until the rebalance completes, a follower's SyncGroup
until the leader's) gets a Pending; the coordinator fills its `response` and calls its `wake`.
"""

from __future__ import annotations

import uuid
from typing import Callable

from . import errors as E

EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", \
    "Stable"
# Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms (broker defaults).
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
# Kafka's group.initial.rebalance.delay.ms (3 s, `kafka.group_initial_rebalance_delay_ms`): consumers started
# together join one generation instead of one each, so none consumes partitions it is about to lose.
INITIAL_REBALANCE_DELAY_S = 3.0
# Bounds on what clients make the coordinator hold (Kafka's group.max.size defaults to unbounded; a group
# id, member id or metadata is client-chosen and kept in memory).
MAX_GROUPS = 10_000
MAX_MEMBERS_PER_GROUP = 1_000


class Pending:
    """A request waiting for its group: `response` once answered, then `wake()` (set by the listener)."""

    __slots__ = ("response", "wake")

    def __init__(self) -> None:
        self.response: dict | None = None
        self.wake: Callable[[], None] | None = None

    def answer(self, response: dict) -> None:
        if self.response is None:
            self.response = response
            if self.wake is not None:
                self.wake()


class Member:
    __slots__ = ("member_id", "instance_id", "client_id", "session_timeout_s", "rebalance_timeout_s",
                 "protocol_type", "protocols", "assignment", "deadline", "join", "sync")

    def __init__(self, member_id: str, req: dict, client_id: str, now: float):
        self.member_id = member_id
        self.instance_id = req.get("group_instance_id")
        self.client_id = client_id
        self.assignment = b""
        self.join: Pending | None = None  # awaiting the JoinGroup response
        self.sync: Pending | None = None  # awaiting the SyncGroup response
        self.update(req, now)

    def update(self, req: dict, now: float) -> None:
        self.session_timeout_s = req["session_timeout_ms"] / 1000
        rebalance = req.get("rebalance_timeout_ms", -1)
        self.rebalance_timeout_s = (rebalance if rebalance > 0 else req["session_timeout_ms"]) / 1000
        self.protocol_type = req["protocol_type"]
        self.protocols = [(p["name"], p["metadata"]) for p in req["protocols"]]
        self.deadline = now + self.session_timeout_s

    def metadata(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


class Group:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.pending: dict[str, float] = {}  # member ids handed out by MEMBER_ID_REQUIRED -> when they expire
        self.deadline = 0.0  # when the current rebalance (or the wait for the leader's sync) ends
        self.initial_delay = False  # the first rebalance of an empty group: wait for more members
        self.delay_started = 0.0
        self.new_member_added = False

    def candidates(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[dict]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {p["name"] for p in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidates())

    def select_protocol(self) -> str:
        candidates = self.candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda n: votes[n])

    def max_rebalance_timeout(self) -> float:
        return max((m.rebalance_timeout_s for m in self.members.values()), default=0.0)


class Coordinator:
    """Every classic group this listener coordinates (it coordinates them all)."""

    def __init__(self, initial_delay_s: float = INITIAL_REBALANCE_DELAY_S):
        self.groups: dict[str, Group] = {}
        self.initial_delay_s = initial_delay_s

    # ------------------------------------------------------------------ JoinGroup

    def join(self, req: dict, version: int, client_id: str | None, now: float) -> dict | Pending:
        group_id, member_id = req["group_id"], req["member_id"]
        if not group_id:
            return _join_error(E.INVALID_GROUP_ID, member_id)
        if not MIN_SESSION_TIMEOUT_MS <= req["session_timeout_ms"] <= MAX_SESSION_TIMEOUT_MS:
            return _join_error(E.INVALID_SESSION_TIMEOUT, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return _join_error(E.UNKNOWN_MEMBER_ID, member_id)
            if len(self.groups) >= MAX_GROUPS and not self._forget_empty():
                return _join_error(E.COORDINATOR_NOT_AVAILABLE, member_id)
            group = self.groups[group_id] = Group(group_id)
        if not group.supports(req["protocol_type"], req["protocols"]):
            return _join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            if len(group.members) + len(group.pending) >= MAX_MEMBERS_PER_GROUP:
                return _join_error(E.GROUP_MAX_SIZE_REACHED, member_id)
            new_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
            if version >= 4 and req.get("group_instance_id") is None:
                group.pending[new_id] = now + req["session_timeout_ms"] / 1000
                return _join_error(E.MEMBER_ID_REQUIRED, new_id)
            return self._add_and_rebalance(group, new_id, req, client_id, now)
        if member_id in group.pending:
            del group.pending[member_id]
            return self._add_and_rebalance(group, member_id, req, client_id, now)
        member = group.members.get(member_id)
        if member is None or group.state == EMPTY:
            return _join_error(E.UNKNOWN_MEMBER_ID, member_id)
        same = member.protocol_type == req["protocol_type"] and \
            member.protocols == [(p["name"], p["metadata"]) for p in req["protocols"]]
        if group.state == PREPARING_REBALANCE:
            member.update(req, now)
            return self._await_join(group, member, now)
        if group.state == COMPLETING_REBALANCE and same:
            member.update(req, now)
            return self._join_response(group, member)  # the answer it missed, again
        if group.state == STABLE and same and member_id != group.leader:
            member.update(req, now)
            return self._join_response(group, member)
        member.update(req, now)
        self._prepare_rebalance(group, now)
        return self._await_join(group, member, now)

    def _add_and_rebalance(self, group: Group, member_id: str, req: dict, client_id: str | None,
                           now: float) -> Pending:
        member = Member(member_id, req, client_id or "", now)
        if not group.members:
            group.protocol_type = member.protocol_type
        group.members[member_id] = member
        if group.state == PREPARING_REBALANCE and group.initial_delay:
            group.new_member_added = True  # the initial delay is extended for it (InitialDelayedJoin)
        if group.state in (EMPTY, STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        return self._await_join(group, member, now)

    def _await_join(self, group: Group, member: Member, now: float) -> Pending:
        if member.join is not None:  # a duplicate join from the same member: the older one loses
            member.join.answer(_join_error(E.UNKNOWN_MEMBER_ID, member.member_id))
        member.join = pending = Pending()
        self._try_complete_join(group, now)  # the last member in completes the join: member.join is None again
        return pending

    def _prepare_rebalance(self, group: Group, now: float) -> None:
        if group.state == COMPLETING_REBALANCE:  # syncs of the generation being replaced
            for m in group.members.values():
                if m.sync is not None:
                    m.sync.answer(_sync(E.REBALANCE_IN_PROGRESS))
                    m.sync = None
        group.initial_delay = group.state == EMPTY
        group.delay_started = now
        delay = min(self.initial_delay_s, group.max_rebalance_timeout()) if group.initial_delay else \
            group.max_rebalance_timeout()
        group.deadline = now + delay
        group.state = PREPARING_REBALANCE

    def _try_complete_join(self, group: Group, now: float) -> None:
        if group.state != PREPARING_REBALANCE:
            return
        if group.initial_delay:
            if now < group.deadline:
                return
            left = group.delay_started + group.max_rebalance_timeout() - now
            if group.new_member_added and left > 0:
                # Kafka's InitialDelayedJoin: members kept arriving; wait another delay (within the rebalance timeout)
                group.new_member_added = False
                group.deadline = now + min(self.initial_delay_s, left)
                return
        else:
            everyone = all(m.join is not None for m in group.members.values()) and not group.pending
            if not everyone and now < group.deadline:
                return
        for m in [m for m in group.members.values() if m.join is None]:  # did not rejoin in time
            self._remove(group, m)
        group.initial_delay = group.new_member_added = False
        group.generation += 1
        if not group.members:
            group.state, group.protocol_name, group.leader, group.protocol_type = EMPTY, None, None, None
            return
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING_REBALANCE
        group.deadline = now + group.max_rebalance_timeout()
        for m in group.members.values():
            m.assignment = b""
            m.deadline = now + m.session_timeout_s
            pending, m.join = m.join, None
            pending.answer(self._join_response(group, m))

    def _join_response(self, group: Group, member: Member) -> dict:
        leader = member.member_id == group.leader
        members = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                    "metadata": m.metadata(group.protocol_name)} for m in group.members.values()] if leader else []
        return {"error_code": E.NONE, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "leader": group.leader, "member_id": member.member_id,
                "members": members}

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, req: dict, now: float) -> dict | Pending:
        group = self.groups.get(req["group_id"])
        member = group.members.get(req["member_id"]) if group is not None else None
        if member is None:
            return _sync(E.UNKNOWN_MEMBER_ID)
        if req["generation_id"] != group.generation:
            return _sync(E.ILLEGAL_GENERATION)
        if (req.get("protocol_type") is not None and req["protocol_type"] != group.protocol_type) or \
                (req.get("protocol_name") is not None and req["protocol_name"] != group.protocol_name):
            return _sync(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.state == PREPARING_REBALANCE:
            return _sync(E.REBALANCE_IN_PROGRESS)
        member.deadline = now + member.session_timeout_s
        if group.state == STABLE:
            return self._sync_response(group, member)
        if member.sync is not None:
            member.sync.answer(_sync(E.UNKNOWN_MEMBER_ID))
        member.sync = pending = Pending()
        if member.member_id == group.leader:
            given = {a["member_id"]: a["assignment"] for a in req["assignments"]}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.state = STABLE
            for m in group.members.values():
                if m.sync is not None:
                    waiting, m.sync = m.sync, None
                    waiting.answer(self._sync_response(group, m))
        return pending

    @staticmethod
    def _sync_response(group: Group, member: Member) -> dict:
        return {"error_code": E.NONE, "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "assignment": member.assignment}

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(self, req: dict, now: float) -> int:
        group = self.groups.get(req["group_id"])
        member = group.members.get(req["member_id"]) if group is not None else None
        if member is None or group.state == EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if req["generation_id"] != group.generation:
            return E.ILLEGAL_GENERATION
        member.deadline = now + member.session_timeout_s
        return E.REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else E.NONE

    def leave(self, group_id: str, member_ids: list[str], now: float) -> list[int]:
        """Each member's error code; the group rebalances without those that left."""
        group = self.groups.get(group_id)
        out = []
        left = False
        for member_id in member_ids:
            if group is None:
                out.append(E.UNKNOWN_MEMBER_ID)
            elif member_id in group.pending:
                del group.pending[member_id]
                out.append(E.NONE)
            elif member_id in group.members:
                self._remove(group, group.members[member_id])
                out.append(E.NONE)
                left = True
            else:
                out.append(E.UNKNOWN_MEMBER_ID)
        if left:
            self._after_removal(group, now)
        return out

    def _remove(self, group: Group, member: Member) -> None:
        del group.members[member.member_id]
        for pending in (member.join, member.sync):
            if pending is not None:
                pending.answer(_join_error(E.UNKNOWN_MEMBER_ID, member.member_id) if pending is member.join
                               else _sync(E.UNKNOWN_MEMBER_ID))
        member.join = member.sync = None

    def _after_removal(self, group: Group, now: float) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE):
            if group.members:
                self._prepare_rebalance(group, now)
            else:
                group.generation += 1
                group.state, group.protocol_name, group.leader, group.protocol_type = EMPTY, None, None, None
        self._try_complete_join(group, now)

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> None:
        """Expire sessions and pending member ids, and end rebalances whose time is up."""
        for group in list(self.groups.values()):
            for member_id, until in list(group.pending.items()):
                if until <= now:
                    del group.pending[member_id]
            expired = [m for m in group.members.values() if m.join is None and m.deadline <= now]
            for m in expired:
                self._remove(group, m)
            if expired:
                self._after_removal(group, now)
            if group.state == COMPLETING_REBALANCE and group.deadline <= now:
                self._prepare_rebalance(group, now)  # the leader never sent its assignments
            self._try_complete_join(group, now)

    def _forget_empty(self) -> bool:
        """Drop the empty groups' state (their commits are the commit store's); whether any was dropped."""
        empty = [g for g, group in self.groups.items() if group.state == EMPTY and not group.pending]
        for g in empty:
            del self.groups[g]
        return bool(empty)

    # ------------------------------------------------------------------ OffsetCommit's check

    def validate_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        """ClassicGroup.validateOffsetCommit: NONE when the commit may be stored."""
        group = self.groups.get(group_id)
        if group is None or group.state == EMPTY:
            if generation < 0:
                return E.NONE  # a consumer without group management (assign), or the admin client
            return E.UNKNOWN_MEMBER_ID if group is None or member_id else E.ILLEGAL_GENERATION
        if generation >= 0 or member_id or instance_id is not None:
            if member_id not in group.members:
                return E.UNKNOWN_MEMBER_ID
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        else:
            return E.UNKNOWN_MEMBER_ID
        if group.state == COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE


def _join_error(code: int, member_id: str) -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "member_id": member_id, "members": []}


def _sync(code: int) -> dict:
    return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}
