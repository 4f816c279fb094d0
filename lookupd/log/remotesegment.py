"""One tiered segment, answering what a local LogSegment answers (RemoteLogManager's read side).

Its indexes are files fetched once into the cache dir and then mapped lazily like a local
segment's, so every index lookup is the local code; its `.log` bytes come from the object
store through `RemoteSegmentData.read`, at the byte positions of the original segment, so every
header walk and batch read is the local code too. The one-call native paths need a local `.log`
descriptor and are declined: every answer comes from the reference path, which they must equal.

Remote segments are never read on the daemon's event loop: in non-blocking mode (lookupd.log.fileio)
any read of their `.log` or indexes raises WouldBlock, and the call goes to a worker thread.
"""

from __future__ import annotations

import threading
from typing import Callable, NamedTuple

from ..errors import Unavailable
from .fileio import WouldBlock, mode as _nonblocking
from .filerecords import FileRecords
from .index import OffsetIndex, TimeIndex
from .segment import LogSegment
from .txnindex import TransactionIndex

# RemoteSegmentData.index_path kinds (the plugin's IndexType names).
OFFSET, TIMESTAMP, TRANSACTION = "offset", "timestamp", "transaction"
TIER_LOCAL, TIER_REMOTE = "local", "remote"
_INDEX_CLASSES = {OFFSET: OffsetIndex, TIMESTAMP: TimeIndex, TRANSACTION: TransactionIndex}


class RemoteSegmentInfo(NamedTuple):
    """What the listing knows of a remote segment before anything of it is fetched."""

    base_offset: int
    end_offset: int | None  # inclusive, as Kafka records it (None: manifest and metadata topic silent)
    max_timestamp: int | None
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset)
    segment_id: str
    log_key: str  # the `.log` object's key, for messages and `lookupd dump`
    keys: object = None  # its objects' keys (lookupd.log.remote.layout.SegmentKeys)


class _RemoteHandle:
    """FileHandle's reading surface (`pread`, `size`) over a remote segment's bytes, and LazyHandle's
    (`get`, `is_open`, `close`) over itself: FileRecords reads through it unchanged."""

    is_open = True

    def __init__(self, data) -> None:
        self.data = data

    def get(self) -> "_RemoteHandle":
        return self

    def size(self) -> int:
        if _nonblocking.on:  # the first use fetches the manifest
            raise WouldBlock()
        return _translate_missing(lambda: self.data.size)

    def pread(self, size: int, position: int) -> bytes:
        if _nonblocking.on:
            raise WouldBlock()
        return _translate_missing(self.data.read, position, size)

    def close(self) -> None:
        pass


class RemoteRecords(FileRecords):
    """A remote segment's `.log` as FileRecords: `path` is its `s3://bucket/key` (for messages)."""

    def __init__(self, data, path: str):
        self.path = path
        self._file = _RemoteHandle(data)
        self.handle = self._file.get

    def peek_size(self) -> int:
        return self._file.size()


def _translate_missing(fn, *args):
    """Call fn; the store's NotFound becomes FileNotFoundError, which the log's `_one_listing` answers
    as it does for a local segment deleted meanwhile: list again and rerun."""
    try:
        return fn(*args)
    except Unavailable as err:
        from .remote.store import ObjectNotFound

        if isinstance(err, ObjectNotFound):
            raise FileNotFoundError(str(err)) from None
        raise


class RemoteSegment(LogSegment):
    """A rolled segment in the object store (never live)."""

    tier = TIER_REMOTE

    def __init__(self, info: RemoteSegmentInfo, data, cache=None, *, url: str,
                 current: Callable[[], RemoteSegmentInfo | None] | None = None):
        self.info_ = info
        self._current = current  # the listing's entry for this base offset now
        self.base_offset = info.base_offset
        self.dir = url.rsplit("/", 1)[0]
        self.data = data
        self.log = RemoteRecords(data, url)
        self._cache = cache
        self._lock = threading.Lock()
        self._indexes: dict[str, object] = {}
        self.live = False
        self._warned: set[str] = set()
        self._cached_next_offset = None
        self._cached_max_ts = None

    def __repr__(self) -> str:
        return f"RemoteSegment({self.log.path!r})"

    def _index(self, kind: str):
        if _nonblocking.on:  # a remote segment is always read in a worker thread, fetched or not
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
                        path = paths[k] or f"{self.log.path}.no-{k}-index"
                        self._indexes[k] = _INDEX_CLASSES[k](path, self.base_offset, self._cache)
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

    def locate(self, kind: int, offset: int, extra: int = 0) -> None:
        """The native one-call paths read a local `.log` descriptor: the reference path answers."""
        return None

    def _locate_by_time(self, kind: int, timestamp: int, starting_offset: int = 0) -> None:
        return None

    def largest_timestamp(self, size: int | None = None) -> int:
        """The largest timestamp the upload recorded (Kafka's RemoteLogSegmentMetadata.maxTimestampMs,
        which is LogSegment.largestTimestamp at upload time): nothing fetched. Without it, the time
        index's last entry."""
        if self.info_.max_timestamp is not None:
            return self.info_.max_timestamp
        return self.max_timestamp_so_far(size)[0]

    def info(self) -> dict:
        out = super().info()
        out["tier"] = TIER_REMOTE
        return out
