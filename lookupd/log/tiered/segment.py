"""One tiered segment, answering what a local LogSegment answers (RemoteLogManager's read side).

Its indexes are files fetched once into the cache dir and then mapped lazily like a local
segment's, so every index lookup is the local code; its `.log` bytes come from the object
store through `RemoteSegmentData.read`, at the byte positions of the original segment, so every
header walk and batch read is the local code too. The one-call native paths need a local `.log`
descriptor and are declined: every answer comes from the reference path, which they must equal.

A segment read often (MATERIALIZE_AFTER_READS) is fetched whole into the cache in the background;
from then on its `.log` is a local file and every path is the local code's, the native ones included,
so a warm remote lookup costs what a local one costs.

Remote I/O never runs on the daemon's event loop: in non-blocking mode (lookupd.log.fileio) any read
of a remote segment not yet fetched whole raises WouldBlock, and the call goes to a worker thread.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple

from ...errors import CorruptDataError, LookupdError, Unavailable
from ..fileio import FileHandle, WouldBlock, mode as _nonblocking
from ..filerecords import FileRecords
from ..index import OffsetIndex, TimeIndex
from ..segment import LogSegment
from ..txnindex import TransactionIndex

# RemoteSegmentData.index_path kinds (the plugin's IndexType names).
OFFSET, TIMESTAMP, TRANSACTION = "offset", "timestamp", "transaction"
TIER_LOCAL, TIER_REMOTE = "local", "remote"
_INDEX_CLASSES = {OFFSET: OffsetIndex, TIMESTAMP: TimeIndex, TRANSACTION: TransactionIndex}
# Reads of a segment's bytes after which it is fetched whole into the cache: a segment read this often
# is being looked up repeatedly, and a local copy makes each lookup as cheap as on a local segment.
MATERIALIZE_AFTER_READS = 16
MATERIALIZE_THREADS = 2  # background whole-segment fetches at once (each is sequential, with read-ahead)

log = logging.getLogger(__name__)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _materialize_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(MATERIALIZE_THREADS, thread_name_prefix="lookupd-whole-segment")
        return _pool


class RemoteSegmentInfo(NamedTuple):
    """What the listing knows of a remote segment before anything of it is fetched."""

    base_offset: int
    end_offset: int | None  # inclusive, as Kafka records it (None: manifest and metadata topic silent)
    max_timestamp: int | None
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset)
    segment_id: str
    log_key: str  # the `.log` object's key, for messages and `lookupd dump`
    keys: object = None  # its objects' keys (lookupd.log.tiered.layout.SegmentKeys)


class _RemoteHandle:
    """FileHandle's reading surface (`pread`, `size`) over a remote segment's bytes, and LazyHandle's
    (`get`, `is_open`, `close`) over itself: FileRecords reads through it unchanged."""

    is_open = True

    def __init__(self, data, on_read: Callable[[], None]) -> None:
        self.data = data
        self.on_read = on_read

    def get(self) -> "_RemoteHandle":
        return self

    def size(self) -> int:
        if _nonblocking.on:  # the first use fetches the manifest
            raise WouldBlock()
        return _translate_missing(lambda: self.data.size)

    def pread(self, size: int, position: int) -> bytes:
        if _nonblocking.on:
            raise WouldBlock()
        self.on_read()
        return _translate_missing(self.data.read, position, size)

    def close(self) -> None:
        pass


class RemoteRecords(FileRecords):
    """A remote segment's `.log` as FileRecords: `path` is its `s3://bucket/key` (for messages)."""

    def __init__(self, data, path: str, on_read: Callable[[], None]):
        self.path = path
        self._file = _RemoteHandle(data, on_read)
        self.handle = self._file.get

    def peek_size(self) -> int:
        return self._file.size()


class _HeldHandle:
    """LazyHandle's surface over one FileHandle held open for the segment's life: the cache may evict the
    file's name, and the open descriptor keeps its bytes readable."""

    is_open = True

    def __init__(self, handle: FileHandle):
        self.handle = handle

    def get(self) -> FileHandle:
        return self.handle

    def close(self) -> None:
        pass


class WholeRecords(FileRecords):
    """A remote segment's `.log` once fetched whole into the cache: a local file read by the local code
    (native paths included); `path` stays the `s3://` URL for messages."""

    def __init__(self, local_path: str, url: str):
        self.path = url
        self._file = _HeldHandle(FileHandle(local_path))
        self.handle = self._file.get

    def peek_size(self) -> int:
        return self._file.get().size()


def _translate_missing(fn, *args):
    """Call fn; the store's NotFound becomes FileNotFoundError, which the log's `_one_listing` answers
    as it does for a local segment deleted meanwhile: list again and rerun."""
    try:
        return fn(*args)
    except Unavailable as err:
        from ..remote.errors import ObjectNotFound

        if isinstance(err, ObjectNotFound):
            raise FileNotFoundError(str(err)) from None
        raise


class RemoteSegment(LogSegment):
    """A rolled segment in the object store (never live)."""

    tier = TIER_REMOTE

    def __init__(self, info: RemoteSegmentInfo, data, cache=None, *, url: str,
                 current: Callable[[], RemoteSegmentInfo | None] | None = None,
                 fetch_whole: Callable[[], str] | None = None):
        self.info_ = info
        self._current = current  # the listing's entry for this base offset now
        self._fetch_whole = fetch_whole  # fetches the segment whole into the cache, returns its file
        self._reads = 0
        self.whole = False  # whether `log` is the local copy
        self.base_offset = info.base_offset
        self.dir = url.rsplit("/", 1)[0]
        self.data = data
        self.log = RemoteRecords(data, url, self._count_read)
        self._cache = cache
        self._lock = threading.Lock()
        self._indexes: dict[str, object] = {}
        self.live = False
        self._warned: set[str] = set()
        self._cached_end = None
        self._cached_next_offset = None
        self._cached_max_ts = None

    def __repr__(self) -> str:
        return f"RemoteSegment({self.log.path!r})"

    def _count_read(self) -> None:
        self._reads += 1
        if self._reads == MATERIALIZE_AFTER_READS and self._fetch_whole is not None:
            _materialize_pool().submit(self._become_whole)

    def _become_whole(self) -> None:
        """Fetch the segment whole (in the background) and read it locally from then on."""
        try:
            records = WholeRecords(self._fetch_whole(), self.log.path)
            if records.size() != self.data.size:
                raise OSError(f"the copy holds {records.size()} bytes, the segment {self.data.size}")
        except (LookupdError, OSError) as err:
            log.info("%s not fetched whole (%s); reading it by chunks", self, err)
            return
        self.log = records
        self.whole = True

    def _index(self, kind: str):
        if _nonblocking.on and not self.whole:  # read in a worker thread until it is a local file
            raise WouldBlock()
        index = self._indexes.get(kind)
        if index is None:
            with self._lock:
                index = self._indexes.get(kind)
                if index is None:
                    # The offset and time indexes are adjacent in the `.indexes` object: one GET for both.
                    kinds = [TRANSACTION] if kind == TRANSACTION else [OFFSET, TIMESTAMP]
                    paths = _translate_missing(self.data.index_paths, kinds)
                    for k in kinds:
                        # An index the upload lacks reads as a missing file: a missing offset or time index
                        # is answered from a scan of the log, a missing transaction index holds nothing.
                        # One the cache could not write (its disk full) comes as bytes, kept in memory.
                        found = paths[k]
                        if isinstance(found, bytes):
                            self._indexes[k] = _INDEX_CLASSES[k](f"{self.log.path} ({k} index, in memory)",
                                                                 self.base_offset, self._cache, data=found)
                        else:
                            self._indexes[k] = _INDEX_CLASSES[k](found or f"{self.log.path}.no-{k}-index",
                                                                 self.base_offset, self._cache)
                    index = self._indexes[kind]
        return index

    @property
    def offset_index(self) -> OffsetIndex:
        return self._index(OFFSET)

    @property
    def time_index(self) -> TimeIndex:
        return self._index(TIMESTAMP)

    @property
    def txn_index(self) -> TransactionIndex:
        return self._index(TRANSACTION)

    def set_live(self, live: bool) -> None:
        """A remote segment is a rolled one: it never grows."""

    def replaced(self) -> bool:
        """Whether the listing now names another upload (or none) at this base offset."""
        return self._current is not None and self._current() != self.info_

    def close(self) -> None:
        with self._lock:
            indexes, self._indexes = list(self._indexes.values()), {}
        for index in indexes:
            index.close()

    def locate(self, kind: int, offset: int, extra: int = 0) -> tuple | None:
        """The native one-call paths read a local `.log` descriptor: once the segment is whole, its copy's;
        before, the reference path answers."""
        return LogSegment.locate(self, kind, offset, extra) if self.whole else None

    def _locate_by_time(self, kind: int, timestamp: int, starting_offset: int = 0) -> tuple | None:
        return LogSegment._locate_by_time(self, kind, timestamp, starting_offset) if self.whole else None

    def largest_timestamp(self, size: int | None = None) -> int:
        """The largest timestamp the upload recorded (Kafka's RemoteLogSegmentMetadata.maxTimestampMs,
        which is LogSegment.largestTimestamp at upload time): nothing fetched. Without it, the time
        index's last entry."""
        if self.info_.max_timestamp is not None:
            return self.info_.max_timestamp
        return self.max_timestamp_so_far(size)[0]

    def info(self) -> dict:
        """LogSegment.info; for an upload whose objects cannot be read (a corrupt manifest, say), what the
        listing knows with `error` saying why ("CODE: message"): one segment never fails a listing of all."""
        try:
            out = super().info()
        except CorruptDataError as err:
            out = {"base_offset": self.base_offset, "size": -1, "active": False, "offset_index_entries": -1,
                   "time_index_entries": -1, "largest_timestamp": -1, "error": f"{err.code}: {err}"}
        out["tier"] = TIER_REMOTE
        out["key"] = self.info_.log_key  # the `.log` object, for readers that go to the bucket themselves
        return out
