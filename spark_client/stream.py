"""Streaming reads of `kafka-segments`: micro-batches over a live log, as Spark's Kafka source makes them.

`spark.readStream.format("kafka-segments")...load()`. An offset is what Spark's Kafka source
checkpoints, `{"topic": {"partition": next offset}}`, one entry per partition read. Each trigger
asks the daemons for the log end offsets (latestOffset), admits part of them
(maxOffsetsPerTrigger, minOffsetsPerTrigger with maxTriggerDelay, Trigger.AvailableNow's fixed
end), and the micro-batch's [start, end) ranges are cut into splits by the batch planner
(spark_client.planner.plan_ranges) and read by the batch split reader. Everything here runs in
the driver's long-lived stream reader, so its state (the AvailableNow end, the time of the last
trigger) lasts for the query's run.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)

from .errors import DataLossError, SegmentsChanged
from .options import ReadOptions, TopicPartition, tp_name, tp_names
from .planner import check_partitions, plan_ranges, resolve_bounds, select, starting_from_group
from .reader import ReadSettings, read_split
from .routing import Daemons, PartitionInfo, discover, route
from .splits import Split

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]
# Planning again when segments roll or go while a micro-batch is planned: a roll needs one more
# try, and retention deleting several segments at once at most a few.
PLAN_ATTEMPTS = 4


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka source offset: {"topic": {"partition": offset}}, topics and partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(value: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(p)): int(o) for topic, parts in value.items() for p, o in parts.items()}


def rate_limit(begin: Offsets, end: Offsets, limit: int) -> Offsets:
    """At most about `limit` offsets in all: each partition gets a share in proportion to its backlog
    (a share under one offset is rounded up, others down), as Spark's Kafka source divides it."""
    backlog = {tp: end[tp] - begin[tp] for tp in end if tp in begin and end[tp] > begin[tp]}
    total = sum(backlog.values())
    if total < 1:
        return dict(end)
    out = {}
    for tp, stop in end.items():
        if tp not in backlog:
            out[tp] = stop
            continue
        share = limit * backlog[tp] / total
        out[tp] = min(stop, begin[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return out


class KafkaSegmentsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, settings: ReadSettings):
        self.options = options
        self.settings = settings
        self._available_now: Offsets | None = None  # the end Trigger.AvailableNow fixed when the query started
        self._latest: Offsets | None = None  # log end offsets at the last trigger (reportLatestOffset)
        self._last_trigger_ms = time.time() * 1000
        self._initial: dict | None = None

    # ------------------------------------------------------------- offsets (driver)

    def initialOffset(self) -> dict:
        """Where a new query starts: startingOffsets / startingTimestamp / startingOffsetsByTimestamp /
        lookupd.startingGroup.

        Resolved once: Spark asks again when it plans the first micro-batch, and `latest` must not
        move past the end it already chose."""
        if self._initial is None:
            with Daemons(self.settings.token, tls=self.settings.tls) as daemons:
                routes = discover(self.options.address, daemons)
                infos = [route(routes, tp, self.options.address)
                         for tp in select(self.options, routes, daemons, need_topics=False)]
                options = starting_from_group(self.options, daemons, infos)
                check_partitions(options, [i.tp for i in infos])
                self._initial = to_json({i.tp: resolve_bounds(options, daemons.client(i.address), i)[0]
                                         for i in infos})
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        with Daemons(self.settings.token, tls=self.settings.tls) as daemons:
            self._available_now = {tp: i.log_end_offset for tp, i in self._partitions(daemons).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger, else minOffsetsPerTrigger (both apply when both are set; see latestOffset)."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: the log end offsets (or AvailableNow's), as the limit admits.
        Returning `start` means no micro-batch now."""
        begin = from_json(start)
        with Daemons(self.settings.token, tls=self.settings.tls) as daemons:
            infos = self._partitions(daemons)
        self._latest = {tp: i.log_end_offset for tp, i in infos.items()}
        end = dict(self._available_now if self._available_now is not None else self._latest)
        for tp in end:
            if tp not in begin:  # a new partition is read from its earliest offset
                begin[tp] = infos[tp].log_start_offset if tp in infos else end[tp]
        if isinstance(limit, ReadAllAvailable):
            return to_json(end)
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_offsets_per_trigger
        least = limit.min_rows if isinstance(limit, ReadMinRows) else self.options.min_offsets_per_trigger
        if least is not None and self._available_now is None and self._wait_for_more(begin, end, least):
            return start
        return to_json(rate_limit(begin, end, most) if most is not None else end)

    def reportLatestOffset(self) -> dict | None:
        """The log end offsets seen by the last trigger: the query progress shows how far behind it is."""
        return None if self._latest is None else to_json(self._latest)

    def _wait_for_more(self, begin: Offsets, end: Offsets, least: int) -> bool:
        """minOffsetsPerTrigger: skip this trigger while fewer offsets are new, until maxTriggerDelay passed."""
        now = time.time() * 1000
        if now - self._last_trigger_ms < self.options.max_trigger_delay_ms:
            new = sum(max(end[tp] - begin[tp], 0) for tp in end)
            if new < least:
                return True
        self._last_trigger_ms = now
        return False

    def _partitions(self, daemons: Daemons) -> dict[TopicPartition, PartitionInfo]:
        """The partitions the strategy names that the daemons serve now (new ones included)."""
        routes = discover(self.options.address, daemons)
        return {tp: route(routes, tp, self.options.address)
                for tp in select(self.options, routes, daemons, need_topics=False) if tp in routes}

    # ------------------------------------------------------------- micro-batches

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Splits reading [start, end) of every partition, cut by the batch planner."""
        begin, stop = from_json(start), from_json(end)
        gone = set(begin).difference(stop)
        if gone:
            self._lost(f"{tp_names(gone)} are gone. Some data may have been missed.")
        for attempt in range(PLAN_ATTEMPTS):
            with Daemons(self.settings.token, tls=self.settings.tls) as daemons:
                bounds = self._bounds(daemons, begin, stop)
                try:
                    return plan_ranges(self.options, daemons, bounds)
                except SegmentsChanged:
                    if attempt + 1 == PLAN_ATTEMPTS:
                        raise
                    log.info("segments changed while micro-batch %s -> %s was planned; planning again", start, end)
        raise AssertionError("unreachable")

    def _bounds(self, daemons: Daemons, begin: Offsets, stop: Offsets) -> list[tuple[PartitionInfo, int, int]]:
        routes = discover(self.options.address, daemons)
        bounds = []
        for tp, end in sorted(stop.items()):
            info = routes.get(tp)
            if info is None:
                self._lost(f"{tp_name(tp)} is gone: no daemon serves it any more. Some data may have been missed.")
                continue
            info = route(routes, tp, self.options.address)  # PartitionUnreadable if its daemon cannot read it
            start = begin.get(tp)
            if start is None:  # added since the last micro-batch: from its earliest offset, which should be 0
                start = info.log_start_offset
                if start != 0:
                    self._lost(f"Added partition {tp_name(tp)} starts from {start} instead of 0. "
                               f"Some data may have been missed.")
            if end < start:
                self._lost(f"Partition {tp_name(tp)}'s offset was changed from {start} to {end}, "
                           f"some data may have been missed.")
                continue
            if end > start:
                bounds.append((info, start, end))
        return bounds

    def _lost(self, reason: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(reason)
        log.warning("%s (failOnDataLoss is false)", reason)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One split, on an executor: exactly as a batch read reads it."""
        if not isinstance(partition, Split):
            return iter(())
        return read_split(partition, self.settings)
