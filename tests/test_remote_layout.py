"""The plugin's object keys: parsed and formatted, and which segments and partitions a bucket lists."""

from __future__ import annotations

import pytest

from lookupd.log.remote.config import RemoteConfig
from lookupd.log.tiered.layout import (RemotePartition, SegmentKeys, list_partitions, list_segments, parse_key,
                                      partition_dirs)
from lookupd.log.remote.store import ObjectStore
from s3server import s3_server  # noqa: F401 - fixture

TID = "MWJ6FHTfRYy67jzwZdeqSQ"
SID = "tqimKeZwStOEOwRzT3L5oQ"


def test_the_plugins_example_key_round_trips():
    key = f"someprefix/topic-{TID}/7/00000000000000001234-{SID}.log"  # ObjectKeyFactory's own example
    keys, suffix = parse_key("someprefix/", key)
    assert suffix == "log"
    assert keys == SegmentKeys(1234, SID, RemotePartition("topic", 7, TID), "someprefix/")
    assert keys.log == key
    assert keys.manifest == key[:-3] + "rsm-manifest" and keys.indexes == key[:-3] + "indexes"


@pytest.mark.parametrize("topic", ["a", "my-topic", "x.y_z-1", "t-" + TID])  # dashes, and a dash-id lookalike
def test_topics_with_dashes_split_at_the_id(topic):
    tid = "-" + TID[1:]  # an id may itself start with "-" (base64url)
    key = f"{topic}-{tid}/0/00000000000000000000-{SID}.rsm-manifest"
    keys, suffix = parse_key("", key)
    assert (keys.partition.topic, keys.partition.topic_id, suffix) == (topic, tid, "rsm-manifest")
    assert keys.manifest == key


@pytest.mark.parametrize("key", [
    f"other/t-{TID}/0/00000000000000000000-{SID}.log",        # another prefix
    f"t-{TID}/0/0000000000000000000-{SID}.log",              # 19 digits
    f"t-{TID}/0/00000000000000000000-{SID}.txt",             # unknown suffix
    f"t-{TID}/00/00000000000000000000-{SID}.log",            # partition with a leading zero
    f"t-{TID}/2147483648/00000000000000000000-{SID}.log",    # partition beyond int32
    f"t-short/0/00000000000000000000-{SID}.log",             # no 22-character topic id
    f"t-{TID}/0/x/00000000000000000000-{SID}.log",           # too deep
    f"t-{TID}/0/00000000000000000000-{SID[:-1]}.log",        # short segment id
])
def test_other_keys_are_not_segments(key):
    assert parse_key("" if not key.startswith("other/") else "p/", key) is None


def _put(client, bucket, keys):
    for k in keys:
        client.put_object(Bucket=bucket, Key=k, Body=b"x" * len(k))


@pytest.mark.parametrize("prefix", ["", "tiered/", "prod-"])
def test_listing_keeps_complete_uploads_and_finds_every_partition(s3_server, tmp_path, prefix):
    bucket = s3_server.bucket()
    client = s3_server.client()
    p0 = RemotePartition("orders", 0, TID)
    p3 = RemotePartition("orders", 3, TID)
    other = RemotePartition("my-events", 12, "AAAAAAAAAAAAAAAAAAAAAA")
    sid2 = "B" * 22
    complete = [SegmentKeys(0, SID, p0, prefix), SegmentKeys(100, SID, p0, prefix), SegmentKeys(100, sid2, p0, prefix)]
    incomplete = SegmentKeys(200, SID, p0, prefix)  # copy in progress: no manifest yet
    _put(client, bucket, [k.key(s) for k in complete for s in ("log", "indexes", "rsm-manifest")])
    _put(client, bucket, [incomplete.log, incomplete.indexes])
    _put(client, bucket, [SegmentKeys(5, SID, p3, prefix).manifest, SegmentKeys(0, SID, other, prefix).manifest,
                          prefix + "unrelated/file.txt", "elsewhere/" + SegmentKeys(0, SID, p0, "").log])
    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(tmp_path), endpoint_url=s3_server.endpoint_url))
    listed = list_segments(store, prefix, p0)
    assert [s.keys for s in listed] == sorted(complete)  # by start offset, then segment id
    assert [s.keys.segment_id for s in listed] == [SID, sid2, SID]
    assert listed[0].log_size == len(complete[0].log) and listed[0].manifest_size == len(complete[0].manifest)
    assert list_partitions(store, prefix) == sorted([p0, p3, other])
    again = RemotePartition("orders", 3, "C" * 22)  # the topic deleted and created again: a second id
    _put(client, bucket, [SegmentKeys(0, SID, again, prefix).manifest])
    assert partition_dirs(store, prefix, "orders", 3) == sorted([p3, again])
    assert partition_dirs(store, prefix, "orders", 0) == [p0]
    assert partition_dirs(store, prefix, "orders", 1) == [] and partition_dirs(store, prefix, "my", 12) == []
    skipped = []  # an upload whose .log and .indexes are gone (deleted under us, or never written): not readable
    assert list_segments(store, prefix, p3, skipped) == [] and skipped == [SegmentKeys(5, SID, p3, prefix).manifest]
