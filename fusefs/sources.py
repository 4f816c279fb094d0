"""Where a partition's bytes come from: local files read with `pread`, or the daemon's `read`.

Both sources answer the same two questions: the record batches from a point on (one
segment, or across segments to the end of the partition), and the raw bytes of a segment
file at any position. Local descriptors live in a bounded LRU cache: opening a file in the
mount pins the descriptor it got (so a segment deleted while open keeps giving its old
bytes); a generated view pins the `.log`s it reads the same way (see LocalSource). Through the daemon only `.log` bytes exist; a byte
position is mapped to the batch holding it with `resolve_offset` (a binary search over
the segment's offsets), since the daemon reads by offset.
"""

from __future__ import annotations

import bisect
import os
import threading
import weakref
from collections import OrderedDict
from typing import Iterator, NamedTuple

from lookupd.format.batch import BatchHeader, parse_header, whole_frames
from lookupd.log.fileio import FileHandle, regular_stat
from lookupd.log.filerecords import read_frames
from lookupd.log.segment import TIER_REMOTE, LogSegment
from lookupd.log.tiered.segment import INDEX_SUFFIXES, UploadData
from lookupd.format.names import segment_file_name
from lookupd.errors import OffsetOutOfRange
from lookupd.rpc.client import RemoteError

from .catalog import Catalog, PartitionInfo
from .daemon import DaemonLink
from .tiers import BucketLogFile, BucketSegments

# A file suffix (without its dot) -> the upload's index kind.
INDEX_KINDS = {suffix[1:]: kind for kind, suffix in INDEX_SUFFIXES.items()}

READ_BYTES = 1 << 20  # one pread of a .log, one daemon `read`


class Cursor(NamedTuple):
    """A batch boundary: the segment, the byte position in its .log and the offset there."""

    segment: int
    position: int
    offset: int


Batch = tuple[BatchHeader, memoryview, Cursor]  # header, bytes, the cursor just after it


def whole_batches(buf: bytes, position: int, path: str) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The batches of a daemon `read` answer (whole batches), which starts at file `position`."""
    mv = memoryview(buf)
    for off, size in whole_frames(buf, position, path):
        yield parse_header(buf, off, position + off, path), mv[off:off + size]


class Handles:
    """Open read-only descriptors, at most `max_open`, least recently opened dropped first.

    A dropped descriptor closes once no open file in the mount holds it (FileHandle's
    finalizer). A cached descriptor is reused only while the path still names its file.
    """

    def __init__(self, max_open: int = 256):
        self.max_open = max_open
        self._lock = threading.Lock()
        self._open: OrderedDict[str, tuple[FileHandle, int, int]] = OrderedDict()

    def open(self, path: str) -> FileHandle:
        st = regular_stat(path)  # FileNotFoundError when the broker deleted it (RefusedFile: not a regular file)
        with self._lock:
            cached = self._open.get(path)
            if cached is not None and cached[1:] == (st.st_dev, st.st_ino):
                self._open.move_to_end(path)
                return cached[0]
        handle = FileHandle(path)
        st = os.fstat(handle.fd)
        with self._lock:
            self._open[path] = (handle, st.st_dev, st.st_ino)
            self._open.move_to_end(path)
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
        return handle


class MemoryHandle:
    """FileHandle's `fd` and `size` over bytes in an anonymous memory file (memfd): an index the cache
    could not write, read by libfuse from its descriptor like any other file."""

    def __init__(self, data: bytes):
        self.fd = os.memfd_create("lookupd-index", os.MFD_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def size(self) -> int:
        return os.fstat(self.fd).st_size


class LocalFile:
    """A raw segment file open in the mount: libfuse reads it from the pinned descriptor (fusefs.binding)."""

    def __init__(self, handle: FileHandle | MemoryHandle):
        self._handle = handle

    @property
    def fd(self) -> int:
        """The pinned descriptor: open while this file is."""
        return self._handle.fd

    def size(self) -> int:
        return self._handle.size()

    def identity(self) -> tuple[int, int, int, int]:
        """(device, inode, size, mtime): which file, and which state of it, this open holds."""
        st = os.fstat(self._handle.fd)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class LocalSource:
    """A partition whose directory is on this host.

    A source made for one open generated file pins the descriptors of the `.log`s it read
    (the first one from the open on, and the latest MAX_PINNED): a segment deleted by
    retention while the file is open keeps its bytes, so reads, and restarts of the view
    from a checkpoint, go on as if nothing happened. A view following the partition skips
    segments deleted before it got to them; one restarting in a segment that was deleted
    and is no longer pinned ends there, cleanly.
    """

    MAX_PINNED = 8  # descriptors one open file holds beyond its first segment's

    def __init__(self, part: PartitionInfo, catalog: Catalog, handles: Handles):
        self.part = part
        self._catalog = catalog
        self._handles = handles
        self._first: tuple[int, FileHandle] | None = None
        self._pins: OrderedDict[int, FileHandle] = OrderedDict()
        self._pins_lock = threading.Lock()

    def path(self, base_offset: int, suffix: str) -> str:
        return os.path.join(self.part.local_dir, segment_file_name(base_offset, "." + suffix))

    def log_name(self, base_offset: int) -> str:
        return self.path(base_offset, "log")

    def open_raw(self, base_offset: int, suffix: str) -> LocalFile:
        return LocalFile(self._handles.open(self.path(base_offset, suffix)))

    def pin(self, base_offset: int) -> FileHandle:
        """The segment's `.log`, open from now on; FileNotFoundError when it is gone already."""
        with self._pins_lock:
            if self._first is not None and self._first[0] == base_offset:
                return self._first[1]
            handle = self._pins.get(base_offset)
            if handle is not None:
                self._pins.move_to_end(base_offset)
                return handle
        handle = self._handles.open(self.log_name(base_offset))
        with self._pins_lock:
            if self._first is None:
                self._first = (base_offset, handle)
            else:
                self._pins[base_offset] = handle
                while len(self._pins) > self.MAX_PINNED:
                    self._pins.popitem(last=False)
        return handle

    def batches(self, cursor: Cursor, follow: bool) -> Iterator[Batch]:
        """Batches from `cursor` to the end of its segment, and of the later ones if `follow`."""
        segment, position = cursor.segment, cursor.position
        try:
            handle = self.pin(segment)
        except FileNotFoundError:
            return  # deleted, and not pinned: the view ends here
        while True:
            path = self.log_name(segment)
            mv, last = None, None
            for buf, off, pos, size in read_frames(handle, position, handle.size(), path=path, chunk=READ_BYTES,
                                                   whole=True):
                if buf is not last:
                    mv, last = memoryview(buf), buf
                header = parse_header(buf, off, pos, path)
                yield header, mv[off:off + size], Cursor(segment, pos + size, header.last_offset + 1)
            if not follow:
                return
            while True:
                nxt = self._catalog.segments(self.part).after(segment)
                if nxt is None:
                    return
                segment, position = nxt.base_offset, 0
                try:
                    handle = self.pin(segment)
                    break
                except FileNotFoundError:
                    continue  # retention deleted it after the listing: its records are gone


class TieredSource(LocalSource):
    """A partition with segments in the bucket (`fusefs mount --config`): its local segments as LocalSource
    reads them, its remote ones straight from the bucket (fusefs.tiers), so views cross the tiers."""

    def __init__(self, part: PartitionInfo, catalog: Catalog, handles: Handles, remote: BucketSegments):
        super().__init__(part, catalog, handles)
        self._remote = remote

    def is_remote(self, base_offset: int) -> bool:
        seg = self._catalog.segments(self.part).get(base_offset)
        return seg is not None and seg.tier == TIER_REMOTE

    def remote_segment(self, base_offset: int) -> LogSegment:
        return self._remote.segment(self.part.topic, self.part.partition, self.part.local_dir, base_offset)

    def remote_data(self, base_offset: int) -> UploadData:
        return self._remote.data(self.part.topic, self.part.partition, self.part.local_dir, base_offset)

    def log_name(self, base_offset: int) -> str:
        if self.is_remote(base_offset):
            return self.remote_segment(base_offset).log.path
        return super().log_name(base_offset)

    def open_raw(self, base_offset: int, suffix: str):
        if not self.is_remote(base_offset):
            return super().open_raw(base_offset, suffix)
        data = self.remote_data(base_offset)
        if suffix == "log":
            return BucketLogFile(data)
        path = data.index_paths([INDEX_KINDS[suffix]])[INDEX_KINDS[suffix]]
        if path is None:
            raise FileNotFoundError(f"{self.log_name(base_offset)} has no {suffix}")
        if isinstance(path, bytes):  # cache_dir could not take it (its disk full): the bytes, in memory
            return LocalFile(MemoryHandle(path))
        return LocalFile(FileHandle(path))  # the fetched index, as Kafka wrote it

    def index_size(self, base_offset: int, suffix: str) -> int | None:
        """A remote segment file's size (from its manifest); None when the segment has no such index."""
        data = self.remote_data(base_offset)
        return data.size if suffix == "log" else data.index_size(INDEX_KINDS[suffix])

    def pin(self, base_offset: int):
        if self.is_remote(base_offset):
            return self.remote_segment(base_offset).log.handle()  # pread and size over the bucket's bytes
        return super().pin(base_offset)


class DaemonSource:
    """A partition read through the daemon (its log dir is not on this host; a tiered partition's remote
    segments are read from the bucket instead: TieredSource)."""

    def __init__(self, part: PartitionInfo, catalog: Catalog, daemon: DaemonLink):
        self.part = part
        self._catalog = catalog
        self._daemon = daemon

    def log_name(self, base_offset: int) -> str:
        return (f"{self.part.topic}-{self.part.partition}/{segment_file_name(base_offset, '.log')} "
                f"(via lookupd at {self._daemon.address})")

    def read(self, offset: int) -> dict | None:
        """The daemon's `read` from `offset`; None once retention deleted it (below the log start)."""
        try:
            return self._daemon.call("read", self.part.topic, self.part.partition, offset, READ_BYTES)
        except RemoteError as err:
            if err.code == OffsetOutOfRange.code:
                return None
            raise

    def resolve(self, offset: int) -> dict | None:
        return self._daemon.call("resolve_offset", self.part.topic, self.part.partition, offset)

    def open_raw(self, base_offset: int, suffix: str) -> "DaemonLog":
        segments = self._catalog.segments(self.part)
        nxt = segments.after(base_offset)
        end = nxt.base_offset if nxt is not None else self.part.log_end_offset
        return DaemonLog(self, base_offset, end)

    def batches(self, cursor: Cursor, follow: bool) -> Iterator[Batch]:
        offset = cursor.offset
        while True:
            r = self.read(offset)
            if r is None or not r["records"] or (not follow and r["segment"] != cursor.segment):
                return
            label = self.log_name(r["segment"])
            position = r["position"]
            for header, data in whole_batches(r["records"], position, label):
                position += len(data)
                yield header, data, Cursor(r["segment"], position, header.last_offset + 1)
            offset = r["next_offset"]


class DaemonLog:
    """One segment's `.log` through the daemon, addressed by byte position.

    Known batch starts (position -> an offset inside that batch) are remembered; a read
    far from any of them binary-searches the segment's offsets with `resolve_offset`.
    """

    def __init__(self, source: DaemonSource, base_offset: int, end_offset: int):
        self._source = source
        self._base = base_offset
        self._end = end_offset  # offsets of this segment are below this
        self._lock = threading.Lock()
        self._starts = [0]
        self._offsets = [base_offset]
        self._chunk_at = 0
        self._chunk = b""

    def read(self, size: int, offset: int) -> bytes:
        out = bytearray()
        with self._lock:
            while len(out) < size:
                pos = offset + len(out)
                if not self._chunk_at <= pos < self._chunk_at + len(self._chunk) and not self._fetch(pos):
                    break
                i = pos - self._chunk_at
                out += self._chunk[i:i + size - len(out)]
        return bytes(out)

    def _learn(self, position: int, offset: int) -> None:
        i = bisect.bisect_left(self._starts, position)
        if i == len(self._starts) or self._starts[i] != position:
            self._starts.insert(i, position)
            self._offsets.insert(i, offset)

    def _fetch(self, position: int) -> bool:
        """Load the daemon's batches from the one holding `position`; False past the last batch."""
        i = bisect.bisect_right(self._starts, position) - 1
        offset = self._offsets[i]
        if position - self._starts[i] > READ_BYTES:
            offset = self._search(position, offset)
            if offset is None:
                return False
        while True:
            r = self._source.read(offset)
            if r is None or r["segment"] != self._base or not r["records"]:
                return False
            records, at = r["records"], r["position"]
            for header, data in whole_batches(records, at, self._source.log_name(self._base)):
                self._learn(header.position, header.base_offset)
            self._learn(at + len(records), r["next_offset"])
            self._chunk_at, self._chunk = at, records
            if position < at + len(records):
                return position >= at
            offset = r["next_offset"]

    def _search(self, position: int, low: int) -> int | None:
        """An offset of the batch holding `position`, by bisecting [low, segment end)."""
        high = self._end
        j = bisect.bisect_right(self._starts, position)
        if j < len(self._starts):
            high = min(high, self._offsets[j])
        while low < high:
            mid = (low + high) // 2
            loc = self._source.resolve(mid)
            if loc is None or loc["segment"] != self._base or loc["position"] > position:
                high = mid
                continue
            self._learn(loc["position"], mid)
            if position < loc["position"] + loc["size"]:
                return mid
            low = loc["last_offset"] + 1
        return None
