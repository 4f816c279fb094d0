"""Every partition under one or more broker log dirs (Kafka's LogManager, read side)."""

from __future__ import annotations

import logging
import os
import threading

from .cache import IndexCache
from .fileio import RefusedFile, open_regular
from ..errors import UnknownPartition
from .locallog import LocalLog
from ..format.names import parse_partition_dir, validate_partition, validate_topic

log = logging.getLogger(__name__)

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"


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

    def __init__(self, log_dirs: list[str | os.PathLike], cache: IndexCache | None = None):
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(os.fspath(d)) for d in log_dirs]
        self.cache = cache if cache is not None else IndexCache()
        self._logs: dict[tuple[str, int], LocalLog] = {}
        self._dir_mtimes: dict[str, int] = {}
        self._dir_ids: dict[tuple[str, int], tuple[int, int]] = {}  # a partition dir's (device, inode)
        self._lock = threading.Lock()
        self._refused: set[str] = set()
        self.refresh()

    def refresh(self) -> dict[str, int]:
        """Rescan the log dirs: new partitions and segments appear, deleted ones are released.

        Returns counts of partitions added and removed and of partitions whose segments changed.
        A log dir that is missing is reported in the log and treated as empty; one that cannot
        be listed for another reason (no descriptor left, an I/O error) keeps its last listing,
        so a passing shortage does not unlist every partition.
        """
        found: dict[tuple[str, int], str] = {}
        starts: dict[tuple[str, int], int] = {}
        unlisted: list[str] = []  # log dirs whose partitions stay as they were
        refused: set[str] = set()  # checkpoint files not read (warned of when first found)
        for root in self.log_dirs:
            try:
                entries = list(os.scandir(root))
            except FileNotFoundError as err:
                log.warning("cannot list log dir %s: %s", root, err)
                continue
            except OSError as err:
                log.warning("cannot list log dir %s: %s; serving its last listing", root, err)
                unlisted.append(root + os.sep)
                continue
            checkpoint = os.path.join(root, LOG_START_OFFSET_CHECKPOINT)
            try:
                starts.update(read_offset_checkpoint(checkpoint))
            except RefusedFile as err:
                if checkpoint not in self._refused:
                    log.warning("%s: %s", checkpoint, err.strerror)
                refused.add(checkpoint)
            for entry in entries:
                parsed = parse_partition_dir(entry.name)
                if parsed is None or not entry.is_dir(follow_symlinks=False):
                    continue
                if parsed in found:
                    log.warning("%s-%d is in two log dirs (%s, %s); serving the first",
                                *parsed, found[parsed], entry.path)
                    continue
                found[parsed] = entry.path
        added = removed = changed = 0
        with self._lock:
            current = dict(self._logs)
        for key in set(current).difference(found):
            if current[key].dir.startswith(tuple(unlisted)):
                continue
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
                    changed += llog.refresh()
                llog.checkpointed_log_start = starts.get(key)
                self._dir_mtimes[key] = mtime
                self._dir_ids[key] = ident
            except FileNotFoundError:
                if key in current:
                    current.pop(key).close()
                    removed += 1
        with self._lock:
            self._logs = current
        self._refused = refused
        return {"added": added, "removed": removed, "changed": changed}

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
