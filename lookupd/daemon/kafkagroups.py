"""The Kafka listener's consumer groups: the classic-protocol coordinator (lookupd.kafka.groups) on the event
loop, and the groups' committed offsets, kept in memory and, with [kafka] state_dir, in files there.

Commits are never written into a log dir or the bucket: each group's are one JSON file,
`<state_dir>/kafka-groups/<group id, hex>.json`, replaced whole on every commit (written beside it, synced,
renamed over it), and read back at start. With `workers`, only worker 0 serves the Kafka listener
(lookupd.daemon.main), so a group has one coordinator and one view of its commits.

OffsetFetch answers a partition the listener has no commit of its own for with the group's position
replayed from `__consumer_offsets` in the log dirs (lookupd.log.positions), so a consumer group resumes
where it was on the cluster that wrote them; a commit made here wins over it.
"""

from __future__ import annotations

import json
import logging
import os
import time

import trio

from ..kafka import apis
from ..kafka import errors as E
from ..kafka.groups import INITIAL_REBALANCE_DELAY_S, Coordinator, Pending
from ..errors import CorruptDataError, UnknownPartition
from ..kafka.messages import (FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE, HEARTBEAT_REQUEST,
                              HEARTBEAT_RESPONSE, JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE, LEAVE_GROUP_REQUEST,
                              LEAVE_GROUP_RESPONSE, OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE,
                              OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE, SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE)
from ..log.positions import positions
from .acl import READ

log = logging.getLogger(__name__)

# How often sessions and rebalance deadlines are checked: a member is removed at most this late.
TICK_S = 0.1
# Kafka's offset.metadata.max.bytes: a commit's metadata string longer than this is refused.
MAX_METADATA_BYTES = 4096
# Committed partitions kept per group: a client cannot grow one group's file and memory without bound.
MAX_COMMITS_PER_GROUP = 100_000
GROUPS_DIR = "kafka-groups"
NO_OFFSET = -1
# Groups whose unreplayable commits were logged: each is said once, and a damaged log cannot grow the set.
MAX_LOGGED_FAULTS = 1024


class CommitStore:
    """group id -> {(topic, partition): (offset, leader epoch, metadata)}, and its files under `state_dir`."""

    def __init__(self, state_dir: str):
        self.dir = os.path.join(state_dir, GROUPS_DIR) if state_dir else ""
        self.groups: dict[str, dict[tuple[str, int], tuple[int, int, str | None]]] = {}
        if self.dir:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            self._load()
        else:
            log.info("kafka.state_dir is not set: consumer groups' commits are kept in memory until the daemon stops")

    def _path(self, group_id: str) -> str:
        return os.path.join(self.dir, group_id.encode().hex() + ".json")

    def _load(self) -> None:
        for name in os.listdir(self.dir):
            if not name.endswith(".json"):
                continue
            path = os.path.join(self.dir, name)
            try:
                group_id = bytes.fromhex(name[:-5]).decode()
                with open(path, encoding="utf-8") as f:
                    rows = json.load(f)
                self.groups[group_id] = {(t, int(p)): (int(o), int(e), m) for t, p, o, e, m in rows}
            except (ValueError, TypeError, OSError, UnicodeDecodeError) as err:
                log.warning("%s: not a consumer group's commits (%s); ignored", path, err)
        if self.groups:
            log.info("consumer groups' commits: %d groups read from %s", len(self.groups), self.dir)

    def get(self, group_id: str) -> dict:
        return self.groups.get(group_id, {})

    def put(self, group_id: str, commits: dict) -> dict:
        """The group's commits with `commits` added (the caller writes them with `save`)."""
        merged = dict(self.groups.get(group_id, {}))
        merged.update(commits)
        self.groups[group_id] = merged
        return merged

    def save(self, group_id: str, commits: dict) -> None:
        """Write the group's commits (in a worker thread: it syncs)."""
        if not self.dir:
            return
        rows = [[t, p, o, e, m] for (t, p), (o, e, m) in sorted(commits.items())]
        path = self._path(group_id)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(rows, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


class KafkaGroups:
    """Answers the group APIs for the Kafka listener's connections."""

    APIS = frozenset((apis.FIND_COORDINATOR, apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP,
                      apis.OFFSET_FETCH, apis.OFFSET_COMMIT))

    def __init__(self, broker, state_dir: str, offsets_topic_partitions: int = 50,
                 initial_rebalance_delay_s: float = INITIAL_REBALANCE_DELAY_S):
        self.broker = broker
        self.coordinator = Coordinator(initial_rebalance_delay_s)
        self.commits = CommitStore(state_dir)
        self.offsets_topic_partitions = offsets_topic_partitions  # where a group's replayed commits are
        self._writing: dict[str, trio.Lock] = {}
        self._warned: set[tuple[str, str]] = set()  # (group, fault) already logged

    async def run(self) -> None:
        """Expire sessions and end rebalances on time, for as long as the daemon serves."""
        while True:
            await trio.sleep(TICK_S)
            self.coordinator.tick(time.monotonic())

    async def answer(self, req, principal: str) -> bytes:
        k, v, body, at = req.api_key, req.api_version, req.body, req.body_at
        now = time.monotonic()
        c = self.coordinator
        if k == apis.FIND_COORDINATOR:
            return self._find_coordinator(FIND_COORDINATOR_REQUEST.decode(body, v, at), v)
        if k == apis.JOIN_GROUP:
            r = JOIN_GROUP_REQUEST.decode(body, v, at)
            return JOIN_GROUP_RESPONSE.encode(await _settled(c.join(r, v, req.client_id, now)), v)
        if k == apis.SYNC_GROUP:
            r = SYNC_GROUP_REQUEST.decode(body, v, at)
            return SYNC_GROUP_RESPONSE.encode(await _settled(c.sync(r, now)), v)
        if k == apis.HEARTBEAT:
            r = HEARTBEAT_REQUEST.decode(body, v, at)
            return HEARTBEAT_RESPONSE.encode({"error_code": c.heartbeat(r, now)}, v)
        if k == apis.LEAVE_GROUP:
            r = LEAVE_GROUP_REQUEST.decode(body, v, at)
            ids = [r["member_id"]] if v < 3 else [m["member_id"] for m in r["members"]]
            codes = c.leave(r["group_id"], ids, now)
            if v < 3:
                return LEAVE_GROUP_RESPONSE.encode({"error_code": codes[0]}, v)
            return LEAVE_GROUP_RESPONSE.encode({"error_code": E.NONE, "members": [
                {"member_id": m["member_id"], "group_instance_id": m["group_instance_id"], "error_code": code}
                for m, code in zip(r["members"], codes)]}, v)
        if k == apis.OFFSET_COMMIT:
            return await self._offset_commit(OFFSET_COMMIT_REQUEST.decode(body, v, at), v, principal)
        if k == apis.OFFSET_FETCH:
            return await self._offset_fetch(OFFSET_FETCH_REQUEST.decode(body, v, at), v, principal)
        raise AssertionError(f"not a group API: {k}")

    def _find_coordinator(self, r: dict, v: int) -> bytes:
        ep = self.broker.endpoint
        error = E.NONE if r["key_type"] == 0 else E.COORDINATOR_NOT_AVAILABLE  # groups only, no transactions
        found = {"node_id": ep.node_id if not error else -1, "host": ep.host if not error else "",
                 "port": ep.port if not error else -1, "error_code": error,
                 "error_message": None if not error else "this read-only listener coordinates consumer groups only"}
        if v < 4:
            return FIND_COORDINATOR_RESPONSE.encode(found, v)
        return FIND_COORDINATOR_RESPONSE.encode({"coordinators": [{"key": key, **found}
                                                                  for key in r["coordinator_keys"]]}, v)

    async def _offset_commit(self, r: dict, v: int, principal: str) -> bytes:
        group_id = r["group_id"]
        error = E.INVALID_GROUP_ID if not group_id else self.coordinator.validate_commit(
            group_id, r["generation_id_or_member_epoch"], r["member_id"], r["group_instance_id"])
        broker = self.broker
        answers, commits = [], {}
        for t in r["topics"]:
            topic, parts = t["name"], []
            allowed = broker.allowed(principal, topic, READ)
            for p in t["partitions"]:
                code = error
                if code == E.NONE:
                    if not allowed:
                        code = E.TOPIC_AUTHORIZATION_FAILED
                    elif p["committed_metadata"] is not None and \
                            len(p["committed_metadata"].encode()) > MAX_METADATA_BYTES:
                        code = 12  # OFFSET_METADATA_TOO_LARGE
                    elif not _served(broker, topic, p["partition_index"]):
                        code = E.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        commits[(topic, p["partition_index"])] = (p["committed_offset"], p["committed_leader_epoch"],
                                                                 p["committed_metadata"])
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            answers.append({"name": topic, "partitions": parts})
        if commits:
            if len(self.commits.get(group_id)) + len(commits) > MAX_COMMITS_PER_GROUP:
                for a in answers:
                    for p in a["partitions"]:
                        if p["error_code"] == E.NONE:
                            p["error_code"] = E.INVALID_COMMIT_OFFSET_SIZE
            else:
                merged = self.commits.put(group_id, commits)
                lock = self._writing.setdefault(group_id, trio.Lock())
                async with lock:  # one writer a group: the last commit's file is the one left
                    await trio.to_thread.run_sync(self.commits.save, group_id, merged)
        return OFFSET_COMMIT_RESPONSE.encode({"topics": answers}, v)

    async def _offset_fetch(self, r: dict, v: int, principal: str) -> bytes:
        if v < 8:
            topics = await self._fetched(r["group_id"], r["topics"], principal)
            return OFFSET_FETCH_RESPONSE.encode({"topics": topics, "error_code": E.NONE}, v)
        return OFFSET_FETCH_RESPONSE.encode({"groups": [
            {"group_id": g["group_id"], "topics": await self._fetched(g["group_id"], g["topics"], principal),
             "error_code": E.NONE} for g in r["groups"]]}, v)

    async def _fetched(self, group_id: str, topics: list | None, principal: str) -> list:
        """The committed offsets asked for (every one of the group's when `topics` is null): the listener's
        own, else the replayed ones; -1 where neither has one."""
        commits = self.commits.get(group_id)
        if topics is None or any((t["name"], p) not in commits for t in topics for p in t["partition_indexes"]):
            commits = {**await self._replayed(group_id), **commits}
        broker = self.broker
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for (t, p) in sorted(commits):
                by_topic.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()
                      if broker.allowed(principal, t, READ)]
        out = []
        for t in topics:
            allowed = broker.allowed(principal, t["name"], READ)
            parts = []
            for p in t["partition_indexes"]:
                offset, epoch, metadata = commits.get((t["name"], p), (NO_OFFSET, -1, "")) if allowed else \
                    (NO_OFFSET, -1, "")
                parts.append({"partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch,
                              "metadata": metadata, "error_code": E.NONE if allowed else E.TOPIC_AUTHORIZATION_FAILED})
            out.append({"name": t["name"], "partitions": parts})
        return out


    async def _replayed(self, group_id: str) -> dict[tuple[str, int], tuple[int, int, str | None]]:
        """The group's commits replayed from `__consumer_offsets` in the log dirs (a worker thread catches its
        partition up); none where that partition is not there. A record of the group that could not be
        replayed leaves it none too, logged once: the consumer's reset policy applies, as with no commit."""
        try:
            found = await trio.to_thread.run_sync(positions, self.broker.manager, group_id,
                                                  self.offsets_topic_partitions)
        except UnknownPartition:
            return {}
        except CorruptDataError as err:
            if (group_id, str(err)) not in self._warned and len(self._warned) < MAX_LOGGED_FAULTS:
                self._warned.add((group_id, str(err)))
                log.warning("group %r: its commits in the log dirs cannot be replayed, OffsetFetch answers none: %s",
                            group_id, err)
            return {}
        return {tp: (o.committed_offset, o.leader_epoch, o.metadata) for tp, o in found.items()}


def _served(broker, topic: str, partition: int) -> bool:
    try:
        broker.manager.get(topic, partition)
        return True
    except Exception:  # noqa: BLE001 - unknown or illegal: not served
        return False


async def _settled(answer: dict | Pending) -> dict:
    """The response, once the coordinator has one (a Pending waits for the rebalance or the leader)."""
    if not isinstance(answer, Pending):
        return answer
    if answer.response is None:
        done = trio.Event()
        answer.wake = done.set
        await done.wait()
    return answer.response
