"""lookupd.startingGroup: a Spark read that starts where a consumer group committed (real local Spark, a
daemon subprocess), `earliest` or `latest` for the partitions the group has no commit for."""

from __future__ import annotations

import os
import tempfile

import pytest

from coordinator_writer import CoordinatorLog, Record, commit_key, commit_value
from lookupd.format.builder import build_batch
from lookupd.format.internal.topics import partition_for
from lookupd.tools.writer import LogWriter
from spark_fixtures import spark  # noqa: F401 - a fixture

from spark_client.examples.with_daemon import running_daemon  # noqa: E402
from spark_client.errors import OptionError  # noqa: E402
from spark_client.options import parse_options, parse_stream_options  # noqa: E402


@pytest.fixture(scope="module")
def group_daemon():
    with tempfile.TemporaryDirectory(prefix="lkg", dir="/tmp") as d:
        logs = os.path.join(d, "logs")
        for p in range(2):
            w = LogWriter(os.path.join(logs, f"orders-{p}"))
            w.append(build_batch([(1_767_225_600_000 + i, f"k{i}".encode(), b"v", ()) for i in range(30)],
                                 base_offset=0))
            w.close()
        log = CoordinatorLog(os.path.join(logs, f"__consumer_offsets-{partition_for('etl')}"))
        log.write([Record(commit_key("etl", "orders", 0), commit_value(10))])
        log.write([Record(commit_key("etl", "orders", 1), commit_value(99))], producer_id=5, producer_epoch=0)
        log.close()  # the commit on orders-1 is pending (no marker): not where the group is
        sock = os.path.join(d, "s")
        with running_daemon([logs], sock):
            yield sock


def offsets(spark, sock, **options):
    df = spark.read.format("kafka-segments").option("lookupd.address", sock).option("subscribe", "orders") \
        .options(**options).load()
    rows = df.select("partition", "offset").collect()
    return {p: sorted(r.offset for r in rows if r.partition == p) for p in (0, 1)}


def test_a_read_starts_at_the_groups_committed_offsets(spark, group_daemon):
    read = offsets(spark, group_daemon, **{"lookupd.startingGroup": "etl"})
    assert read == {0: list(range(10, 30)), 1: list(range(30))}
    read = offsets(spark, group_daemon, **{"lookupd.startingGroup": "etl", "lookupd.startingGroupReset": "latest"})
    assert read == {0: list(range(10, 30)), 1: []}
    assert offsets(spark, group_daemon, **{"lookupd.startingGroup": "etl", "startingOffsets": "latest"})[1] == []
    # a group that committed nothing starts everywhere at the reset, as a new Kafka consumer does
    new = next(g for g in (f"new-{i}" for i in range(1000)) if partition_for(g) == partition_for("etl"))
    assert offsets(spark, group_daemon, **{"lookupd.startingGroup": new}) == {0: list(range(30)), 1: list(range(30))}
    # one whose __consumer_offsets partition no daemon serves cannot be known: an error, not a guess
    elsewhere = next(g for g in (f"x-{i}" for i in range(1000)) if partition_for(g) != partition_for("etl"))
    with pytest.raises(Exception, match="no lookupd serves its __consumer_offsets partition"):
        offsets(spark, group_daemon, **{"lookupd.startingGroup": elsewhere})


def test_starting_group_options_are_checked():
    base = {"lookupd.address": "/s", "subscribe": "orders"}
    o = parse_options({**base, "lookupd.startingGroup": " etl "})
    assert (o.starting.kind, o.starting.group, o.starting.reset) == ("group", "etl", "earliest")
    assert parse_stream_options({**base, "lookupd.startingGroup": "etl"}).starting.reset == "latest"
    for extra, why in (({"startingOffsets": '{"orders":{"0":1}}'}, "specific startingOffsets"),
                       ({"startingTimestamp": "1"}, "startingTimestamp"),
                       ({"lookupd.startingGroupReset": "none"}, "must be 'earliest' or 'latest'")):
        with pytest.raises(OptionError, match=why):
            parse_options({**base, "lookupd.startingGroup": "etl", **extra})
    with pytest.raises(OptionError, match="must name a consumer group"):
        parse_options({**base, "lookupd.startingGroup": " "})
