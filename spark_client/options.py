"""Options of the `kafka-segments` data source: parsed and checked, with no Spark and no I/O.

Names, JSON forms, precedence and refusals follow Spark's own Kafka source
(KafkaSourceProvider.validateBatchOptions, getKafkaOffsetRangeLimit, JsonUtils), so a job can
switch between `format("kafka")` and `format("kafka-segments")` by changing the format and the
connection option. A mistake Spark rejects raises OptionError with Spark's message; option
names are case-insensitive, as in Spark.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Mapping

from .errors import OptionError

log = logging.getLogger(__name__)

EARLIEST = -2  # in startingOffsets / endingOffsets JSON, as in Spark and Kafka's ListOffsets
LATEST = -1

DEFAULT_MAX_BYTES_PER_SPLIT = 128 << 20  # like spark.sql.files.maxPartitionBytes

TopicPartition = tuple[str, int]


def tp_name(tp: TopicPartition) -> str:
    """Kafka's TopicPartition.toString: `topic-partition`."""
    return f"{tp[0]}-{tp[1]}"


def tp_names(tps) -> str:
    return "[" + ", ".join(tp_name(tp) for tp in sorted(tps)) + "]"


@dataclass(frozen=True)
class Bound:
    """Where reading starts or ends: Spark's KafkaOffsetRangeLimit.

    kind is "earliest", "latest", "offsets" (per-partition offsets, -2/-1 allowed),
    "timestamps" (per-partition timestamps), "timestamp" (one timestamp for all partitions), or
    "group" (lookupd.startingGroup: the group's committed offsets, `reset` where it has none; the
    planner turns it into "offsets").
    """

    kind: str
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None
    group: str = ""
    reset: str = "earliest"

    @property
    def values(self) -> dict[TopicPartition, int]:
        return dict(self.per_partition)


@dataclass(frozen=True)
class Strategy:
    """Which partitions to read: kind "assign" (partitions), "subscribe" (topics) or "subscribePattern"."""

    kind: str
    partitions: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    pattern: str = ""


@dataclass(frozen=True)
class RemoteOptions:
    """The lookupd.remote.* options: where executors read remote segments from. None: the daemon's
    [remote] setting (its `stats` says it), else the default."""

    bucket: str | None = None
    prefix: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    encryption_keys: tuple[tuple[str, str], ...] = ()  # key id -> PEM file readable on the executors


@dataclass(frozen=True)
class ReadOptions:
    strategy: Strategy
    starting: Bound
    ending: Bound
    no_match_strategy: str  # startingOffsetsByTimestampStrategy: "error" or "latest"
    include_headers: bool
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_bytes_per_split: int
    read_committed: bool
    address: str | dict[str, str]
    token_file: str | None
    read_from: str  # "auto", "files" or "daemon"
    # lookupd.tls.ca/.cert/.key as the Client's keyword arguments (tls_ca, tls_cert, tls_key): paths on
    # each executor, for tls:// addresses
    tls: tuple[tuple[str, str], ...] = ()
    # Streams only (spark_client.stream): admission control per micro-batch.
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 0
    remote: RemoteOptions = RemoteOptions()
    # lookupd.decodeValues: None, "json" or "struct" (spark_client.decoded)
    decode_values: str | None = None


ASSIGN, SUBSCRIBE, SUBSCRIBE_PATTERN = "assign", "subscribe", "subscribepattern"
STRATEGY_KEYS = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
ADDRESS = "lookupd.address"
STARTING_GROUP, STARTING_GROUP_RESET = "lookupd.startinggroup", "lookupd.startinggroupreset"
ADDRESS_EXAMPLE = '{"broker-1": "broker-1:9470", "broker-2": "broker-2:9470", "orders-0": "broker-2:9470"}'
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
READ_FROM = ("auto", "files", "daemon")
REMOTE_KEYS = "lookupd.remote.encryption.keys"
STREAM_ONLY = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")
DEFAULT_MAX_TRIGGER_DELAY = "15m"  # Spark's default for maxTriggerDelay
_TIME_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNSUPPORTED_KAFKA = {
    "kafka.auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option 'startingOffsets' "
        "to 'earliest' or 'latest' to specify where to start."),
    "kafka.key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys."),
    "kafka.value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values."),
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check `options` as Spark checks a batch Kafka read, in Spark's order; OptionError if rejected."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    no_match = _no_match_strategy(opts)
    starting = _starting_group(opts) or \
        _bound(opts, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets", "earliest")
    if starting.kind == "latest":
        raise OptionError("starting offset can't be latest for batch queries on Kafka")
    for tp, off in starting.per_partition if starting.kind == "offsets" else ():
        if off == LATEST:
            raise OptionError(f"startingOffsets for {tp_name(tp)} can't be latest for batch queries on Kafka")
        _check_offset("startingOffsets", tp, off)
    ending = _bound(opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", "latest")
    if ending.kind == "earliest":
        raise OptionError("ending offset can't be earliest for batch queries on Kafka")
    for tp, off in ending.per_partition if ending.kind == "offsets" else ():
        if off == EARLIEST:
            raise OptionError(f"ending offset for {tp_name(tp)} can't be earliest for batch queries on Kafka")
        _check_offset("endingOffsets", tp, off)
    strategy, splitting = _general(opts)
    for key in STREAM_ONLY:
        if key in opts:
            log.warning("%s option ignored in batch queries", key)
    _check_limits(starting, ending)
    return ReadOptions(strategy=strategy, starting=starting, ending=ending, no_match_strategy=no_match,
                       **splitting, **_settings(opts))


def parse_stream_options(options: Mapping[str, str]) -> ReadOptions:
    """Check `options` as Spark checks a streaming Kafka read (validateStreamOptions); OptionError if rejected.

    The start defaults to `latest` and is used only when a query first starts (later runs resume
    from their checkpoint); ending options are refused; `ending` is the log end of each trigger.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    if "endingoffsets" in opts:
        raise OptionError("ending offset not valid in streaming queries")
    if "endingoffsetsbytimestamp" in opts or "endingtimestamp" in opts:
        raise OptionError("ending timestamp not valid in streaming queries")
    no_match = _no_match_strategy(opts)
    starting = _starting_group(opts, "latest") or \
        _bound(opts, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets", "latest")
    for tp, off in starting.per_partition if starting.kind == "offsets" else ():
        _check_offset("startingOffsets", tp, off)
    strategy, splitting = _general(opts)
    max_offsets = _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_offsets = _positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    delay = _duration_ms(opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY), "maxTriggerDelay")
    return ReadOptions(strategy=strategy, starting=starting, ending=Bound("latest"), no_match_strategy=no_match,
                       max_offsets_per_trigger=max_offsets, min_offsets_per_trigger=min_offsets,
                       max_trigger_delay_ms=delay, **splitting, **_settings(opts))


def _general(opts: dict[str, str]) -> tuple[Strategy, dict]:
    """The strategy and split sizes, checked alike for batch and stream reads after their bounds
    (validateGeneralOptions), then the refused kafka.* options."""
    strategy = _strategy(opts)
    min_partitions = _positive_int(opts, "minpartitions", "minPartitions")
    max_records = _positive_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition")
    max_bytes = _positive_int(opts, "maxbytespersplit", "maxBytesPerSplit") or DEFAULT_MAX_BYTES_PER_SPLIT
    for key, message in _UNSUPPORTED_KAFKA.items():
        if key in opts:
            raise OptionError(message)
    return strategy, dict(min_partitions=min_partitions, max_records_per_partition=max_records,
                          max_bytes_per_split=max_bytes)


def _settings(opts: dict[str, str]) -> dict:
    """Headers, data loss, isolation and the lookupd.* options, checked last."""
    return dict(
        include_headers=_boolean(opts, "includeheaders", "includeHeaders", False),
        fail_on_data_loss=_boolean(opts, "failondataloss", "failOnDataLoss", True),
        read_committed=_isolation_level(opts) == "read_committed",
        address=parse_address(opts.get(ADDRESS)), token_file=opts.get("lookupd.tokenfile") or None,
        read_from=_choice(opts, "lookupd.readfrom", "lookupd.readFrom", READ_FROM, "auto"),
        remote=_remote(opts),
        decode_values=_decode_values(opts),
        tls=tuple((f"tls_{part}", opts[f"lookupd.tls.{part}"]) for part in ("ca", "cert", "key")
                  if opts.get(f"lookupd.tls.{part}")),
    )


DECODE_VALUES = ("json", "struct")


def _decode_values(opts: dict[str, str]) -> str | None:
    """lookupd.decodeValues: keys and values in Confluent's wire format decoded (spark_client.decoded)."""
    value = opts.get("lookupd.decodevalues")
    if value is None or value.strip().lower() in ("", "none", "false"):
        return None
    if value.strip().lower() not in DECODE_VALUES:
        raise OptionError(f"lookupd.decodeValues must be json or struct; got '{value}'")
    return value.strip().lower()


def _remote(opts: dict[str, str]) -> RemoteOptions:
    """lookupd.remote.bucket, .prefix, .endpoint_url, .region and .encryption.keys (JSON: key id -> PEM path)."""
    keys = opts.get(REMOTE_KEYS)
    pairs: tuple[tuple[str, str], ...] = ()
    if keys is not None:
        try:
            parsed = json.loads(keys)
            if not isinstance(parsed, dict) or not all(isinstance(v, str) and v for v in parsed.values()):
                raise ValueError
        except ValueError:
            raise OptionError(f"Expected e.g. {{\"key-1\": \"/etc/lookupd/tiered-key-1.pem\"}} for option "
                              f"'{REMOTE_KEYS}' (key id -> PEM private key file on the executors), "
                              f"got {keys}") from None
        pairs = tuple(sorted(parsed.items()))
    bucket = opts.get("lookupd.remote.bucket")
    if bucket is not None and not bucket.strip():
        raise OptionError("lookupd.remote.bucket must name the bucket the tiered segments are in")
    return RemoteOptions(bucket=bucket and bucket.strip(), prefix=opts.get("lookupd.remote.prefix"),
                         endpoint_url=opts.get("lookupd.remote.endpoint_url") or None,
                         region=opts.get("lookupd.remote.region") or None, encryption_keys=pairs)


def parse_address(value: str | None) -> str | dict[str, str]:
    """`lookupd.address`: a socket path or HOST:PORT, or a JSON object of addresses (see routing)."""
    if value is None or not value.strip():
        raise OptionError(f"Option '{ADDRESS}' must be specified: the lookupd socket path or HOST:PORT, "
                          f"or a JSON object of daemon addresses such as {ADDRESS_EXAMPLE}")
    text = value.strip()
    if not text.startswith("{"):
        return text
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if (not isinstance(parsed, dict) or not parsed
            or not all(isinstance(v, str) and v.strip() for v in parsed.values())):
        raise OptionError(f"Expected e.g. {ADDRESS_EXAMPLE} for option '{ADDRESS}', got {value}")
    return {k: v.strip() for k, v in parsed.items()}


# ---------------------------------------------------------------- pieces


def _no_match_strategy(opts: dict[str, str]) -> str:
    value = opts.get("startingoffsetsbytimestampstrategy", "error")
    if value.lower() not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got '{value}'")
    return value.lower()


def _bound(opts: dict[str, str], global_key: str, by_timestamp_key: str, offsets_key: str, default: str) -> Bound:
    """getKafkaOffsetRangeLimit: global timestamp, then per-partition timestamps, then offsets."""
    if global_key in opts:
        text = opts[global_key].strip()
        try:
            return Bound("timestamp", timestamp=int(text))
        except ValueError:
            raise OptionError(f"Expected a single long value, got {text}") from None
    if by_timestamp_key in opts:
        example = '{"topicA": {"0": 123456789, "1": 123456789}, "topicB": {"0": 123456789, "1": 123456789}}'
        return Bound("timestamps", _partition_map(opts[by_timestamp_key].strip(), example))
    text = opts.get(offsets_key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return Bound(text.lower())
    return Bound("offsets", _partition_map(text, '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'))


def _starting_group(opts: dict[str, str], default_reset: str = "earliest") -> Bound | None:
    """lookupd.startingGroup: start where the consumer group committed, and for a partition it has no
    commit for at lookupd.startingGroupReset (or startingOffsets) `earliest` or `latest`, as a Kafka
    consumer resets by auto.offset.reset. None when the option is not given."""
    group = opts.get(STARTING_GROUP)
    if group is None:
        return None
    if not group.strip():
        raise OptionError("lookupd.startingGroup must name a consumer group")
    for key, name in (("startingtimestamp", "startingTimestamp"),
                      ("startingoffsetsbytimestamp", "startingOffsetsByTimestamp")):
        if key in opts:
            raise OptionError(f"lookupd.startingGroup and {name} both say where to start; set one of them")
    offsets = opts.get("startingoffsets", "").strip().lower()
    if offsets and offsets not in ("earliest", "latest"):
        raise OptionError("lookupd.startingGroup and specific startingOffsets both say where to start; "
                          "with lookupd.startingGroup, startingOffsets may only be earliest or latest (where a "
                          "partition without a commit starts)")
    reset = opts.get(STARTING_GROUP_RESET, offsets or default_reset).strip().lower()
    if reset not in ("earliest", "latest"):
        raise OptionError(f"lookupd.startingGroupReset must be 'earliest' or 'latest', got "
                          f"'{opts[STARTING_GROUP_RESET]}'")
    return Bound("group", group=group.strip(), reset=reset)


def _partition_map(text: str, example: str) -> tuple[tuple[TopicPartition, int], ...]:
    """JsonUtils.partitionOffsets / partitionTimestamps: {"topic": {"partition": long}}."""
    try:
        parsed = json.loads(text)
        out = []
        for topic, parts in parsed.items():
            for part, value in parts.items():
                if isinstance(value, bool) or not isinstance(value, int) or not isinstance(topic, str):
                    raise ValueError
                out.append(((topic, int(part)), value))
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"Expected e.g. {example}, got {text}") from None
    return tuple(sorted(out))


def _check_offset(option: str, tp: TopicPartition, offset: int) -> None:
    if offset < EARLIEST:
        raise OptionError(f"{option} for {tp_name(tp)} is {offset}: an offset is >= 0, "
                          f"or -2 for earliest, -1 for latest")


def _strategy(opts: dict[str, str]) -> Strategy:
    """validateGeneralOptions + strategy(): exactly one of assign, subscribe, subscribePattern."""
    given = [k for k in STRATEGY_KEYS if k in opts]
    names = ", ".join(STRATEGY_KEYS)
    if not given:
        raise OptionError(f"One of the following options must be specified for Kafka source: {names}. "
                          f"See the docs for more details.")
    if len(given) > 1:
        raise OptionError(f"Only one of the following options can be specified for Kafka source: {names}. "
                          f"See the docs for more details.")
    key, value = given[0], opts[given[0]]
    if key == ASSIGN:
        if not value.strip().startswith("{"):
            raise OptionError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        try:
            parsed = json.loads(value)
            tps = tuple(sorted({(t, p) for t, parts in parsed.items() for p in parts}))
            if not all(isinstance(p, int) and not isinstance(p, bool) for _, p in tps):
                raise ValueError
        except (ValueError, AttributeError, TypeError):
            raise OptionError(f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {value}') from None
        return Strategy("assign", partitions=tps)
    if key == SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Strategy("subscribe", topics=topics)
    pattern = value.strip()
    if not pattern:
        raise OptionError(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' "
                          f"is '{value}'")
    try:
        re.compile(pattern)
    except re.error as err:
        raise OptionError(f"subscribePattern '{value}' is not a valid regular expression: {err}") from None
    return Strategy("subscribePattern", pattern=pattern)


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        n = int(opts[key].strip())
    except ValueError:
        raise OptionError(f"{name} must be an integer, got '{opts[key]}'") from None
    if n <= 0:
        raise OptionError(f"{name} must be positive")
    return n


def _duration_ms(text: str, name: str) -> int:
    """A Spark time string (`500ms`, `30s`, `15m`, `1h`, `2d`; a bare number is milliseconds)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if m is None or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise OptionError(f"{name} must be a time such as 500ms, 30s, 15m or 1h; got '{text}'")
    return int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2), 1)


def _boolean(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    """Scala's String.toBoolean: "true" or "false" in any case."""
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"{name} must be 'true' or 'false', got '{opts[key]}'")
    return value == "true"


def _choice(opts: dict[str, str], key: str, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = opts.get(key, default).strip().lower()
    if value not in allowed:
        raise OptionError(f"{name} must be one of {', '.join(allowed)}; got '{opts[key]}'")
    return value


def _isolation_level(opts: dict[str, str]) -> str:
    """`isolationLevel`, or Spark's way of saying it, `kafka.isolation.level`; both must agree."""
    ours = _choice(opts, "isolationlevel", "isolationLevel", ISOLATION_LEVELS, "read_uncommitted")
    theirs = _choice(opts, "kafka.isolation.level", "kafka.isolation.level", ISOLATION_LEVELS, ours)
    if "isolationlevel" in opts and theirs != ours:
        raise OptionError(f"isolationLevel '{ours}' and kafka.isolation.level '{theirs}' disagree; set one of them")
    return theirs


def _check_limits(starting: Bound, ending: Bound) -> None:
    """checkOffsetLimitValidity: specific start and end name the same partitions, start <= end."""
    for kind, what in (("offsets", "offset"), ("timestamps", "timestamp")):
        if starting.kind != kind or ending.kind != kind:
            continue
        start, end = starting.values, ending.values
        if set(start) != set(end):
            raise OptionError(f"The specified start {what} and end {what} should have the same topic-partitions. "
                              f"Topic-partitions for start {what}: {tp_names(start)}, "
                              f"topic-partitions for end {what}: {tp_names(end)}.")
        for tp, s in sorted(start.items()):
            e = end[tp]
            if s > e and s >= 0 and e >= 0:
                raise OptionError(f"The specified start {what} {s} is greater than the end {what} {e} "
                                  f"for topic {tp[0]} partition {tp[1]}.")
