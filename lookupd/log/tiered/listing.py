"""Which remote segments exist (RemoteLogManager and RemoteLogMetadataManager, read side).

For each partition directory in the bucket: the uploads with a manifest (the plugin writes it last);
among those, when `__remote_log_metadata` is in the log dirs, only the ones it records as
COPY_SEGMENT_FINISHED and not being deleted; and where two uploads cover the same offsets (a leader
change mid-copy), the one Kafka's leader-epoch lineage reads: on the local `leader-epoch-checkpoint`
first, then of the highest epoch. A local partition is matched to its bucket directory by the topic
id in its `partition.metadata` (a topic deleted and created again has a new id); partitions only in
the bucket are listed too.
"""

from __future__ import annotations

import bisect
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterable, NamedTuple

from ...errors import LookupdError
from ..remote.config import RemoteConfig
from ..remote.diskcache import cache_name
from ..remote.errors import ObjectNotFound
from ..remote.opener import open_bucket
from ..remote.manifest import Manifest
from .layout import ListedSegment, RemotePartition, SegmentKeys, list_partitions, list_segments
from .brokerfiles import MetadataReader, RemoteLogMetadata, read_leader_epoch_checkpoint, read_topic_id
from ..locallog import LocalLog
from ..segment import LogSegment
from .segment import Listing, RemoteSegmentInfo, UploadData, remote_segment

if TYPE_CHECKING:
    from ..remote.bucket import BucketSegment
    from ..remote.store import ObjectStore

log = logging.getLogger(__name__)
WHOLE_PIECE_BYTES = 4 << 20  # a whole-segment fetch reads (and holds) this much at a time
MANIFEST_GETS_IN_FLIGHT = 8  # a listing's manifest GETs at once: each is a few KB, so they cost latency, not
                             # bandwidth, and a partition of hundreds of segments lists in a fraction of the time
# Objects skipped by a listing are named in the log once each, at most this many per listing (then counted).
SKIPPED_NAMED = 20


class History(NamedTuple):
    """Which bucket directory holds a partition's history: the partition matching rule, the one the daemon, the
    mount and restore read. A partition's directory is the one of its topic's id (a topic deleted and created
    again has a new one); `topic_id` None: any (a partition with no local directory, restore without
    --topic-id). `local_dir`: where its leader-epoch lineage is read, if anywhere."""

    topic_id: str | None
    local_dir: str | None = None

    def holds(self, rp: RemotePartition) -> bool:
        return self.topic_id is None or rp.topic_id == self.topic_id

    def lineage(self) -> list[tuple[int, int]]:
        """The partition's leader-epoch lineage (the local `leader-epoch-checkpoint`; [] without one)."""
        return [] if self.local_dir is None else read_leader_epoch_checkpoint(self.local_dir)


def local_history(topic: str, partition: int, local_dir: str | None) -> History | None:
    """What a partition's local directory says of its history in the bucket; None when it has none there: a
    local partition without a topic id yet, or whose `partition.metadata` cannot be read (said in the log:
    it is served from local disk only). No local directory: any directory of the topic's name."""
    if local_dir is None:
        return History(None)
    try:
        topic_id = read_topic_id(local_dir)
    except LookupdError as err:
        log.warning("%s; serving %s-%d from local disk only", err, topic, partition)
        return None
    return None if topic_id is None else History(topic_id, local_dir)


def on_lineage(epochs: tuple[tuple[int, int], ...], end_offset: int | None,
               lineage: list[tuple[int, int]], position: dict[int, int] | None = None) -> bool:
    """Whether a segment's leader epochs agree with the partition's epoch lineage (the checkpoint's
    (epoch, start offset) entries): each of its epochs is in the lineage and starts in the segment
    no earlier than the lineage says, and ends no later than the lineage's next epoch begins
    (RemoteLogManager.isRemoteSegmentWithinLeaderEpochs, in spirit). True without a lineage.
    `position`: epoch -> its place in the lineage, when the caller made it already."""
    if not lineage:
        return True
    if position is None:
        position = _positions(lineage)
    for i, (epoch, offset) in enumerate(epochs):
        k = position.get(epoch)
        if k is None or offset < lineage[k][1]:
            return False
        epoch_end = lineage[k + 1][1] if k + 1 < len(lineage) else None  # exclusive
        last = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else end_offset
        if epoch_end is not None and last is not None and last >= epoch_end:
            return False
    return True


def _positions(lineage: list[tuple[int, int]]) -> dict[int, int]:
    """epoch -> its first place in the lineage."""
    out: dict[int, int] = {}
    for k, (epoch, _) in enumerate(lineage):
        out.setdefault(epoch, k)
    return out


def choose(candidates: Iterable[RemoteSegmentInfo], lineage: list[tuple[int, int]]) -> list[RemoteSegmentInfo]:
    """One upload per offset range: the uploads on the lineage first, then those of the highest epoch,
    then the later start; any upload overlapping one already chosen is dropped. In offset order.

    O(N log N) in the uploads: the chosen ones are disjoint, so an upload overlaps one of them exactly when
    the chosen one that starts last at or before its end reaches its start; that one is found through a
    running maximum (a Fenwick tree) over the uploads in start order."""
    position = _positions(lineage)
    infos = sorted(candidates, key=lambda i: (i.base_offset, i.segment_id))
    los = [i.base_offset for i in infos]
    his = [i.end_offset if i.end_offset is not None else i.base_offset for i in infos]
    if all(map(int.__lt__, his[:-1], los[1:])):  # no two overlap (the usual case): every one is chosen
        return infos

    def preference(k: int):
        info = infos[k]
        top_epoch = max((e for e, _ in info.leader_epochs), default=-1)
        return (on_lineage(info.leader_epochs, info.end_offset, lineage, position), top_epoch, info.base_offset,
                info.segment_id)

    n = len(infos)
    latest = [-1] * (n + 1)  # Fenwick tree: the highest chosen place among places [0, p)
    chosen = []
    for k in sorted(range(n), key=preference, reverse=True):
        p, before = bisect.bisect_right(los, his[k]), -1  # places of the uploads starting at or before its end
        while p > 0:
            before = max(before, latest[p])
            p &= p - 1
        if before >= 0 and his[before] >= los[k]:
            continue
        chosen.append(k)
        p = k + 1
        while p <= n:
            latest[p] = max(latest[p], k)
            p += p & -p
    return [infos[k] for k in sorted(chosen)]


class PartitionListing:
    """One bucket partition directory's chosen segments, and what listing it again needs: the partition's
    epoch lineage and the logs the listing read the metadata topic from."""

    def __init__(self, partition: RemotePartition, url: str, segments: list[RemoteSegmentInfo],
                 lineage: list[tuple[int, int]], local_logs: list[LocalLog]):
        self.partition = partition
        self.url = url
        self.segments = segments
        self.lineage = lineage
        self.local_logs = local_logs


class RemoteTier:
    """The bucket's tiered segments, as the log layer sees them (listing only here; the bytes are the
    Bucket's)."""

    def __init__(self, config: RemoteConfig, store: ObjectStore | None = None, *, cached: bool = True):
        """`store`: one made already (else the config's); `cached` False: no disk cache (restore)."""
        self.config = config
        self.bucket = open_bucket(config, store=store, cached=cached)
        self.store = self.bucket.store
        self._lock = threading.Lock()
        # What each partition's last listing took from each manifest: manifest key -> (ETag, the upload's
        # RemoteSegmentInfo or None), so that listing it again fetches only manifests new or rewritten since.
        self._listed: dict[RemotePartition, dict[str, tuple[str | None, RemoteSegmentInfo | None]]] = {}
        self._warned: set[str] = set()  # skipped keys already named in the log
        self._metadata = MetadataReader()  # the __remote_log_metadata records, folded as they are appended
        # Uploads the metadata topic names whose objects the store no longer has (a read missed them), by partition
        self._gone: dict[RemotePartition, set[str]] = {}

    def url(self, key: str) -> str:
        return self.bucket.url(key)

    # ------------------------------------------------------------- manifests and data

    def manifest(self, keys: SegmentKeys, listed: ListedSegment | None = None) -> Manifest:
        """The segment's parsed manifest (Bucket.manifest); `listed`: the listing's entry, whose ETag and size
        it is read at."""
        if listed is None:
            return self.bucket.manifest(keys.manifest)
        return self.bucket.manifest(keys.manifest, listed.manifest_etag, listed.manifest_size)

    def data(self, keys: SegmentKeys) -> BucketSegment:
        """The segment's BucketSegment (made once per upload; its manifest fetched then)."""
        return self.bucket.segment(keys.log)

    def open(self, info: RemoteSegmentInfo, cache=None, listing: Listing | None = None) -> LogSegment:
        """The listed upload as a LogSegment of remote parts (nothing fetched until it is read); `listing`: the
        partition's (a TieredLog), asked whether it still names this upload."""
        return remote_segment(self, info, cache, listing)

    def upload_data(self, info: RemoteSegmentInfo) -> UploadData:
        """The listed upload's bytes and indexes, opened on first use (what a remote segment reads through)."""
        return UploadData(self, info.keys)

    def gone(self, keys: SegmentKeys) -> None:
        """The store no longer has one of the upload's objects: listings from the metadata topic leave it out
        from now on (as a listing of the bucket would), until the topic no longer names it."""
        with self._lock:
            self._gone.setdefault(keys.partition, set()).add(keys.segment_id)

    def whole_segment(self, keys: SegmentKeys) -> str:
        """The segment's original bytes as one file in the cache (fetched once, in pieces, through the
        chunk cache and its read-ahead); its path."""
        disk = self.bucket.disk_cache
        name = cache_name(keys.log, "whole")
        path = disk.file(name)
        if path is None:
            data = self.data(keys)
            pieces = (data.read(p, WHOLE_PIECE_BYTES) for p in range(0, data.size, WHOLE_PIECE_BYTES))
            path = disk.put_stream(name, pieces)
        return path

    # ------------------------------------------------------------- listing

    def _info(self, listed: ListedSegment) -> RemoteSegmentInfo | None:
        """What the upload's manifest says of it (no metadata topic); None when it was deleted since the
        listing. A manifest that cannot be read leaves the upload listed by its key alone: its reads say
        what is wrong (CORRUPT_DATA, once fetched), and no other segment's answers change."""
        keys = listed.keys
        try:
            m = self.manifest(keys, listed).metadata
        except ObjectNotFound:
            return None  # deleted since the listing
        except LookupdError as err:
            log.warning("%s", err)
            m = None
        if m is None:  # a manifest from before Sept 2023: its bounds come from its data when asked
            return RemoteSegmentInfo(keys.start_offset, None, None, (), keys.segment_id, keys.log, keys)
        return RemoteSegmentInfo(keys.start_offset, m.end_offset, m.max_timestamp_ms,
                                 tuple(sorted(m.segment_leader_epochs.items(), key=lambda e: e[1])),
                                 keys.segment_id, keys.log, keys)

    def list_partition(self, partition: RemotePartition, state: RemoteLogMetadata | None,
                       lineage: list[tuple[int, int]], listed: list[ListedSegment] | None = None,
                       skipped: list[str] | None = None) -> list[RemoteSegmentInfo]:
        """The partition's chosen segments; `listed`: its listing when the caller made it already.

        With the metadata topic, its records say which uploads exist, as they do for Kafka's
        RemoteLogManager: their keys follow from them, and nothing is listed or fetched (a listing of 50,000
        uploads is 150 pages, seconds of the store's time at every rescan). Without it, the partition's objects
        are listed, and the manifests not yet read (or rewritten since) are fetched MANIFEST_GETS_IN_FLIGHT at
        a time. `skipped`: gets the keys the listing skipped (None: they are named in the log here)."""
        if state is not None:  # the metadata topic's records: nothing listed, nothing fetched
            finished = state.finished(partition.topic_id, partition.partition)
            if listed is not None:
                pairs = [(s.keys, finished.get(s.keys.segment_id)) for s in listed]
            else:
                with self._lock:
                    gone = self._gone.get(partition, set()) & set(finished)
                    self._gone[partition] = gone
                pairs = [(SegmentKeys(m.start_offset, sid, partition, self.config.prefix), m)
                         for sid, m in finished.items() if 0 <= m.start_offset and sid not in gone]
            return choose([RemoteSegmentInfo(k.start_offset, m.end_offset, m.max_timestamp, m.leader_epochs,
                                             k.segment_id, k.log, k) for k, m in pairs if m is not None], lineage)
        if listed is None:
            mine: list[str] = []
            listed = list_segments(self.store, self.config.prefix, partition, mine if skipped is None else skipped)
            self.note_skipped(mine)
        before = self._listed.get(partition, {})
        known: dict[str, tuple[str | None, RemoteSegmentInfo | None]] = {}
        todo = []
        for s in listed:
            kept = before.get(s.keys.manifest)
            if kept is not None and kept[0] == s.manifest_etag and s.manifest_etag is not None:
                known[s.keys.manifest] = kept
            else:
                todo.append(s)
        if len(todo) > 1:
            with ThreadPoolExecutor(MANIFEST_GETS_IN_FLIGHT, thread_name_prefix="lookupd-manifests") as pool:
                got = list(pool.map(self._info, todo))
        else:
            got = [self._info(s) for s in todo]
        for s, info in zip(todo, got):
            if info is not None:
                known[s.keys.manifest] = (s.manifest_etag, info)
        with self._lock:
            self._listed[partition] = known
        return choose([info for _, info in known.values() if info is not None], lineage)

    def note_skipped(self, keys: list[str], whole: bool = False) -> None:
        """Name in the log, once each, the objects a listing skipped (not the plugin's, or an upload missing
        its `.log` or `.indexes`). `whole`: the listing was of the whole bucket, so the keys it did not skip
        are forgotten (named again should they come back)."""
        new = [k for k in keys if k not in self._warned]
        with self._lock:
            if whole:
                self._warned = set(keys)
            else:
                self._warned.update(new)
        if not new:
            return
        shown = ", ".join(repr(k) for k in new[:SKIPPED_NAMED])
        more = f" and {len(new) - SKIPPED_NAMED} more" if len(new) > SKIPPED_NAMED else ""
        log.warning("s3://%s: skipped %d objects that are not a complete upload in the tiered-storage plugin's "
                    "layout (an illegal topic name or number, an upload missing its .log or .indexes): %s%s",
                    self.config.bucket, len(new), shown, more)

    def scan(self, local_logs: list[LocalLog]) -> dict[tuple[str, int], PartitionListing]:
        """Every bucket partition that matches a local partition's topic id or has no local partition,
        with its chosen segments; LookupdError (UNAVAILABLE, UNAUTHORIZED) when the store cannot be listed."""
        state = self._metadata.read(local_logs)
        local = {(llog.topic, llog.partition): llog for llog in local_logs if llog.local_dir is not None}
        out: dict[tuple[str, int], PartitionListing] = {}
        skipped: list[str] = []
        partitions = list_partitions(self.store, self.config.prefix, skipped)
        with self._lock:  # the listings of partitions no longer in the bucket are forgotten
            present = set(partitions)
            self._listed = {rp: v for rp, v in self._listed.items() if rp in present}
        for rp in partitions:
            key = (rp.topic, rp.partition)
            llog = local.get(key)
            history = local_history(rp.topic, rp.partition, None if llog is None else llog.local_dir)
            if history is None or not history.holds(rp):
                continue  # another incarnation of the topic (or no id yet): not this partition's history
            if llog is None and key in out:
                continue  # two ids for one name with no local dir to tell them apart: the first listed
            lineage = history.lineage()
            segments = self.list_partition(rp, state, lineage, skipped=skipped)
            if not segments:
                continue
            out[key] = PartitionListing(rp, self.url(rp.dir(self.config.prefix).rstrip("/")), segments, lineage,
                                        local_logs)
        self.note_skipped(skipped, whole=True)
        return out

    def relist(self, listing: PartitionListing) -> list[RemoteSegmentInfo]:
        """The partition's chosen segments now (a TieredLog's `refresh`)."""
        return self.list_partition(listing.partition, self._metadata.read(listing.local_logs), listing.lineage)
