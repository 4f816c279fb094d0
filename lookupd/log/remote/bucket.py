"""Bucket: one bucket's store client, disk cache, keyring and manifest cache, through which the daemon, the mount,
the Spark executors and restore open uploaded segments.

An upload is opened two ways: `upload` (its manifest, a chunk fetcher and an index fetcher, nothing cached:
restore takes each byte once) and `segment` (the same pieces with the chunk cache and its read-ahead around
them and the indexes as cached files: every other reader). Both fetch the manifest once (one GET), then
keep it parsed in the manifest cache.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from ...errors import CorruptDataError, LookupdError
from .chunkcache import DECODE, SHARED_POOLS, ChunkCache, Pools
from .chunks import ChunkFetcher
from .config import RemoteConfig
from .diskcache import DiskCache
from .indexes import IndexFetcher, IndexFiles
from .keyring import Keyring
from .manifest import MAX_MANIFEST_BYTES, Manifest, parse_manifest, too_big
from .objects import INDEXES, MANIFEST, sibling_key
from .store import ObjectStore
from .transform import ChunkTransform, Decryption

# Parsed manifests kept (and the failures to parse one, so that a bad object is not fetched again until it
# changes), weighed by what each holds: a few KB for a fixed chunk index, 8 bytes a chunk more for a variable
# one. A listing keeps what it needs of each manifest on its own, so this only saves the GET of a segment
# read again: 16 MiB hold thousands of them, and at least 32 of the largest (manifest.MAX_CHUNKS chunks).
MANIFEST_CACHE_BYTES = 16 << 20
# Segments opened lately, kept open for a reader that comes back (a Spark split opens a few; the daemon's
# segments hold theirs while listed): their data key stays unwrapped, their in-flight chunks shared.
SEGMENTS_KEPT = 64


class ManifestCache:
    """Parsed manifests and the CorruptDataErrors of those that are not, by key, least recently used dropped
    first past MANIFEST_CACHE_BYTES. Each entry keeps the ETag it was read at: asked with another ETag (a
    listing saw the object rewritten), it is not found."""

    def __init__(self, limit: int = MANIFEST_CACHE_BYTES):
        self.limit = limit
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[str | None, Manifest | CorruptDataError, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, etag: str | None = None) -> Manifest | CorruptDataError | None:
        """The Manifest or CorruptDataError kept for `key` (at `etag`, unless None), else None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (etag is not None and entry[0] is not None and entry[0] != etag):
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: str, etag: str | None, value: Manifest | CorruptDataError) -> None:
        weight = _weight(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[2]
            self._entries[key] = (etag, value, weight)
            self.bytes += weight
            while self.bytes > self.limit and len(self._entries) > 1:
                self.bytes -= self._entries.popitem(last=False)[1][2]

    def __len__(self) -> int:
        return len(self._entries)


def _weight(value: Manifest | LookupdError) -> int:
    """About what a kept manifest (or error) holds in memory, in bytes."""
    if isinstance(value, LookupdError):
        return 512 + len(str(value))
    starts = value.chunk_index.starts
    epochs = len(value.metadata.segment_leader_epochs) if value.metadata is not None else 0
    return 2048 + (8 * len(starts) if starts is not None else 0) + 100 * epochs


@dataclass(frozen=True)
class Upload:
    """One uploaded segment read with no cache: its manifest, its chunks and its indexes by ranged GETs."""

    key: str                 # the `.log` object
    manifest: Manifest
    chunks: ChunkFetcher
    indexes: IndexFetcher

    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.manifest.chunk_index.file_size


class BucketSegment:
    """One uploaded segment read through the caches: its original bytes (`read`, `read_into`, positions of the
    original segment) and its indexes as files (`index_path`) to be mapped as a local segment's are."""

    def __init__(self, upload: Upload, chunks: ChunkCache, indexes: IndexFiles):
        self.upload = upload
        self.chunks = chunks
        self.indexes = indexes

    @property
    def key(self) -> str:
        return self.upload.key

    @property
    def manifest(self) -> Manifest:
        return self.upload.manifest

    @property
    def store(self) -> ObjectStore:
        return self.upload.chunks.store

    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.upload.size

    def read(self, position: int, size: int, *, sequential: bool | None = None) -> bytes:
        """Original bytes [position, position + size), fewer where the segment ends (ChunkCache.read)."""
        return self.chunks.read(position, size, sequential=sequential)

    def read_into(self, position: int, out: memoryview, *, sequential: bool | None = None) -> int:
        """`read` into `out` (a FUSE reply buffer), one copy from the decoded chunks; how many bytes went in."""
        return self.chunks.read_into(position, out, sequential=sequential)

    def index_size(self, kind: str) -> int | None:
        return self.upload.indexes.size(kind)

    def index_path(self, kind: str) -> str | bytes | None:
        return self.indexes.path(kind)

    def index_paths(self, kinds: list[str]) -> dict[str, str | bytes | None]:
        return self.indexes.paths(kinds)


class Bucket:
    """One bucket, its parts shared by every reader of it in this process."""

    def __init__(self, store: ObjectStore, keyring: Keyring, disk_cache: DiskCache | None,
                 manifests: ManifestCache | None = None, pools: Pools = SHARED_POOLS):
        self.store = store
        self.keyring = keyring
        self.disk_cache = disk_cache   # None: nothing cached (`segment` refused, `upload` only)
        self.manifests = manifests if manifests is not None else ManifestCache()
        self.pools = pools
        self._lock = threading.Lock()
        # `.log` key -> BucketSegment, shared by the readers of one upload while any holds it
        self._opened: weakref.WeakValueDictionary[str, BucketSegment] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[str, BucketSegment] = OrderedDict()  # the SEGMENTS_KEPT opened last

    @classmethod
    def open(cls, config: RemoteConfig, *, store: ObjectStore | None = None, cached: bool = True) -> Bucket:
        """The bucket `config` names: its store (`store`: one made already), its cache in cache_dir (`cached`
        False: none), the keys of [remote.encryption.keys]. Through lookupd.log.remote.opener.open_bucket."""
        return cls(store if store is not None else ObjectStore(config), Keyring(config.encryption_keys),
                   DiskCache(config.cache_dir, config.cache_bytes) if cached else None)

    @property
    def name(self) -> str:
        return self.store.bucket

    def url(self, key: str) -> str:
        return f"s3://{self.store.bucket}/{key}"

    def manifest(self, key: str, etag: str | None = None, size: int | None = None) -> Manifest:
        """The parsed manifest at `key` (one GET the first time); CorruptDataError naming it when it is not one,
        remembered, so that it is not fetched again until a listing shows it rewritten (another `etag`).
        `size`: the listing's, checked before any GET."""
        found = self.manifests.get(key, etag)
        if found is None:
            try:
                if size is not None and size > MAX_MANIFEST_BYTES:
                    raise CorruptDataError(key, None, too_big(size))
                found = parse_manifest(self.store.get(key, MAX_MANIFEST_BYTES, "manifest"), key)
            except CorruptDataError as err:
                found = err
            self.manifests.put(key, etag, found)
        if isinstance(found, CorruptDataError):
            raise CorruptDataError(found.path, found.position, found.reason)  # a new one: raised in many threads
        return found

    def upload(self, log_key: str) -> Upload:
        """The upload whose `.log` object is `log_key`, read with no cache (its manifest fetched first)."""
        manifest = self.manifest(sibling_key(log_key, MANIFEST))
        decryption = None
        if manifest.encryption is not None:
            decryption = Decryption(manifest.encryption, lambda: self.keyring.unwrap(manifest.encryption,
                                                                                      manifest.key))
            # Unwrapped from the start, in the background: the RSA operation (milliseconds) overlaps the first
            # GETs. Queued before any chunk of this segment is, so no decode task waits for it from its place.
            decryption.start(lambda fn: self.pools.submit(DECODE, fn))
        transform = ChunkTransform(log_key, manifest.chunk_index, decryption, manifest.compression)
        return Upload(log_key, manifest, ChunkFetcher(self.store, log_key, manifest.chunk_index, transform),
                      IndexFetcher(self.store, sibling_key(log_key, INDEXES), manifest, decryption))

    def segment(self, log_key: str) -> BucketSegment:
        """The upload whose `.log` object is `log_key`, read through the caches; one object per upload while
        any reader holds it (its in-flight chunks shared)."""
        if self.disk_cache is None:
            raise ValueError(f"{self.url(log_key)}: this Bucket was opened without a cache; read it by `upload`")
        with self._lock:
            found = self._opened.get(log_key)
        if found is None:
            upload = self.upload(log_key)
            with self._lock:
                found = self._opened.get(log_key)
                if found is None:
                    found = BucketSegment(upload, ChunkCache(upload.chunks, self.disk_cache, self.pools),
                                          IndexFiles(upload.indexes, self.disk_cache, log_key))
                    self._opened[log_key] = found
        with self._lock:
            self._recent[log_key] = found
            self._recent.move_to_end(log_key)
            while len(self._recent) > SEGMENTS_KEPT:
                self._recent.popitem(last=False)
        return found
