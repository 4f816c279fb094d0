"""The fetch, decode and write pipeline of `lookupd restore` (restore.py decides what to restore).

GETS_IN_FLIGHT threads fetch a partition's `.log` pieces in order, across segment boundaries, each decoding
what it fetched and writing it at its place in the segment's `.log.tmp` as soon as it has it (pieces end in
any order: none waits for the one before), starting its writeback, so the sync before a `.log` is renamed
waits for its last pieces only. A segment's indexes are fetched alongside and written by SYNC_THREADS other
threads; one more syncs and renames each `.log` while the next segment's pieces are fetched. Every file is
written as `<name>.tmp`, synced, then renamed; a segment's `.log` last, once its indexes are in place: a
`.log` of full size marks a finished segment. Nothing is cached: each byte is read once.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..errors import CorruptDataError
from ..format.names import LOG_SUFFIX, filename_prefix
from ..log.tiered.layout import ListedSegment
from ..log.tiered.segment import INDEX_SUFFIXES
from .durable import TMP, Directory, drop_cached, start_writeback, write_all, write_atomically
from .progress import Progress

if TYPE_CHECKING:
    from ..log.remote.bucket import Bucket, Upload

PIECE_BYTES = 4 * 1024 * 1024    # one GET of a `.log` (whole chunks; the plugin's usual chunk.size): small enough
                                 # to overlap writing with fetching, big enough for few calls
GETS_IN_FLIGHT = 4               # GETs (each decoded and written on its thread) at once: keeps the store busy while
                                 # a piece is decoded and written; memory: this many pieces
DECODED_BYTES = 4 * PIECE_BYTES  # at most this much decoded from one GET of compressed chunks, so that those GETs
                                 # too take PIECE_BYTES of the object (one a chunk cost the S3 server 71 ms of
                                 # CPU against 55 over 4 zstd + encrypted segments, bench_remote); each chunk is
                                 # written as soon as it is decoded, so memory is one chunk per GET in flight
SYNC_THREADS = 2                 # threads writing and syncing the small files (indexes, partition.metadata), off
                                 # the GET threads: a sync may wait for a journal commit
SYNCS_QUEUED = 2                 # segments whose `.log` waits for its sync and rename while the next ones are
                                 # fetched (a failed one stops the restore this soon)


class SegmentFiles:
    """One segment's files in DEST_DIR (`<base>.*`, each created and renamed in `dest`): its indexes, then
    its `.log`."""

    def __init__(self, dest: Directory, base: int, size: int, bucket: Bucket, log_key: str):
        self.dest = dest
        self.stem = filename_prefix(base)     # its files' names in `dest`
        self.size = size                      # of its `.log`
        self._bucket = bucket                 # where its Upload is opened when first asked for (its turn)
        self._log_key = log_key
        self._data: Upload | None = None
        self.indexes: Future | None = None    # the index files written
        self._fd: int | None = None
        self._lock = threading.Lock()         # the fd opened once; the bytes written counted
        self._written = 0

    @property
    def data(self) -> Upload:
        if self._data is None:
            self._data = self._bucket.upload(self._log_key)
        return self._data

    def write_indexes(self, fetched: Callable[[], dict]) -> None:
        """Write the indexes `fetched()` gives (it waits for their GET)."""
        indexes = fetched()
        write_atomically(self.dest, {self.stem + suffix: indexes[kind] for kind, suffix in INDEX_SUFFIXES.items()
                                     if indexes[kind] is not None})

    def _open(self) -> int:
        with self._lock:
            if self._fd is None:
                self._fd = self.dest.create_fresh(self.stem + LOG_SUFFIX + TMP)
            return self._fd

    def write_at(self, position: int, pieces) -> int:
        """Write consecutive decoded pieces (an iterable, decoded as it is taken: one held at a time) at
        `position` of the `.log.tmp`, starting their writeback (from the thread that fetched them, in any order
        with the segment's other pieces); the bytes written. Never past the size the manifest gives."""
        fd = self._open()
        n = 0
        for piece in pieces:
            if position + n + len(piece) > self.size:
                raise CorruptDataError(self.data.key, position + n, f"decoded bytes run past the {self.size} bytes "
                                       "the manifest gives the segment")
            write_all(fd, piece, position + n)
            start_writeback(fd, position + n, len(piece))
            n += len(piece)
        with self._lock:
            self._written += n
        return n

    def finish(self) -> None:
        """Once every piece is written: sync the `.log.tmp`, then (its indexes in place) rename it."""
        fd = self._open()  # an empty segment still has its (empty) file
        try:
            os.fdatasync(fd)
            # Read once, written once: a partition's worth of segments would evict the machine's useful
            # cache, and the freed pages are the ones the next segment's writes take again (fresh ones
            # cost more: on this 2-core VM a 15 MB write's CPU time went from 4 to 20-30 ms at times).
            drop_cached(fd)
        finally:
            self.abandon()
        if self._written != self.size:
            raise CorruptDataError(self.data.key, self._written, f"the segment ends after {self._written} "
                                   f"bytes, its manifest says {self.size}")
        self.indexes.result()
        self.dest.replace(self.stem + LOG_SUFFIX + TMP, self.stem + LOG_SUFFIX)

    def abandon(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class Head:
    """The start of a `.log` object and its whole `.indexes` object, fetched while the manifests are (before
    its chunks and index spans are known): GETs of PIECE_BYTES each from byte 0, `size` bytes in all."""

    key: str
    size: int
    pieces: list[Future]
    indexes: Future | None  # the whole `.indexes` object; None when the listing showed none

    def span(self, start: int, end: int) -> memoryview | bytes:
        """Bytes [start, end) of the object (end <= size): a view of one piece, or joined across two."""
        first, last = start // PIECE_BYTES, (end - 1) // PIECE_BYTES
        parts = [memoryview(self.pieces[i].result()) for i in range(first, last + 1)]
        parts[-1] = parts[-1][:end - last * PIECE_BYTES]
        parts[0] = parts[0][start - first * PIECE_BYTES:]
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _ahead(pool: ThreadPoolExecutor, jobs, limit: int):
    """(files, result) of `jobs` in order, their calls run on `pool` at most `limit` ahead (a job without a
    call gives None). Closed early, it returns once no call of its jobs is running."""
    pending: deque = deque()
    try:
        for files, call in jobs:
            pending.append((files, None if call is None else pool.submit(call)))
            while len(pending) > limit or (pending and pending[0][1] is None):
                files0, future = pending.popleft()
                yield files0, None if future is None else future.result()
        while pending:
            files0, future = pending.popleft()
            yield files0, None if future is None else future.result()
    finally:
        wait([future for _, future in pending if future is not None and not future.cancel()])


class Pipeline:
    """The threads of one restore (a context manager: they end with it)."""

    def __init__(self):
        self._gets = ThreadPoolExecutor(GETS_IN_FLIGHT, thread_name_prefix="restore-get")
        self._syncer = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="restore-sync")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="restore-write")
        # Every thread started now, while the listings wait on the store: started on first use, each costs
        # a hand-off of the GIL (milliseconds under load) just when the first GETs are sent.
        for pool, threads in ((self._gets, GETS_IN_FLIGHT), (self._syncer, SYNC_THREADS), (self._writer, 1)):
            all_started = threading.Barrier(threads)
            for _ in range(threads):
                pool.submit(all_started.wait)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        for pool in (self._gets, self._syncer, self._writer):
            pool.shutdown(wait=True, cancel_futures=True)

    def head(self, store, listed: ListedSegment) -> Head:
        """Start fetching the listed segment's whole `.indexes` object and the first GETS_IN_FLIGHT pieces of
        its `.log` object (the sizes the listing gave)."""
        indexes = None
        if listed.indexes_size:
            indexes = self._gets.submit(store.get_range_buffer, listed.keys.indexes, 0, listed.indexes_size)
        size = min(listed.log_size or 0, GETS_IN_FLIGHT * PIECE_BYTES)
        return Head(listed.keys.log, size, [self._gets.submit(store.get_range_buffer, listed.keys.log, a,
                                                              min(a + PIECE_BYTES, size))
                                            for a in range(0, size, PIECE_BYTES)], indexes)

    def write_files(self, dest: Directory, files: dict[str, bytes]) -> Future:
        """write_atomically(dest, files) on a sync thread."""
        return self._syncer.submit(write_atomically, dest, files)

    def _jobs(self, todo: list[SegmentFiles], head: Head | None):
        """The `.log` GETs in order, each (segment files, call): runs of whole chunks of about PIECE_BYTES
        (ChunkFetcher.plan; those in `head`, when it is this segment's, from its bytes), each call fetching,
        decoding and writing its run; then (files, None) when a segment's are all out. A segment's indexes are fetched
        and written from when its first GET is asked for."""
        for files in todo:
            upload = files.data
            mine = head is not None and head.key == upload.key
            if mine and head.indexes is not None:
                fetched = lambda upload=upload: upload.indexes.fetch(list(INDEX_SUFFIXES), head.indexes.result())  # noqa: E731
            else:
                fetched = self._gets.submit(upload.indexes.fetch, list(INDEX_SUFFIXES)).result
            files.indexes = self._syncer.submit(files.write_indexes, fetched)
            chunks = upload.chunks
            for run in chunks.plan(PIECE_BYTES, DECODED_BYTES, head.size if mine else 0):
                if run.fetched:  # wholly in `head`: decoded from its bytes
                    yield files, lambda files=files, chunks=chunks, run=run: files.write_at(
                        run.position, chunks.fetch(run.first, run.last, head.span(run.start, run.end)))
                else:
                    yield files, lambda files=files, chunks=chunks, run=run: files.write_at(
                        run.position, chunks.fetch(run.first, run.last))
            yield files, None

    def run(self, todo: list[SegmentFiles], progress: Progress, head: Head | None = None) -> int:
        """Restore the segments `todo`, in order; the `.log` bytes written."""
        written = 0
        syncs: deque = deque()
        ahead = _ahead(self._gets, self._jobs(todo, head), GETS_IN_FLIGHT)
        try:
            for files, n in ahead:
                if n is None:
                    syncs.append(self._writer.submit(files.finish))
                else:
                    progress.advance(n)
                    written += n
                while len(syncs) > SYNCS_QUEUED:
                    syncs.popleft().result()
            while syncs:
                syncs.popleft().result()
        finally:
            ahead.close()  # returns once no GET thread writes to a file of `todo`
            for future in syncs:
                future.cancel()
            self._writer.submit(lambda: None).result()  # the writer is idle: no file of `todo` is in use
            for files in todo:
                files.abandon()
        return written
