"""ObjectStore against a real S3 server (SeaweedFS), faults injected by a proxy in front of it."""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from faultproxy import FaultProxy
from lookupd.errors import Unauthorized, Unavailable
from lookupd.log.remote.config import RemoteConfig
from lookupd.log.remote.store import ObjectNotFound, ObjectStore
from s3server import s3_server  # noqa: F401 - fixture

DATA = os.urandom(100_000)


@pytest.fixture
def bucket(s3_server):
    name = s3_server.bucket()
    s3_server.client().put_object(Bucket=name, Key="t-AAAAAAAAAAAAAAAAAAAAAA/0/obj.log", Body=DATA)
    return name


def _store(endpoint: str, bucket: str, tmp_path, **kw) -> ObjectStore:
    return ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(tmp_path / "cache"), endpoint_url=endpoint), **kw)


KEY = "t-AAAAAAAAAAAAAAAAAAAAAA/0/obj.log"


def test_ranged_gets_whole_gets_and_sizes(s3_server, bucket, tmp_path):
    store = _store(s3_server.endpoint_url, bucket, tmp_path)
    assert store.get(KEY) == DATA
    assert store.size(KEY) == len(DATA)
    assert store.get_range(KEY, 0, 1) == DATA[:1]
    assert store.get_range(KEY, 12345, 67890) == DATA[12345:67890]
    assert store.get_range(KEY, len(DATA) - 10, len(DATA) + 100) == DATA[-10:]  # clipped at the object's end
    assert store.get_range(KEY, len(DATA), len(DATA) + 5) == b""
    assert store.get_range(KEY, 5, 5) == b""


def test_listing_follows_continuation_pages(s3_server, tmp_path):
    name = s3_server.bucket()
    client = s3_server.client()
    keys = [f"p/{i:05d}" for i in range(1003)]  # S3 answers at most 1000 keys a page
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=name, Key=k, Body=k.encode()), keys))
    client.put_object(Bucket=name, Key="q/other", Body=b"x")
    store = _store(s3_server.endpoint_url, name, tmp_path)
    listed = store.list("p/")
    assert [o.key for o in listed] == keys
    assert all(o.size == len(o.key) for o in listed)
    assert store.list_dirs("") == ["p/", "q/"]
    assert [o.key for o in store.list("p/0100")] == [f"p/{i:05d}" for i in range(1000, 1003)]  # mid-name
    assert store.list_dirs("q") == ["q/"]


def test_concurrent_ranged_gets_from_many_threads(s3_server, bucket, tmp_path):
    store = _store(s3_server.endpoint_url, bucket, tmp_path)
    ranges = [(i * 997 % 90_000, i * 997 % 90_000 + 1 + i * 31) for i in range(64)]
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda r: store.get_range(KEY, *r), ranges))
    assert got == [DATA[a:b] for a, b in ranges]


@pytest.mark.parametrize("fault", ["503", "slowdown", "500", "reset"])
def test_transient_faults_are_retried(s3_server, bucket, tmp_path, fault):
    with FaultProxy(s3_server.endpoint_url) as proxy:
        rule = proxy.inject("GET", r"obj\.log$", fault, times=2)
        store = _store(proxy.url, bucket, tmp_path)
        assert store.get_range(KEY, 100, 200) == DATA[100:200]
        assert rule.hits == 2
        assert sum(1 for m, p, _ in proxy.requests if m == "GET") == 3


@pytest.mark.parametrize("fault", ["503", "slowdown", "reset"])
def test_a_store_that_keeps_failing_is_unavailable_naming_bucket_and_key(s3_server, bucket, tmp_path, fault):
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", r"obj\.log$", fault)
        store = _store(proxy.url, bucket, tmp_path, attempts=3)
        with pytest.raises(Unavailable) as e:
            store.get_range(KEY, 0, 10)
        assert not isinstance(e.value, ObjectNotFound)
        assert f"s3://{bucket}/{KEY}" in str(e.value)
        assert sum(1 for m, p, _ in proxy.requests if m == "GET") == 3


def test_a_slow_answer_times_out_and_is_retried(s3_server, bucket, tmp_path):
    with FaultProxy(s3_server.endpoint_url) as proxy:
        rule = proxy.inject("GET", r"obj\.log$", "slow", times=1, delay=1.5)
        store = _store(proxy.url, bucket, tmp_path, request_timeout=0.5)
        assert store.get_range(KEY, 0, 10) == DATA[:10]
        assert rule.hits == 1


def test_403_is_unauthorized(s3_server, bucket, tmp_path):
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", r"obj\.log$", "403")
        store = _store(proxy.url, bucket, tmp_path)
        with pytest.raises(Unauthorized, match=f"s3://{bucket}/{KEY}"):
            store.get(KEY)
        assert len(proxy.requests) == 1  # never retried


def test_wrong_credentials_are_unauthorized(s3_server, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = _store(s3_server.endpoint_url, bucket, tmp_path)
    with pytest.raises(Unauthorized, match="check the AWS credentials"):
        store.get_range(KEY, 0, 10)
    with pytest.raises(Unauthorized):
        store.list("")


def test_a_whole_object_damaged_in_transit_is_retried(s3_server, bucket, tmp_path):
    """Whole GETs (manifests) are checked against the store's full-object checksum."""
    with FaultProxy(s3_server.endpoint_url) as proxy:
        rule = proxy.inject("GET", r"obj\.log$", "corrupt", times=1, at=777)
        store = _store(proxy.url, bucket, tmp_path, attempts=3)
        assert store.get(KEY) == DATA
        assert rule.hits == 1
        proxy.inject("GET", r"obj\.log$", "corrupt", at=777)
        with pytest.raises(Unavailable, match=f"s3://{bucket}/{KEY}.*after 3 attempts.*Checksum"):
            store.get(KEY)


def test_no_credentials_at_all_is_unauthorized_saying_so(s3_server, bucket, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = _store(s3_server.endpoint_url, bucket, tmp_path)
    for call in (lambda: store.get_range(KEY, 0, 10), lambda: store.get(KEY), lambda: store.list("")):
        with pytest.raises(Unauthorized, match="no AWS credentials were found"):
            call()


def test_a_deleted_object_is_not_found(s3_server, bucket, tmp_path):
    store = _store(s3_server.endpoint_url, bucket, tmp_path)
    with pytest.raises(ObjectNotFound, match="no such object"):
        store.get("t-AAAAAAAAAAAAAAAAAAAAAA/0/gone.rsm-manifest")
    with pytest.raises(ObjectNotFound, match="no such object"):
        store.get_range("t-AAAAAAAAAAAAAAAAAAAAAA/0/gone.log", 0, 10)
    with pytest.raises(ObjectNotFound):
        store.size("t-AAAAAAAAAAAAAAAAAAAAAA/0/gone.log")


def test_a_missing_bucket_says_so(s3_server, tmp_path):
    store = _store(s3_server.endpoint_url, "no-such-bucket-here", tmp_path)
    with pytest.raises(Unavailable, match="does not exist"):
        store.list("")


def test_a_store_that_is_down_is_unavailable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    store = _store(f"http://127.0.0.1:{port}", "bucket", tmp_path, attempts=2)
    with pytest.raises(Unavailable, match=r"s3://bucket/k.*after 2 attempts"):
        store.get_range("k", 0, 10)
