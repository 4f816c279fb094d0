"""What is there: the daemon's partitions and segments, cached for a short TTL, and where to read them.

Listings come from the daemon (`partitions`, `segments`), which rescans the log dirs
itself, so partitions and segments that appear or go away on disk appear or go away here
within the TTL plus the daemon's rescan interval (plus one listing's time: see TTLCache).
While the daemon is down, lookups that need a listing fail, after at most one more answer
from the old listing.

A partition is read from local files when its directory is found under one of the
mount's `--log-dir`s or, without `--log-dir`, under the log dir the daemon reports when
the daemon is reached through a Unix socket (same host). Otherwise its bytes come
through the daemon's `read`.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
import time
from typing import Any, Callable, Hashable, NamedTuple

from lookupd.format.schemas import Registry
from lookupd.rpc.client import RemoteError, topic_denial

from .binding import FuseOSError
from .daemon import DaemonLink

log = logging.getLogger(__name__)


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
    tier: str = "local"  # "remote": in the bucket (fusefs.tiers reads it)


class Segments:
    """One partition's segments as the daemon listed them, in offset order."""

    def __init__(self, rows: list[dict]):
        self.list = sorted((SegmentInfo(*(r.get(f, SegmentInfo._field_defaults.get(f)) for f in SegmentInfo._fields))
                            for r in rows),
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
    """Values fetched at most once per `ttl` seconds per key, and per SLOWDOWN times as long
    as the last fetch took: a listing that costs the daemon a second is not asked for every
    second, so keeping a big partition listed costs the daemon at most 1/SLOWDOWN of a core.

    A stale value is answered at once while one background thread fetches the new one, so
    a slow listing (thousands of segments) never holds up lookups after the first; a key
    with no value yet is fetched by the caller (others wait for it). A failed background
    fetch drops the value: the next caller fetches, and gets the error.
    """

    SLOWDOWN = 10

    def __init__(self, ttl: float):
        self.ttl = ttl
        self._entries: dict[Hashable, tuple[float, Any]] = {}
        self._locks: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, fetch: Callable[[], Any]) -> Any:
        lock = self._locks.setdefault(key, threading.Lock())
        entry = self._entries.get(key)
        if entry is not None:
            if entry[0] <= time.monotonic() and lock.acquire(blocking=False):
                threading.Thread(target=self._refresh, args=(key, fetch, lock), daemon=True,
                                 name=f"refresh {key}").start()
            return entry[1]
        with lock:
            entry = self._entries.get(key)
            if entry is not None:
                return entry[1]
            return self._fetch(key, fetch)

    def peek(self, key: Hashable) -> Any:
        """The value held for `key` (stale or not), None if none."""
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def _fetch(self, key: Hashable, fetch: Callable[[], Any]) -> Any:
        started = time.monotonic()
        value = fetch()
        now = time.monotonic()
        self._entries[key] = (now + max(self.ttl, self.SLOWDOWN * (now - started)), value)
        return value

    def _refresh(self, key: Hashable, fetch: Callable[[], Any], lock: threading.Lock) -> None:
        try:
            self._fetch(key, fetch)
        except Exception as err:  # noqa: BLE001 - the next caller fetches again and reports it
            self._entries.pop(key, None)
            log.debug("refreshing %s failed: %s", key, err)
        finally:
            lock.release()


# Topic names whose absence the catalog keeps the reason for (and logs, once each): any name may be asked about.
MAX_DENIALS_KEPT = 256


class Catalog:
    """Partitions and segments, as the daemon lists them (see the module docstring)."""

    def __init__(self, daemon: DaemonLink, *, log_dirs: list[str], same_host: bool, ttl: float = 1.0):
        self.daemon = daemon
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.same_host = same_host
        self._cache = TTLCache(ttl)
        self._hidden: set[tuple[str, int]] = set()  # partitions left out for an error, as last fetched
        # topic -> (until when, the daemon's UNAUTHORIZED answer or None): why a topic it does not list is
        # absent, asked once per ttl; and the topics whose denial was logged (once each)
        self._denials: dict[str, tuple[float, RemoteError | None]] = {}
        self._denials_said: set[str] = set()

    def _local_dir(self, row: dict) -> str | None:
        name = f"{row['topic']}-{row['partition']}"
        roots = self.log_dirs or ([row["log_dir"]] if self.same_host else [])
        for root in roots:
            path = os.path.join(root, name)
            if os.path.isdir(path):
                return path
        return None

    def _fetch_partitions(self) -> dict[tuple[str, int], PartitionInfo]:
        """The daemon's partitions; one it cannot read (an `error` in its entry) is left out, and said so once."""
        out = {}
        hidden = set()
        for r in self.daemon.call("partitions"):
            if r.get("error") is not None:
                hidden.add((r["topic"], r["partition"]))
                if (r["topic"], r["partition"]) not in self._hidden:
                    log.warning("%s-%d is not shown: %s", r["topic"], r["partition"], r["error"])
                continue
            out[(r["topic"], r["partition"])] = PartitionInfo(r["topic"], r["partition"], r["log_start_offset"],
                                                              r["log_end_offset"], r["log_dir"], self._local_dir(r))
        self._hidden = hidden
        return out

    def partitions(self) -> dict[tuple[str, int], PartitionInfo]:
        return self._cache.get("partitions", self._fetch_partitions)

    def topics(self) -> dict[str, list[int]]:
        """Topic -> its partition numbers, sorted."""
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions()):
            out.setdefault(topic, []).append(partition)
        return out

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        """The partition, or FuseOSError: ENOENT when the daemon does not serve it, EACCES when its topic is
        one the daemon's [[acl]] rules do not let this mount describe (`absent`)."""
        partitions = self.partitions()
        info = partitions.get((topic, partition))
        if info is None:
            if not any(t == topic for t, _ in partitions):
                raise self.absent(topic)
            raise FuseOSError(errno.ENOENT)
        return info

    def absent(self, topic: str) -> FuseOSError:
        """The error for a topic the daemon does not list: EACCES when its [[acl]] rules deny it (the daemon's
        reason, naming the principal, the operation and the topic, logged once per topic), else ENOENT."""
        now = time.monotonic()
        known = self._denials.get(topic)
        if known is None or known[0] <= now:
            known = self._denials[topic] = (now + self._cache.ttl, topic_denial(self.daemon.call, topic))
            if len(self._denials) > MAX_DENIALS_KEPT:  # any name may be asked about: keep the newest only
                del self._denials[next(iter(self._denials))]
            if known[1] is not None and topic not in self._denials_said and len(self._denials_said) < MAX_DENIALS_KEPT:
                self._denials_said.add(topic)
                log.warning("topic %r is not shown: the daemon answers %s", topic, known[1])
        return FuseOSError(errno.ENOENT if known[1] is None else errno.EACCES)

    def segments(self, part: PartitionInfo) -> Segments:
        key = ("segments", part.topic, part.partition)
        return self._cache.get(key, lambda: Segments(self.daemon.call("segments", part.topic, part.partition)))

    def schemas(self) -> Registry | None:
        """The Schema Registry's state as the daemon reads it from its schemas topic (None: not served)."""
        return self._cache.get("schemas", self._fetch_schemas)

    def _fetch_schemas(self) -> Registry | None:
        try:
            answer = self.daemon.call("schemas")
        except RemoteError as err:
            if err.code == "UNKNOWN_METHOD":  # a daemon from before schemas
                return None
            raise
        if answer is None:
            return None
        old = self._cache.peek("schemas")
        if old is not None and old.end_offset == answer.get("end_offset") and \
                len(old.versions) == len(answer.get("versions", ())):
            return old  # the same state: its decoders and rendered batches stay good
        return Registry.from_json(answer)

    def segment(self, part: PartitionInfo, base_offset: int) -> SegmentInfo:
        """The segment, or FuseOSError ENOENT when the partition has none at that base offset."""
        seg = self.segments(part).get(base_offset)
        if seg is None:
            raise FuseOSError(errno.ENOENT)
        return seg
