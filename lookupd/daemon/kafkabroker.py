"""What the Kafka listener answers, from the LogManager: a read-only broker that leads every partition.

Each method takes a decoded request and the connection's principal and returns the response body
(lookupd.kafka encodes it); none holds a socket. Metadata, ListOffsets and Fetch read the log dirs (and
the bucket) through the same LogManager as the msgpack methods, so they may block: the connection runs
them in a worker thread, or on the event loop in non-blocking mode where everything is in memory
(lookupd.log.fileio), as the msgpack service does.

Kafka's rules followed here:
* Metadata names this listener as the only broker, the controller, and the leader and only replica of every
  partition; topic ids from `partition.metadata`, leader epochs from `leader-epoch-checkpoint` (else -1).
* The high watermark is the log end offset (everything in the files), the last stable offset the first
  offset of the earliest open transaction (lookupd.log.stable).
* Fetch reads as ReplicaManager.readFromLog and LogSegment.read do: partitions in request order, each at
  most min(partition_max_bytes, what is left of max_bytes), the first partition with data at least its
  first batch whole (KIP-74); bytes as stored, from one segment, possibly ending mid-batch; up to the last
  stable offset under read_committed, with the aborted transactions of the `.txnindex`es.
* ListOffsets: -1 latest (the last stable offset under read_committed), -2 earliest, -3 max timestamp,
  KIP-1005's -4 and -5, and by timestamp the msgpack `offset_for_timestamp`'s answer, across both tiers;
  an answer at or past what the isolation level may read is "none" (-1), as Partition.fetchOffsetForTimestamp.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import NamedTuple

from ..errors import CorruptDataError, LookupdError, OffsetOutOfRange, Unavailable, UnknownPartition
from ..kafka import errors as E
from ..kafka import fetch as F
from ..kafka import listoffsets as LO
from ..kafka.messages import METADATA_RESPONSE, PRODUCE_RESPONSE
from ..log.fileio import WouldBlock, mode as nonblocking_mode
from ..log.locallog import SegmentList
from ..log.segment import LOCATE_BATCH, TIER_LOCAL
from ..format.names import LEADER_EPOCH_CHECKPOINT
from ..log.tiered.brokerfiles import read_leader_epoch_checkpoint, read_topic_id, uuid_bytes
from ..log.stable import StableOffset
from .acl import DESCRIBE, READ, Acl
from .service import INLINE_READ_MAX_BYTES

log = logging.getLogger(__name__)

# Kafka's AclOperation codes, for Metadata's topic_authorized_operations bit field.
ACL_OPERATION_BITS = {READ: 1 << 3, DESCRIBE: 1 << 8}
NO_AUTHORIZED_OPERATIONS = -2147483648
READ_ONLY_MESSAGE = "lookupd's Kafka listener is read-only: it serves a broker's log dirs and tiered bucket, and " \
                    "never writes; produce to the cluster itself"


class Endpoint(NamedTuple):
    node_id: int
    host: str
    port: int


class PartitionRead(NamedTuple):
    """What one partition's answer was read from: its log and segment listing, the offsets the answer gives,
    and the segment bytes [position, end) it serves (segment None where it serves none from a local file)."""

    log: object
    bases: list  # the listing, as the log held it (a new list whenever segments come or go)
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    segment: object | None = None
    position: int = 0
    end: int = 0


class FetchPlan(NamedTuple):
    """One Fetch's answer: topics as fetch.encode_response takes them, the record bytes in it, whether
    any partition has an error (an error answers at once, as Kafka's DelayedFetch completes on one), and
    what each partition was read from, in request order (None where it was not read)."""

    topics: list
    total_bytes: int
    has_error: bool
    reads: list


class KafkaBroker:
    """The broker's answers over one LogManager; thread-safe (per-partition state is locked)."""

    def __init__(self, manager, acl: Acl | None, endpoint: Endpoint, cluster_id: str):
        self.manager = manager
        self.acl = acl
        self.endpoint = endpoint
        self.cluster_id = cluster_id
        self._stable: dict[tuple[str, int], StableOffset] = {}
        self._stable_lock = threading.Lock()
        self._ids: dict[str, tuple[object, bytes]] = {}  # topic -> (its partition 0's log, topic id)
        # (the LogManager listing it was made from, topic id -> topic): made again once the listing is another
        self._by_id: tuple[object, dict[bytes, str]] = (None, {})
        self._epochs: dict[str, tuple[int, int]] = {}  # partition dir -> (checkpoint mtime, leader epoch)

    # ------------------------------------------------------------------ helpers

    def allowed(self, principal: str, topic: str, operation: str) -> bool:
        return self.acl is None or self.acl.allowed(principal, topic, operation)

    def _denied(self, principal: str, topic: str) -> None:
        if self.acl is not None:
            self.acl.denials[principal] = self.acl.denials.get(principal, 0) + 1

    def topics(self) -> dict[str, list]:
        """topic -> its partitions' logs, in partition order."""
        out: dict[str, list] = {}
        for llog in self.manager.logs():
            out.setdefault(llog.topic, []).append(llog)
        return out

    def topic_id(self, topic: str, logs: list) -> bytes:
        """The topic's id from its first partition's `partition.metadata` (zeros without one)."""
        first = logs[0]
        kept = self._ids.get(topic)
        if kept is not None and kept[0] is first:
            return kept[1]
        raw = bytes(16)
        directory = first.local_dir
        if directory is not None and os.path.isdir(directory):
            try:
                text = read_topic_id(directory)
                raw = uuid_bytes(text) if text else raw
            except (CorruptDataError, ValueError, OSError) as err:
                log.warning("%s: %s; naming the topic with no id", topic, err)
        self._ids[topic] = (first, raw)
        return raw

    def topic_by_id(self, topic_id: bytes) -> str | None:
        """The topic with this id (the first by name where several have it), None if none: from a map made once
        per listing of the log dirs, not a pass over every topic (each Fetch and check of a consumer on a version
        naming topics by id asks)."""
        listing, kept = self.manager.listing, self._by_id
        if kept[0] is not listing:
            by_id: dict[bytes, str] = {}
            for topic, logs in self.topics().items():  # in topic order
                by_id.setdefault(self.topic_id(topic, logs), topic)
            kept = self._by_id = (listing, by_id)
        return kept[1].get(topic_id)

    def leader_epoch(self, llog) -> int:
        """The partition's latest leader epoch (`leader-epoch-checkpoint`'s last entry), -1 without one."""
        directory = llog.local_dir
        if directory is None:
            return -1
        path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            return -1
        kept = self._epochs.get(directory)
        if kept is not None and kept[0] == mtime:
            return kept[1]
        entries = read_leader_epoch_checkpoint(directory)
        epoch = entries[-1][0] if entries else -1
        self._epochs[directory] = (mtime, epoch)
        return epoch

    def stable(self, llog) -> StableOffset:
        key = (llog.topic, llog.partition)
        st = self._stable.get(key)
        if st is None or st.log is not llog:
            with self._stable_lock:
                st = self._stable.get(key)
                if st is None or st.log is not llog:
                    st = self._stable[key] = StableOffset(llog)
        return st

    # ------------------------------------------------------------------ Metadata

    def metadata(self, req: dict, version: int, principal: str) -> bytes:
        topics = self.topics()
        wanted = req["topics"]
        if wanted is None or (version == 0 and not wanted):
            names = [t for t in sorted(topics) if self.allowed(principal, t, DESCRIBE)]
            explicit = False
        else:
            names, explicit = [], True
            for t in wanted:
                name = t["name"]
                if name is None and t["topic_id"] != bytes(16):
                    name = self.topic_by_id(t["topic_id"])
                names.append(name)
        out = []
        for name in names:
            logs = topics.get(name) if name is not None else None
            entry = {"name": name, "is_internal": False, "partitions": [],
                     "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS}
            if explicit and name is not None and not self.allowed(principal, name, DESCRIBE):
                self._denied(principal, name)
                entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
            elif logs is None:
                entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                entry["error_code"] = E.NONE
                entry["topic_id"] = self.topic_id(name, logs)
                node = self.endpoint.node_id
                entry["partitions"] = [{"error_code": E.NONE, "partition_index": llog.partition, "leader_id": node,
                                        "leader_epoch": self.leader_epoch(llog), "replica_nodes": [node],
                                        "isr_nodes": [node], "offline_replicas": []} for llog in logs]
                if req.get("include_topic_authorized_operations"):
                    entry["topic_authorized_operations"] = sum(
                        bit for op, bit in ACL_OPERATION_BITS.items() if self.allowed(principal, name, op))
            out.append(entry)
        ep = self.endpoint
        return METADATA_RESPONSE.encode({
            "brokers": [{"node_id": ep.node_id, "host": ep.host, "port": ep.port, "rack": None}],
            "cluster_id": self.cluster_id, "controller_id": ep.node_id, "topics": out}, version)

    # ------------------------------------------------------------------ ListOffsets

    def list_offsets(self, req: LO.ListOffsetsRequest, version: int, principal: str) -> bytes:
        committed = req.isolation_level == F.READ_COMMITTED
        answers = []
        for topic, targets in req.topics:
            if not self.allowed(principal, topic, DESCRIBE):
                self._denied(principal, topic)
                answers.append((topic, [LO.Answer(t.partition, E.TOPIC_AUTHORIZATION_FAILED) for t in targets]))
                continue
            answers.append((topic, [self._list_offset(topic, t, committed) for t in targets]))
        return LO.encode_response(version, answers)

    def _list_offset(self, topic: str, t: LO.Target, committed: bool) -> LO.Answer:
        try:
            llog = self.manager.get(topic, t.partition)
            ts = t.timestamp
            if ts == -1:  # LATEST: the high watermark, or the last stable offset under read_committed
                end = llog.log_end_offset
                return LO.Answer(t.partition, E.NONE, -1, self.stable(llog).at_end(end) if committed else end,
                                 self.leader_epoch(llog))
            found = llog.offset_for_timestamp(ts)
            if committed and found is not None and found.offset >= 0 and ts not in (-2, -4):
                # an answer at or past what read_committed may read is none (read_uncommitted may read to the
                # log end, past every record found)
                if found.offset >= self.stable(llog).at_end(llog.log_end_offset):
                    found = None
            if found is None or found.offset < 0:
                return LO.Answer(t.partition, E.NONE, -1, -1, -1)
            epoch = found.leader_epoch if found.leader_epoch is not None else -1
            return LO.Answer(t.partition, E.NONE, found.timestamp, found.offset, epoch)
        except (UnknownPartition, LookupdError) as err:
            return LO.Answer(t.partition, _error_code(err))
        except OSError as err:
            log.warning("ListOffsets %s-%d: %s", topic, t.partition, err)
            return LO.Answer(t.partition, E.KAFKA_STORAGE_ERROR)

    # ------------------------------------------------------------------ Fetch

    def fetch(self, req: F.FetchRequest, version: int, principal: str, *, regions: bool,
              max_bytes_cap: int) -> FetchPlan:
        """Read what the request asks for (see the module's rules). `regions`: local records as file Regions
        (for sendfile) rather than bytes; `max_bytes_cap`: the daemon's bound on one response's records."""
        committed = req.isolation_level == F.READ_COMMITTED
        limit = max(0, min(req.max_bytes, max_bytes_cap))
        min_one = True  # KIP-74: the first partition with data gets its first batch whole
        total, has_error, topics, reads = 0, False, [], []
        for ft in req.topics:
            name = ft.topic
            if version >= F.TOPIC_IDS:
                name = self.topic_by_id(ft.topic_id)
            parts = []
            for fp in ft.partitions:
                if name is None:
                    parts.append(F.PartitionData(fp.partition, E.UNKNOWN_TOPIC_ID))
                    has_error = True
                    reads.append(None)
                    continue
                if not self.allowed(principal, name, READ):
                    self._denied(principal, name)
                    parts.append(F.PartitionData(fp.partition, E.TOPIC_AUTHORIZATION_FAILED))
                    has_error = True
                    reads.append(None)
                    continue
                pd, read = self._read_partition(name, fp, min(max(fp.partition_max_bytes, 0), limit), min_one,
                                                committed, regions)
                reads.append(read)
                size = len(pd.records)
                if size:
                    min_one = False
                limit = max(0, limit - size)
                total += size
                has_error |= pd.error_code != E.NONE
                parts.append(pd)
            topics.append((ft.topic, ft.topic_id, parts))
        return FetchPlan(topics, total, has_error, reads)

    def next_fetch(self, req: F.FetchRequest, plan: FetchPlan) -> F.FetchRequest | None:
        """The Fetch a consumer sends next once it has taken all of `plan` (the answer to `req`): the same, each
        partition that was served records from a local segment fetching from one past the last batch whole in
        them. None when no partition moved on, or where one moves to cannot be told cheaply."""
        reads = iter(plan.reads)
        moved, topics = False, []
        for ft in req.topics:
            parts = []
            for fp in ft.partitions:
                read = next(reads)
                if read is not None and read.segment is not None:
                    offset = read.segment.next_fetch_offset(read.position, read.end)
                    if offset is None:
                        return None
                    fp, moved = fp._replace(fetch_offset=offset), True
                parts.append(fp)
            topics.append(ft._replace(partitions=parts))
        return req._replace(topics=topics) if moved else None

    def unchanged(self, req: F.FetchRequest, version: int, plan: FetchPlan) -> bool:
        """Whether `plan`, read for `req` a moment ago, is still the answer: every partition's log, segment
        listing, log start, log end and last stable offset are what they were then (the records before the
        log end of a listed segment do not change). Only for a plan without errors."""
        committed = req.isolation_level == F.READ_COMMITTED
        reads = iter(plan.reads)
        for ft in req.topics:
            name = self.topic_by_id(ft.topic_id) if version >= F.TOPIC_IDS else ft.topic
            for fp in ft.partitions:
                read = next(reads)
                try:
                    llog = self.manager.get(name, fp.partition) if name is not None else None
                except LookupdError:
                    return False
                if llog is not read.log or llog.base_offsets is not read.bases:
                    return False
                v = SegmentList(llog, read.bases)
                end = v.log_end_offset
                if v.log_start_offset != read.log_start_offset or end != read.log_end_offset or \
                        (committed and self.stable(llog).at_end(end) != read.last_stable_offset):
                    return False
        return True

    def _read_partition(self, topic: str, fp: F.FetchPartition, max_bytes: int, min_one: bool, committed: bool,
                        regions: bool) -> tuple[F.PartitionData, PartitionRead | None]:
        try:
            llog = self.manager.get(topic, fp.partition)
            return self._read(llog, fp.partition, fp.fetch_offset, max_bytes, min_one, committed, regions)
        except FileNotFoundError:  # a segment deleted while being read: once more, on a fresh listing
            try:
                llog = self.manager.get(topic, fp.partition)
                llog.refresh()
                return self._read(llog, fp.partition, fp.fetch_offset, max_bytes, min_one, committed, regions)
            except (LookupdError, OSError) as err:
                return F.PartitionData(fp.partition, _error_code(err)), None
        except LookupdError as err:
            return F.PartitionData(fp.partition, _error_code(err)), None
        except OSError as err:
            log.warning("Fetch %s-%d: %s", topic, fp.partition, err)
            return F.PartitionData(fp.partition, E.KAFKA_STORAGE_ERROR), None

    def _read(self, llog, partition: int, offset: int, max_bytes: int, min_one: bool, committed: bool,
              regions: bool) -> tuple[F.PartitionData, PartitionRead]:
        bases = llog.base_offsets
        v = SegmentList(llog, bases)
        start, end = v.log_start_offset, v.log_end_offset
        stable = self.stable(llog).at_end(end)
        aborted = [] if committed else None
        if not start <= offset <= end:
            if offset < start and llog.remote_error is not None:
                raise Unavailable(f"the remote tier cannot be listed now ({llog.remote_error})")
            return F.PartitionData(partition, E.OFFSET_OUT_OF_RANGE, end, stable, start), None
        limit = stable if committed else end
        records: bytes | F.Region = b""
        read = PartitionRead(llog, bases, start, end, stable)
        i = v.floor_slot(offset)
        while offset < limit and 0 <= i < len(bases):
            seg = v.segment(bases[i])
            found = _batch_at(seg, offset)
            if found is None:  # nothing at or past `offset` in this segment: the next one
                i += 1
                continue
            max_position = seg.size()
            next_base = bases[i + 1] if i + 1 < len(bases) else end
            if limit < next_base:  # the last stable offset lies in this segment: serve up to its batch
                at = seg.translate_offset(limit)
                if at is not None:
                    max_position = min(max_position, at.position)
            position, batch_size = found
            adjusted = max(max_bytes, batch_size) if min_one else max_bytes
            size = min(max_position - position, adjusted)
            if size > 0:
                if regions and seg.tier == TIER_LOCAL:
                    records = F.Region(seg.log.handle(), position, size)
                    read = PartitionRead(llog, bases, start, end, stable, seg, position, position + size)
                else:
                    if nonblocking_mode.on and size > INLINE_READ_MAX_BYTES:
                        raise WouldBlock()  # copying that much would hold the event loop: a worker thread reads it
                    records = seg.log.read(position, size)
                if committed:
                    aborted = [(t.producer_id, t.first_offset) for t in llog.aborted_transactions(offset, next_base)]
            break
        return F.PartitionData(partition, E.NONE, end, stable, start, aborted, records), read

    def ends(self, req: F.FetchRequest, version: int) -> list[int]:
        """What a waiting Fetch watches: each partition's log end offset now (-1 where unknown)."""
        out = []
        for ft in req.topics:
            name = self.topic_by_id(ft.topic_id) if version >= F.TOPIC_IDS else ft.topic
            for fp in ft.partitions:
                try:
                    out.append(self.manager.get(name, fp.partition).log_end_offset if name is not None else -1)
                except (LookupdError, OSError):
                    out.append(-1)
        return out

    # ------------------------------------------------------------------ Produce

    def produce(self, req: dict, version: int) -> bytes:
        """Every partition refused, with POLICY_VIOLATION (not retriable) and a message saying why."""
        return PRODUCE_RESPONSE.encode({"responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": E.POLICY_VIOLATION, "base_offset": -1,
                 "error_message": READ_ONLY_MESSAGE} for p in t["partition_data"]]}
            for t in req["topic_data"]]}, version)


def _batch_at(seg, offset: int) -> tuple[int, int] | None:
    """(position, size) of the segment's first batch whose last offset >= `offset` (LogSegment.translateOffset),
    None if none is: in one native call (`LogSegment.locate`) for a local segment where it can answer, else
    `translate_offset`, the answer of record. The caller's offset is below the log end, as for
    LocalLog.resolve_offset's native path."""
    if seg.tier == TIER_LOCAL:
        found = seg.locate(LOCATE_BATCH, offset)
        if found is not None:
            return found[3], found[4]
    found = seg.translate_offset(offset)
    return (found.position, found.size) if found is not None else None


def _error_code(err: BaseException) -> int:
    if isinstance(err, UnknownPartition):
        return E.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(err, OffsetOutOfRange):
        return E.OFFSET_OUT_OF_RANGE
    if isinstance(err, LookupdError) and err.code == "INVALID_ARGUMENT":
        return E.UNKNOWN_TOPIC_OR_PARTITION  # an illegal topic name cannot exist here
    if isinstance(err, CorruptDataError):
        log.warning("%s", err)
        return E.CORRUPT_MESSAGE
    if isinstance(err, (Unavailable, OSError)):
        return E.KAFKA_STORAGE_ERROR
    log.warning("%s", err)
    return E.UNKNOWN_SERVER_ERROR
