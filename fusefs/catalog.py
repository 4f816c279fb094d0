"""What is there: the daemon's partitions and segments, cached for a short TTL, and where to read them.

Listings come from the daemon (`partitions`, `segments`), which rescans the log dirs
itself, so partitions and segments that appear or go away on disk appear or go away here
within the TTL plus the daemon's rescan interval. A stale entry is served while one
thread refreshes it; a failed refresh drops the entry, so while the daemon is down every
lookup that needs it fails rather than answering from an old listing.

A partition is read from local files when its directory is found under one of the
mount's `--log-dir`s or, without `--log-dir`, under the log dir the daemon reports when
the daemon is reached through a Unix socket (same host). Otherwise its bytes come
through the daemon's `read`.
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
import time
from typing import Any, Callable, Hashable, NamedTuple

from fuse import FuseOSError

from .daemon import DaemonLink


class PartitionInfo(NamedTuple):
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    log_dir: str
    local_dir: str | None  # the partition directory on this host, None: read through the daemon


class SegmentInfo(NamedTuple):
    base_offset: int
    size: int
    active: bool
    largest_timestamp: int
    offset_index_entries: int
    time_index_entries: int


class Segments:
    """One partition's segments as the daemon listed them, in offset order."""

    def __init__(self, rows: list[dict]):
        self.list = sorted((SegmentInfo(*(r[f] for f in SegmentInfo._fields)) for r in rows),
                           key=lambda s: s.base_offset)
        self.bases = [s.base_offset for s in self.list]
        self._by_base = {s.base_offset: s for s in self.list}

    def get(self, base_offset: int) -> SegmentInfo | None:
        return self._by_base.get(base_offset)

    def after(self, base_offset: int) -> SegmentInfo | None:
        """The segment following the one at `base_offset`, if any."""
        i = bisect.bisect_right(self.bases, base_offset)
        return self.list[i] if i < len(self.list) else None


class TTLCache:
    """Values fetched at most once per `ttl` seconds per key; one thread refreshes, the others
    keep reading the stale value meanwhile (or wait, when there is none)."""

    def __init__(self, ttl: float):
        self.ttl = ttl
        self._entries: dict[Hashable, tuple[float, Any]] = {}
        self._locks: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, fetch: Callable[[], Any]) -> Any:
        entry = self._entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        lock = self._locks.setdefault(key, threading.Lock())
        if not lock.acquire(blocking=entry is None):
            return entry[1]
        try:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > time.monotonic():
                return entry[1]
            try:
                value = fetch()
            except BaseException:
                self._entries.pop(key, None)
                raise
            self._entries[key] = (time.monotonic() + self.ttl, value)
            return value
        finally:
            lock.release()


class Catalog:
    """Partitions and segments, as the daemon lists them (see the module docstring)."""

    def __init__(self, daemon: DaemonLink, *, log_dirs: list[str], same_host: bool, ttl: float = 1.0):
        self.daemon = daemon
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.same_host = same_host
        self._cache = TTLCache(ttl)

    def _local_dir(self, row: dict) -> str | None:
        name = f"{row['topic']}-{row['partition']}"
        roots = self.log_dirs or ([row["log_dir"]] if self.same_host else [])
        for root in roots:
            path = os.path.join(root, name)
            if os.path.isdir(path):
                return path
        return None

    def _fetch_partitions(self) -> dict[tuple[str, int], PartitionInfo]:
        return {(r["topic"], r["partition"]): PartitionInfo(r["topic"], r["partition"], r["log_start_offset"],
                                                            r["log_end_offset"], r["log_dir"], self._local_dir(r))
                for r in self.daemon.call("partitions")}

    def partitions(self) -> dict[tuple[str, int], PartitionInfo]:
        return self._cache.get("partitions", self._fetch_partitions)

    def topics(self) -> dict[str, list[int]]:
        """Topic -> its partition numbers, sorted."""
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions()):
            out.setdefault(topic, []).append(partition)
        return out

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        """The partition, or FuseOSError ENOENT when the daemon does not serve it."""
        info = self.partitions().get((topic, partition))
        if info is None:
            raise FuseOSError(errno.ENOENT)
        return info

    def segments(self, part: PartitionInfo) -> Segments:
        key = ("segments", part.topic, part.partition)
        return self._cache.get(key, lambda: Segments(self.daemon.call("segments", part.topic, part.partition)))

    def segment(self, part: PartitionInfo, base_offset: int) -> SegmentInfo:
        """The segment, or FuseOSError ENOENT when the partition has none at that base offset."""
        seg = self.segments(part).get(base_offset)
        if seg is None:
            raise FuseOSError(errno.ENOENT)
        return seg
