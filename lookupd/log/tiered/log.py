"""A partition whose older segments are in the object store (Kafka's UnifiedLog over its LocalLog and
the RemoteLogManager, read side).

The remote segments below the first local one and the local segments form one listing, so every
method of LocalLog (its reference paths, its checks and errors) answers across both tiers unchanged:
the log start is the earliest remote segment's base offset (or the broker's checkpoint if higher),
ListOffsets finds the first segment whose largest timestamp reaches the target (remote ones first,
as RemoteLogManager.findOffsetByTimestamp does for timestamps older than the local log), and a
segment the store no longer has (deleted by retention after the last listing) raises
FileNotFoundError, on which the call lists again and reruns as for a local segment deleted meanwhile.
"""

from __future__ import annotations

import os

from ..locallog import LocalLog, SegmentList
from ..segment import LogSegment
from .listing import PartitionListing, RemoteTier
from .segment import RemoteSegmentInfo


class TieredLog(LocalLog):
    """A LocalLog (its directory may be absent: a partition only in the bucket) with remote segments below."""

    def __init__(self, directory: str | None, topic: str, partition: int, cache=None, *, tier: RemoteTier,
                 listing: PartitionListing, log_start_offset: int | None = None):
        self._local_dir = None if directory is None else os.fspath(directory)
        self.remote_url = listing.url  # s3://bucket/<prefix><topic>-<topic id>/<partition>
        self._tier = tier
        self._partition = listing  # how to list the partition again
        self._listing = listing.segments
        self._remote: dict[int, RemoteSegmentInfo] = {}
        self._first_local: int | None = None
        self._listed_now = True  # `listing` is fresh: the first refresh (LocalLog's constructor) lists only the dir
        super().__init__(self._local_dir if self._local_dir is not None else self.remote_url, topic, partition, cache,
                         log_start_offset=log_start_offset)

    @property
    def local_dir(self) -> str | None:
        """The partition directory on this host; None for a partition only in the bucket."""
        return self._local_dir

    def __repr__(self) -> str:
        return f"TieredLog({self.topic}-{self.partition}, {len(self._remote)} remote + " \
               f"{len(self._bases) - len(self._remote)} local segments)"

    def refresh(self) -> bool:
        """List the bucket and the directory again (after a segment vanished mid-call, or on demand)."""
        if self._listed_now:
            self._listed_now = False
        else:
            self._listing = self._tier.relist(self._partition)
        return super().refresh()

    def update_remote(self, listing: list[RemoteSegmentInfo]) -> bool:
        """Take a new remote listing (the LogManager's periodic one) and the directory's; whether anything changed."""
        self._listing = listing
        return super().refresh()

    def listed(self, base_offset: int) -> RemoteSegmentInfo | None:
        """The upload the remote listing names at `base_offset` now (None: a local segment, or none)."""
        return self._remote.get(base_offset)

    def _list_bases(self) -> list[int]:
        local = super()._list_bases() if self.local_dir is not None else []
        first_local = local[0] if local else None
        # Kafka reads an offset from the local log once it is at or past the local log start: a remote
        # copy of a segment still on disk is never read.
        remote = {info.base_offset: info for info in self._listing
                  if first_local is None or info.base_offset < first_local}
        self._remote = remote
        self._first_local = first_local
        return sorted(remote) + local

    def _new_segment(self, base_offset: int, live: bool) -> LogSegment:
        info = self._remote.get(base_offset)
        if info is None:
            return LogSegment.open(self.local_dir, base_offset, self._cache, live=live)
        return self._tier.open(info, self._cache, self)

    def local_log_start(self, v: SegmentList) -> int:
        """The first local segment's base offset (not below the log start); the log end offset when
        every segment is remote, as Kafka's localLogStartOffset after the last local one is deleted."""
        first = next((b for b in v.bases if b not in self._remote), None)
        if first is None:
            return v.log_end_offset
        return max(first, v.log_start_offset)

    def highest_remote_offset(self, v: SegmentList) -> int:
        """The last remote segment's end offset as its upload recorded it; read from its data otherwise."""
        remote = [b for b in v.bases if b in self._remote]
        if not remote:
            return -1
        info = self._remote[remote[-1]]
        if info.end_offset is not None:
            return info.end_offset
        return v.segment(remote[-1]).read_next_offset() - 1

    @property
    def remote_segment_count(self) -> int:
        return len(self._remote)
