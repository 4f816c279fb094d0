"""`lookupd restore`: a partition's tiered segments rebuilt into a local directory, as Kafka wrote them.

Each remote segment becomes `<base>.log` (the original bytes, read through RemoteSegmentData's chunk
cache and read-ahead), `.index`, `.timeindex` and `.txnindex` (the index bytes the plugin uploaded:
Kafka's own files of a rolled segment, trimmed on roll), plus `partition.metadata`. Every file is
written as `<name>.tmp`, synced, then renamed, so a crash leaves whole files and `.tmp` leftovers only;
a rerun deletes the leftovers and skips each segment whose files are all there with the sizes the
manifest gives. Reads only from the bucket: the one place written is DEST_DIR (and the cache_dir).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..daemon.config import load_remote
from ..errors import CorruptDataError, InvalidArgument
from ..log.remote.layout import ListedSegment, RemotePartition, segments_in, topic_ids
from ..log.remotelog import RemoteTier
from ..log.segment import LogSegment
from .progress import Progress
from .recover import sync_dir
from .verify import index_problems, scan_segment

PIECE_BYTES = 4 * 1024 * 1024    # one GET of a `.log` (whole chunks; the plugin's usual chunk.size): small enough
                                 # to overlap writing with fetching, big enough for few calls
GETS_IN_FLIGHT = 4               # GETs (each decoded on its thread) running ahead of the writer: keeps the store
                                 # busy while a piece is decoded and written; memory: this many pieces
WRITES_QUEUED = 2                # decoded pieces waiting for the writer thread (memory: this many pieces more)
TMP = ".tmp"
METADATA = "partition.metadata"
# The index kinds restored, with their file suffixes (the producer snapshot and leader-epoch index are
# per-segment copies of broker state, not segment files: the broker rebuilds both on load).
INDEX_FILES = {"offset": ".index", "timestamp": ".timeindex", "transaction": ".txnindex"}
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.tmp)?")


def partition_metadata(topic_id: str) -> bytes:
    """Kafka's PartitionMetadataFile: exactly these two lines, no final newline."""
    return f"version: 0\ntopic_id: {topic_id}".encode()


def expected_files(data) -> dict[str, int]:
    """suffix -> size of every file a segment restores to (its `.log` and the indexes it has)."""
    out = {".log": data.size}
    for kind, suffix in INDEX_FILES.items():
        size = data.index_size(kind)
        if size is not None:
            out[suffix] = size
    return out


def foreign_files(names: list[str], bases: set[int]) -> list[str]:
    """The names in DEST_DIR that a restore of segments `bases` would not write (refused: not ours)."""
    out = []
    for name in names:
        m = _SEGMENT_FILE.fullmatch(name)
        if name in (METADATA, METADATA + TMP) or (m is not None and int(m[1]) in bases):
            continue
        out.append(name)
    return sorted(out)


@dataclass
class Counts:
    restored: int = 0
    skipped: int = 0
    bytes: int = 0


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing the piece to disk now, while the next ones are fetched, so that the sync
    before the rename waits for the last piece only (on Linux POSIX_FADV_DONTNEED starts the writeback of
    dirty pages; it drops the pages only once they are clean)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _find_partition(store, prefix: str, topic: str, partition: int,
                    topic_id: str | None) -> tuple[RemotePartition, list[ListedSegment]]:
    """The partition's bucket directory and its uploads: one listing of the topic directories, then one of
    the partition directory under each that bears the topic's name."""
    found = []
    for tid in topic_ids(store, prefix, topic):
        if topic_id is None or tid == topic_id:
            rp = RemotePartition(topic, partition, tid)
            objects = store.list(rp.dir(prefix))
            if objects:
                found.append((rp, segments_in(prefix, rp, objects)))
    if not found:
        which = f" with topic id {topic_id}" if topic_id else ""
        raise InvalidArgument(f"s3://{store.bucket}/{prefix} holds no partition {topic}-{partition}{which}; "
                              "check --topic, --partition and the [remote] bucket and prefix")
    if len(found) > 1:
        ids = ", ".join(rp.topic_id for rp, _ in found)
        raise InvalidArgument(f"s3://{store.bucket}/{prefix} holds {topic}-{partition} under several topic ids "
                              f"({ids}: the topic was deleted and created again); choose one with --topic-id")
    return found[0]


def _write_all(fd: int, piece) -> None:
    view = memoryview(piece)
    while view:
        view = view[os.write(fd, view):]  # a write may take fewer bytes than given


def _write_atomically(files: dict[str, bytes]) -> None:
    """Write each path's bytes to path + .tmp, sync them all, then rename them all (the first sync commits
    the others' metadata too: one journal commit, not one a file)."""
    fds = []
    try:
        for path, data in files.items():
            fds.append(os.open(path + TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            _write_all(fds[-1], data)
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    for path in files:
        os.replace(path + TMP, path)


def _complete(dest: str, base: int, expected: dict[str, int]) -> bool:
    for suffix, size in expected.items():
        try:
            if os.stat(os.path.join(dest, f"{base:020d}{suffix}")).st_size != size:
                return False
        except FileNotFoundError:
            return False
    return True


class _SegmentFiles:
    """One segment's files in DEST_DIR: its indexes (fetched, written, synced and renamed on a GET thread
    meanwhile), and its `.log`, written piece by piece on the writer thread (writeback started after each
    piece), then synced and renamed last: a `.log` of full size marks a finished segment."""

    def __init__(self, dest: str, base: int, data):
        self.stem = os.path.join(dest, f"{base:020d}")
        self.data = data
        self.indexes: Future | None = None
        self.fd: int | None = None
        self.written = 0

    def restore_indexes(self) -> None:
        indexes = self.data.fetch_indexes(list(INDEX_FILES))
        _write_atomically({self.stem + suffix: indexes[kind] for kind, suffix in INDEX_FILES.items()
                           if indexes[kind] is not None})

    def write(self, pieces: list) -> None:
        if self.fd is None:
            self.fd = os.open(self.stem + ".log" + TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for piece in pieces:
            _write_all(self.fd, piece)
            start_writeback(self.fd, self.written, len(piece))
            self.written += len(piece)

    def finish(self) -> None:
        self.write([])  # an empty segment still has its (empty) file
        try:
            os.fdatasync(self.fd)
        finally:
            os.close(self.fd)
            self.fd = None
        if self.written != self.data.size:
            raise CorruptDataError(self.data.key, self.written, f"the segment ends after {self.written} bytes, "
                                   f"its manifest says {self.data.size}")
        self.indexes.result()
        os.replace(self.stem + ".log" + TMP, self.stem + ".log")

    def abandon(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _jobs(todo: list[_SegmentFiles], pool: ThreadPoolExecutor):
    """The `.log` GETs of a restore in order, each (segment files, call): runs of whole chunks of about
    PIECE_BYTES, then (files, None) when a segment's are all out. A segment's indexes are started on `pool`
    when its first `.log` GET is asked for."""
    for files in todo:
        files.indexes = pool.submit(files.restore_indexes)
        for run in files.data.chunk_runs(PIECE_BYTES):
            yield files, lambda data=files.data, run=run: data.fetch_chunks(*run)
        yield files, None


def _ahead(pool: ThreadPoolExecutor, jobs, limit: int):
    """(files, result) of `jobs` in order, their calls run on `pool` at most `limit` ahead (a job without a
    call gives None)."""
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
        for _, future in pending:
            if future is not None:
                future.cancel()


def restore_segments(todo: list[_SegmentFiles], progress: Progress, also: dict[str, bytes]) -> int:
    """Fetch, decode and write the segments: GETS_IN_FLIGHT GETs (and their decoding) run ahead of the writer,
    across segment boundaries, while the writer thread writes and syncs; the `.log` bytes written. The files
    `also` (path -> bytes) are written meanwhile."""
    written = 0
    writes: deque = deque()
    with ThreadPoolExecutor(GETS_IN_FLIGHT, thread_name_prefix="restore-get") as pool, \
            ThreadPoolExecutor(1, thread_name_prefix="restore-write") as writer:
        writes.append(pool.submit(_write_atomically, also))
        try:
            for files, pieces in _ahead(pool, _jobs(todo, pool), GETS_IN_FLIGHT):
                if pieces is None:
                    writes.append(writer.submit(files.finish))
                else:
                    writes.append(writer.submit(files.write, pieces))
                    n = sum(len(piece) for piece in pieces)
                    progress.advance(n)
                    written += n
                while len(writes) > WRITES_QUEUED:
                    writes.popleft().result()
            while writes:
                writes.popleft().result()
        finally:
            for future in writes:
                future.cancel()
            writer.shutdown(wait=True)
            for files in todo:
                files.abandon()
    return written


def verify_segment(dest: str, base: int) -> list[str]:
    """What `lookupd dump --verify-index-only` reports for the restored segment (empty: all good)."""
    seg = LogSegment(dest, base, live=False)
    try:
        scan = scan_segment(seg)
        return scan.problems + index_problems(seg, scan)
    finally:
        seg.close()


def _writable(directory: str) -> bool:
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def run(args) -> int:
    settings = load_remote(args.config)
    if not settings.bucket:
        raise InvalidArgument(f"{args.config} has no [remote] table with a bucket: restore reads the bucket "
                              "it names")
    tmp_cache = None
    if not _writable(settings.cache_dir):  # e.g. the daemon's config run by another user: a temporary cache
        tmp_cache = settings.cache_dir = tempfile.mkdtemp(prefix="lookupd-restore-")
    try:
        return restore_partition(RemoteTier(settings.remote_config()), args.dest, args.topic, args.partition,
                                 topic_id=args.topic_id, verify=args.verify)
    finally:
        if tmp_cache is not None:
            shutil.rmtree(tmp_cache, ignore_errors=True)


def restore_partition(tier: RemoteTier, dest: str, topic: str, partition: int, *, topic_id: str | None = None,
                      verify: bool = False, out=None) -> int:
    """Restore (or finish restoring) one partition into `dest`; the exit status (1: --verify found problems)."""
    out = out if out is not None else sys.stdout
    rp, listed = _find_partition(tier.store, tier.config.prefix, topic, partition, topic_id)
    segments = tier.list_partition(rp, None, [], listed=listed)
    bases = {info.base_offset for info in segments}
    os.makedirs(dest, exist_ok=True)
    foreign = foreign_files(os.listdir(dest), bases)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise InvalidArgument(f"{dest} holds files that are not this partition's restore ({shown}); restore "
                              "into an empty directory (or the one an interrupted restore left)")
    metadata_path = os.path.join(dest, METADATA)
    want = partition_metadata(rp.topic_id)
    if os.path.exists(metadata_path):
        with open(metadata_path, "rb") as f:
            if f.read() != want:
                raise InvalidArgument(f"{metadata_path} names another topic id than {rp.topic_id}: {dest} holds "
                                      "another partition's restore")
    for name in os.listdir(dest):  # an interrupted run's half-written files
        if name.endswith(TMP):
            os.unlink(os.path.join(dest, name))
    datas = [(info.base_offset, tier.data(info.keys)) for info in segments]
    todo = [_SegmentFiles(dest, base, data) for base, data in datas if not _complete(dest, base, expected_files(data))]
    counts = Counts(restored=len(todo), skipped=len(datas) - len(todo))
    with Progress(sum(files.data.size for files in todo), f"restore {rp.topic}-{rp.partition}") as progress:
        counts.bytes = restore_segments(todo, progress, also={metadata_path: want})
        sync_dir(dest)
        problems = []
        if verify:
            for base, _ in datas:
                problems += verify_segment(dest, base)
        for p in problems:
            progress.write(f"error: {p}", sys.stderr)
    verified = f", {len(datas)} verified" if verify and not problems else ""
    out.write(f"restored {rp.topic}-{rp.partition} (topic id {rp.topic_id}) into {dest}: {counts.restored} "
              f"segments ({counts.bytes:,} bytes of log) written, {counts.skipped} already complete{verified}\n")
    return 1 if problems else 0
