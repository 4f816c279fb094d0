"""A hostile or broken tiered-storage bucket (issue #39): anyone who can write one object under the prefix.

Each object (or setting) the issue's table names is planted beside a healthy tiered partition (plain-0, its
first segments remote, no metadata topic so that every manifest is read) in one bucket of the suite's real
S3 server, and must cost one clear answer for its own segment, bounded time and memory, and never the local
answers nor any other segment's. The property test plants each object in turn in each place it could be
(beside the healthy uploads, in a partition of its own, right under the prefix) and compares every answer
with the unplanted bucket's. Row 10 (a full cache disk) is tested with the disk cache (issue #40).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time

import msgpack
import pytest
import trio

import reference as R
from daemon_helpers import REPO, RawPeer, blocking_call, running, short_dir, start_daemon, stop_daemon  # noqa: F401
from faultproxy import FaultProxy
from s3server import s3_server  # noqa: F401 - fixture
from synthetic_bucket import (FAKE_LOG, MANIFESTS, alone, fixed_manifest, local_tail, many_chunk_sizes, put_objects,
                              synthetic_segments, upload_objects, upload_of, variable_manifest)
from tiered_helpers import tier_partition

from lookupd.daemon.service import Service, Session
from lookupd.errors import INT64_MAX, INT64_MIN, LookupdError
from lookupd.log.logmanager import LogManager
from lookupd.log.remote.config import RemoteSettings
from lookupd.log.tiered.layout import RemotePartition, SegmentKeys, parse_key
from lookupd.log.remote.manifest import MAX_CHUNKS, MAX_MANIFEST_BYTES
from lookupd.log.remote.store import ObjectStore, ObjectTooLarge
from lookupd.log.remote.bucket import MANIFEST_CACHE_BYTES
from lookupd.log.tiered.listing import RemoteTier, RemoteSegmentInfo, choose
from lookupd.tools.tieredwriter import kafka_uuid

TRUSTED = Session(trusted=True)
TOPIC = "plain"
REMOTE_OFFSETS = (0, 100, 250)  # in plain-0's first three segments, which are remote
LOCAL_OFFSETS = (800, 1200)


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def healthy(s3_server, tmp_path_factory):  # noqa: F811
    """plain-0 with its first three segments in a bucket of their own, no metadata topic; and the answers
    the unplanted bucket gives."""
    R.require()
    root = tmp_path_factory.mktemp("hostile")
    t = tier_partition(root, R.log_dir("plain-0"), s3_server, cut=3, metadata_topic=False)
    manager = _manager(t, root / "baseline-cache")
    try:
        baseline = _answers(Service(manager))
    finally:
        manager.close()
    assert all(not isinstance(a, tuple) for a in baseline.values()), baseline  # every healthy call answers
    return t, baseline


@pytest.fixture
def plant(healthy, s3_server):  # noqa: F811
    """plant(objects): PUT key -> body into the healthy bucket; removed again after the test."""
    t, _ = healthy
    client = s3_server.client()
    planted = []

    def put(objects: dict[str, bytes]) -> None:
        put_objects(s3_server.endpoint_url, t.config.bucket, objects)
        planted.extend(objects)

    yield put
    for key in planted:
        client.delete_object(Bucket=t.config.bucket, Key=key)


def _manager(t, cache_dir, **config) -> LogManager:
    return LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config, cache_dir=str(cache_dir),
                                                                            **config)))


def _call(service: Service, method: str, *params):
    try:
        return service.call(method, list(params), TRUSTED)
    except LookupdError as err:
        return ("error", err.code, str(err))


def _answers(service: Service) -> dict:
    """Every answer about the healthy partition: its listing, its segments, and lookups in its remote and
    local segments."""
    out = {"partitions": [p for p in _call(service, "partitions") if p["topic"] == TOPIC],
           "segments": _call(service, "segments", TOPIC, 0)}
    for o in REMOTE_OFFSETS + LOCAL_OFFSETS:
        out[("resolve_offset", o)] = _call(service, "resolve_offset", TOPIC, 0, o)
        out[("lookup_offset", o)] = _call(service, "lookup_offset", TOPIC, 0, o, "floor")
        out[("read", o)] = _call(service, "read", TOPIC, 0, o, 2000)
    for b in R.batches("plain-0")[::40]:
        out[("offset_for_timestamp", b["max_timestamp"])] = _call(service, "offset_for_timestamp", TOPIC, 0,
                                                                  b["max_timestamp"])
    out["resolve_offsets"] = _call(service, "resolve_offsets", TOPIC, 0, list(REMOTE_OFFSETS + LOCAL_OFFSETS))
    return out


def _ints_fit_int64(value) -> bool:
    """Whether every integer in an answer is one msgpack sends as Kafka's int64."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    if isinstance(value, dict):
        return all(_ints_fit_int64(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_ints_fit_int64(v) for v in value)
    return True


def _beside(t, offset: int = 150) -> SegmentKeys:
    """An upload in the healthy partition's own directory, inside its remote offsets."""
    healthy_rp = parse_key(t.config.prefix, t.uploaded[0].log_key)[0].partition
    return SegmentKeys(offset, kafka_uuid(), healthy_rp, t.config.prefix)


def stray_keys(prefix: str, rp: RemotePartition) -> dict[str, dict[str, bytes]]:
    """Objects whose keys are not the plugin's (rows 5, 6, 12, 8's upload without its .log), by name."""
    d = rp.dir(prefix)
    sid = kafka_uuid()
    return {
        "a key with a newline": {f"{d}00000000000000000000-{sid}.log\n": b"x", f"{prefix}junk\nkey": b"x"},
        "an offset past int64": upload_objects(SegmentKeys(99999999999999999999, sid, rp, prefix),
                                               fixed_manifest(len(FAKE_LOG))),
        "Arabic-Indic digits": {f"{d}{chr(0x0660) * 19}\u0661-{sid}.{s}": b"{}" for s in ("log", "indexes", "rsm-manifest")},
        "topic ..": upload_objects(SegmentKeys(0, sid, RemotePartition("..", 0, rp.topic_id), prefix),
                                   fixed_manifest(len(FAKE_LOG))),
        "a right-to-left override": upload_objects(SegmentKeys(0, sid, RemotePartition("rtl\u202egnp.exe", 0,
                                                                                        rp.topic_id), prefix),
                                                   fixed_manifest(len(FAKE_LOG))),
        "no .log": {SegmentKeys(150, sid, rp, prefix).manifest: json.dumps(fixed_manifest(len(FAKE_LOG))).encode()},
    }


# ------------------------------------------------------------------------------------------ the property


@pytest.mark.parametrize("kind", list(MANIFESTS))
@pytest.mark.parametrize("where", ["beside", "alone"])
def test_one_planted_manifest_changes_no_other_answer(healthy, plant, tmp_path, kind, where):
    """The property: with the object planted, every local answer and every other remote segment's answer
    is what the unplanted bucket gives; the planted upload's own reads are one CORRUPT_DATA naming it."""
    t, baseline = healthy
    keys = _beside(t) if where == "beside" else SegmentKeys(0, kafka_uuid(), alone(), t.config.prefix)
    plant(upload_of(kind, keys))
    manager = _manager(t, tmp_path / "cache")  # a daemon's start: lists the bucket and reads every manifest
    try:
        s = Service(manager)
        got = _answers(s)
        assert got == baseline
        assert _ints_fit_int64(got)
        if where == "alone":
            err = _call(s, "read", keys.partition.topic, 0, 0, 1 << 20)
            assert err[:2] == ("error", "CORRUPT_DATA") and keys.manifest in err[2], err
            listing = [p for p in _call(s, "partitions") if p["topic"] == keys.partition.topic]
            assert _ints_fit_int64(listing)
    finally:
        manager.close()


@pytest.mark.parametrize("name", ["a key with a newline", "an offset past int64", "Arabic-Indic digits",
                                  "topic ..", "a right-to-left override", "no .log"])
@pytest.mark.parametrize("where", ["beside", "alone"])
def test_one_stray_key_changes_no_answer(healthy, plant, tmp_path, caplog, name, where):
    """Rows 5, 6, 8 and 12: a key that is not the plugin's (or an upload missing its .log) is skipped with one
    warning naming it, never fails the listing, and changes no answer."""
    t, baseline = healthy
    rp = _beside(t).partition if where == "beside" else alone()
    objects = stray_keys(t.config.prefix, rp)[name]
    plant(objects)
    caplog.set_level(logging.WARNING, logger="lookupd")
    manager = _manager(t, tmp_path / "cache")
    try:
        s = Service(manager)
        assert _answers(s) == baseline
        topics = {p["topic"] for p in _call(s, "partitions")}
        assert topics <= {TOPIC, "rogue"}, topics  # neither ".." nor the right-to-left name is served
        manager.refresh(remote=True)  # listed again: named once only
    finally:
        manager.close()
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1, skipped
    named = [k for k in objects if any(repr(part) in skipped[0] for part in (k, k.rsplit("/", 2)[0] + "/"))]
    assert named, (objects, skipped)


# ------------------------------------------------------------------------------------------ row by row


@contextlib.contextmanager
def _planted_alone(healthy, plant, tmp_path, kind: str):
    """(keys, manager) with an upload whose manifest is MANIFESTS[kind] in a partition of its own."""
    t, _ = healthy
    keys = SegmentKeys(0, kafka_uuid(), alone(), t.config.prefix)
    plant(upload_of(kind, keys))
    manager = _manager(t, tmp_path / "cache")
    try:
        yield keys, manager
    finally:
        manager.close()


def test_row1_a_broken_manifest_neither_stops_the_start_nor_later_rescans(healthy, plant, tmp_path):
    """Row 1: a manifest of 100 KB of `[`: the start lists, the planted segment is CORRUPT_DATA, and a rescan
    neither fails nor fetches it again; a local partition added later appears."""
    t, _ = healthy
    with _planted_alone(healthy, plant, tmp_path, "deep JSON") as (keys, manager):
        store = manager.remote.store
        before = store.bytes_fetched
        shutil.copytree(R.log_dir("compressed-0"), t.tiered_dir / "compressed-0")
        try:
            counts = manager.refresh(remote=True)
            assert counts["added"] == 1 and ("compressed", 0) in {(p.topic, p.partition) for p in manager.logs()}
        finally:
            shutil.rmtree(t.tiered_dir / "compressed-0")
        assert store.bytes_fetched == before  # the bad manifest is remembered (same ETag): not fetched again
        err = _call(Service(manager), "segments", keys.partition.topic, 0)
        assert isinstance(err, list) and "CORRUPT_DATA" in err[0]["error"]


def test_row3_tiny_chunks_are_refused_before_any_byte_of_the_log(healthy, plant, tmp_path):
    """Row 3: 1-byte chunks (below MIN_CHUNK_BYTES, more of them than MAX_CHUNKS): one CORRUPT_DATA, the `.log`
    never fetched."""
    with _planted_alone(healthy, plant, tmp_path, "1-byte chunks") as (keys, manager):
        store = manager.remote.store
        before = store.bytes_fetched
        err = _call(Service(manager), "read", keys.partition.topic, 0, 0, 1 << 20)
        assert err[:2] == ("error", "CORRUPT_DATA") and "MIN_CHUNK_BYTES" in err[2], err
        assert store.bytes_fetched - before < 4096  # at most the manifest again, never the 64 KiB `.log`


def test_row4_a_zstd_bomb_is_refused_by_reads_and_by_restore(healthy, plant, tmp_path):
    """Row 4: a chunk declaring 64 MiB (above MAX_CHUNK_BYTES): reads answer CORRUPT_DATA without inflating it,
    and restore stops with that error before writing the segment."""
    from lookupd.tools.restore import restore_partition

    t, _ = healthy
    rp = alone()
    keys = [SegmentKeys(o, kafka_uuid(), rp, t.config.prefix) for o in (0, 100)]
    for k in keys:
        plant(upload_of("a zstd bomb chunk", k))
    manager = _manager(t, tmp_path / "cache")
    try:
        err = _call(Service(manager), "read", rp.topic, 0, 0, 1 << 20)
        assert err[:2] == ("error", "CORRUPT_DATA") and "MAX_CHUNK_BYTES" in err[2], err
        dest = tmp_path / "restored"
        with pytest.raises(LookupdError, match="MAX_CHUNK_BYTES"):
            restore_partition(manager.remote, str(dest), rp.topic, 0)
        written = sum(f.stat().st_size for f in dest.iterdir()) if dest.exists() else 0
        assert written < 1 << 20, written
    finally:
        manager.close()


def test_row5_offsets_past_int64_never_reach_an_answer(healthy, plant, tmp_path):
    """Row 5: an offset past int64 in a key is skipped; endOffset and maxTimestampMs past int64 in a manifest
    are CORRUPT_DATA for that upload; `partitions` answers, and every integer in it is an int64."""
    t, _ = healthy
    rp = alone()
    plant(stray_keys(t.config.prefix, rp)["an offset past int64"])
    plant(upload_of("offsets past int64", SegmentKeys(0, kafka_uuid(), rp, t.config.prefix)))
    manager = _manager(t, tmp_path / "cache")
    try:
        s = Service(manager)
        listing = _call(s, "partitions")
        assert isinstance(listing, list) and _ints_fit_int64(listing)
        msgpack.packb(listing)
        segments = _call(s, "segments", rp.topic, 0)
        assert [x["base_offset"] for x in segments] == [0] and "endOffset" in segments[0]["error"]
    finally:
        manager.close()


def test_row6_a_key_with_a_newline_fails_neither_the_listing_nor_restore(healthy, plant, tmp_path):
    """Row 6: obstore cannot represent the key; the listing goes on (boto3 lists it) and so does restore."""
    from lookupd.tools.restore import restore_partition

    t, baseline = healthy
    plant(stray_keys(t.config.prefix, _beside(t).partition)["a key with a newline"])
    manager = _manager(t, tmp_path / "cache")
    try:
        assert _answers(Service(manager)) == baseline
        dest = tmp_path / "restored"
        assert restore_partition(manager.remote, str(dest), TOPIC, 0, out=open(os.devnull, "w")) == 0
        assert sorted(p.name for p in dest.glob("*.log")) == [f"{u.facts.base_offset:020d}.log" for u in t.uploaded]
    finally:
        manager.close()


def test_row7_manifests_are_bounded_alone_and_together(healthy, plant, tmp_path):
    """Row 7: 10.5 million chunk sizes in 2 KB are refused (MAX_CHUNKS); legal manifests of MAX_CHUNKS chunks
    each are kept within MANIFEST_CACHE_BYTES however many there are."""
    t, _ = healthy
    rp = alone()
    planted = many_chunk_sizes()
    assert len(planted) < 4096
    plant(upload_objects(SegmentKeys(0, kafka_uuid(), rp, t.config.prefix), planted))
    sizes = [1] * MAX_CHUNKS  # MAX_CHUNKS chunks of 1 KiB, each stored in 1 byte: legal
    legal = json.dumps(variable_manifest(sizes, 1024, 1024 * MAX_CHUNKS, compression=False)).encode()
    many = 40  # 40 x 512 KiB of chunk starts: above MANIFEST_CACHE_BYTES together
    for i in range(many):
        plant(upload_objects(SegmentKeys(1000 + i * MAX_CHUNKS, kafka_uuid(), rp, t.config.prefix), legal,
                             b"x" * MAX_CHUNKS))
    manager = _manager(t, tmp_path / "cache")
    try:
        tier = manager.remote
        assert tier.bucket.manifests.bytes <= MANIFEST_CACHE_BYTES
        assert len(tier.bucket.manifests) < many
        segments = _call(Service(manager), "segments", rp.topic, 0)
        assert "MAX_CHUNKS" in segments[0]["error"]
    finally:
        manager.close()


def _profile_calls(fn) -> int:
    """How many Python and C function calls `fn()` makes (the work, counted, not timed)."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_row8_choosing_among_n_uploads_is_n_log_n(healthy):
    """Row 8: twice the uploads cost about twice the work to choose among, not four times (O(N^2) did)."""
    def infos(n: int) -> list[RemoteSegmentInfo]:
        out = [RemoteSegmentInfo(i * 100, i * 100 + 99, i, ((1, i * 100),), f"s{i}", f"k{i}") for i in range(n)]
        out += [RemoteSegmentInfo(i * 100, i * 100 + 99, i, ((0, i * 100),), f"z{i}", f"z{i}") for i in range(0, n, 7)]
        return out

    small, large = infos(2000), infos(4000)
    assert [i.segment_id for i in choose(small, [])] == [f"s{i}" for i in range(2000)]
    work = _profile_calls(lambda: choose(small, [])), _profile_calls(lambda: choose(large, []))
    assert work[1] / work[0] < 2.6, work


def test_row8_thousands_of_segments_list_once_and_relist_without_refetching(healthy, s3_server, tmp_path):  # noqa: F811
    """Row 8 against the store: 2,000 uploads in one partition (one missing its `.log`) are listed with one GET
    per manifest at start; `partitions` sends nothing; a rescan sends only the listing's pages."""
    t, _ = healthy
    rp = RemotePartition("scale", 0, kafka_uuid())
    n, span = 2000, 100
    keys, objects, _ = synthetic_segments(rp, n, span)
    del objects[keys[n // 2].log]  # a broken upload in the middle: not listed, so nothing relists for it
    bucket = s3_server.bucket()
    put_objects(s3_server.endpoint_url, bucket, objects)
    log_dir = tmp_path / "logs"
    local_tail(log_dir, rp.topic, 0, n * span, topic_id=rp.topic_id)
    config = dataclasses.replace(t.config, bucket=bucket, prefix="", cache_dir=str(tmp_path / "c"))
    manager = LogManager([log_dir], remote=RemoteTier(config))
    try:
        store = manager.remote.store
        assert n - 1 <= store.requests <= n + 20  # two delimiter listings, the pages, a GET per manifest
        llog = manager.get(rp.topic, 0)
        assert llog.remote_segment_count == n - 1
        before = store.requests
        info = Service(manager).call("partitions", [], TRUSTED)
        mine = next(p for p in info if p["topic"] == rp.topic)
        assert (mine["segments"], mine["log_start_offset"], mine["log_end_offset"]) == (n - 1 + 2, 0, n * span + 200)
        assert store.requests == before
        manager.refresh(remote=True)
        assert store.requests - before <= 8, store.requests - before  # the listings' pages, no manifest
    finally:
        manager.close()


def test_row9_a_stalled_store_holds_remote_calls_only(healthy, tmp_path, short_dir, monkeypatch):  # noqa: F811
    """Row 9: every GET answered after seconds, and more remote calls than worker threads: a local call is
    answered before any of them, and a remote call past REMOTE_DEADLINE_S is UNAVAILABLE saying so."""
    from lookupd.daemon import blocking

    t, _ = healthy
    monkeypatch.setattr(blocking, "REMOTE_DEADLINE_S", 4.0)
    with FaultProxy(t.config.endpoint_url) as proxy:
        remote = RemoteSettings(bucket=t.config.bucket, endpoint_url=proxy.url, cache_dir=str(tmp_path / "cache"),
                                prefix=t.config.prefix)
        sock = os.path.join(short_dir, "s")

        async def scenario():
            async with running(sock, [t.tiered_dir], remote=remote, blocking_threads=2,
                               blocking_threads_per_connection=1):
                proxy.inject("GET", r"\.(log|indexes|rsm-manifest)$", "slow", delay=2.5)
                answered = []

                async def remote_read(i: int) -> None:
                    peer = await RawPeer.unix(sock)
                    err, _ = await peer.call("read", TOPIC, 0, REMOTE_OFFSETS[i % 3], 1000)
                    answered.append(("remote", err))
                    await peer.aclose()

                async with trio.open_nursery() as nursery:
                    for i in range(6):
                        nursery.start_soon(remote_read, i)
                    await trio.sleep(0.5)  # the remote calls hold every worker thread there is
                    peer = await RawPeer.unix(sock)
                    for method, *params in (("resolve_offset", LOCAL_OFFSETS[0]), ("partitions",),
                                            ("resolve_offsets", list(LOCAL_OFFSETS))):
                        err, got = await peer.call(method, *([TOPIC, 0] if params else []), *params)
                        assert err is None, err
                        answered.append(("local", method))
                    await peer.aclose()
                return answered

        answered = trio.run(scenario)
    assert [who for who, _ in answered[:3]] == ["local"] * 3, answered
    errors = [err for who, err in answered if who == "remote" and err is not None]
    assert all(e["code"] == "UNAVAILABLE" and "REMOTE_DEADLINE_S" in e["message"] for e in errors), errors


def test_row11_an_oversized_manifest_is_never_read_and_never_fetched_again(healthy, plant, tmp_path):
    """Row 11: a manifest above MAX_MANIFEST_BYTES is refused from the listing's size (no GET), and a GET of one
    reads its length before any of its body."""
    t, _ = healthy
    with _planted_alone(healthy, plant, tmp_path, "a 2 MiB manifest") as (keys, manager):
        store = manager.remote.store
        assert store.bytes_fetched < MAX_MANIFEST_BYTES
        for _ in range(2):
            manager.refresh(remote=True)
            err = _call(Service(manager), "read", keys.partition.topic, 0, 0, 100)
            assert err[:2] == ("error", "CORRUPT_DATA") and "MAX_MANIFEST_BYTES" in err[2], err
        assert store.bytes_fetched < MAX_MANIFEST_BYTES
        fresh = ObjectStore(t.config)
        with pytest.raises(ObjectTooLarge):
            fresh.get(keys.manifest, MAX_MANIFEST_BYTES, "manifest")
        assert fresh.bytes_fetched == 0


# ------------------------------------------------------------------------------- the daemon as a subprocess


def _daemon_config(path: str, t, sock: str, cache_dir: str, *, endpoint: bool = True, workers: int = 1) -> None:
    with open(path, "w") as f:
        f.write(f'log_dirs = ["{t.tiered_dir}"]\nsocket = "{sock}"\nworkers = {workers}\n[remote]\n'
                f'bucket = "{t.config.bucket}"\ncache_dir = "{cache_dir}"\nprefix = "{t.config.prefix}"\n'
                + (f'endpoint_url = "{t.config.endpoint_url}"\n' if endpoint else ""))


def _remote_calls_answer(sock: str, clients: int) -> list:
    """From `clients` connections at once: `partitions` and a read of a remote segment, each (error, ok)."""
    out = []

    def one(i: int) -> None:
        try:
            err, listing = blocking_call(sock, "partitions", timeout=30)
            err2, got = blocking_call(sock, "read", TOPIC, 0, REMOTE_OFFSETS[i % 3], 1000, timeout=30)
            out.append((err, err2, bool(listing) and bool(got and got["records"])))
        except OSError as e:  # a timeout: the worker hangs
            out.append((repr(e), None, False))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def test_row2_workers_with_a_remote_tier_answer(healthy, short_dir, tmp_path):  # noqa: F811
    """Row 2: `workers = 2` with [remote]: every connection, whichever worker takes it, gets its answers."""
    t, _ = healthy
    sock, conf = os.path.join(short_dir, "s"), os.path.join(short_dir, "c.toml")
    _daemon_config(conf, t, sock, str(tmp_path / "cache"), workers=2)
    proc = start_daemon(["--config", conf], short_dir, sock)
    try:
        got = _remote_calls_answer(sock, 6)
        deadline = time.monotonic() + 60  # both started (a worker stopped while it starts exits 1)
        while "2 workers serving" not in proc.stderr_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        code, stderr = stop_daemon(proc)
    assert got == [(None, None, True)] * 6, (got, stderr[-3000:])
    assert code == 0, stderr


def test_row13_no_endpoint_url_takes_aws_endpoint_url_from_the_environment(healthy, short_dir, tmp_path,  # noqa: F811
                                                                          monkeypatch):
    """Row 13: without remote.endpoint_url, `serve`, `dump s3://` and `restore` use AWS_ENDPOINT_URL, as boto3
    and obstore read it (what an AWS deployment relies on: the default endpoint, no endpoint_url)."""
    t, _ = healthy
    sock, conf = os.path.join(short_dir, "s"), os.path.join(short_dir, "c.toml")
    _daemon_config(conf, t, sock, str(tmp_path / "cache"), endpoint=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", t.config.endpoint_url)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = start_daemon(["--config", conf], short_dir, sock)
    try:
        got = _remote_calls_answer(sock, 1)
    finally:
        code, stderr = stop_daemon(proc)
    assert got == [(None, None, True)] and code == 0, (got, stderr[-3000:])
    url = f"s3://{t.config.bucket}/{t.uploaded[0].log_key}"
    for args in (["dump", "--config", conf, url], ["restore", "--config", conf, "--topic", TOPIC, "--partition", "0",
                                                     str(tmp_path / "restored")]):
        done = subprocess.run([sys.executable, "-m", "lookupd", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr[-3000:])
