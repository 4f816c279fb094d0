"""A partition directory's segment files and views, each with its attributes, for one READDIRPLUS.

Listing 10,000 segments means 60,000 entries and 30,000 `stat`s; an `ls -l` repeated a second
later would make them all again. A rolled segment's files do not change while they exist, so
their entries are kept as a snapshot, reused while the partition directory is unchanged: same
inode and mtime (every file created, renamed or deleted in it, a roll, retention, compaction's
`.swap`, moves the mtime) and the same rolled segments in the daemon's listing. A snapshot taken
within RACY_NS of the directory's last change is not kept (a second change within the clock's
granularity could leave the mtime as it was, as git's "racily clean" index entries).
The active segment's files are always listed anew: they grow.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Callable

from lookupd.errors import LookupdError
from lookupd.format.names import LOG_SUFFIX, segment_file_name
from lookupd.log.fileio import RefusedFile, regular_stat

from . import tree
from .catalog import SegmentInfo

log = logging.getLogger(__name__)

RACY_NS = 100_000_000  # 100 ms: far above any file system's timestamp granularity (ext4's is a jiffy)
MAX_WARNED = 10_000  # refused files remembered as warned of; past that, forgotten and warned of again
MAX_KEPT = 200_000  # entries kept over all partitions (about 350 bytes each: 70 MB); least recently listed go first

Entry = tuple[str, "dict | None"]  # name, attributes (None: left to a lookup)
FileAttrs = Callable[..., dict]  # (size, blocks, mtime ns[, I/O size]) -> getattr's answer


def remote_entries(segments: list[SegmentInfo], file_attrs: FileAttrs) -> list[Entry]:
    """A partition read through the daemon: each segment's `.log` (its size as listed) and its records."""
    out: list[Entry] = []
    for seg in segments:
        mtime_ns = seg.largest_timestamp * 1_000_000
        out.append((segment_file_name(seg.base_offset, LOG_SUFFIX), file_attrs(seg.size, (seg.size + 511) // 512, mtime_ns)))
        out.append((segment_file_name(seg.base_offset, ".records.jsonl"), file_attrs(0, 0, mtime_ns)))
    return out


def tiered_entries(segments: list[SegmentInfo], size_of: Callable[[int, str], int | None],
                   file_attrs: FileAttrs) -> list[Entry]:
    """A partition's segments in the bucket, named `<base>.remote.<suffix>`: the raw files each has (sizes
    from its manifest: one GET per segment the first time) and the views made from them."""
    from .tiers import REMOTE_IO_SIZE, file_name

    out: list[Entry] = []
    for seg in segments:
        mtime_ns = seg.largest_timestamp * 1_000_000
        try:
            sizes = {suffix: size_of(seg.base_offset, suffix) for suffix in tree.RAW}
        except (LookupdError, OSError) as err:  # the store down, the segment gone: its log as the daemon listed it
            log.warning("listing %s's indexes: %s", file_name(seg.base_offset, "log", True), err)
            sizes = {"log": seg.size}
        for suffix, size in sizes.items():
            if size is None:
                continue
            io_size = (REMOTE_IO_SIZE,) if suffix == "log" else ()  # read with direct I/O: see fusefs.ops
            out.append((file_name(seg.base_offset, suffix, True), file_attrs(size, (size + 511) // 512, mtime_ns,
                                                                             *io_size)))
            view = next(v for v, raw in tree.VIEWS.items() if raw == suffix)
            out.append((file_name(seg.base_offset, view, True), file_attrs(0, 0, mtime_ns)))
    return out


def local_entries(segments: list[SegmentInfo], stat_of: Callable[[str], os.stat_result | None],
                  file_attrs: FileAttrs, refused: Callable[[RefusedFile], None]) -> list[Entry]:
    """Each segment's raw files that `stat_of` finds (None: not there) and the views made from them; a file
    that is a symbolic link or not a regular file (RefusedFile) is not listed, and passed to `refused`."""
    out: list[Entry] = []
    for seg in segments:
        mtime_ns = seg.largest_timestamp * 1_000_000
        raw = set()
        for suffix in tree.RAW:
            name = segment_file_name(seg.base_offset, "." + suffix)
            try:
                st = stat_of(name)
            except RefusedFile as err:
                refused(err)
                continue
            except OSError:  # deleted since the scan: left to a lookup, which says ENOENT
                out.append((name, None))
                raw.add(suffix)
                continue
            if st is not None:
                out.append((name, file_attrs(st.st_size, st.st_blocks, mtime_ns)))
                raw.add(suffix)
        views = file_attrs(0, 0, mtime_ns)  # one dict for all of a segment's views: they are alike
        out += [(segment_file_name(seg.base_offset, "." + view), views) for view, source in tree.VIEWS.items()
                if source in raw]
    return out


class Listings:
    """Partition directory -> the snapshot of its rolled segments' entries (see the module docstring)."""

    def __init__(self, max_kept: int = MAX_KEPT):
        self.max_kept = max_kept
        self._kept: OrderedDict[str, tuple[tuple, list[Entry]]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()
        self._warned: set[str] = set()  # files said to be refused (RefusedFile)

    def entries(self, directory: str, segments: list[SegmentInfo], file_attrs: FileAttrs) -> list[Entry]:
        rolled = [s for s in segments if not s.active]
        d = os.stat(directory)
        key = (d.st_ino, d.st_mtime_ns, [(s.base_offset, s.size, s.largest_timestamp) for s in rolled])
        with self._lock:
            kept = self._kept.get(directory)
            if kept is not None and kept[0] == key:
                self._kept.move_to_end(directory)
                entries = kept[1]
            else:
                entries = None
        if entries is None:
            with os.scandir(directory) as scan:
                on_disk = {e.name: e for e in scan}
            entries = local_entries(rolled, lambda n: _entry_stat(on_disk[n]) if n in on_disk else None, file_attrs,
                                    self._refused)
            if time.time_ns() - d.st_mtime_ns > RACY_NS:
                self._keep(directory, key, entries)
        active = [s for s in segments if s.active]
        return entries + local_entries(active, lambda n: _stat_or_none(os.path.join(directory, n)), file_attrs,
                                       self._refused)

    def _refused(self, err: RefusedFile) -> None:
        """Say once per file that it is not listed (every listing of its directory meets it again)."""
        with self._lock:
            if err.filename in self._warned:
                return
            if len(self._warned) >= MAX_WARNED:
                self._warned.clear()
            self._warned.add(err.filename)
        log.warning("%s is %s; not listed", err.filename, err.strerror)

    def _keep(self, directory: str, key: tuple, entries: list[Entry]) -> None:
        with self._lock:
            old = self._kept.pop(directory, None)
            if old is not None:
                self._count -= len(old[1])
            if len(entries) > self.max_kept:
                return
            self._kept[directory] = (key, entries)
            self._count += len(entries)
            while self._count > self.max_kept:
                _, (_, dropped) = self._kept.popitem(last=False)
                self._count -= len(dropped)


def _stat_or_none(path: str) -> os.stat_result | None:
    """The file's lstat, None if it is not there; RefusedFile if it is not a regular file (lookupd.log.fileio)."""
    try:
        return regular_stat(path)
    except RefusedFile:
        raise
    except FileNotFoundError:
        return None


def _entry_stat(entry: os.DirEntry) -> os.stat_result:
    """A scanned file's lstat; RefusedFile if it is not a regular file (the type comes with the entry)."""
    if not entry.is_file(follow_symlinks=False):
        raise RefusedFile(entry.path, entry.is_symlink())
    return entry.stat(follow_symlinks=False)
