"""Planning a read: partitions to read, their [start, end) offsets, and the splits.

Runs in the driver. A batch read resolves its bounds from the options (`plan`); a micro-batch
of a stream has them from its offsets (spark_client.stream); both are cut into splits by
`plan_ranges`, so batch and stream splits are made, and read, the same way.

Every bound is resolved through the daemons with columnar calls, one per partition and step
(offsets_for_timestamps for timestamps, resolve_offsets for the batches at the bounds, the
segment starts and the cut points), the partitions' calls in flight together over one
connection per daemon. Errors mirror Spark's Kafka source.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor

from lookupd.rpc.client import RemoteError, topic_denial

from .errors import DataLossError, OptionError, SegmentsChanged, TopicAuthorizationError
from .options import EARLIEST, LATEST, Bound, ReadOptions, TopicPartition, tp_name, tp_names
from .remote import resolve_location
from .routing import Daemons, PartitionInfo, addresses, columnar, discover, route
from .splits import Batch, PartitionRange, Segment, Split, build_splits, cut_targets, part_counts

log = logging.getLogger(__name__)

PLANNING_THREADS = 16


def plan(options: ReadOptions, daemons: Daemons) -> list[Split]:
    """The splits of a batch read, in topic, partition and offset order."""
    routes = discover(options.address, daemons)
    infos = [route(routes, tp, options.address) for tp in select(options, routes, daemons)]
    options = starting_from_group(options, daemons, infos)
    check_partitions(options, [i.tp for i in infos])
    with ThreadPoolExecutor(min(PLANNING_THREADS, max(len(infos), 1))) as pool:
        bounds = list(pool.map(lambda i: (i, *resolve_bounds(options, daemons.client(i.address), i)), infos))
    return plan_ranges(options, daemons, bounds)


def plan_ranges(options: ReadOptions, daemons: Daemons, bounds: list[tuple[PartitionInfo, int, int]]) -> list[Split]:
    """The splits reading offsets [start, end) of each (partition, start, end), in the order given.

    Offsets outside the partition's log are data loss (failOnDataLoss), as are deleted batches."""
    locations = {a: resolve_location(options.remote, daemons.client(a).stats().get("remote"))
                 for a in dict.fromkeys(info.address for info, _, _ in bounds)}
    with ThreadPoolExecutor(min(PLANNING_THREADS, max(len(bounds), 1))) as pool:
        ranges = [replace(r, remote=locations[r.info.address])
                  for r in pool.map(lambda b: resolve_range(options, daemons, *b), bounds) if r is not None]
        counts = part_counts([r.bytes for r in ranges], options.min_partitions)

        def cut(r: PartitionRange, parts: int) -> list[Split]:
            targets = cut_targets(r, parts, options.max_bytes_per_split, options.max_records_per_partition)
            return build_splits(r, _batches(daemons, r.info, targets) if targets else [])

        return [s for splits in pool.map(cut, ranges, counts) for s in splits]


def select(options: ReadOptions, routes: dict[TopicPartition, PartitionInfo], daemons: Daemons, *,
           need_topics: bool = True) -> list[TopicPartition]:
    """The partitions the strategy names, sorted (assign: exactly those; subscribe: all of each topic).

    A named topic that no daemon lists because its [[acl]] rules deny it is TopicAuthorizationError;
    need_topics=False (streams): a subscribed topic that does not exist yet is no error."""
    s = options.strategy
    if s.kind == "assign":
        check_authorized(options, daemons, {t for t, _ in s.partitions}.difference(t for t, _ in routes))
        return list(s.partitions)
    if s.kind == "subscribe":
        missing = sorted(set(s.topics).difference(t for t, _ in routes))
        check_authorized(options, daemons, missing)
        if missing and need_topics:
            raise OptionError(f"topic(s) {', '.join(missing)} not found: no partition of them is served by lookupd "
                              f"at {', '.join(addresses(options.address))}")
        return sorted(tp for tp in routes if tp[0] in s.topics)
    pattern = re.compile(s.pattern)
    return sorted(tp for tp in routes if pattern.fullmatch(tp[0]))


def check_authorized(options: ReadOptions, daemons: Daemons, topics) -> None:
    """TopicAuthorizationError, with the daemon's reason (its principal, the operation, the topic), for the
    named topics that no daemon lists because its [[acl]] rules deny them (Spark's Kafka source fails so)."""
    denied: dict[str, str] = {}
    for topic in sorted(topics):
        for address in addresses(options.address):
            err = topic_denial(daemons.client(address).call, topic)
            if err is not None:
                denied[topic] = f"lookupd at {address} answers {err}"
                break
    if denied:
        raise TopicAuthorizationError(list(denied), "; ".join(denied.values()))


def starting_from_group(options: ReadOptions, daemons: Daemons, infos: list[PartitionInfo]) -> ReadOptions:
    """lookupd.startingGroup as startingOffsets: each partition read starts at the group's committed
    offset (group_offsets, asked of the daemons in turn until one serves the group's __consumer_offsets
    partition), a partition without one at its reset (earliest or latest). A group none of them knows
    has committed nothing: every partition starts at the reset."""
    bound = options.starting
    if bound.kind != "group":
        return options
    answer, missing = None, []
    for address in addresses(options.address):
        try:
            answer = daemons.client(address).group_offsets(bound.group, "read_uncommitted")["offsets"]
            break
        except RemoteError as err:
            if err.code == "UNKNOWN_GROUP":
                answer = {"topic": [], "partition": [], "committed_offset": []}
                break
            if err.code != "UNKNOWN_PARTITION":
                raise
            missing.append(f"{address}: {err}")
    if answer is None:
        raise OptionError(f"lookupd.startingGroup {bound.group!r}: no lookupd serves its __consumer_offsets "
                          f"partition ({'; '.join(missing)})")
    committed = {(t, p): o for t, p, o in zip(answer["topic"], answer["partition"], answer["committed_offset"])
                 if o is not None}  # the daemon's columns
    if not committed:
        log.warning("group %s has no committed offset: every partition starts at %s", bound.group, bound.reset)
    reset = EARLIEST if bound.reset == "earliest" else LATEST
    return replace(options, starting=Bound("offsets", tuple(sorted((i.tp, committed.get(i.tp, reset))
                                                                   for i in infos))))


def check_partitions(options: ReadOptions, tps: list[TopicPartition]) -> None:
    """Per-partition offsets or timestamps must name exactly the partitions being read (Spark's assert)."""
    for bound, name in ((options.starting, "startingOffsets"), (options.ending, "endingOffsets")):
        if bound.kind not in ("offsets", "timestamps") or set(bound.values) == set(tps):
            continue
        if bound.kind == "offsets":
            raise OptionError(f"If {name} contains specific offsets, you must specify all TopicPartitions. "
                              f"Use -1 for latest, -2 for earliest. "
                              f"Specified: {tp_names(bound.values)} Assigned: {tp_names(tps)}")
        raise OptionError(f"If starting/endingOffsetsByTimestamp contains specific offsets, you must specify all "
                          f"topics. Specified: {tp_names(bound.values)} Assigned: {tp_names(tps)}")


def resolve_range(options: ReadOptions, daemons: Daemons, info: PartitionInfo, start: int,
                  end: int) -> PartitionRange | None:
    """The batches and segments holding the partition's [start, end); None when empty."""
    client = daemons.client(info.address)
    start, end = _check_data_loss(options, info, start, end)
    if start > end:
        raise OptionError(f"The resolved start offset {start} is greater than the resolved end offset {end} for "
                          f"topic {info.topic} partition {info.partition}. Either the start is set too late for "
                          f"the end (a timestamp against an offset, or an offset past the latest one), or the "
                          f"partition is broken.")
    if start == end:
        return None
    listing = [(s["base_offset"], s["size"], s.get("key") if s.get("tier") == "remote" else None)
               for s in client.segments(info.topic, info.partition)]
    bases = [b for b, _, _ in listing]
    at = _batches(daemons, info, [start, end] + bases, keep_missing=True)
    first, last = at[0], at[1]
    if first is None:
        if bases and start < bases[0] and info.log_start_offset < bases[0]:
            # Retention ran after `info` was listed: judge the range again against the log start now,
            # so the loss is reported (or skipped, without failOnDataLoss) as for any start below it.
            return resolve_range(options, daemons, replace(info, log_start_offset=bases[0]), start, end)
        return _lost(options, info, start, end, f"no batch holds offset {start} any more")
    firsts = {b: (loc.base_offset if loc is not None and loc.segment == b else -1) for b, loc in zip(bases, at[2:])}
    end_segment = last.segment if last is not None else bases[-1]
    segments = tuple(Segment(b, size, firsts[b], key) for b, size, key in listing
                     if first.segment <= b <= end_segment)
    if not segments or segments[0].base_offset != first.segment or segments[-1].base_offset != end_segment:
        raise SegmentsChanged(f"the segments of {tp_name(info.tp)} changed while the read was planned; run it again")
    end_position = last.position + last.size if last is not None else segments[-1].size
    aborted = ()
    if options.read_committed:
        aborted = tuple((t["producer_id"], t["first_offset"], t["last_offset"])
                        for t in client.aborted_transactions(info.topic, info.partition, start, end))
    return PartitionRange(info, start, end, first, segments, end_position, aborted)


def resolve_bounds(options: ReadOptions, client, info: PartitionInfo) -> tuple[int, int]:
    """The options' bounds -> offsets: earliest/latest from the daemon's listing, timestamps in one call."""
    wanted = [_timestamp(b, info.tp) for b in (options.starting, options.ending)]
    asked = [t for t in wanted if t is not None]
    found = iter(client.offsets_for_timestamps(info.topic, info.partition, asked)["offset"] if asked else [])
    start_ts, end_ts = wanted
    if start_ts is not None:
        start = next(found)
        if start < 0:
            if options.no_match_strategy == "error":
                raise OptionError(f"No offset matched from request of topic-partition {tp_name(info.tp)} and "
                                  f"timestamp {start_ts}.")
            start = info.log_end_offset
    else:
        start = _offset(options.starting, info)
    if end_ts is not None:
        end = next(found)
        if end < 0:
            end = info.log_end_offset  # Spark: no match for an ending timestamp means latest
    else:
        end = _offset(options.ending, info)
    return start, end


def _timestamp(bound: Bound, tp: TopicPartition) -> int | None:
    if bound.kind == "timestamp":
        return bound.timestamp
    if bound.kind == "timestamps":
        return bound.values[tp]
    return None


def _offset(bound: Bound, info: PartitionInfo) -> int:
    value = bound.values.get(info.tp, EARLIEST) if bound.kind == "offsets" else \
        (EARLIEST if bound.kind == "earliest" else LATEST)
    if value == EARLIEST:
        return info.log_start_offset
    if value == LATEST:
        return info.log_end_offset
    return value


def _check_data_loss(options: ReadOptions, info: PartitionInfo, start: int, end: int) -> tuple[int, int]:
    """Offsets outside [log start, log end]: an error with failOnDataLoss, else moved inside with a warning."""
    lo, hi = info.log_start_offset, info.log_end_offset
    if start < lo:
        start = _lost(options, info, start, min(end, lo),
                      f"starting offset for {tp_name(info.tp)} was {start} but the log starts at {lo} "
                      f"(records deleted)", lo)
        end = max(end, start)
    if end > hi:
        end = _lost(options, info, max(start, hi), end,
                    f"ending offset for {tp_name(info.tp)} is {end} but the log ends at {hi}", hi)
    return start, end


def _lost(options: ReadOptions, info: PartitionInfo, start: int, end: int, reason: str, instead=None):
    """Report records [start, end) as lost: raise with failOnDataLoss, else warn and return `instead`."""
    if options.fail_on_data_loss:
        raise DataLossError(reason)
    log.warning("%s; skipping offsets [%d, %d) of %s (failOnDataLoss is false)", reason, start, end, tp_name(info.tp))
    return instead


def _batches(daemons: Daemons, info: PartitionInfo, offsets: list[int], keep_missing: bool = False) -> list:
    """The batches holding `offsets` (one columnar resolve_offsets call); None or dropped where none does."""
    cols = columnar(daemons.client(info.address), "resolve_offsets", info.topic, info.partition, offsets)
    out = []
    for row in zip(cols["segment"], cols["base_offset"], cols["last_offset"], cols["position"], cols["size"]):
        if row[0] >= 0:
            out.append(Batch(*row))
        elif keep_missing:
            out.append(None)
    return out
