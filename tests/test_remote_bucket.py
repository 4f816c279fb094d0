"""A Bucket's segments (the chunk cache over the chunk fetcher and transforms, the index files) over a real S3 server: byte-identical reads of Kafka-written segments for every upload
variant, indexes fetched once, the cache bound, read-ahead, and corruption named by key and byte."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as R
import lookupd.tools.tieredwriter as W
from faultproxy import FaultProxy
from lookupd.errors import CorruptDataError
from lookupd.log.remote import chunkcache
from lookupd.log.remote.bucket import Bucket
from lookupd.log.remote.chunks import MAX_GET_BYTES
from lookupd.log.remote.config import RemoteConfig
from lookupd.log.remote.diskcache import MARKER, DiskCache
from lookupd.log.remote.keyring import Keyring
from lookupd.log.remote.store import ObjectNotFound, ObjectStore
from s3server import s3_server  # noqa: F401 - fixture

PARTITIONS = ["txn-0", "compressed-0", "logappend-0"]  # transactions, compressed batches, legacy formats
VARIANTS = {
    "plain": dict(chunk_size=4096),
    "plain-variable": dict(chunk_size=3000, variable_index=True),
    "zstd": dict(chunk_size=5000, compression=True, with_metadata=False),
    "encrypted": dict(chunk_size=4096, encryption=True),
    "zstd-encrypted": dict(chunk_size=1100, compression=True, encryption=True),  # MIN_CHUNK_BYTES: 1 KiB
}


@pytest.fixture(scope="module")
def tiered(s3_server, tmp_path_factory):
    """variant -> (bucket, [Uploaded]) for every partition; plus the key pair the encrypted ones use."""
    keydir = tmp_path_factory.mktemp("keys")
    key = W.WrappingKey.create(keydir)
    client = s3_server.client()
    out = {}
    for name, kw in VARIANTS.items():
        bucket = s3_server.bucket()
        opts = W.Options(**{**kw, "encryption": key if kw.get("encryption") else None})
        uploads = []
        for p in PARTITIONS:
            uploads += W.upload_partition(client, bucket, R.log_dir(p), opts=opts)
        out[name] = (bucket, uploads)
    return out, key


def _open(endpoint, bucket, up, key, cache_dir, cache_bytes=10 ** 9, store=None):
    """A fresh reader with its own cache (and its own store, so request counts are its own)."""
    store = store or ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(cache_dir), endpoint_url=endpoint))
    cache = DiskCache(str(cache_dir), cache_bytes)
    return Bucket(store, Keyring({key.key_id: key.pem_path}), cache).segment(up.log_key)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_segment_reads_back_byte_identical_with_its_indexes(s3_server, tiered, tmp_path, variant):
    (buckets, key) = tiered
    bucket, uploads = buckets[variant]
    assert len(uploads) > 40
    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(tmp_path), endpoint_url=s3_server.endpoint_url))
    for up in uploads:
        seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path / up.log_key.replace("/", "_"), store=store)
        original = up.segment.read_bytes()
        assert seg.size == len(original)
        assert seg.read(0, seg.size + 100) == original
        assert seg.read(seg.size, 10) == b""
        for kind, raw in up.indexes.items():
            with open(seg.index_path(kind), "rb") as f:
                assert f.read() == raw, kind
        if "transaction" not in up.indexes:
            assert seg.index_path("transaction") is None


@pytest.mark.parametrize("variant", ["plain", "zstd-encrypted"])
def test_random_ranges_match_the_segment(s3_server, tiered, tmp_path_factory, variant):
    (buckets, key) = tiered
    bucket, uploads = buckets[variant]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    original = up.segment.read_bytes()

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=s3_server.endpoint_url))

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(original) + 10), st.integers(0, 3 * 4096 + 7))
    def check(position, size):
        seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path_factory.mktemp("c"), store=store)
        want = original[position:position + size]
        assert seg.read(position, size) == want
        out = bytearray(b"\xee" * (size + 3))  # read_into (the mount's path) gives read's bytes, nothing past them
        assert seg.read_into(position, memoryview(out)[:size]) == len(want)
        assert out == want + b"\xee" * (size + 3 - len(want))

    check()


def test_adjacent_chunks_are_fetched_in_one_get_and_cached_reads_fetch_nothing(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["encrypted"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path)
    chunks = seg.manifest.chunk_index.chunk_count
    assert chunks >= 4
    before = seg.store.requests
    assert seg.read(10, seg.size) == up.segment.read_bytes()[10:]
    assert seg.store.requests - before == 1
    seg.read(0, seg.size)
    seg.read(5000, 3)
    assert seg.store.requests - before == 1


def test_indexes_are_fetched_once_and_offset_with_time_index_in_one_get(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["encrypted"]
    up = next(u for u in uploads if u.indexes["offset"] and u.indexes["timestamp"])
    seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path)
    before = seg.store.requests, seg.store.bytes_fetched
    paths = seg.index_paths(["offset", "timestamp"])
    assert seg.store.requests - before[0] == 1
    pos, size = seg.manifest.indexes["timestamp"]
    assert seg.store.bytes_fetched - before[1] == pos + size  # just those two, nothing of the others
    assert seg.index_path("offset") == paths["offset"] and seg.index_path("timestamp") == paths["timestamp"]
    assert seg.store.requests - before[0] == 1
    # A new reader over the same cache dir (a restart) finds them on disk.
    again = _open(s3_server.endpoint_url, bucket, up, key, tmp_path)
    assert open(again.index_path("offset"), "rb").read() == up.indexes["offset"]
    assert again.store.requests == 1  # its manifest only


def test_the_cache_stays_within_its_bound(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["zstd"]
    limit = 40_000
    total_read = 0
    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(tmp_path), endpoint_url=s3_server.endpoint_url))
    for up in uploads[:15]:
        seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path, cache_bytes=limit, store=store)
        assert seg.read(0, seg.size) == up.segment.read_bytes()
        seg.index_path("offset")
        seg.chunks.disk.flush()
        total_read += seg.size
        on_disk = sum(e.stat().st_size for e in os.scandir(tmp_path) if e.name != MARKER)
        assert on_disk <= limit
        assert seg.chunks.disk.disk_bytes == on_disk
    assert total_read > 5 * limit
    # A restart adopts what is there, within a smaller bound too.
    cache = DiskCache(str(tmp_path), limit // 2)
    assert cache.disk_bytes <= limit // 2 == cache.limit
    assert sum(e.stat().st_size for e in os.scandir(tmp_path) if e.name != MARKER) == cache.disk_bytes


def _settle(seg) -> None:
    deadline = time.monotonic() + 30
    while seg.chunks._inflight and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("hint", [None, True, False])
def test_sequential_reads_are_read_ahead(s3_server, tiered, tmp_path, hint):
    (buckets, key) = tiered
    bucket, uploads = buckets["plain"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path)
    original = up.segment.read_bytes()
    step = seg.manifest.chunk_index.chunk_size
    chunks = seg.manifest.chunk_index.chunk_count
    assert 6 <= chunks and seg.size < chunkcache.READ_AHEAD_GET_BYTES  # one read-ahead GET covers the rest
    assert seg.read(0, step, sequential=hint) == original[:step]
    _settle(seg)
    assert seg.read(step, step, sequential=hint) == original[step:2 * step]
    _settle(seg)
    fetched = seg.store.requests
    # The manifest, then: told it is a scan, chunk 0 and one read-ahead GET of all the rest; found out
    # (a read starting where the last ended), chunk 0, chunk 1, and the read-ahead started before it.
    assert fetched == {True: 3, None: 4, False: 3}[hint]
    position = 2 * step
    while position < seg.size:
        assert seg.read(position, step, sequential=hint) == original[position:position + step]
        position += step
    if hint is False:  # never ahead: one GET per chunk read
        assert seg.store.requests == fetched + chunks - 2
    else:  # every later chunk came from the read-ahead
        assert seg.store.requests == fetched


def test_concurrent_readers_of_one_segment_agree(s3_server, tiered, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    (buckets, key) = tiered
    bucket, uploads = buckets["zstd-encrypted"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path, cache_bytes=20_000)
    original = up.segment.read_bytes()
    ranges = [((i * 7919) % seg.size, 1 + (i * 104729) % 9000) for i in range(200)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda r: seg.read(*r, sequential=r[0] % 2 == 0), ranges))
    assert got == [original[p:p + n] for p, n in ranges]


def test_a_corrupt_encrypted_chunk_names_the_key_and_byte(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["encrypted"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", r"\.log$", "corrupt", at=100)
        seg = _open(proxy.url, bucket, up, key, tmp_path)
        chunk = seg.manifest.chunk_index.transformed_start(2)
        for read in (lambda: seg.read(2 * 4096 + 5, 10), lambda: seg.read_into(2 * 4096 + 5, memoryview(bytearray(10)))):
            with pytest.raises(CorruptDataError, match="AES-GCM tag mismatch") as e:
                read()  # chunk 2 alone
            assert e.value.path == up.log_key and e.value.position == chunk
            assert f"{up.log_key} at byte {chunk}: chunk 2" in str(e.value)


def test_a_corrupt_compressed_chunk_is_corrupt_data(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["zstd"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", r"\.log$", "corrupt", at=0)  # the zstd magic of the first chunk fetched
        seg = _open(proxy.url, bucket, up, key, tmp_path)
        with pytest.raises(CorruptDataError, match="chunk 0: not a zstd frame") as e:
            seg.read(0, 10)
        assert e.value.path == up.log_key and e.value.position == 0


def test_a_corrupt_encrypted_index_names_the_indexes_key(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["encrypted"]
    up = next(u for u in uploads if u.indexes["offset"])
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", r"\.indexes$", "corrupt", at=20)
        seg = _open(proxy.url, bucket, up, key, tmp_path)
        with pytest.raises(CorruptDataError, match="offset index: AES-GCM tag mismatch") as e:
            seg.index_path("offset")
        assert e.value.path == up.indexes_key and e.value.position == 0


def test_a_missing_or_wrong_key_is_corrupt_data_naming_the_manifest(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["encrypted"]
    up = uploads[0]
    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(tmp_path), endpoint_url=s3_server.endpoint_url))
    cache = DiskCache(str(tmp_path), 10 ** 8)
    seg = Bucket(store, Keyring({}), cache).segment(up.log_key)
    with pytest.raises(CorruptDataError, match="key id 'key-1'.*remote.encryption.keys") as e:
        seg.read(0, 10)
    assert e.value.path == up.manifest_key
    other = W.WrappingKey.create(tmp_path, "key-1-other")
    seg = Bucket(store, Keyring({"key-1": other.pem_path}), cache).segment(up.log_key)
    with pytest.raises(CorruptDataError, match="wrong key or corrupt") as e:
        seg.read(0, 10)
    assert e.value.path == up.manifest_key


def _outcome(fn):
    """fn()'s chunks as bytes, or its error as (type, text, path, position): what two paths must share."""
    try:
        return {i: bytes(data) for i, data in fn().items()}
    except CorruptDataError as e:
        return type(e), str(e), e.path, e.position


def _parallel(seg, chunks: list[int]):
    """The fast path: one GET per run, its chunks decoded on the decode pool as in a read-ahead."""
    runs, futures = seg.chunks._start(chunks)
    for run in runs:
        chunkcache.SHARED_POOLS.get("readahead").submit(seg.chunks._run, *run, futures)
    out = {}
    for i in chunks:  # the first error, in chunk order, as the reference path raises it
        out[i] = futures[i].result()
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("corrupt_chunk", [None, 0, 2])
def test_parallel_decoding_gives_the_reference_paths_bytes_and_errors(s3_server, tiered, tmp_path, variant,
                                                                       corrupt_chunk):
    """`_run` (chunks of one GET decoded in parallel) against `fetch_serial` (decoded one after the other), on
    intact bytes and with one bit flipped in one chunk of the GET (plain: both return the flipped bytes)."""
    (buckets, key) = tiered
    bucket, uploads = buckets[variant]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        probe = _open(proxy.url, bucket, up, key, tmp_path / "probe")
        index = probe.manifest.chunk_index
        chunks = list(range(min(index.chunk_count, 6)))
        assert len(chunks) == 6 and len(probe.chunks.fetcher.runs(chunks, MAX_GET_BYTES)) == 1  # one GET each
        if corrupt_chunk is not None:
            proxy.inject("GET", r"\.log$", "corrupt", at=index.transformed_start(corrupt_chunk) + 20)
        reference = _outcome(lambda: _open(proxy.url, bucket, up, key, tmp_path / "ref").chunks.fetch_serial(0, chunks[-1]))
        fast = _outcome(lambda: _parallel(_open(proxy.url, bucket, up, key, tmp_path / "fast"), chunks))
    assert fast == reference
    original = up.segment.read_bytes()
    if corrupt_chunk is None:
        assert b"".join(reference.values()) == original[:len(b"".join(reference.values()))]
    elif variant == "plain" or variant == "plain-variable":
        assert reference[corrupt_chunk] != original[corrupt_chunk * index.chunk_size:][:index.chunk_size]
    else:
        assert reference[0] is CorruptDataError and f"chunk {corrupt_chunk}" in reference[1]


def test_a_key_file_fixed_after_a_failed_unwrap_is_picked_up(s3_server, tiered, tmp_path):
    """The data key is unwrapped in the background; a failure is not kept: the next read tries again."""
    import shutil

    from lookupd.errors import Unavailable

    (buckets, key) = tiered
    bucket, uploads = buckets["encrypted"]
    up = uploads[0]
    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir=str(tmp_path), endpoint_url=s3_server.endpoint_url))
    pem = tmp_path / "later.pem"
    seg = Bucket(store, Keyring({key.key_id: str(pem)}), DiskCache(str(tmp_path / "cache"), 10 ** 8)).segment(
        up.log_key)
    with pytest.raises(Unavailable, match="cannot read the private key file"):
        seg.read(0, 10)
    shutil.copy(key.pem_path, pem)
    assert seg.read(0, 10) == up.segment.read_bytes()[:10]


def test_reads_finish_when_the_pools_refuse_work(s3_server, tiered, tmp_path):
    """At interpreter shutdown the pools refuse new tasks: the reading thread does the work itself rather
    than fail, or leave a chunk claimed that no one will ever fetch."""
    from concurrent.futures import ThreadPoolExecutor

    (buckets, key) = tiered
    bucket, uploads = buckets["zstd-encrypted"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    for name in ("readahead", "decode"):
        chunkcache.SHARED_POOLS.get(name).shutdown(wait=True)
    try:
        seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path)
        with ThreadPoolExecutor(1) as reader:  # a hang fails this test, not the whole run
            assert reader.submit(seg.read, 0, seg.size, sequential=True).result(timeout=120) == \
                up.segment.read_bytes()
            assert not seg.chunks._inflight
    finally:
        chunkcache.SHARED_POOLS.clear()  # fresh pools for the tests that follow


def test_a_long_read_fetches_at_most_two_gets_ahead_of_decoding(s3_server, tiered, tmp_path, monkeypatch):
    """A read spanning many GETs starts the next GET only once the one before the last is decoded, so its
    fetched but undecoded bytes stay within two GETs however long the read (decoding slowed down here)."""
    (buckets, key) = tiered
    bucket, uploads = buckets["zstd-encrypted"]
    up = max(uploads, key=lambda u: u.segment.stat().st_size)
    seg = _open(s3_server.endpoint_url, bucket, up, key, tmp_path)
    chunk = seg.manifest.chunk_index.chunk_size
    assert seg.manifest.chunk_index.chunk_count >= 24
    monkeypatch.setattr(chunkcache, "MAX_GET_BYTES", 4 * chunk)  # 4 chunks a GET: 3 of them on the pool
    fetcher = seg.chunks.fetcher
    decode, get_run = fetcher.transform.decode, fetcher.get
    undecoded = []

    def slow_decode(i, blob):
        time.sleep(0.02)
        return decode(i, blob)

    def watched_get_run(first, last):
        before_previous = first - (last - first + 1)
        undecoded.append([i for i, f in list(seg.chunks._inflight.items()) if i < before_previous and not f.done()])
        return get_run(first, last)

    fetcher.transform.decode, fetcher.get = slow_decode, watched_get_run
    assert seg.read(0, 24 * chunk) == up.segment.read_bytes()[:24 * chunk]
    assert len(undecoded) == 6 and not any(undecoded)


def test_a_segment_deleted_after_listing_is_not_found(s3_server, tiered, tmp_path):
    (buckets, key) = tiered
    bucket, uploads = buckets["plain"]
    fresh = s3_server.bucket()
    client = s3_server.client()
    up = W.upload_segment(client, fresh, uploads[0].segment.parent, int(uploads[0].segment.name[:20]),
                          topic="txn", partition=0, topic_id=W.kafka_uuid(), opts=W.Options())
    seg = _open(s3_server.endpoint_url, fresh, up, key, tmp_path)
    client.delete_object(Bucket=fresh, Key=up.log_key)
    client.delete_object(Bucket=fresh, Key=up.indexes_key)
    with pytest.raises(ObjectNotFound, match=up.log_key):
        seg.read(0, 10)
    with pytest.raises(ObjectNotFound, match=up.indexes_key):
        seg.index_path("offset")
