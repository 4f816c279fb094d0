"""Faults of the remote tier through the log layer and the service, a real S3 server behind a fault proxy:
each ends in a clear error (never INTERNAL), and local answers go on meanwhile."""

from __future__ import annotations

import dataclasses

import pytest

import reference as R
from faultproxy import FaultProxy
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, WrappingKey

from lookupd.daemon.service import Service, Session
from lookupd.errors import LookupdError
from lookupd.log.logmanager import LogManager
from lookupd.log.tiered.listing import RemoteTier

TRUSTED = Session(trusted=True)


def _answer(service: Service, method: str, *params):
    try:
        return service.call(method, list(params), TRUSTED)
    except LookupdError as err:
        return ("error", err.code, str(err))


@pytest.fixture
def tiered(s3_server, tmp_path):  # noqa: F811
    """plain-0 with its first three segments remote, served through a fault proxy."""
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3, metadata_topic=False,
                       opts=Options(encryption=WrappingKey.create(tmp_path)))
    with FaultProxy(s3_server.endpoint_url) as proxy:
        config = dataclasses.replace(t.config, endpoint_url=proxy.url)
        lm = LogManager([t.tiered_dir], remote=RemoteTier(config))
        try:
            yield t, proxy, Service(lm), lm
        finally:
            lm.close()


REMOTE_OFFSET = 100  # in the first (remote) segment
LOCAL_OFFSET = 800   # in a local one


def _local_goes_on(s: Service) -> None:
    assert _answer(s, "resolve_offset", "plain", 0, LOCAL_OFFSET)["base_offset"] <= LOCAL_OFFSET


@pytest.mark.parametrize("fault", ["503", "slowdown", "reset"])
def test_transient_faults_are_retried(tiered, fault):
    t, proxy, s, _ = tiered
    proxy.inject("GET", r"\.(log|indexes|rsm-manifest)$", fault, times=2)
    got = _answer(s, "resolve_offset", "plain", 0, REMOTE_OFFSET)
    assert got["segment"] == 0 and got["base_offset"] <= REMOTE_OFFSET <= got["last_offset"]


@pytest.mark.parametrize("fault,code", [("503", "UNAVAILABLE"), ("403", "UNAUTHORIZED")])
def test_lasting_faults_name_bucket_and_key(tiered, fault, code):
    t, proxy, s, _ = tiered
    proxy.inject("GET", r"\.(log|indexes|rsm-manifest)$", fault)
    for call in (("read", REMOTE_OFFSET, 100), ("offset_for_timestamp", 0), ("lookup_offset", REMOTE_OFFSET, "floor")):
        err = _answer(s, call[0], "plain", 0, *call[1:])
        assert err[:2] == ("error", code), (call, err)
        assert f"s3://{t.config.bucket}/" in err[2], err
    _local_goes_on(s)


def test_a_store_that_resets_every_connection(tiered):
    """As good as down (H5's store tests cover a closed port): UNAVAILABLE after the retries; a listing
    that fails keeps the last one, so the partition keeps its remote segments and its log start."""
    t, proxy, s, lm = tiered
    proxy.inject("*", r".", "reset")
    err = _answer(s, "read", "plain", 0, REMOTE_OFFSET, 100)
    assert err[:2] == ("error", "UNAVAILABLE") and t.config.bucket in err[2], err
    _local_goes_on(s)
    lm.refresh(remote=True)
    plain = [p for p in _answer(s, "partitions") if p["topic"] == "plain"][0]
    assert plain["log_start_offset"] == 0 and plain["local_log_start_offset"] > 0


def test_a_corrupt_chunk_is_corrupt_data_naming_key_and_byte(tiered):
    t, proxy, s, _ = tiered
    proxy.inject("GET", r"\.log$", "corrupt", at=40)
    err = _answer(s, "read", "plain", 0, REMOTE_OFFSET, 100)
    assert err[:2] == ("error", "CORRUPT_DATA"), err
    assert t.uploaded[0].log_key in err[2] and "byte" in err[2], err
    _local_goes_on(s)


def test_a_manifest_damaged_in_transit_is_retried_then_unavailable(tiered):
    """A whole-object GET carries the store's checksum: damage on the way is retried, never INTERNAL."""
    t, proxy, _, _ = tiered
    proxy.inject("GET", t.uploaded[0].manifest_key.rsplit("/", 1)[1] + "$", "corrupt", at=0)
    lm = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config, endpoint_url=proxy.url)))
    try:
        err = _answer(Service(lm), "read", "plain", 0, REMOTE_OFFSET, 100)
        assert err[:2] == ("error", "UNAVAILABLE") and t.uploaded[0].manifest_key in err[2], err
        _local_goes_on(Service(lm))
    finally:
        lm.close()


def test_a_corrupt_manifest_is_corrupt_data(tiered, s3_server):  # noqa: F811
    """Stored corrupt, met while listing: the segment stays listed (its bounds unknown) and its reads say
    what is wrong; the other segments answer."""
    t, proxy, _, _ = tiered
    key = t.uploaded[0].manifest_key
    client = s3_server.client()
    body = client.get_object(Bucket=t.config.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=t.config.bucket, Key=key, Body=body[:40] + b"\x00" + body[41:])
    lm = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config, endpoint_url=proxy.url)))
    try:
        s = Service(lm)
        err = _answer(s, "read", "plain", 0, REMOTE_OFFSET, 100)
        assert err[:2] == ("error", "CORRUPT_DATA") and t.uploaded[0].manifest_key in err[2], err
        second = t.uploaded[1].facts.base_offset
        assert _answer(s, "read", "plain", 0, second, 100)["segment"] == second
        _local_goes_on(s)
    finally:
        lm.close()


def test_a_missing_key_id_is_corrupt_data(s3_server, tmp_path):  # noqa: F811
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3, metadata_topic=False,
                       opts=Options(encryption=WrappingKey.create(tmp_path)))
    lm = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config, encryption_keys={})))
    try:
        err = _answer(Service(lm), "read", "plain", 0, REMOTE_OFFSET, 100)
        assert err[:2] == ("error", "CORRUPT_DATA") and "key-1" in err[2] and "[remote.encryption.keys]" in err[2]
    finally:
        lm.close()


def test_a_segment_deleted_by_retention_drops_out(tiered, s3_server):  # noqa: F811
    """Deleted after the listing: the read that misses it lists again; the log start moves past it, so a read
    below it is OFFSET_OUT_OF_RANGE, and the rest answers."""
    t, proxy, s, lm = tiered
    first = t.uploaded[0]
    client = s3_server.client()
    for key in (first.manifest_key, first.log_key, first.indexes_key):
        client.delete_object(Bucket=t.config.bucket, Key=key)
    err = _answer(s, "read", "plain", 0, REMOTE_OFFSET, 100)
    assert err[:2] == ("error", "OFFSET_OUT_OF_RANGE"), err
    second = t.uploaded[1].facts.base_offset
    assert _answer(s, "offset_for_timestamp", "plain", 0, -2)["offset"] == second
    assert _answer(s, "read", "plain", 0, second, 100)["segment"] == second
    _local_goes_on(s)


def test_a_store_down_at_start_makes_older_offsets_unavailable_not_out_of_range(s3_server, tmp_path):  # noqa: F811
    """Never a wrong answer: while the bucket has never been listed, an offset below the local log start of
    a partition with a topic id may be remote; once the store answers, the next rescan lists it."""
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("*", r".", "503")
        lm = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config, endpoint_url=proxy.url)))
        try:
            s = Service(lm)
            err = _answer(s, "read", "plain", 0, REMOTE_OFFSET, 100)
            assert err[:2] == ("error", "UNAVAILABLE") and "remote tier" in err[2], err
            _local_goes_on(s)
            proxy.clear()
            lm.refresh()
            assert _answer(s, "read", "plain", 0, REMOTE_OFFSET, 100)["segment"] == 0
        finally:
            lm.close()
