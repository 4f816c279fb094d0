"""The plugin's object keys, parsed and formatted, and which segments and partitions a bucket holds.

`<prefix><topic>-<topicId>/<partition>/<startOffset, 20 digits>-<segmentId>.<suffix>` with suffix `log`,
`indexes` or `rsm-manifest` (ObjectKeyFactory). Ids are Kafka Uuids in their 22-character base64url form.
The manifest is uploaded last, so a segment without one is still being copied (or its copy failed):
it is not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOG, INDEXES, MANIFEST = "log", "indexes", "rsm-manifest"
SUFFIXES = (LOG, INDEXES, MANIFEST)
OFFSET_DIGITS = 20  # Kafka's segment file names: the base offset zero-padded to 20 digits
ID_CHARS = 22       # Kafka's Uuid.toString(): 16 bytes in unpadded base64url

_ID = rf"[A-Za-z0-9_-]{{{ID_CHARS}}}"
_TOPIC_DIR = re.compile(rf"(?P<topic>.+)-(?P<topic_id>{_ID})")
_SEGMENT_FILE = re.compile(rf"(?P<offset>\d{{{OFFSET_DIGITS}}})-(?P<segment_id>{_ID})\.(?P<suffix>log|indexes|rsm-manifest)")
_PARTITION = re.compile(r"0|[1-9]\d{0,9}")


@dataclass(frozen=True, order=True)
class RemotePartition:
    """A partition directory in the bucket: `<prefix><topic>-<topic_id>/<partition>/`."""

    topic: str
    partition: int
    topic_id: str

    def dir(self, prefix: str) -> str:
        return f"{prefix}{self.topic}-{self.topic_id}/{self.partition}/"


@dataclass(frozen=True, order=True)
class SegmentKeys:
    """The three objects of one uploaded segment; ordered by start offset, then segment id."""

    start_offset: int
    segment_id: str
    partition: RemotePartition
    prefix: str

    def key(self, suffix: str) -> str:
        return f"{self.partition.dir(self.prefix)}{self.start_offset:0{OFFSET_DIGITS}d}-{self.segment_id}.{suffix}"

    @property
    def log(self) -> str:
        return self.key(LOG)

    @property
    def indexes(self) -> str:
        return self.key(INDEXES)

    @property
    def manifest(self) -> str:
        return self.key(MANIFEST)


@dataclass(frozen=True)
class ListedSegment:
    """A complete upload (its manifest exists), with the object sizes the listing gave."""

    keys: SegmentKeys
    log_size: int | None      # None: the .log object was not listed (deleted under us, or never written)
    indexes_size: int | None
    manifest_size: int


def parse_key(prefix: str, key: str) -> tuple[SegmentKeys, str] | None:
    """(segment, suffix) of a key in the plugin's layout under `prefix`, or None for any other key."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if len(parts) != 3:
        return None
    topic_dir, partition, name = parts
    t = _TOPIC_DIR.fullmatch(topic_dir)
    s = _SEGMENT_FILE.fullmatch(name)
    if t is None or s is None or _PARTITION.fullmatch(partition) is None or int(partition) > 2 ** 31 - 1:
        return None
    p = RemotePartition(t["topic"], int(partition), t["topic_id"])
    return SegmentKeys(int(s["offset"]), s["segment_id"], p, prefix), s["suffix"]


def list_segments(store, prefix: str, partition: RemotePartition) -> list[ListedSegment]:
    """The partition's complete uploads (those with a manifest), by start offset then segment id.

    Two uploads may cover the same offsets (a leader change mid-copy); both are listed and the caller
    picks by leader-epoch lineage.
    """
    return segments_in(prefix, partition, store.list(partition.dir(prefix)))


def segments_in(prefix: str, partition: RemotePartition, objects) -> list[ListedSegment]:
    """list_segments over a listing already made (ObjectInfo of the partition directory's objects)."""
    found: dict[SegmentKeys, dict[str, int]] = {}
    for obj in objects:
        parsed = parse_key(prefix, obj.key)
        if parsed is not None and parsed[0].partition == partition:
            found.setdefault(parsed[0], {})[parsed[1]] = obj.size
    return [ListedSegment(keys, sizes.get(LOG), sizes.get(INDEXES), sizes[MANIFEST])
            for keys, sizes in sorted(found.items()) if MANIFEST in sizes]


def list_partitions(store, prefix: str) -> list[RemotePartition]:
    """Every partition directory under `prefix` (two delimiter listings, never the segment keys)."""
    out = []
    for topic_dir in store.list_dirs(prefix):
        t = _TOPIC_DIR.fullmatch(topic_dir[len(prefix):].rstrip("/"))
        if t is None:
            continue
        for partition_dir in store.list_dirs(topic_dir):
            number = partition_dir[len(topic_dir):].rstrip("/")
            if _PARTITION.fullmatch(number) and int(number) <= 2 ** 31 - 1:
                out.append(RemotePartition(t["topic"], int(number), t["topic_id"]))
    return sorted(out)


def partition_dirs(store, prefix: str, topic: str, partition: int) -> list[RemotePartition]:
    """One partition's directories in the bucket, one per topic id the topic had: one listing of the topic
    directories, then one of each that bears the topic's name (not one per topic in the bucket)."""
    return sorted(RemotePartition(topic, partition, topic_id) for topic_id in topic_ids(store, prefix, topic)
                  if f"{prefix}{topic}-{topic_id}/{partition}/" in store.list_dirs(f"{prefix}{topic}-{topic_id}/"))


def topic_ids(store, prefix: str, topic: str) -> list[str]:
    """The ids of the topic directories under `prefix` that bear the topic's name (one listing)."""
    out = []
    for topic_dir in store.list_dirs(prefix):
        t = _TOPIC_DIR.fullmatch(topic_dir[len(prefix):].rstrip("/"))
        if t is not None and t["topic"] == topic:
            out.append(t["topic_id"])
    return sorted(out)
