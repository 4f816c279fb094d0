"""RemoteSegmentData: the original bytes and the indexes of one uploaded segment, read through the cache.

Positions are byte positions in the original segment. Chunks are fetched by ranged GET (adjacent missing
chunks in one GET), AES-256-GCM decrypted (12-byte IV in front, the manifest's AAD), zstd-decompressed,
and cached decoded. Sequential reads start a read-ahead of the next chunks on a background thread.
Indexes are fetched once each, decrypted, and written to cache_dir as files to be mapped like local ones.
Every method does blocking I/O: call it from a worker thread.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...errors import CorruptDataError
from .diskcache import DiskCache, cache_name
from .errors import StoreWouldWait, local_only
from .keyring import Keyring
from .manifest import INDEX_KINDS, MAX_MANIFEST_BYTES, Manifest, parse_manifest
from .store import ObjectStore

IV_BYTES = 12                       # the plugin's AES-GCM IV, written in front of each chunk
TAG_BYTES = 16                      # AES-GCM's 128-bit tag, after the ciphertext
MAX_GET_BYTES = 32 * 1024 * 1024    # one GET fetches and decodes at most this many bytes (memory bound)
READ_AHEAD_BYTES = 16 * 1024 * 1024  # how far ahead of a sequential reader chunks are fetched: with the
                                     # plugin's usual 4 MiB chunks, one arriving while two decode in parallel
                                     # (bench_remote, zstd+encrypted, 2 cores: 1.2x the MB/s of 8 MiB)
READ_AHEAD_GET_BYTES = 4 * 1024 * 1024  # read-ahead GETs fetch about this much, several in flight (small chunks
                                        # coalesced, big ones one a GET: the first arrives sooner)
READ_AHEAD_THREADS = 4              # background GETs in flight, across all segments
DECODE_TASK_BYTES = 256 * 1024      # chunks of one GET decoded by one pool task: a task for each small chunk would
                                    # cost more than its decoding (a plugin's 4 MiB chunks: still one a task)
# Chunks decrypted and decompressed at once besides the readers' own: one a core this process may run on
# (zstd and AES-GCM release the GIL).
DECODE_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2

# Two pools, so that a GET never waits in a queue behind decoding and decoding never takes more threads
# than there are cores. No task in either waits for one queued after it in the same pool.
_pools: dict[str, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()


def _pool(name: str) -> ThreadPoolExecutor:
    """The shared "readahead" (GETs) or "decode" pool, made on first use."""
    with _pool_lock:
        pool = _pools.get(name)
        if pool is None:
            threads = READ_AHEAD_THREADS if name == "readahead" else DECODE_THREADS
            pool = _pools[name] = ThreadPoolExecutor(threads, thread_name_prefix=f"lookupd-{name}")
        return pool


def _submit(name: str, fn, *args) -> Future:
    """fn(*args) on pool `name`; here and now if the pool refuses it (interpreter shutdown), so that no
    chunk's future is left for its waiters to wait on forever."""
    try:
        return _pool(name).submit(fn, *args)
    except RuntimeError:
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:
            done.set_exception(e)
        return done


def sibling_key(log_key: str, suffix: str) -> str:
    """The `.indexes` or `.rsm-manifest` key of the same upload as a `.log` key."""
    if not log_key.endswith(".log"):
        raise ValueError(f"{log_key!r} is not a segment's .log key")
    return log_key[:-len("log")] + suffix


def open_segment(store: ObjectStore, log_key: str, keyring: Keyring, cache: DiskCache) -> RemoteSegmentData:
    """Fetch and parse the segment's manifest (one GET), then wrap it."""
    manifest_key = sibling_key(log_key, "rsm-manifest")
    manifest = parse_manifest(store.get(manifest_key, MAX_MANIFEST_BYTES, "manifest"), manifest_key)
    return RemoteSegmentData(store, log_key, manifest, keyring, cache)


class RemoteSegmentData:
    """One uploaded segment: `.size`, `.read(position, size)` and `.index_path(kind)`."""

    def __init__(self, store: ObjectStore, key: str, manifest: Manifest, keyring: Keyring, cache: DiskCache):
        self.store = store
        self.key = key                       # the `.log` object
        self.indexes_key = sibling_key(key, "indexes")
        self.manifest = manifest
        self._keyring = keyring
        self._cache = cache
        self._lock = threading.Lock()
        self._key_lock = threading.Lock()
        self._key: Future | None = None  # the AESGCM cipher once the data key is unwrapped
        if manifest.encryption is not None:
            # Unwrapped from the start, in the background: the RSA operation (milliseconds) overlaps the
            # first GETs. Queued before any chunk of this segment is, so no decode task waits for it
            # from its place in the queue.
            self._key = _submit("decode", self._unwrap)
        self._inflight: dict[int, Future] = {}  # chunk -> its pending fetch (a read waits instead of refetching)
        self._next_sequential = -1              # where the last read ended: a read starting there is sequential
        self._decompressor = threading.local()

    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.manifest.chunk_index.file_size

    # -- data key --------------------------------------------------------------------------------------------

    def _unwrap(self) -> AESGCM:
        return AESGCM(self._keyring.unwrap(self.manifest.encryption, self.manifest.key))

    def _cipher(self) -> AESGCM:
        """The segment's cipher. A failed background unwrap is tried again here, on every use until one
        succeeds: a key file fixed meanwhile is picked up, and each caller gets its own error."""
        if self._key.exception() is None:
            return self._key.result()
        with self._key_lock:
            if self._key.exception() is not None:
                done: Future = Future()
                done.set_result(self._unwrap())
                self._key = done
            return self._key.result()

    def _decrypt(self, blob: bytes, object_key: str, position: int, what: str) -> bytes:
        if len(blob) < IV_BYTES + TAG_BYTES:
            raise CorruptDataError(object_key, position, f"{what}: {len(blob)} bytes cannot hold an AES-GCM "
                                   f"IV and tag")
        try:
            return self._cipher().decrypt(blob[:IV_BYTES], blob[IV_BYTES:], self.manifest.encryption.aad)
        except InvalidTag:
            raise CorruptDataError(object_key, position, f"{what}: AES-GCM tag mismatch (corrupt bytes, "
                                   "or a data key that is not this segment's)") from None

    # -- chunks ----------------------------------------------------------------------------------------------

    def _decode(self, i: int, blob: memoryview) -> bytes | memoryview:
        """Original bytes of chunk i from its transformed bytes (untransformed: a view of them, no copy)."""
        index = self.manifest.chunk_index
        position = index.transformed_start(i)
        start, end = index.original_span(i)
        what = f"chunk {i}"
        if self.manifest.encryption is not None:
            blob = self._decrypt(blob, self.key, position, what)
        if self.manifest.compression:
            try:
                declared = zstandard.get_frame_parameters(blob).content_size
            except zstandard.ZstdError as e:
                raise CorruptDataError(self.key, position, f"{what}: not a zstd frame: {e}") from None
            if declared != end - start:
                raise CorruptDataError(self.key, position, f"{what}: zstd frame declares {declared} bytes, the "
                                       f"chunk index {end - start}")
            d = getattr(self._decompressor, "d", None)
            if d is None:
                d = self._decompressor.d = zstandard.ZstdDecompressor()
            try:
                blob = d.decompress(blob, max_output_size=end - start)
            except zstandard.ZstdError as e:
                raise CorruptDataError(self.key, position, f"{what}: zstd: {e}") from None
        if len(blob) != end - start:
            raise CorruptDataError(self.key, position, f"{what}: {len(blob)} bytes where the chunk index says "
                                   f"{end - start}")
        return blob

    def _get_run(self, first: int, last: int, blob: memoryview | None = None) -> memoryview:
        """The transformed bytes of chunks first..last, by one ranged GET (`blob`: fetched already), whole."""
        index = self.manifest.chunk_index
        start, end = index.transformed_span(first, last)
        if blob is None:
            blob = self.store.get_range_buffer(self.key, start, end)
        if len(blob) != end - start:
            raise CorruptDataError(self.key, start + len(blob), f"the .log object ends before chunk "
                                   f"{index.chunk_at_transformed(start + len(blob))} does (at {end})")
        return blob

    def _decode_at(self, i: int, blob: memoryview, first: int) -> bytes | memoryview:
        """Chunk i decoded from `blob` (the transformed bytes from chunk `first` on)."""
        index = self.manifest.chunk_index
        base = index.transformed_start(first)
        a, b = index.transformed_span(i, i)
        return self._decode(i, blob[a - base:b - base])

    def _decode_cached(self, i: int, blob: memoryview, first: int) -> bytes | memoryview:
        """Chunk i decoded from `blob` (the transformed bytes from chunk `first` on), and cached."""
        data = self._decode_at(i, blob, first)
        self._cache.put(cache_name(self.key, str(i)), data)
        return data

    def fetch_chunks(self, first: int, last: int, blob: memoryview | None = None) -> Iterator[bytes | memoryview]:
        """Chunks first..last by one ranged GET, each decoded in this thread as the caller asks for it, not
        cached: for a reader that takes each byte once (restore), calling from its own threads, which holds one
        decoded chunk at a time. `blob`: their bytes, when the caller has them."""
        blob = self._get_run(first, last, blob)
        return (self._decode_at(i, blob, first) for i in range(first, last + 1))

    def chunk_runs(self, max_bytes: int, start: int = 0, max_decoded: int | None = None) -> list[tuple[int, int]]:
        """The chunks from `start` on, grouped into runs (first, last) for fetch_chunks of at most `max_bytes`
        fetched and `max_decoded` (default: max_bytes) decoded each (a bigger chunk: a run of its own)."""
        return self._runs(list(range(start, self.manifest.chunk_index.chunk_count)), max_bytes, max_decoded)

    def _fetch(self, first: int, last: int) -> dict[int, bytes | memoryview]:
        """Chunks first..last in one ranged GET, decoded one after the other in this thread, and cached.

        The reference path: `_run` gives the same bytes and errors, its chunks decoded in parallel."""
        blob = self._get_run(first, last)
        return {i: self._decode_cached(i, blob, first) for i in range(first, last + 1)}

    def _runs(self, chunks: list[int], max_bytes: int, max_decoded: int | None = None) -> list[tuple[int, int]]:
        """Consecutive chunk numbers grouped into GETs of at most `max_bytes` fetched and `max_decoded`
        (default: max_bytes) decoded; a bigger chunk alone. `_run` decodes the chunks of one GET in parallel."""
        index = self.manifest.chunk_index
        max_decoded = max_bytes if max_decoded is None else max_decoded
        runs: list[tuple[int, int]] = []
        for i in chunks:
            if runs and runs[-1][1] == i - 1:
                start, end = index.transformed_span(runs[-1][0], i)
                decoded = index.original_span(i)[1] - index.original_span(runs[-1][0])[0]
                if end - start <= max_bytes and decoded <= max_decoded:
                    runs[-1] = (runs[-1][0], i)
                    continue
            runs.append((i, i))
        return runs

    def _start(self, chunks: list[int], max_bytes: int | None = None,
               max_decoded: int | None = None) -> tuple[list[tuple[int, int]], dict[int, Future]]:
        """Claim the chunks no one is fetching: their GETs (the caller runs them; at most max_bytes, default
        MAX_GET_BYTES, each) and each chunk's future."""
        max_bytes = MAX_GET_BYTES if max_bytes is None else max_bytes
        futures: dict[int, Future] = {}
        with self._lock:
            for i in chunks:
                if i not in self._inflight:
                    futures[i] = self._inflight[i] = Future()
        return self._runs(list(futures), max_bytes, max_decoded), futures

    def _settle(self, i: int, future: Future, data: bytes | memoryview | None,
                error: BaseException | None = None) -> None:
        """Hand chunk i (or the error) to its waiters; later readers find it in the cache."""
        if error is None:
            future.set_result(data)
        else:
            future.set_exception(error)  # raised in every reading thread that waits for this chunk
        with self._lock:
            if self._inflight.get(i) is future:
                del self._inflight[i]

    def _run(self, first: int, last: int, futures: dict[int, Future]) -> None:
        """Chunks first..last by one GET; the first decoded here, the others on the pool in parallel,
        each chunk's waiters woken as soon as it is decoded. No pool task waits for one queued after it."""
        try:
            blob = self._get_run(first, last)
        except BaseException as e:
            for i in range(first, last + 1):
                self._settle(i, futures[i], None, e)
            return
        groups = self._runs(list(range(first, last + 1)), DECODE_TASK_BYTES)
        for a, b in groups[1:]:
            _submit("decode", self._decode_settle, a, b, blob, first, futures)
        self._decode_settle(*groups[0], blob, first, futures)

    def _decode_settle(self, a: int, b: int, blob: memoryview, first: int, futures: dict[int, Future]) -> None:
        """Decode chunks a..b (one pool task: small chunks go many to a task), each settled as it is done."""
        for i in range(a, b + 1):
            try:
                data = self._decode_cached(i, blob, first)
            except BaseException as e:
                self._settle(i, futures[i], None, e)
            else:
                self._settle(i, futures[i], data)

    def _chunks(self, wanted: range) -> dict[int, bytes | memoryview]:
        got: dict[int, bytes | memoryview] = {}
        missing = []
        for i in wanted:
            data = self._cache.get(cache_name(self.key, str(i)))
            if data is None:
                missing.append(i)
            else:
                got[i] = data
        if missing:
            if local_only.on:  # a GET, or a wait for another thread's: not in this thread
                raise StoreWouldWait()
            runs, mine = self._start(missing)
            for k, run in enumerate(runs):
                self._run(*run, mine)
                if k:  # the next GET waits until the one before this is decoded: two GETs' bytes at most
                    for i in range(runs[k - 1][0], runs[k - 1][1] + 1):
                        mine[i].exception()  # waits; an error is raised below, in chunk order
            for i in missing:
                future = mine.get(i)
                if future is None:
                    with self._lock:
                        future = self._inflight.get(i)
                if future is not None:
                    got[i] = future.result()
                else:  # fetched by another thread meanwhile: cached, unless evicted again already
                    data = self._cache.get(cache_name(self.key, str(i)))
                    got[i] = data if data is not None else self._fetch(i, i)[i]
        return got

    def _read_ahead(self, after: int) -> None:
        """Start background GETs for the chunks after chunk `after`, up to READ_AHEAD_BYTES ahead."""
        index = self.manifest.chunk_index
        wanted = []
        for i in range(after + 1, index.chunk_count):
            if (i - after - 1) * index.chunk_size >= READ_AHEAD_BYTES:
                break
            if not self._cache.contains(cache_name(self.key, str(i))):
                wanted.append(i)
        # Fewer, bigger GETs cost the store less; their chunks are still decoded in parallel.
        runs, futures = self._start(wanted, READ_AHEAD_GET_BYTES, READ_AHEAD_BYTES)
        for run in runs:
            _submit("readahead", self._run, *run, futures)

    def read(self, position: int, size: int, *, sequential: bool | None = None) -> bytes:
        """Original segment bytes [position, position + size), fewer where the segment ends.

        sequential: True when the caller scans onwards from here (a fetch or a columnar scan): the chunks
        after this read are fetched in the background from this first read on. None: a read that starts
        where the previous one ended counts as sequential. False: never read ahead (a lookup).
        """
        parts = self._parts(position, size, sequential)
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def read_into(self, position: int, out: memoryview, *, sequential: bool | None = None) -> int:
        """`read(position, len(out))` into `out` with one copy from the decoded chunks (a FUSE reply buffer:
        no bytes object between); how many bytes went in."""
        n = 0
        for part in self._parts(position, len(out), sequential):
            out[n:n + len(part)] = part
            n += len(part)
        return n

    def _parts(self, position: int, size: int, sequential: bool | None) -> list[memoryview]:
        """The pieces of the decoded chunks that make [position, position + size), views, not copies."""
        if position < 0 or size < 0:
            raise ValueError(f"position {position} and size {size} must not be negative")
        wanted = self.manifest.chunk_index.chunks_for(position, size)
        if not wanted:
            return [memoryview(b"")]
        if sequential is None:
            sequential = position == self._next_sequential
        end = min(position + size, self.size)
        self._next_sequential = end
        if sequential:  # before this read's own GET, so that they overlap
            self._read_ahead(wanted[-1])
        chunks = self._chunks(wanted)
        chunk_size = self.manifest.chunk_index.chunk_size
        parts = []
        for i in wanted:
            base = i * chunk_size
            parts.append(memoryview(chunks[i])[max(position - base, 0):end - base])
        return parts

    # -- indexes ---------------------------------------------------------------------------------------------

    def index_size(self, kind: str) -> int | None:
        """The size of index `kind` as Kafka wrote it (without fetching it); None when the segment has none."""
        return index_size(self.manifest, kind)

    def index_path(self, kind: str) -> str | bytes | None:
        """The file in cache_dir holding index `kind` as Kafka wrote it; None when the segment has none.

        kind: offset, timestamp, producer_snapshot, leader_epoch or transaction. The first call fetches
        it with one ranged GET of its part of the `.indexes` object; later calls return the cached file
        (fetched again only after eviction). Map the file right away: an evicted file stays readable
        while mapped or open. When the cache cannot write the file (cache_dir's filesystem is full), the
        index's bytes themselves: the caller keeps them in memory, and the answers go on.
        """
        return self.index_paths([kind])[kind]

    def index_paths(self, kinds: list[str]) -> dict[str, str | bytes | None]:
        """index_path for several kinds, adjacent missing ones in one GET (offset + timestamp: one GET)."""
        _check_kinds(kinds)
        out: dict[str, str | None] = {}
        missing = []
        for kind in INDEX_KINDS:  # the `.indexes` object's order
            if kind not in kinds:
                continue
            span = self.manifest.indexes[kind]
            name = cache_name(self.key, kind)
            if span is None:
                out[kind] = None
            elif (path := self._cache.file(name)) is not None:
                out[kind] = path
            elif span[1] == 0:
                out[kind] = self._cached_file(name, b"")
            else:
                missing.append(kind)
        groups: list[list[str]] = []
        for kind in missing:
            pos, size = self.manifest.indexes[kind]
            if groups and sum(self.manifest.indexes[groups[-1][-1]]) == pos:
                groups[-1].append(kind)
            else:
                groups.append([kind])
        for group in groups:
            for kind, data in self._fetch_indexes(group).items():
                out[kind] = self._cached_file(cache_name(self.key, kind), data)
        return out

    def _cached_file(self, name: str, data: bytes) -> str | bytes:
        """The index written into the cache (its path), or `data` itself when the cache cannot write it."""
        try:
            return self._cache.put_file(name, data)
        except OSError:  # cache_dir's filesystem full or failing (the cache logged it): kept in memory
            return data

    def fetch_indexes(self, kinds: list[str], whole: memoryview | None = None) -> dict[str, bytes | None]:
        """Indexes `kinds` as Kafka wrote them (None: the segment has none), from one ranged GET spanning
        them (the small ones between come along), not cached: for a reader that takes them once (restore).
        `whole`: the whole `.indexes` object, when the caller fetched it already (no GET then)."""
        _check_kinds(kinds)
        out: dict[str, bytes | None] = dict.fromkeys(kinds)
        out.update(self._fetch_indexes([k for k in INDEX_KINDS if k in kinds and self.manifest.indexes[k]], whole))
        return out

    def _fetch_indexes(self, kinds: list[str], whole: memoryview | None = None) -> dict[str, bytes]:
        """Indexes `kinds` (present ones, in the `.indexes` object's order) from one ranged GET (or from
        `whole`, the whole object), decrypted."""
        if not kinds:
            return {}
        start = self.manifest.indexes[kinds[0]][0]
        end = sum(self.manifest.indexes[kinds[-1]])
        blob = self.store.get_range_buffer(self.indexes_key, start, end) if whole is None else whole[start:end]
        if len(blob) != end - start:
            raise CorruptDataError(self.indexes_key, start + len(blob), f"the .indexes object ends before "
                                   f"the {kinds[-1]} index does (at {end})")
        out = {}
        for kind in kinds:
            pos, size = self.manifest.indexes[kind]
            data = bytes(blob[pos - start:pos - start + size])
            if self.manifest.encryption is not None and size:
                data = self._decrypt(data, self.indexes_key, pos, f"{kind} index")
            out[kind] = data
        return out


def index_size(manifest: Manifest, kind: str) -> int | None:
    """The size of the segment's index `kind` as Kafka wrote it; None when the segment has none."""
    span = manifest.indexes[kind]
    if span is None:
        return None
    if span[1] and manifest.encryption is not None:
        return span[1] - IV_BYTES - TAG_BYTES  # stored with its IV in front and GCM tag behind
    return span[1]


def _check_kinds(kinds: list[str]) -> None:
    for kind in kinds:
        if kind not in INDEX_KINDS:
            raise ValueError(f"unknown index kind {kind!r}: one of {', '.join(INDEX_KINDS)}")
