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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from ..log.remote.config import load_remote
from ..errors import CorruptDataError, InvalidArgument
from ..log.remote.layout import RemotePartition, partition_dirs
from ..log.remotelog import RemoteTier
from ..log.segment import LogSegment
from .progress import Progress
from .recover import sync_dir
from .verify import index_problems, scan_segment

PIECE_BYTES = 4 * 1024 * 1024    # one read and write of a `.log` (the plugin's usual chunk.size): small enough
                                 # to overlap writing with fetching, big enough for few calls
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


def _find_partition(store, prefix: str, topic: str, partition: int, topic_id: str | None) -> RemotePartition:
    found = partition_dirs(store, prefix, topic, partition)
    if topic_id is not None:
        found = [rp for rp in found if rp.topic_id == topic_id]
    if not found:
        which = f" with topic id {topic_id}" if topic_id else ""
        raise InvalidArgument(f"s3://{store.bucket}/{prefix} holds no partition {topic}-{partition}{which}; "
                              "check --topic, --partition and the [remote] bucket and prefix")
    if len(found) > 1:
        ids = ", ".join(rp.topic_id for rp in found)
        raise InvalidArgument(f"s3://{store.bucket}/{prefix} holds {topic}-{partition} under several topic ids "
                              f"({ids}: the topic was deleted and created again); choose one with --topic-id")
    return found[0]


def _write_all(f, piece: bytes) -> None:
    view = memoryview(piece)
    while view:
        view = view[f.write(view):]  # an unbuffered write may take fewer bytes than given


def _write_atomically(path: str, pieces, *, before_rename: Callable[[int], None] | None = None) -> int:
    """Write `pieces` to `path` + .tmp, sync, rename; the bytes written. Each piece is written on a
    background thread while the next one is fetched (the GIL is released in both). `before_rename(n)`
    may refuse the file (it raises) or wait for others to be in place first."""
    tmp = path + TMP
    n = 0
    with open(tmp, "wb", buffering=0) as f, ThreadPoolExecutor(1, thread_name_prefix="restore-write") as writer:
        pending = None
        for piece in pieces:
            if pending is not None:
                pending.result()
            pending = writer.submit(_write_all, f, piece)
            n += len(piece)
        if pending is not None:
            pending.result()
        os.fsync(f.fileno())
    if before_rename is not None:
        before_rename(n)
    os.replace(tmp, path)
    return n


def _complete(dest: str, base: int, expected: dict[str, int]) -> bool:
    for suffix, size in expected.items():
        try:
            if os.stat(os.path.join(dest, f"{base:020d}{suffix}")).st_size != size:
                return False
        except FileNotFoundError:
            return False
    return True


def _log_pieces(data, progress: Progress):
    position = 0
    while position < data.size:
        piece = data.read(position, PIECE_BYTES, sequential=True)
        if not piece:
            break
        position += len(piece)
        progress.advance(len(piece))
        yield piece


def _copy(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        return [f.read()]


def restore_segment(dest: str, base: int, data, progress: Progress) -> int:
    """The segment's index files (written and synced on a thread meanwhile), then its `.log`, renamed last:
    a `.log` of full size marks a finished segment."""
    stem = os.path.join(dest, f"{base:020d}")
    paths = data.index_paths(list(INDEX_FILES))
    with ThreadPoolExecutor(1, thread_name_prefix="restore-index") as pool:
        indexes = [pool.submit(_write_atomically, stem + suffix, _copy(paths[kind]))
                   for kind, suffix in INDEX_FILES.items() if paths[kind] is not None]

        def last(n: int) -> None:
            if n != data.size:
                raise CorruptDataError(data.key, n, f"the segment ends after {n} bytes, its manifest says "
                                       f"{data.size}")
            for written in indexes:
                written.result()
        return _write_atomically(stem + ".log", _log_pieces(data, progress), before_rename=last)


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
    rp = _find_partition(tier.store, tier.config.prefix, topic, partition, topic_id)
    segments = tier.list_partition(rp, None, [])
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
    todo = [(base, data) for base, data in datas if not _complete(dest, base, expected_files(data))]
    counts = Counts(skipped=len(datas) - len(todo))
    with Progress(sum(d.size for _, d in todo), f"restore {rp.topic}-{rp.partition}") as progress:
        for base, data in todo:
            counts.bytes += restore_segment(dest, base, data, progress)
            counts.restored += 1
        _write_atomically(metadata_path, [want])
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
