"""The Kafka listener's classic group coordinator (lookupd.kafka.groups) driven directly, with its clock in
the test's hands: the orders of joins and syncs that real clients only sometimes produce."""

from __future__ import annotations

import pytest

from lookupd.daemon.kafkasettings import KafkaSettings
from lookupd.errors import InvalidArgument
from lookupd.kafka import errors as E
from lookupd.kafka.groups import COMPLETING_REBALANCE, STABLE, Coordinator, Pending


def _join(member_id: str = "", session_ms: int = 10_000) -> dict:
    return {"group_id": "g", "member_id": member_id, "group_instance_id": None, "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": 30_000, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}]}


def _sync(member_id: str, generation: int, assignments: list | None = None) -> dict:
    return {"group_id": "g", "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range", "assignments": assignments or []}


def _member_id(c: Coordinator, now: float) -> str:
    """A v4+ member's first join: MEMBER_ID_REQUIRED and the id to join with."""
    answer = c.join(_join(), 5, "client", now)
    assert answer["error_code"] == E.MEMBER_ID_REQUIRED
    return answer["member_id"]


def _stable_group_of_two(c: Coordinator) -> tuple[str, str, int]:
    a, b = _member_id(c, 0.0), _member_id(c, 0.0)
    ja, jb = c.join(_join(a), 5, "client", 0.0), c.join(_join(b), 5, "client", 0.0)
    for at in (1.1, 2.2, 3.3):  # the new group's initial delay, extended once for the second member
        c.tick(at * c.initial_delay_s)
    assert isinstance(ja, Pending) and isinstance(jb, Pending) and ja.response and jb.response
    generation = ja.response["generation_id"]
    leader = ja.response["leader"]
    follower = b if leader == a else a
    pending = c.sync(_sync(follower, generation), 4.0)
    c.sync(_sync(leader, generation, [{"member_id": a, "assignment": b"A"}, {"member_id": b, "assignment": b"B"}]),
           4.0)
    assert isinstance(pending, Pending) and pending.response["error_code"] == E.NONE
    assert c.groups["g"].state == STABLE
    return leader, follower, generation


def test_the_join_that_completes_a_rebalance_gets_its_own_answer():
    """A rebalance of a stable group: the leader rejoins first and waits; the follower's rejoin is the last
    one the group waits for, so the join completes within that call and the follower's answer must be
    its own, at once (it came back as nothing, and the connection failed with an AttributeError)."""
    c = Coordinator()
    leader, follower, generation = _stable_group_of_two(c)
    first = c.join(_join(leader) | {"protocols": [{"name": "range", "metadata": b"changed"}]}, 5, "client", 5.0)
    assert isinstance(first, Pending) and first.response is None  # a changed subscription: a rebalance
    last = c.join(_join(follower), 5, "client", 5.1)
    answer = last.response if isinstance(last, Pending) else last
    assert answer is not None and answer["error_code"] == E.NONE, last
    assert answer["generation_id"] == generation + 1 and answer["member_id"] == follower
    assert first.response["generation_id"] == generation + 1
    assert c.groups["g"].state == COMPLETING_REBALANCE


def test_the_initial_rebalance_delay_is_kafkas_and_bounded():
    assert KafkaSettings().group_initial_rebalance_delay_ms == 3000
    KafkaSettings.from_table({"group_initial_rebalance_delay_ms": 0}, None).check()
    for bad in (-1, 300_001):
        with pytest.raises(InvalidArgument, match="group_initial_rebalance_delay_ms must be 0-300000"):
            KafkaSettings.from_table({"group_initial_rebalance_delay_ms": bad}, None).check()
