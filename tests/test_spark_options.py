"""kafka-segments options: Spark's Kafka source names, forms, precedence and refusals (no Spark, no daemon)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from spark_client.errors import OptionError
from spark_client.options import DEFAULT_MAX_BYTES_PER_SPLIT, parse_options  # noqa: E402

BASE = {"lookupd.address": "/run/lookupd.sock", "subscribe": "orders"}


def opts(**changes):
    o = dict(BASE)
    for k, v in changes.items():
        if v is None:
            o.pop(k, None)
        else:
            o[k] = v
    return o


def rejected(options: dict) -> str:
    with pytest.raises(OptionError) as info:
        parse_options(options)
    return str(info.value)


def test_defaults_are_spark_batch_defaults():
    o = parse_options(BASE)
    assert (o.starting.kind, o.ending.kind) == ("earliest", "latest")
    assert o.strategy.kind == "subscribe" and o.strategy.topics == ("orders",)
    assert not o.include_headers and o.fail_on_data_loss and not o.read_committed
    assert o.no_match_strategy == "error" and o.min_partitions is None and o.max_records_per_partition is None
    assert o.max_bytes_per_split == DEFAULT_MAX_BYTES_PER_SPLIT and o.read_from == "auto"


def test_option_names_are_case_insensitive_and_kafka_options_are_accepted():
    o = parse_options({"LOOKUPD.ADDRESS": "h:1", "Subscribe": " a , b ,", "STARTINGOFFSETS": "Earliest",
                       "includeheaders": "TRUE", "kafka.bootstrap.servers": "broker:9092"})
    assert o.strategy.topics == ("a", "b") and o.include_headers and o.address == "h:1"


@pytest.mark.parametrize("strategies, message", [
    ({}, "One of the following options must be specified for Kafka source: subscribe, subscribepattern, assign"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options can be specified"),
    ({"subscribePattern": "a.*", "subscribe": "a"}, "Only one of the following options can be specified"),
    ({"assign": "orders"}, "No topicpartitions to assign as specified value for option 'assign' is 'orders'"),
    ({"assign": '{"orders": 0}'}, 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got {"orders": 0}'),
    ({"assign": '{"orders": [0, "x"]}'}, "Expected e.g."),
    ({"subscribe": " , "}, "No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
    ({"subscribePattern": "  "}, "Pattern to subscribe is empty"),
    ({"subscribePattern": "orders("}, "is not a valid regular expression"),
])
def test_strategy_refusals(strategies, message):
    assert message in rejected({"lookupd.address": "x.sock", **strategies})


def test_strategies():
    assert parse_options(opts(subscribe=None, assign='{"b":[1,0],"a":[2]}')).strategy.partitions == \
        (("a", 2), ("b", 0), ("b", 1))
    assert parse_options(opts(subscribe=None, subscribePattern="ord.*")).strategy.pattern == "ord.*"


@pytest.mark.parametrize("changes, message", [
    ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries on Kafka"),
    ({"startingOffsets": '{"orders":{"0":-1}}'}, "startingOffsets for orders-0 can't be latest for batch queries"),
    ({"endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries on Kafka"),
    ({"endingOffsets": '{"orders":{"0":-2}}'}, "ending offset for orders-0 can't be earliest for batch queries"),
    ({"startingOffsets": '{"orders":{"0":-7}}'}, "startingOffsets for orders-0 is -7"),
    ({"startingOffsets": "[1, 2]"}, 'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got [1, 2]'),
    ({"endingOffsets": '{"orders":{"zero":5}}'}, "Expected e.g."),
    ({"startingOffsets": '{"orders":{"0":true}}'}, "Expected e.g."),
    ({"startingTimestamp": "yesterday"}, "Expected a single long value, got yesterday"),
    ({"endingOffsetsByTimestamp": '{"orders": 5}'}, 'Expected e.g. {"topicA": {"0": 123456789'),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy must be 'error' or"),
    ({"startingOffsets": '{"orders":{"0":5}}', "endingOffsets": '{"orders":{"1":9}}'},
     "The specified start offset and end offset should have the same topic-partitions. Topic-partitions for "
     "start offset: [orders-0], topic-partitions for end offset: [orders-1]."),
    ({"startingOffsets": '{"orders":{"0":9}}', "endingOffsets": '{"orders":{"0":5}}'},
     "The specified start offset 9 is greater than the end offset 5 for topic orders partition 0."),
    ({"startingOffsetsByTimestamp": '{"orders":{"0":9}}', "endingOffsetsByTimestamp": '{"orders":{"0":5}}'},
     "The specified start timestamp 9 is greater than the end timestamp 5 for topic orders partition 0."),
    ({"minPartitions": "0"}, "minPartitions must be positive"),
    ({"minPartitions": "many"}, "minPartitions must be an integer, got 'many'"),
    ({"maxRecordsPerPartition": "-3"}, "maxRecordsPerPartition must be positive"),
    ({"maxBytesPerSplit": "0"}, "maxBytesPerSplit must be positive"),
    ({"includeHeaders": "yes"}, "includeHeaders must be 'true' or 'false', got 'yes'"),
    ({"failOnDataLoss": "0"}, "failOnDataLoss must be 'true' or 'false', got '0'"),
    ({"isolationLevel": "serializable"}, "isolationLevel must be one of read_uncommitted, read_committed"),
    ({"isolationLevel": "read_committed", "kafka.isolation.level": "read_uncommitted"}, "disagree"),
    ({"kafka.auto.offset.reset": "earliest"}, "Kafka option 'auto.offset.reset' is not supported"),
    ({"kafka.value.deserializer": "x"}, "Kafka option 'value.deserializer' is not supported"),
    ({"kafka.enable.auto.commit": "true"}, "Kafka option 'enable.auto.commit' is not supported"),
    ({"lookupd.readFrom": "nfs"}, "lookupd.readFrom must be one of auto, files, daemon"),
    ({"lookupd.address": None}, "Option 'lookupd.address' must be specified"),
    ({"lookupd.address": '{"broker-1": 9470}'}, "Expected e.g. {\"broker-1\": \"broker-1:9470\""),
    ({"lookupd.address": "{}"}, "Expected e.g."),
])
def test_refusals(changes, message):
    assert message in rejected(opts(**changes))


def test_per_partition_offsets_with_earliest_and_latest():
    o = parse_options(opts(startingOffsets='{"orders":{"0":23,"1":-2}}', endingOffsets='{"orders":{"0":50,"1":-1}}'))
    assert o.starting.values == {("orders", 0): 23, ("orders", 1): -2}
    assert o.ending.values == {("orders", 0): 50, ("orders", 1): -1}


def test_timestamp_options_take_precedence_as_in_spark():
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets (even a refused 'latest')."""
    o = parse_options(opts(startingTimestamp="1000", startingOffsetsByTimestamp='{"orders":{"0":5}}',
                           startingOffsets="latest", endingOffsetsByTimestamp='{"orders":{"0":7}}',
                           endingOffsets="earliest"))
    assert (o.starting.kind, o.starting.timestamp) == ("timestamp", 1000)
    assert o.ending.kind == "timestamps" and o.ending.values == {("orders", 0): 7}


def test_isolation_level_either_way():
    assert parse_options(opts(isolationLevel="READ_COMMITTED")).read_committed
    assert parse_options({**BASE, "kafka.isolation.level": "read_committed"}).read_committed
    assert parse_options(opts(isolationLevel="read_committed", **{"kafka.isolation.level": "read_committed"})) \
        .read_committed


def test_address_forms():
    assert parse_options(opts(**{"lookupd.address": " 10.0.0.5:9470 "})).address == "10.0.0.5:9470"
    spec = '{"broker-1": "broker-1:9470", "orders-0": " /run/b2.sock "}'
    assert parse_options(opts(**{"lookupd.address": spec})).address == \
        {"broker-1": "broker-1:9470", "orders-0": "/run/b2.sock"}


def test_remote_options_default_to_the_daemons_each_one():
    from spark_client.remote import resolve_location

    daemon = {"bucket": "tiered", "prefix": "p/", "endpoint_url": "http://store:8333", "region": "eu-west-1"}
    o = parse_options(opts(**{"lookupd.remote.endpoint_url": "http://other:9000",
                              "lookupd.remote.encryption.keys": '{"key-1": "key-1.pem"}'}))
    got = resolve_location(o.remote, daemon)
    assert (got.bucket, got.prefix, got.endpoint_url, got.region) == ("tiered", "p/", "http://other:9000", "eu-west-1")
    assert got.encryption_keys == (("key-1", "key-1.pem"),)
    assert resolve_location(parse_options(opts()).remote, None) is None  # no bucket anywhere: through the daemon
    alone = resolve_location(parse_options(opts(**{"lookupd.remote.bucket": "b"})).remote, None)
    assert (alone.bucket, alone.prefix, alone.endpoint_url, alone.region) == ("b", "", None, "us-east-1")
    for bad in ('["key-1.pem"]', '{"key-1": 7}', "not json"):
        with pytest.raises(OptionError, match="lookupd.remote.encryption.keys"):
            parse_options(opts(**{"lookupd.remote.encryption.keys": bad}))
    with pytest.raises(OptionError, match="lookupd.remote.bucket"):
        parse_options(opts(**{"lookupd.remote.bucket": " "}))
