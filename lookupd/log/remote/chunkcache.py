"""ChunkCache: one upload's decoded chunks through the DiskCache, around its ChunkFetcher (Aiven's ChunkCache
around its chunk manager), with in-flight tracking and read-ahead.

Positions are byte positions in the original segment. A read takes the chunks it needs from the cache; the
missing ones are fetched (adjacent ones in one GET), the first of a GET decoded by the reader, the others on
the decode pool in parallel, each handed to every thread waiting for it as soon as it is decoded: a chunk
another thread is fetching is waited for, never fetched twice. A sequential read starts the next chunks'
GETs on a background pool (read-ahead). Every method does blocking I/O: call it from a worker thread.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from .chunks import MAX_GET_BYTES, ChunkFetcher
from .diskcache import DiskCache, cache_name
from .errors import StoreWouldWait, local_only
from .readpattern import ReadPattern

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
READ_AHEAD, DECODE = "readahead", "decode"


class Pools:
    """The two pools of a process's chunk caches, made on first use: GETs ahead of readers ("readahead") and
    decoding ("decode"), apart so that a GET never waits in a queue behind decoding and decoding never takes
    more threads than there are cores. No task in either waits for one queued after it in the same pool."""

    def __init__(self) -> None:
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> ThreadPoolExecutor:
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                threads = READ_AHEAD_THREADS if name == READ_AHEAD else DECODE_THREADS
                pool = self._pools[name] = ThreadPoolExecutor(threads, thread_name_prefix=f"lookupd-{name}")
            return pool

    def submit(self, name: str, fn, *args) -> Future:
        """fn(*args) on pool `name`; here and now if the pool refuses it (interpreter shutdown), so that no
        chunk's future is left for its waiters to wait on forever."""
        try:
            return self.get(name).submit(fn, *args)
        except RuntimeError:
            done: Future = Future()
            try:
                done.set_result(fn(*args))
            except Exception as e:
                done.set_exception(e)
            return done

    def clear(self) -> None:
        """Forget the pools (shut down or not): the next use makes fresh ones."""
        with self._lock:
            self._pools.clear()


SHARED_POOLS = Pools()  # one process's: decoding is bound by its cores, whatever the buckets


class ChunkCache:
    """One upload's original bytes: `.size`, `.read(position, size)`, `.read_into(position, out)`."""

    def __init__(self, fetcher: ChunkFetcher, disk: DiskCache, pools: Pools = SHARED_POOLS):
        self.fetcher = fetcher
        self.disk = disk
        self.pools = pools
        self.key = fetcher.key
        self._lock = threading.Lock()
        self._inflight: dict[int, Future] = {}  # chunk -> its pending fetch (a read waits instead of refetching)
        self.pattern = ReadPattern()             # reads told neither way: sequential when one starts where the last ended

    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.fetcher.size

    def _name(self, i: int) -> str:
        return cache_name(self.key, str(i))

    def _decode_cached(self, i: int, blob: memoryview, first: int) -> bytes | memoryview:
        """Chunk i decoded from `blob` (the transformed bytes from chunk `first` on), and cached."""
        data = self.fetcher.decode(i, blob, first)
        self.disk.put(self._name(i), data)
        return data

    def fetch_serial(self, first: int, last: int) -> dict[int, bytes | memoryview]:
        """Chunks first..last in one ranged GET, decoded one after the other in this thread, and cached.

        The reference path: `_run` gives the same bytes and errors, its chunks decoded in parallel."""
        blob = self.fetcher.get(first, last)
        return {i: self._decode_cached(i, blob, first) for i in range(first, last + 1)}

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
        return self.fetcher.runs(list(futures), max_bytes, max_decoded), futures

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
            blob = self.fetcher.get(first, last)
        except BaseException as e:
            for i in range(first, last + 1):
                self._settle(i, futures[i], None, e)
            return
        groups = self.fetcher.runs(range(first, last + 1), DECODE_TASK_BYTES)
        for a, b in groups[1:]:
            self.pools.submit(DECODE, self._decode_settle, a, b, blob, first, futures)
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
            data = self.disk.get(self._name(i))
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
                    data = self.disk.get(self._name(i))
                    got[i] = data if data is not None else self.fetch_serial(i, i)[i]
        return got

    def _read_ahead(self, after: int) -> None:
        """Start background GETs for the chunks after chunk `after`, up to READ_AHEAD_BYTES ahead."""
        index = self.fetcher.index
        wanted = []
        for i in range(after + 1, index.chunk_count):
            if (i - after - 1) * index.chunk_size >= READ_AHEAD_BYTES:
                break
            if not self.disk.contains(self._name(i)):
                wanted.append(i)
        # Fewer, bigger GETs cost the store less; their chunks are still decoded in parallel.
        runs, futures = self._start(wanted, READ_AHEAD_GET_BYTES, READ_AHEAD_BYTES)
        for run in runs:
            self.pools.submit(READ_AHEAD, self._run, *run, futures)

    def read(self, position: int, size: int, *, sequential: bool | None = None) -> bytes:
        """Original segment bytes [position, position + size), fewer where the segment ends.

        sequential: True when the caller scans onwards from here (a fetch or a columnar scan): the chunks
        after this read are fetched in the background from this first read on. None: `pattern` decides (a
        read that starts where the previous one ended). False: never read ahead (a lookup).
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
        index = self.fetcher.index
        wanted = index.chunks_for(position, size)
        if not wanted:
            return [memoryview(b"")]
        end = min(position + size, self.size)
        told = self.pattern.sequential(position, end)
        if sequential is None:
            sequential = told
        if sequential:  # before this read's own GET, so that they overlap
            self._read_ahead(wanted[-1])
        chunks = self._chunks(wanted)
        chunk_size = index.chunk_size
        parts = []
        for i in wanted:
            base = i * chunk_size
            parts.append(memoryview(chunks[i])[max(position - base, 0):end - base])
        return parts
