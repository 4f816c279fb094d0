"""Test support: a Kafka-reference partition tiered at a cut, beside the same partition fully local.

`tier_partition` copies the partition twice: one copy stays whole (the answer of record); from the other,
the segments below the cut are uploaded to the bucket in the plugin's layout (lookupd/tools/tieredwriter.py) and
deleted, and the broker's files about them are added as a tiered broker leaves them: `partition.metadata`,
`leader-epoch-checkpoint` and `__remote_log_metadata` records (copy started, copy finished).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from remote_metadata_writer import copied, write_metadata_topic
from lookupd.tools.tieredwriter import (Options, kafka_uuid, local_segments, upload_partition,
                                        write_leader_epoch_checkpoint, write_partition_metadata)

from lookupd.log.logmanager import LogManager
from lookupd.log.remote.config import RemoteConfig
from lookupd.log.tiered.listing import RemoteTier
from lookupd.log.segment import LogSegment


@dataclass
class Tiered:
    local_dir: Path    # log dir holding the fully local copy
    tiered_dir: Path   # log dir holding the local tail (and __remote_log_metadata-0)
    config: RemoteConfig
    topic: str
    uploaded: list     # lookupd.tools.tieredwriter.Uploaded, in offset order

    def managers(self) -> tuple[LogManager, LogManager]:
        return LogManager([self.local_dir]), LogManager([self.tiered_dir], remote=RemoteTier(self.config))


def tier_partition(root: Path, source: Path, server, *, cut: int, opts: Options | None = None,
                   metadata_topic: bool = True, keep_local: int = 0, drop_local_dir: bool = False) -> Tiered:
    """Tier `source` (a partition dir) below segment number `cut` of its listing; `keep_local` of the
    uploaded segments stay on disk too (uploaded, not yet deleted by local retention); `drop_local_dir`
    removes the partition directory afterwards (a partition only in the bucket), and first the active
    segment from both copies (the broker only uploads rolled segments: the bucket ends at the last one)."""
    name = source.name
    topic = name.rpartition("-")[0]
    local_dir, tiered_dir = root / "local", root / "tiered"
    shutil.copytree(source, local_dir / name)
    shutil.copytree(source, tiered_dir / name)
    part = tiered_dir / name
    if drop_local_dir:
        last = local_segments(part)[-1]
        for copy in (part, local_dir / name):
            for path in copy.glob(f"{last:020d}.*"):
                path.unlink()
        cut = len(local_segments(part))
    topic_id = kafka_uuid()
    write_partition_metadata(part, topic_id)
    bases = local_segments(part)
    below = bases[:cut]
    bucket = server.bucket()
    opts = opts or Options()
    uploaded = upload_partition(server.client(), bucket, part, topic_id=topic_id, segments=below, opts=opts)
    events, lineage = [], {}
    for up in uploaded:
        seg = LogSegment.open(part, up.facts.base_offset, live=up.facts.base_offset == bases[-1])
        epochs = sorted(up.facts.leader_epochs.items(), key=lambda e: e[1])
        for e, o in epochs:
            lineage.setdefault(e, o)
        # What RemoteLogManager.copyLogSegment records: the segment's largestTimestamp (its mtime when
        # it has no timestamps) and its end offset.
        segment_id = up.log_key.rsplit("/", 1)[1][21:43]  # <20-digit offset>-<22-character id>.log
        events += copied(topic, topic_id, 0, segment_id, start_offset=up.facts.base_offset,
                         end_offset=up.facts.end_offset, max_timestamp=seg.largest_timestamp(),
                         leader_epochs=epochs, size=seg.size())
        seg.close()
    write_leader_epoch_checkpoint(part, sorted(lineage.items(), key=lambda e: e[1]))
    for base in below[:len(below) - keep_local]:
        for path in part.glob(f"{base:020d}.*"):
            path.unlink()
    if drop_local_dir:
        shutil.rmtree(part)
    if metadata_topic:
        write_metadata_topic(tiered_dir, events)
    tiered_dir.mkdir(exist_ok=True)
    config = RemoteConfig(bucket=bucket, cache_dir=str(root / "cache"), prefix=opts.prefix,
                          endpoint_url=server.endpoint_url,
                          encryption_keys={opts.encryption.key_id: opts.encryption.pem_path} if opts.encryption else {})
    return Tiered(local_dir, tiered_dir, config, topic, uploaded)
