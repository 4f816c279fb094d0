"""Which uploads count: the metadata topic's states, and the leader-epoch lineage between two uploads of
the same offsets (real S3 server)."""

from __future__ import annotations

import pytest

import reference as R
from remote_metadata_writer import copied, segment_metadata, segment_update, write_metadata_topic
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, kafka_uuid, upload_segment

from lookupd.log.tiered.brokerfiles import DELETE_SEGMENT_STARTED, read_topic_id
from lookupd.log.tiered.layout import RemotePartition
from lookupd.log.tiered.listing import History, choose, local_history, on_lineage
from lookupd.log.tiered.segment import RemoteSegmentInfo


def _info(base, end, epochs, sid="s"):
    return RemoteSegmentInfo(base, end, 0, tuple(epochs), sid, "k")


def test_a_partition_is_matched_to_the_directory_of_its_topic_id(tmp_path):
    """The one partition matching rule the daemon, the mount and restore read: the local topic id's
    directory; no local directory, any; a local partition without an id (or with an unreadable one), none."""
    ours, theirs = kafka_uuid(), kafka_uuid()
    dirs = [RemotePartition("t", 0, ours), RemotePartition("t", 0, theirs)]
    part = tmp_path / "t-0"
    part.mkdir()
    assert local_history("t", 0, str(part)) is None                       # no partition.metadata yet
    (part / "partition.metadata").write_text("version: 0\ntopic_id: " + ours)
    (part / "leader-epoch-checkpoint").write_text("0\n1\n3 0\n")
    history = local_history("t", 0, str(part))
    assert [rp.topic_id for rp in dirs if history.holds(rp)] == [ours] and history.lineage() == [(3, 0)]
    assert [rp.topic_id for rp in dirs if local_history("t", 0, None).holds(rp)] == [ours, theirs]
    assert [rp.topic_id for rp in dirs if History(theirs).holds(rp)] == [theirs]   # restore --topic-id
    (part / "partition.metadata").write_text("version: 7")
    assert local_history("t", 0, str(part)) is None                       # said in the log, served locally


def test_choose_prefers_the_lineage_then_the_highest_epoch():
    a = _info(0, 99, [(1, 0)], "a")
    b = _info(0, 99, [(2, 0)], "b")       # same offsets, a later epoch
    c = _info(100, 199, [(2, 100)], "c")
    assert choose([a, b, c], []) == [b, c]                      # no lineage: the highest epoch
    assert choose([a, b, c], [(1, 0), (2, 100)]) == [a, c]      # b's epoch 2 starts at 0: not on the lineage
    assert on_lineage(((1, 0), (2, 50)), 99, [(1, 0), (2, 50)])
    assert not on_lineage(((1, 0),), 99, [(1, 0), (2, 50)])     # epoch 1 ended at 49 on the lineage
    assert choose([_info(0, 150, [(1, 0)], "x"), _info(100, 199, [(1, 100)], "y")], []) == \
        [_info(100, 199, [(1, 100)], "y")]                      # overlapping: one of them (the later start)


def _upload_again(t, base: int, epochs: dict[int, int], s3):
    """Another upload of the segment at `base`, as a later leader with `epochs` would make it (its manifest
    records them)."""
    import json

    part = t.tiered_dir / "plain-0"
    # The segment is no longer on disk: upload it again from the fully local copy.
    up = upload_segment(s3.client(), t.config.bucket, t.local_dir / "plain-0", base, topic="plain", partition=0,
                        topic_id=read_topic_id(part), opts=Options(), epochs=epochs, segment_id=kafka_uuid())
    up.manifest["remoteLogSegmentMetadata"]["segmentLeaderEpochs"] = {str(e): o for e, o in epochs.items()}
    s3.client().put_object(Bucket=t.config.bucket, Key=up.manifest_key, Body=json.dumps(up.manifest).encode())
    return up


def _chosen(t) -> dict[int, str]:
    _, tm = t.managers()
    try:
        log = tm.get("plain", 0)
        return {b: log.segment(b).origin.info.segment_id for b in log.base_offsets if log.segment(b).tier == "remote"}
    finally:
        tm.close()


def _sid(up) -> str:
    return up.log_key.rsplit("/", 1)[1][21:43]


@pytest.mark.parametrize("checkpoint", [True, False])
def test_two_uploads_of_the_same_offsets(checkpoint, s3_server, tmp_path):  # noqa: F811
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=2, metadata_topic=False)
    first = t.uploaded[1]
    base = first.facts.base_offset
    again = _upload_again(t, base, {7: base}, s3_server)  # a later leader's copy (epoch 7)
    if not checkpoint:
        (t.tiered_dir / "plain-0" / "leader-epoch-checkpoint").unlink()
    assert _chosen(t)[base] == (_sid(first) if checkpoint else _sid(again))


def test_the_metadata_topic_decides(s3_server, tmp_path):  # noqa: F811
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3, metadata_topic=False)
    topic_id = read_topic_id(t.tiered_dir / "plain-0")
    ups = t.uploaded
    started_only = _upload_again(t, ups[0].facts.base_offset, {9: ups[0].facts.base_offset}, s3_server)

    def meta(up, **kw):
        return dict(start_offset=up.facts.base_offset, end_offset=up.facts.end_offset, max_timestamp=1,
                    leader_epochs=sorted(up.facts.leader_epochs.items()), size=1, **kw)

    events = [*copied("plain", topic_id, 0, _sid(ups[0]), **meta(ups[0])),
              segment_metadata("plain", topic_id, 0, _sid(started_only), **meta(started_only)),  # copy not finished
              *copied("plain", topic_id, 0, _sid(ups[1]), **meta(ups[1])),
              *copied("plain", topic_id, 0, _sid(ups[2]), **meta(ups[2])),
              segment_update("plain", topic_id, 0, _sid(ups[2]), DELETE_SEGMENT_STARTED)]
    write_metadata_topic(t.tiered_dir, events)
    # ups[2] is being deleted: the remote tier ends below it, and its offsets are no longer served.
    assert _chosen(t) == {ups[0].facts.base_offset: _sid(ups[0]), ups[1].facts.base_offset: _sid(ups[1])}
