"""Every partition under one or more broker log dirs (Kafka's LogManager, read side)."""

from __future__ import annotations

import logging
import os
import threading
import time

from .cache import IndexCache
from .fileio import RefusedFile, open_regular
from ..errors import LookupdError, Unavailable, UnknownPartition
from .locallog import LocalLog
from .logdirs import misplaced
from .tiered.listing import RemoteTier
from .tiered.log import TieredLog
from ..format.names import PARTITION_METADATA, parse_partition_dir, validate_partition, validate_topic
from .statewarnings import StateWarnings

log = logging.getLogger(__name__)

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# How often the bucket is listed again (a LIST per partition): the broker uploads a segment when it
# rolls, minutes apart, and a segment deleted meanwhile is noticed on the read that misses it.
REMOTE_RESCAN_S = 30.0
# A rescan re-lists a partition directory only when its mtime changed. Directory times tick coarsely (the
# kernel's clock tick on ext4 and xfs, a second or two on others): a segment made in the same tick as a
# change the last rescan saw leaves the mtime as that rescan recorded it, and would go unseen until the
# next change. So an mtime within this much of the listing is not trusted: listed again next rescan.
DIR_MTIME_GRANULARITY_NS = 2_000_000_000


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Parse a broker offset checkpoint file (version 0: a count, then `topic partition offset` lines).

    A missing or malformed file yields what could be read: it is advisory here. A symbolic link or
    anything but a regular file is not read: RefusedFile (lookupd.log.fileio).
    """
    out: dict[tuple[str, int], int] = {}
    try:
        fd, _ = open_regular(path)
        with open(fd, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except RefusedFile:
        raise
    except OSError:
        return out
    if len(lines) < 2 or lines[0].strip() != "0":
        return out
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isascii() and parts[1].isdigit() and parts[2].isascii() and \
                parts[2].lstrip("-").isdigit():
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


class LogManager:
    """Read-only registry of the partitions under the given log dirs."""

    def __init__(self, log_dirs: list[str | os.PathLike], cache: IndexCache | None = None,
                 remote: RemoteTier | None = None):
        """`remote`: the bucket's tier, whose segments join the local ones (None: local only)."""
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(os.fspath(d)) for d in log_dirs]
        self.cache = cache if cache is not None else IndexCache()
        self.remote = remote
        self._remote_listed_at: float | None = None  # when the bucket was last listed successfully
        self._remote_error: LookupdError | None = None  # why it never was
        self._remote_warning: str | None = None  # why the last listing failed (None: it did not)
        self._remote_listings: dict = {}
        self._logs: dict[tuple[str, int], LocalLog] = {}
        self._dir_mtimes: dict[str, int] = {}
        self._dir_ids: dict[tuple[str, int], tuple[int, int]] = {}  # a partition dir's (device, inode)
        self._lock = threading.Lock()
        self._warnings = StateWarnings(log)  # each said once, and again when it changes
        self.refresh()

    def refresh(self, remote: bool = False) -> dict[str, int]:
        """Rescan the log dirs: new partitions and segments appear, deleted ones are released; with a
        remote tier, list the bucket too when `remote` or REMOTE_RESCAN_S have passed since the last time.

        Returns counts of partitions added and removed and of partitions whose segments changed.
        A log dir that is missing is reported in the log and treated as empty; one that cannot
        be listed for another reason (no descriptor left, an I/O error) keeps its last listing,
        so a passing shortage does not unlist every partition.
        """
        scan_started_ns = time.time_ns()
        found: dict[tuple[str, int], str] = {}
        starts: dict[tuple[str, int], int] = {}
        unlisted: list[str] = []  # log dirs whose partitions stay as they were
        for root in self.log_dirs:
            try:
                entries = list(os.scandir(root))
            except FileNotFoundError as err:
                self._warnings.warn(("unlisted", root), f"cannot list log dir {root}: {err}")
                continue
            except OSError as err:
                self._warnings.warn(("unlisted", root), f"cannot list log dir {root}: {err}; serving its last listing")
                unlisted.append(root + os.sep)
                continue
            checkpoint = os.path.join(root, LOG_START_OFFSET_CHECKPOINT)
            try:
                starts.update(read_offset_checkpoint(checkpoint))
            except RefusedFile as err:
                self._warnings.warn(("refused", checkpoint), f"{checkpoint}: {err.strerror}")
            held = False
            for entry in entries:
                parsed = parse_partition_dir(entry.name)
                if parsed is None or not entry.is_dir(follow_symlinks=False):
                    continue
                held = True
                if parsed in found:
                    self._warnings.warn(("twice", parsed), f"{parsed[0]}-{parsed[1]} is in two log dirs "
                                                           f"({found[parsed]}, {entry.path}); serving the first")
                    continue
                found[parsed] = entry.path
            if not held and (where := misplaced(root)) is not None:
                self._warnings.warn(("misplaced", root), where)
        added = removed = changed = 0
        with self._lock:
            current = dict(self._logs)
        for key in set(current).difference(found):
            if current[key].dir.startswith(tuple(unlisted)) or current[key].local_dir is None:
                continue  # kept as listed (a partition only in the bucket is the remote listing's to drop)
            removed += 1
            current.pop(key).close()
            self._dir_mtimes.pop(key, None)
            self._dir_ids.pop(key, None)
        for key, path in found.items():
            llog = current.get(key)
            try:
                st = os.stat(path)
                mtime, ident = st.st_mtime_ns, (st.st_dev, st.st_ino)
                if llog is None or llog.dir != path or self._dir_ids.get(key) != ident:
                    # new, moved, or deleted and created again: a new partition either way
                    if llog is not None:
                        llog.close()
                    llog = LocalLog(path, key[0], key[1], self.cache, log_start_offset=starts.get(key))
                    current[key] = llog
                    added += 1
                elif self._dir_mtimes.get(key) != mtime:
                    changed += llog.refresh_dir()  # a TieredLog's bucket is _refresh_remote's to list
                llog.checkpointed_log_start = starts.get(key)
                # A directory changed within the file system's timestamp granularity of this listing may
                # change again with the same mtime (two files made in one clock tick): listed again next time.
                self._dir_mtimes[key] = mtime if mtime < scan_started_ns - DIR_MTIME_GRANULARITY_NS else None
                self._dir_ids[key] = ident
            except FileNotFoundError:
                if key in current:
                    current.pop(key).close()
                    removed += 1
        if self.remote is not None:
            counts = self._refresh_remote(current, found, starts, remote)
            added, removed, changed = added + counts[0], removed + counts[1], changed + counts[2]
        with self._lock:
            self._logs = current
        self._warnings.settle()
        return {"added": added, "removed": removed, "changed": changed}

    def _refresh_remote(self, current: dict, found: dict, starts: dict, force: bool) -> tuple[int, int, int]:
        """Put the bucket's segments under the partitions in `current` (in place): a partition with remote
        segments becomes a TieredLog, one only in the bucket is added. A store that cannot be listed
        keeps the last listing (and says so in the log): the local answers go on."""
        now = time.monotonic()
        if force or self._remote_listed_at is None or now - self._remote_listed_at >= REMOTE_RESCAN_S:
            try:
                self._remote_listings = self.remote.scan(list(current.values()))
                self._remote_listed_at = now
                self._remote_error = None
                self._remote_warning = None
            except Exception as err:  # noqa: BLE001 - the bucket's listing never stops the local answers
                if not isinstance(err, LookupdError):  # a bug: said with its traceback; local partitions appear
                    log.error("listing the remote tier failed", exc_info=err)
                    err = Unavailable(f"the remote tier's listing failed ({type(err).__name__}: {err})")
                self._remote_warning = f"cannot list the remote tier: {err}; serving its last listing"
                if self._remote_listed_at is None:  # never listed: retried at the next rescan
                    self._remote_error = err
                else:
                    self._remote_listed_at = now
        if self._remote_warning is not None:  # said once while the store stays unlistable
            self._warnings.warn("remote", self._remote_warning)
        listings = self._remote_listings
        for llog in current.values():  # a partition of a topic with an id may have remote segments
            has_id = llog.local_dir is not None and os.path.exists(os.path.join(llog.dir, PARTITION_METADATA))
            llog.remote_error = self._remote_error if has_id else None
        added = removed = changed = 0
        for key, llog in list(current.items()):
            if key not in listings and isinstance(llog, TieredLog):
                llog.close()
                if llog.local_dir is None:
                    del current[key]
                    removed += 1
                else:  # nothing of it in the bucket any more: a local partition again
                    current[key] = LocalLog(llog.local_dir, key[0], key[1], self.cache, log_start_offset=starts.get(key))
                    changed += 1
        for key, listing in listings.items():
            llog = current.get(key)
            if isinstance(llog, TieredLog):
                changed += llog.update_remote(listing.segments)
                continue
            local_dir = found.get(key)
            tiered = TieredLog(local_dir, key[0], key[1], self.cache, tier=self.remote, listing=listing,
                               log_start_offset=starts.get(key))
            if llog is not None:
                llog.close()
                changed += 1
            else:
                added += 1
            tiered.checkpointed_log_start = starts.get(key)
            current[key] = tiered
        return added, removed, changed

    def get(self, topic: object, partition: object) -> LocalLog:
        """The partition's log; InvalidArgument for illegal names, UnknownPartition if not served."""
        if type(topic) is str and type(partition) is int:  # a served partition's key is legal as it is
            llog = self._logs.get((topic, partition))
            if llog is not None:
                return llog
        key = (validate_topic(topic), validate_partition(partition))
        llog = self._logs.get(key)
        if llog is None:
            raise UnknownPartition(f"partition {key[0]}-{key[1]} is not in the log dirs "
                                   f"({', '.join(self.log_dirs)})")
        return llog

    @property
    def listing(self) -> dict[tuple[str, int], LocalLog]:
        """(topic, partition) -> log as of the last rescan: replaced by each rescan, never changed in place
        (so a reader may keep what it derived from one until `listing` is another object)."""
        return self._logs

    def logs(self) -> list[LocalLog]:
        """All partitions, sorted by topic and partition."""
        return [self._logs[k] for k in sorted(self._logs)]

    @property
    def segment_count(self) -> int:
        return sum(len(llog.base_offsets) for llog in self._logs.values())

    def close(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for llog in logs:
            llog.close()
        self.cache.clear()
