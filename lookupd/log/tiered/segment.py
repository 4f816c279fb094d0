"""One tiered segment: a LogSegment made of remote parts (RemoteLogManager's read side).

Its indexes are files fetched once into the cache dir and then mapped lazily like a local segment's
(RemoteIndexes), so every index lookup is the local code; its `.log` bytes come from the bucket (RemoteFile,
through the Bucket's chunk cache), at the byte positions of the original segment, so every header walk and
batch read is the local code too. The one-call native paths need a local `.log` descriptor, which a file
read from the bucket has not: every answer comes from the reference path, which they must equal.

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
from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol, TypeVar

from ...errors import LookupdError
from ...format.names import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from ..fileio import FileHandle, WouldBlock, mode as _nonblocking
from ..filerecords import FileRecords
from ..index import OffsetIndex, TimeIndex
from ..remote.errors import ObjectNotFound
from ..segment import TIER_REMOTE, LogSegment
from ..txnindex import TransactionIndex
from .layout import SegmentKeys

if TYPE_CHECKING:
    from ..remote.bucket import BucketSegment

# The Bucket's index kinds read as a segment's three indexes (the plugin's IndexType names).
OFFSET, TIMESTAMP, TRANSACTION = "offset", "timestamp", "transaction"
# Each as Kafka's file (its suffix) and as the class reading it. The upload's other two (the producer snapshot
# and the leader-epoch index) are copies of broker state, not segment files: the broker rebuilds both on load.
INDEX_SUFFIXES = {OFFSET: INDEX_SUFFIX, TIMESTAMP: TIME_INDEX_SUFFIX, TRANSACTION: TXN_INDEX_SUFFIX}
_INDEX_CLASSES = {OFFSET: OffsetIndex, TIMESTAMP: TimeIndex, TRANSACTION: TransactionIndex}
# Reads of a segment's bytes after which it is fetched whole into the cache: a segment read this often
# is being looked up repeatedly, and a local copy makes each lookup as cheap as on a local segment.
MATERIALIZE_AFTER_READS = 16
MATERIALIZE_THREADS = 2  # background whole-segment fetches at once (each is sequential, with read-ahead)

log = logging.getLogger(__name__)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
T = TypeVar("T")


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
    keys: SegmentKeys | None = None  # its objects' keys


class Uploads(Protocol):
    """What a remote segment needs of the tier that listed it (lookupd.log.tiered.listing.RemoteTier)."""

    def url(self, key: str) -> str: ...

    def data(self, keys: SegmentKeys) -> BucketSegment: ...

    def gone(self, keys: SegmentKeys) -> None: ...

    def whole_segment(self, keys: SegmentKeys) -> str: ...


class Listing(Protocol):
    """Which upload a partition's listing names at a base offset now (a TieredLog)."""

    def listed(self, base_offset: int) -> RemoteSegmentInfo | None: ...


class UploadData:
    """An upload's BucketSegment, opened on first use: a listed segment costs no GET until it is read. The
    store no longer having one of its objects (deleted by retention since it was listed) is told to the
    tier, and raised (ObjectNotFound)."""

    def __init__(self, uploads: Uploads, keys: SegmentKeys):
        self._uploads = uploads
        self.keys = keys
        self._data: BucketSegment | None = None

    def _with(self, use: Callable[[BucketSegment], T]) -> T:
        try:
            data = self._data
            if data is None:
                data = self._data = self._uploads.data(self.keys)
            return use(data)
        except ObjectNotFound:
            self._uploads.gone(self.keys)
            raise

    @property
    def size(self) -> int:
        return self._with(lambda d: d.size)

    def read(self, position: int, size: int, *, sequential: bool | None = None) -> bytes:
        return self._with(lambda d: d.read(position, size, sequential=sequential))

    def read_into(self, position: int, out: memoryview, *, sequential: bool | None = None) -> int:
        return self._with(lambda d: d.read_into(position, out, sequential=sequential))

    def index_paths(self, kinds: list[str]) -> dict[str, str | bytes | None]:
        return self._with(lambda d: d.index_paths(kinds))

    def index_size(self, kind: str) -> int | None:
        return self._with(lambda d: d.index_size(kind))


def _translate_missing(fn: Callable[..., T], *args) -> T:
    """Call fn; the store's NotFound becomes FileNotFoundError, which the log's `_one_listing` answers
    as it does for a local segment deleted meanwhile: list again and rerun."""
    try:
        return fn(*args)
    except ObjectNotFound as err:
        raise FileNotFoundError(str(err)) from None


class RemoteFile:
    """A remote segment's `.log` as FileRecords reads a file (`get`, `is_open`, `close`), and the handle `get`
    gives (`pread`, `size`; no descriptor): its original bytes from the bucket. Once read
    MATERIALIZE_AFTER_READS times it is fetched whole into the cache in the background, and `get` gives the
    local copy from then on: a FileHandle held open for the segment's life (the cache may evict its name,
    the open descriptor keeps its bytes readable)."""

    is_open = True
    fd = None  # not a local file: the native paths, which read a descriptor, decline

    def __init__(self, data: UploadData, uploads: Uploads, url: str):
        self.data = data
        self._uploads = uploads
        self.url = url
        self._reads = 0
        self._whole: FileHandle | None = None

    @property
    def whole(self) -> bool:
        """Whether the segment is read from its local copy."""
        return self._whole is not None

    def get(self) -> RemoteFile | FileHandle:
        return self._whole or self

    def size(self) -> int:
        if _nonblocking.on:  # the first use fetches the manifest
            raise WouldBlock()
        return _translate_missing(lambda: self.data.size)

    def pread(self, size: int, position: int) -> bytes:
        if _nonblocking.on:
            raise WouldBlock()
        self._reads += 1
        if self._reads == MATERIALIZE_AFTER_READS:
            _materialize_pool().submit(self._become_whole)
        return _translate_missing(self.data.read, position, size)

    def _become_whole(self) -> None:
        """Fetch the segment whole (in the background) and read it locally from then on."""
        try:
            handle = FileHandle(self._uploads.whole_segment(self.data.keys))
            if handle.size() != self.data.size:
                raise OSError(f"the copy holds {handle.size()} bytes, the segment {self.data.size}")
        except (LookupdError, OSError) as err:
            log.info("%s not fetched whole (%s); reading it by chunks", self.url, err)
            return
        self._whole = handle

    def close(self) -> None:
        pass



class RemoteIndexes:
    """A remote segment's three indexes, fetched on first use into the cache dir (the offset and time indexes
    are adjacent in the `.indexes` object: one GET for both) and mapped as a local segment's are. Until its
    `.log` is a local file they are read in a worker thread only (WouldBlock in non-blocking mode)."""

    def __init__(self, file: RemoteFile, base_offset: int, cache=None):
        self._file = file
        self._base_offset = base_offset
        self._cache = cache
        self._lock = threading.Lock()
        self._indexes: dict[str, OffsetIndex | TimeIndex | TransactionIndex] = {}

    @property
    def offset(self) -> OffsetIndex:
        return self._index(OFFSET)

    @property
    def time(self) -> TimeIndex:
        return self._index(TIMESTAMP)

    @property
    def txn(self) -> TransactionIndex:
        return self._index(TRANSACTION)

    def _index(self, kind: str):
        if _nonblocking.on and not self._file.whole:  # read in a worker thread until it is a local file
            raise WouldBlock()
        index = self._indexes.get(kind)
        if index is None:
            with self._lock:
                index = self._indexes.get(kind)
                if index is None:
                    kinds = [TRANSACTION] if kind == TRANSACTION else [OFFSET, TIMESTAMP]
                    paths = _translate_missing(self._file.data.index_paths, kinds)
                    url = self._file.url
                    for k in kinds:
                        # An index the upload lacks reads as a missing file: a missing offset or time index
                        # is answered from a scan of the log, a missing transaction index holds nothing.
                        # One the cache could not write (its disk full) comes as bytes, kept in memory.
                        found = paths[k]
                        if isinstance(found, bytes):
                            self._indexes[k] = _INDEX_CLASSES[k](f"{url} ({k} index, in memory)",
                                                                 self._base_offset, self._cache, data=found)
                        else:
                            self._indexes[k] = _INDEX_CLASSES[k](found or f"{url}.no-{k}-index",
                                                                 self._base_offset, self._cache)
                    index = self._indexes[kind]
        return index

    def close(self) -> None:
        with self._lock:
            indexes, self._indexes = list(self._indexes.values()), {}
        for index in indexes:
            index.close()


class ListedUpload:
    """A remote segment's origin: the upload a listing chose at its base offset. It is replaced when the
    listing names another upload there (or none); it never grows; its upload recorded its largest timestamp."""

    tier = TIER_REMOTE
    may_grow = False

    def __init__(self, info: RemoteSegmentInfo, url: str, listing: Listing | None = None):
        self.info = info
        self.dir = url.rsplit("/", 1)[0]
        self.max_timestamp = info.max_timestamp  # RemoteLogSegmentMetadata.maxTimestampMs (None: not recorded)
        self._listing = listing

    def replaced(self) -> bool:
        return self._listing is not None and self._listing.listed(self.info.base_offset) != self.info

    def mtime_ms(self) -> None:
        return None

    def describe(self) -> dict:
        return {"key": self.info.log_key}  # the `.log` object, for readers that go to the bucket themselves


def remote_segment(uploads: Uploads, info: RemoteSegmentInfo, cache=None, listing: Listing | None = None) -> LogSegment:
    """The listed upload `info` as a LogSegment (nothing fetched until it is read); `listing`: the partition's,
    asked whether it still names this upload."""
    url = uploads.url(info.keys.log)
    file = RemoteFile(UploadData(uploads, info.keys), uploads, url)
    return LogSegment(info.base_offset, FileRecords(url, file=file), RemoteIndexes(file, info.base_offset, cache),
                      ListedUpload(info, url, listing))
