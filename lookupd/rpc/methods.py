"""The daemon's methods in one table: each method's positional params, where the daemon runs it, and what
its [[acl]] rules check. Clients read the params (`lookupd query` types its arguments by them and lists
them in its help); the daemon's service (lookupd.daemon.service) binds a handler to each name and reads
`runs`, and its ACLs (lookupd.daemon.acl) read `access`. Adding a method is a row here and its handler
there; the service refuses to start with a row and no handler, or a handler and no row.

Methods (params are positional; what each answers, in docs/protocol.md):

    ping []                                                   -> "pong"
    auth [token]                                              -> true
    stats []                                                  -> {worker, uptime, requests, errors, connections, partitions,
                                                                  segments, open_indexes, mapped_bytes, lazy_loads, evictions}
    partitions []                                             -> [{topic, partition, log_dir, segments,
                                                                   log_start_offset, log_end_offset}]
    segments [topic, partition]                               -> [{base_offset, size, active, offset_index_entries,
                                                                   time_index_entries, largest_timestamp}]
    lookup_offset [topic, partition, offset, mode]            -> {segment, offset, position} | nil
    lookup_timestamp [topic, partition, timestamp, mode]      -> {segment, timestamp, offset, position} | nil
    resolve_offset [topic, partition, offset]                 -> {segment, base_offset, last_offset, position, size} | nil
    offset_for_timestamp [topic, partition, timestamp]        -> {offset, timestamp, segment, position} | nil
    aborted_transactions [topic, partition, start, end]       -> [{producer_id, first_offset, last_offset, last_stable_offset}]
    read [topic, partition, offset, max_bytes]                -> {segment, position, next_offset, records: bin}
    lookup_offsets [topic, partition, [offset...], mode]      -> {segment: [...], offset: [...], position: [...]}
    resolve_offsets [topic, partition, [offset...]]           -> {segment, base_offset, last_offset, position, size: [...]}
    offsets_for_timestamps [topic, partition, [timestamp...]] -> {offset, timestamp, segment, position: [...]}
    groups []                                                 -> {groups: [{group, type, protocol_type, state,
                                                                  coordinator_partition, members, ...}], warnings}
    group_offsets [group, isolation]                          -> {group, type, state, coordinator_partition, isolation,
                                                                  offsets: {topic, partition, committed_offset, leader_epoch,
                                                                  metadata, commit_timestamp, pending_transaction,
                                                                  log_start_offset, log_end_offset, last_stable_offset,
                                                                  lag, out_of_range: [...]}, warnings}
    schemas []                                                -> {topic, end_offset, skipped, versions: [...]} | nil
    read_decoded [topic, partition, offset, max_bytes]        -> {segment, position, next_offset, records: [{...}]}

mode is "floor" or "ceiling"; columnar answers hold -1 where nothing matches. isolation is
"read_uncommitted" (lag to the log end) or "read_committed" (to the last stable offset).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

# Where the daemon runs a method: INLINE on the event loop always (no file access); HOT on the event loop
# when everything it reads is in memory, else in a worker thread; THREAD always in a worker thread
# (listings and columnar calls: milliseconds of CPU even when hot, which would hold up every other client).
INLINE, HOT, THREAD = "inline", "hot", "thread"
RUNS = (INLINE, HOT, THREAD)

# Kafka's ACL operations a method may need: DESCRIBE (listings and lookups) and READ (record reads and
# columnar calls, which read in bulk).
DESCRIBE, READ = "describe", "read"
OPERATIONS = (DESCRIBE, READ)

# What an operation is checked on (lookupd.daemon.acl). TOPIC and GROUP are named by the method's first
# param, and a call on one the principal may not use is refused; the listings are never refused, their
# answers keep what the principal may see.
TOPIC = "topic"                  # the topic of the first param
GROUP = "group"                  # the consumer group of the first param; its answer keeps the topics it may describe
LISTED_TOPICS = "listed topics"  # an answer listing partitions keeps those of topics allowed
LISTED_GROUPS = "listed groups"  # an answer listing groups keeps the groups allowed
SCHEMAS_TOPIC = "schemas topic"  # the Schema Registry's topic (the daemon's schemas_topic): the schemas are its records
RESOURCES = (TOPIC, GROUP, LISTED_TOPICS, LISTED_GROUPS, SCHEMAS_TOPIC)


class Access(NamedTuple):
    """One check an [[acl]] makes of a call: `operation` on `resource`."""

    operation: str
    resource: str


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One method: its positional `params`, where it `runs`, the `access` its ACLs check (in order; none:
    any principal may call it), and for a columnar call, `targets`, the param holding its list of int64
    targets (held as an array from the moment it is read, lookupd.daemon.service.compact_targets)."""

    params: tuple[str, ...]
    runs: str
    access: tuple[Access, ...] = ()
    targets: str | None = None
    targets_index: int = field(init=False, default=-1)  # where `targets` is in params; -1 without

    def __post_init__(self) -> None:
        if self.runs not in RUNS:
            raise ValueError(f"runs must be one of {', '.join(RUNS)}, got {self.runs!r}")
        for a in self.access:
            if a.operation not in OPERATIONS or a.resource not in RESOURCES:
                raise ValueError(f"unknown access {a}: operations {OPERATIONS}, resources {RESOURCES}")
            if a.resource in (TOPIC, GROUP) and self.params[:1] != (a.resource,):
                raise ValueError(f"access on the {a.resource} of the first param, but the params are {self.params}")
        if self.targets is not None:
            object.__setattr__(self, "targets_index", self.params.index(self.targets))


_TP = ("topic", "partition")
_DESCRIBE_TOPIC = (Access(DESCRIBE, TOPIC),)
_READ_TOPIC = (Access(READ, TOPIC),)
METHODS: dict[str, MethodSpec] = {
    "ping": MethodSpec((), INLINE),
    "auth": MethodSpec(("token",), INLINE),  # connection state: lookupd.daemon.service.Service handles it
    "stats": MethodSpec((), INLINE),
    "partitions": MethodSpec((), THREAD, (Access(DESCRIBE, LISTED_TOPICS),)),
    "segments": MethodSpec(_TP, THREAD, _DESCRIBE_TOPIC),
    "lookup_offset": MethodSpec(_TP + ("offset", "mode"), HOT, _DESCRIBE_TOPIC),
    "lookup_timestamp": MethodSpec(_TP + ("timestamp", "mode"), HOT, _DESCRIBE_TOPIC),
    "resolve_offset": MethodSpec(_TP + ("offset",), HOT, _DESCRIBE_TOPIC),
    "offset_for_timestamp": MethodSpec(_TP + ("timestamp",), HOT, _DESCRIBE_TOPIC),
    "aborted_transactions": MethodSpec(_TP + ("start_offset", "end_offset"), HOT, _DESCRIBE_TOPIC),
    "read": MethodSpec(_TP + ("offset", "max_bytes"), HOT, _READ_TOPIC),
    "lookup_offsets": MethodSpec(_TP + ("offsets", "mode"), THREAD, _READ_TOPIC, targets="offsets"),
    "resolve_offsets": MethodSpec(_TP + ("offsets",), THREAD, _READ_TOPIC, targets="offsets"),
    "offsets_for_timestamps": MethodSpec(_TP + ("timestamps",), THREAD, _READ_TOPIC, targets="timestamps"),
    "groups": MethodSpec((), THREAD, (Access(DESCRIBE, LISTED_GROUPS),)),
    # warm (nothing appended, or what was is in the page cache) on the event loop, else in a thread
    "group_offsets": MethodSpec(("group", "isolation"), HOT, (Access(DESCRIBE, GROUP),)),
    "schemas": MethodSpec((), THREAD, (Access(READ, SCHEMAS_TOPIC),)),
    "read_decoded": MethodSpec(_TP + ("offset", "max_bytes"), THREAD, (Access(READ, SCHEMAS_TOPIC),) + _READ_TOPIC),
}
PARAMS: dict[str, tuple[str, ...]] = {name: spec.params for name, spec in METHODS.items()}  # what clients read


def signatures() -> str:
    """One line per method with its params (`lookupd query --help`)."""
    return "\n".join(f"  {name} {' '.join(p.upper() for p in params)}".rstrip() for name, params in PARAMS.items())
