"""The plugin's object keys, parsed and formatted, and which segments and partitions a bucket holds.

`<prefix><topic>-<topicId>/<partition>/<startOffset, 20 digits>-<segmentId>.<suffix>` with suffix `log`,
`indexes` or `rsm-manifest` (ObjectKeyFactory). Ids are Kafka Uuids in their 22-character base64url form.
The manifest is uploaded last, so a segment without one is still being copied (or its copy failed):
it is not listed; nor is one whose `.log` or `.indexes` object is missing (deleted under us, or never
written), which could not be read.

Keys come from the bucket, which anyone who can write under the prefix controls: names and numbers in
them pass the checks a log dir's do (a legal topic name, ASCII digits, an offset within int64, a partition
within int32). A key that does not is not the plugin's: it is skipped, and handed to the caller to name
(`skipped`), never failing the listing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ...errors import INT64_MAX, InvalidArgument
from ...format.names import OFFSET_DIGITS, filename_prefix, validate_topic
from ..remote.objects import INDEXES, LOG, MANIFEST, ObjectInfo

ID_CHARS = 22       # Kafka's Uuid.toString(): 16 bytes in unpadded base64url
INT32_MAX = 2 ** 31 - 1

# Digits as [0-9]: `\d` takes other scripts' digits too, which int() reads.
_ID = rf"[A-Za-z0-9_-]{{{ID_CHARS}}}"
_TOPIC_DIR = re.compile(rf"(?P<topic>.+)-(?P<topic_id>{_ID})")
_SEGMENT_FILE = re.compile(rf"(?P<offset>[0-9]{{{OFFSET_DIGITS}}})-(?P<segment_id>{_ID})\.(?P<suffix>log|indexes|rsm-manifest)")
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")


def _topic_dir(name: str) -> re.Match | None:
    """The match of a topic directory's name (`<topic>-<topic id>`) whose topic is a legal Kafka topic name."""
    t = _TOPIC_DIR.fullmatch(name)
    if t is None:
        return None
    try:
        validate_topic(t["topic"])
    except InvalidArgument:
        return None
    return t


def _partition(text: str) -> int | None:
    return int(text) if _PARTITION.fullmatch(text) and int(text) <= INT32_MAX else None


@dataclass(frozen=True, order=True, slots=True)
class RemotePartition:
    """A partition directory in the bucket: `<prefix><topic>-<topic_id>/<partition>/`."""

    topic: str
    partition: int
    topic_id: str

    def dir(self, prefix: str) -> str:
        return f"{prefix}{self.topic}-{self.topic_id}/{self.partition}/"


@dataclass(frozen=True, order=True, slots=True)
class SegmentKeys:
    """The three objects of one uploaded segment; ordered by start offset, then segment id."""

    start_offset: int
    segment_id: str
    partition: RemotePartition
    prefix: str

    def key(self, suffix: str) -> str:
        return f"{self.partition.dir(self.prefix)}{filename_prefix(self.start_offset)}-{self.segment_id}.{suffix}"

    @property
    def log(self) -> str:
        return self.key(LOG)

    @property
    def indexes(self) -> str:
        return self.key(INDEXES)

    @property
    def manifest(self) -> str:
        return self.key(MANIFEST)


@dataclass(frozen=True, slots=True)
class ListedSegment:
    """A complete upload (its three objects exist), with the object sizes the listing gave."""

    keys: SegmentKeys
    log_size: int
    indexes_size: int
    manifest_size: int
    manifest_etag: str | None = None  # another after the manifest is rewritten (None: the store gave none)


def parse_key(prefix: str, key: str) -> tuple[SegmentKeys, str] | None:
    """(segment, suffix) of a key in the plugin's layout under `prefix`, or None for any other key."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if len(parts) != 3:
        return None
    topic_dir, partition, name = parts
    t = _topic_dir(topic_dir)
    s = _SEGMENT_FILE.fullmatch(name)
    number = _partition(partition)
    if t is None or s is None or number is None or int(s["offset"]) > INT64_MAX:
        return None
    p = RemotePartition(t["topic"], number, t["topic_id"])
    return SegmentKeys(int(s["offset"]), s["segment_id"], p, prefix), s["suffix"]


def list_segments(store, prefix: str, partition: RemotePartition, skipped: list[str] | None = None) -> list[ListedSegment]:
    """The partition's complete uploads (those with a manifest), by start offset then segment id.

    Two uploads may cover the same offsets (a leader change mid-copy); both are listed and the caller
    picks by leader-epoch lineage. `skipped`: gets the keys that are not the plugin's.
    """
    return segments_in(prefix, partition, store.list(partition.dir(prefix)), skipped)


def segments_in(prefix: str, partition: RemotePartition, objects: Iterable[ObjectInfo],
                skipped: list[str] | None = None) -> list[ListedSegment]:
    """list_segments over a listing already made (ObjectInfo of the partition directory's objects)."""
    found: dict[SegmentKeys, dict[str, ObjectInfo]] = {}
    directory = partition.dir(prefix)
    start = len(directory)
    match = _SEGMENT_FILE.fullmatch
    for obj in objects:  # every key is the directory's: only its file name is parsed (a listing may hold 100,000s)
        key = obj.key
        s = match(key, start) if key.startswith(directory) else None
        if s is not None and int(s["offset"]) <= INT64_MAX:
            found.setdefault(SegmentKeys(int(s["offset"]), s["segment_id"], partition, prefix), {})[s["suffix"]] = obj
        elif skipped is not None:
            skipped.append(key)
    out = []
    for keys, objs in sorted(found.items()):
        if MANIFEST not in objs:
            continue  # still being copied
        if LOG not in objs or INDEXES not in objs:
            if skipped is not None:
                skipped.append(keys.manifest)
            continue
        manifest = objs[MANIFEST]
        out.append(ListedSegment(keys, objs[LOG].size, objs[INDEXES].size, manifest.size,
                                 manifest.etag))
    return out


def list_partitions(store, prefix: str, skipped: list[str] | None = None) -> list[RemotePartition]:
    """Every partition directory under `prefix` (two delimiter listings, never the segment keys)."""
    out = []
    for topic_dir in store.list_dirs(prefix):
        t = _topic_dir(topic_dir[len(prefix):].rstrip("/"))
        if t is None:
            if skipped is not None:
                skipped.append(topic_dir)
            continue
        for partition_dir in store.list_dirs(topic_dir):
            number = _partition(partition_dir[len(topic_dir):].rstrip("/"))
            if number is not None:
                out.append(RemotePartition(t["topic"], number, t["topic_id"]))
            elif skipped is not None:
                skipped.append(partition_dir)
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
        t = _topic_dir(topic_dir[len(prefix):].rstrip("/"))
        if t is not None and t["topic"] == topic:
            out.append(t["topic_id"])
    return sorted(out)
