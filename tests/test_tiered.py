"""THE PROPERTY of tiered storage: a partition tiered at any cut answers every method exactly as the same
partition fully local, on every partition of the Kafka reference corpus (transactions, compression and
legacy formats included), against a real S3 server (SeaweedFS), through every upload variant."""

from __future__ import annotations

import random

import pytest

import reference as R
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, WrappingKey, local_segments

from lookupd.daemon.service import Service, Session
from lookupd.errors import LookupdError

TRUSTED = Session(trusted=True)

# One upload variant per partition, so that every variant meets transactions, compression and legacy
# formats somewhere across the corpus.
VARIANTS = ["plain", "compressed", "encrypted", "both", "variable", "no-metadata", "plain", "compressed", "encrypted"]


def _options(variant: str, tmp_path) -> Options:
    key = WrappingKey.create(tmp_path) if variant in ("encrypted", "both") else None
    return Options(chunk_size=1024 if variant != "plain" else 4096,
                   compression=variant in ("compressed", "both"), encryption=key,
                   variable_index=variant == "variable", with_metadata=variant != "no-metadata",
                   prefix="tiered/" if variant == "variable" else "")


def _answer(service: Service, method: str, *params):
    try:
        return service.call(method, list(params), TRUSTED)
    except LookupdError as err:
        return ("error", err.code)


def _probes(partition: str, start: int, end: int, rng: random.Random) -> tuple[list[int], list[int]]:
    batches = R.batches(partition)
    offsets = {0, start - 1, start, start + 1, end - 1, end, end + 1, 1 << 40}
    for b in rng.sample(batches, min(25, len(batches))):
        offsets.update((b["base_offset"], b["last_offset"], b["last_offset"] + 1))
    for seg in R.answers(partition)["segments"]:
        offsets.update((seg["base_offset"] - 1, seg["base_offset"]))
    stamps = {-5, -4, -3, -2, -1, 0, 1 << 62}
    for b in rng.sample(batches, min(25, len(batches))):
        stamps.update((b["max_timestamp"], b["max_timestamp"] + 1, b["max_timestamp"] - 1))
    return sorted(o for o in offsets if o >= 0), sorted(stamps)


def _compare(local: Service, tiered: Service, topic: str, partition: str, uploaded: int) -> None:
    lp = [p for p in _answer(local, "partitions") if p["topic"] == topic][0]
    tp = [p for p in _answer(tiered, "partitions") if p["topic"] == topic][0]
    for k in ("log_start_offset", "log_end_offset", "segments"):
        assert tp[k] == lp[k], (k, tp, lp)
    ls, ts = _answer(local, "segments", topic, 0), _answer(tiered, "segments", topic, 0)
    assert [s["tier"] for s in ts] == ["remote"] * uploaded + ["local"] * (len(ls) - uploaded)
    assert tp["local_log_start_offset"] == (ls[uploaded]["base_offset"] if uploaded < len(ls) else lp["log_end_offset"])
    for a, b in zip(ls, ts):
        assert {k: v for k, v in a.items() if k not in ("tier", "active")} == \
            {k: v for k, v in b.items() if k not in ("tier", "active", "key")}
        assert ("key" in b) == (b["tier"] == "remote")  # the `.log` object's key, for the Spark source
    offsets, stamps = _probes(partition, lp["log_start_offset"], lp["log_end_offset"], random.Random(partition))
    for o in offsets:
        for call in (("lookup_offset", o, "floor"), ("lookup_offset", o, "ceiling"), ("resolve_offset", o),
                     ("read", o, 1), ("read", o, 5000), ("aborted_transactions", o, o + 500)):
            assert _answer(tiered, call[0], topic, 0, *call[1:]) == _answer(local, call[0], topic, 0, *call[1:]), call
    for t in stamps:
        for call in (("offset_for_timestamp", t), ("lookup_timestamp", t, "floor"), ("lookup_timestamp", t, "ceiling")):
            got, want = _answer(tiered, call[0], topic, 0, *call[1:]), _answer(local, call[0], topic, 0, *call[1:])
            if t in (-4, -5) and call[0] == "offset_for_timestamp":
                continue  # the tiers differ here by design: checked in test_kip_1005_targets_across_tiers
            assert got == want, call
    for call in (("lookup_offsets", offsets, "floor"), ("lookup_offsets", offsets, "ceiling"),
                 ("resolve_offsets", offsets), ("offsets_for_timestamps", [s for s in stamps if s > -4])):
        assert _answer(tiered, call[0], topic, 0, *call[1:]) == _answer(local, call[0], topic, 0, *call[1:]), call[0]


@pytest.mark.parametrize("partition,variant", list(zip(R.PARTITIONS, VARIANTS)))
def test_tiered_partition_answers_as_the_local_one(partition, variant, s3_server, tmp_path):  # noqa: F811
    R.require()
    source = R.log_dir(partition)
    n = len(local_segments(source))
    cut = max(0, n // 2) if n > 1 else 0
    t = tier_partition(tmp_path, source, s3_server, cut=cut, opts=_options(variant, tmp_path))
    lm, tm = t.managers()
    try:
        _compare(Service(lm), Service(tm), t.topic, partition, cut)
    finally:
        lm.close()
        tm.close()


@pytest.mark.parametrize("partition,cut,kw", [
    ("txn-0", 1, {}),                                   # one remote segment
    ("compressed-0", -1, {}),                           # every rolled segment remote
    ("plain-0", 3, {"keep_local": 2}),                  # uploaded but still on disk: read locally
    ("ooo-time-0", 4, {"metadata_topic": False}),       # no __remote_log_metadata: the manifests count
    ("logappend-0", None, {"drop_local_dir": True}),    # only in the bucket (every segment but the active one)
])
def test_tiered_at_other_cuts(partition, cut, kw, s3_server, tmp_path):  # noqa: F811
    R.require()
    source = R.log_dir(partition)
    n = len(local_segments(source))
    cut = n - 1 if cut is None or cut < 0 else cut
    t = tier_partition(tmp_path, source, s3_server, cut=cut, opts=Options(), **kw)
    lm, tm = t.managers()
    try:
        if kw.get("drop_local_dir"):
            part = tm.get(t.topic, 0)
            assert part.local_dir is None and part.info()["log_dir"].startswith("s3://")
        _compare(Service(lm), Service(tm), t.topic, partition, cut - kw.get("keep_local", 0))
    finally:
        lm.close()
        tm.close()


def test_kip_1005_targets_across_tiers(s3_server, tmp_path):  # noqa: F811
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3)
    lm, tm = t.managers()
    try:
        s = Service(tm)
        segs = _answer(s, "segments", "plain", 0)
        local_start = segs[3]["base_offset"]
        earliest_local = _answer(s, "offset_for_timestamp", "plain", 0, -4)
        assert earliest_local == {"offset": local_start, "timestamp": -1, "segment": local_start, "position": 0}
        highest = t.uploaded[-1].facts.end_offset
        latest_tiered = _answer(s, "offset_for_timestamp", "plain", 0, -5)
        batch = _answer(Service(lm), "resolve_offset", "plain", 0, highest)
        assert latest_tiered == {"offset": highest, "timestamp": -1, "segment": batch["segment"],
                                 "position": batch["position"]}
        assert _answer(s, "offsets_for_timestamps", "plain", 0, [-4, -5])["offset"] == [local_start, highest]
        plain = [p for p in _answer(s, "partitions") if p["topic"] == "plain"][0]
        assert (plain["log_start_offset"], plain["local_log_start_offset"]) == (0, local_start)
    finally:
        lm.close()
        tm.close()


@pytest.mark.parametrize("partition", ["txn-0", "closed-0"])
def test_hot_remote_segments_fetched_whole_answer_alike(partition, s3_server, tmp_path):  # noqa: F811
    """Segments read often are fetched whole into the cache and read by the local (native) code from then
    on: the answers stay the same, and the daemon may answer them on its event loop (no remote I/O)."""
    import time

    from lookupd.daemon.service import NEEDS_THREAD
    from lookupd.log.tiered.segment import MATERIALIZE_AFTER_READS

    R.require()
    source = R.log_dir(partition)
    cut = len(local_segments(source)) // 2
    t = tier_partition(tmp_path, source, s3_server, cut=cut, opts=Options(compression=True, chunk_size=2048))
    lm, tm = t.managers()
    try:
        local, tiered = Service(lm), Service(tm)
        log = tm.get(t.topic, 0)
        remote = [log.segment(b) for b in log.base_offsets[:cut]]
        for seg in remote:  # read each one often enough to be fetched whole
            for _ in range(MATERIALIZE_AFTER_READS):
                tiered.call("read", [t.topic, 0, seg.base_offset, 1], TRUSTED)
        deadline = time.monotonic() + 30
        while not all(seg.log.file.whole for seg in remote) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(seg.log.file.whole for seg in remote)
        _compare(local, tiered, t.topic, partition, cut)
        requests = tm.remote.store.requests
        offset = remote[0].base_offset
        got = tiered.call_inline("resolve_offset", [t.topic, 0, offset], TRUSTED)
        assert got is NEEDS_THREAD or got == local.call("resolve_offset", [t.topic, 0, offset], TRUSTED)
        assert tm.remote.store.requests == requests
    finally:
        lm.close()
        tm.close()
