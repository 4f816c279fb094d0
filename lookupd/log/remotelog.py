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

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

from ..errors import LookupdError
from .remote.config import RemoteConfig
from .remote.store import ObjectNotFound
from .remote.layout import ListedSegment, RemotePartition, list_partitions, list_segments
from .remote_metadata import (RemoteLogMetadata, read_leader_epoch_checkpoint, read_remote_log_metadata,
                              read_topic_id)
from .remotesegment import RemoteSegment, RemoteSegmentInfo

log = logging.getLogger(__name__)
WHOLE_PIECE_BYTES = 4 << 20  # a whole-segment fetch reads (and holds) this much at a time
MANIFEST_GETS_IN_FLIGHT = 8  # a listing's manifest GETs at once: each is a few KB, so they cost latency, not
                             # bandwidth, and a partition of hundreds of segments lists in a fraction of the time


def on_lineage(epochs: tuple[tuple[int, int], ...], end_offset: int | None,
               lineage: list[tuple[int, int]]) -> bool:
    """Whether a segment's leader epochs agree with the partition's epoch lineage (the checkpoint's
    (epoch, start offset) entries): each of its epochs is in the lineage and starts in the segment
    no earlier than the lineage says, and ends no later than the lineage's next epoch begins
    (RemoteLogManager.isRemoteSegmentWithinLeaderEpochs, in spirit). True without a lineage."""
    if not lineage:
        return True
    starts = dict(lineage)
    order = [e for e, _ in lineage]
    for i, (epoch, offset) in enumerate(epochs):
        if epoch not in starts or offset < starts[epoch]:
            return False
        k = order.index(epoch)
        epoch_end = lineage[k + 1][1] if k + 1 < len(lineage) else None  # exclusive
        last = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else end_offset
        if epoch_end is not None and last is not None and last >= epoch_end:
            return False
    return True


def choose(candidates: Iterable[RemoteSegmentInfo], lineage: list[tuple[int, int]]) -> list[RemoteSegmentInfo]:
    """One upload per offset range: the uploads on the lineage first, then those of the highest epoch,
    then the later start; any upload overlapping one already chosen is dropped. In offset order."""
    def preference(info: RemoteSegmentInfo):
        top_epoch = max((e for e, _ in info.leader_epochs), default=-1)
        return (on_lineage(info.leader_epochs, info.end_offset, lineage), top_epoch, info.base_offset,
                info.segment_id)

    chosen: list[RemoteSegmentInfo] = []
    for info in sorted(candidates, key=preference, reverse=True):
        lo, hi = info.base_offset, info.end_offset if info.end_offset is not None else info.base_offset
        if all(hi < c.base_offset or lo > (c.end_offset if c.end_offset is not None else c.base_offset)
               for c in chosen):
            chosen.append(info)
    return sorted(chosen, key=lambda i: i.base_offset)


class PartitionListing:
    """One bucket partition directory's chosen segments, and how to list it again."""

    def __init__(self, partition: RemotePartition, url: str, segments: list[RemoteSegmentInfo],
                 relist: Callable[[], list[RemoteSegmentInfo]]):
        self.partition = partition
        self.url = url
        self.segments = segments
        self.relist = relist


class RemoteTier:
    """The bucket's tiered segments, as the log layer sees them (listing only here; the bytes are
    RemoteSegmentData's)."""

    def __init__(self, config: RemoteConfig, store=None):
        from .remote.store import ObjectStore

        from .remote.diskcache import DiskCache
        from .remote.keyring import Keyring

        self.config = config
        self.store = store if store is not None else ObjectStore(config)
        self.disk_cache = DiskCache(config.cache_dir, config.cache_bytes)
        self.keyring = Keyring(config.encryption_keys)
        self._manifests: dict[str, object] = {}  # manifest key -> Manifest (objects never change)
        self._lock = threading.Lock()
        self._opened: dict[str, object] = {}  # `.log` key -> RemoteSegmentData, shared by the segment objects

    def url(self, key: str) -> str:
        return f"s3://{self.config.bucket}/{key}"

    # ------------------------------------------------------------- manifests and data

    def manifest(self, keys) -> object:
        """The segment's parsed manifest (one GET the first time)."""
        from .remote.manifest import parse_manifest

        found = self._manifests.get(keys.manifest)
        if found is None:
            found = parse_manifest(self.store.get(keys.manifest), keys.manifest)
            with self._lock:
                self._manifests[keys.manifest] = found
        return found

    def data(self, keys) -> object:
        """The segment's RemoteSegmentData (made once per upload; its manifest fetched then)."""
        from .remote.segmentdata import RemoteSegmentData

        found = self._opened.get(keys.log)
        if found is None:
            manifest = self.manifest(keys)
            with self._lock:
                found = self._opened.get(keys.log)
                if found is None:
                    found = RemoteSegmentData(self.store, keys.log, manifest, self.keyring, self.disk_cache)
                    self._opened[keys.log] = found
        return found

    def open(self, info: RemoteSegmentInfo, cache=None, current=None) -> RemoteSegment:
        return RemoteSegment(info, _LazyData(lambda: self.data(info.keys)), cache, url=self.url(info.keys.log),
                             current=current, fetch_whole=lambda: self.whole_segment(info.keys))

    def whole_segment(self, keys) -> str:
        """The segment's original bytes as one file in the cache (fetched once, in pieces, through the
        chunk cache and its read-ahead); its path."""
        from .remote.diskcache import cache_name

        name = cache_name(keys.log, "whole")
        path = self.disk_cache.file(name)
        if path is None:
            data = self.data(keys)
            pieces = (data.read(p, WHOLE_PIECE_BYTES) for p in range(0, data.size, WHOLE_PIECE_BYTES))
            path = self.disk_cache.put_stream(name, pieces)
        return path

    # ------------------------------------------------------------- listing

    def _info(self, listed: ListedSegment, state: RemoteLogMetadata | None) -> RemoteSegmentInfo | None:
        """What is known of an upload: the metadata topic's record, else the manifest's; None when the
        metadata topic does not count it as copied."""
        keys = listed.keys
        if state is not None:
            meta = state.finished(keys.partition.topic_id, keys.partition.partition).get(keys.segment_id)
            if meta is None:
                return None
            return RemoteSegmentInfo(keys.start_offset, meta.end_offset, meta.max_timestamp, meta.leader_epochs,
                                     keys.segment_id, keys.log, keys)
        try:
            m = self.manifest(keys).metadata
        except ObjectNotFound:
            return None  # deleted since the listing
        except LookupdError as err:  # listed all the same: its reads fetch it again or say what is wrong
            log.warning("%s", err)
            m = None
        if m is None:  # a manifest from before Sept 2023: its bounds come from its data when asked
            return RemoteSegmentInfo(keys.start_offset, None, None, (), keys.segment_id, keys.log, keys)
        return RemoteSegmentInfo(keys.start_offset, m.end_offset, m.max_timestamp_ms,
                                 tuple(sorted(m.segment_leader_epochs.items(), key=lambda e: e[1])),
                                 keys.segment_id, keys.log, keys)

    def list_partition(self, partition: RemotePartition, state: RemoteLogMetadata | None,
                       lineage: list[tuple[int, int]], listed: list[ListedSegment] | None = None
                       ) -> list[RemoteSegmentInfo]:
        """The partition's chosen segments; `listed`: its listing when the caller made it already. The
        manifests not yet known are fetched MANIFEST_GETS_IN_FLIGHT at a time."""
        if listed is None:
            listed = list_segments(self.store, self.config.prefix, partition)
        if state is None and sum(s.keys.manifest not in self._manifests for s in listed) > 1:
            with ThreadPoolExecutor(MANIFEST_GETS_IN_FLIGHT, thread_name_prefix="lookupd-manifests") as pool:
                infos = list(pool.map(lambda s: self._info(s, state), listed))
        else:
            infos = [self._info(s, state) for s in listed]
        return choose([i for i in infos if i is not None], lineage)

    def scan(self, local_logs: list) -> dict[tuple[str, int], PartitionListing]:
        """Every bucket partition that matches a local partition's topic id or has no local partition,
        with its chosen segments; LookupdError (UNAVAILABLE, UNAUTHORIZED) when the store cannot be listed."""
        state = read_remote_log_metadata(local_logs)
        local = {(llog.topic, llog.partition): llog for llog in local_logs if getattr(llog, "local_dir", "") is not None}
        out: dict[tuple[str, int], PartitionListing] = {}
        for rp in list_partitions(self.store, self.config.prefix):
            key = (rp.topic, rp.partition)
            llog = local.get(key)
            lineage: list[tuple[int, int]] = []
            if llog is not None:
                local_dir = getattr(llog, "local_dir", llog.dir)
                try:
                    topic_id = read_topic_id(local_dir)
                except LookupdError as err:
                    log.warning("%s; serving %s-%d from local disk only", err, *key)
                    continue
                if topic_id != rp.topic_id:
                    continue  # another incarnation of the topic (or no id yet): not this partition's history
                lineage = read_leader_epoch_checkpoint(local_dir)
            elif key in out:
                continue  # two ids for one name with no local dir to tell them apart: the first listed
            segments = self.list_partition(rp, state, lineage)
            if not segments:
                continue
            out[key] = PartitionListing(rp, self.url(rp.dir(self.config.prefix).rstrip("/")), segments,
                                        lambda rp=rp, lineage=lineage, llogs=local_logs: self._relist(rp, llogs, lineage))
        return out

    def _relist(self, rp: RemotePartition, local_logs: list, lineage: list[tuple[int, int]]) -> list[RemoteSegmentInfo]:
        return self.list_partition(rp, read_remote_log_metadata(local_logs), lineage)


class _LazyData:
    """RemoteSegmentData made on first use: a listed segment costs no GET until it is read."""

    def __init__(self, make: Callable[[], object]):
        self._make = make
        self._data = None

    def _get(self):
        data = self._data
        if data is None:
            data = self._data = self._make()
        return data

    @property
    def size(self) -> int:
        return self._get().size

    def read(self, position: int, size: int, *, sequential: bool | None = None) -> bytes:
        return self._get().read(position, size, sequential=sequential)

    def read_into(self, position: int, out: memoryview, *, sequential: bool | None = None) -> int:
        return self._get().read_into(position, out, sequential=sequential)

    def index_paths(self, kinds: list[str]) -> dict[str, str | bytes | None]:
        return self._get().index_paths(kinds)

    def index_size(self, kind: str) -> int | None:
        return self._get().index_size(kind)
