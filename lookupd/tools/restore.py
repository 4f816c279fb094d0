"""`lookupd restore`: a partition's tiered segments rebuilt into a local directory, as Kafka wrote them.

Each remote segment becomes `<base>.log` (the original bytes), `.index`, `.timeindex` and `.txnindex`
(the index bytes the plugin uploaded: Kafka's own files of a rolled segment, trimmed on roll), plus
`partition.metadata`. This module finds the partition (one listing of the topic directories, one of the
partition's), checks DEST_DIR and decides what is left to do; restorefetch.py fetches, decodes and writes.
Every file is written as `<name>.tmp`, synced, then renamed, so a crash leaves whole files and `.tmp`
leftovers only; a rerun deletes the leftovers and skips each segment whose files are all there with the
sizes the manifest gives. Reads only from the bucket: the one place written is DEST_DIR.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass

from ..errors import InvalidArgument
from ..log.remote.config import load_remote
from ..log.remote.layout import ListedSegment, RemotePartition, segments_in, topic_ids
from ..log.remote.segmentdata import index_size
from ..log.remotelog import RemoteTier
from ..log.segment import LogSegment
from .progress import Progress
from .durable import TMP, sync_dir
from .restorefetch import INDEX_FILES, Pipeline, SegmentFiles
from .verify import index_problems, scan_segment

METADATA = "partition.metadata"
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.tmp)?")


def partition_metadata(topic_id: str) -> bytes:
    """Kafka's PartitionMetadataFile: exactly these two lines, no final newline."""
    return f"version: 0\ntopic_id: {topic_id}".encode()


def expected_files(manifest) -> dict[str, int]:
    """suffix -> size of every file a segment restores to (its `.log` and the indexes it has)."""
    out = {".log": manifest.chunk_index.file_size}
    for kind, suffix in INDEX_FILES.items():
        size = index_size(manifest, kind)
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


def _complete(dest: str, base: int, expected: dict[str, int]) -> bool:
    for suffix, size in expected.items():
        try:
            if os.stat(os.path.join(dest, f"{base:020d}{suffix}")).st_size != size:
                return False
        except FileNotFoundError:
            return False
    return True


def _prepare(dest: str, bases: set[int], topic_id: str) -> dict[str, bytes]:
    """Check that `dest` is empty or an interrupted restore of this partition, and delete that one's
    half-written files; the partition.metadata to write there (path -> bytes)."""
    os.makedirs(dest, exist_ok=True)
    foreign = foreign_files(os.listdir(dest), bases)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise InvalidArgument(f"{dest} holds files that are not this partition's restore ({shown}); restore "
                              "into an empty directory (or the one an interrupted restore left)")
    metadata_path = os.path.join(dest, METADATA)
    want = partition_metadata(topic_id)
    if os.path.exists(metadata_path):
        with open(metadata_path, "rb") as f:
            if f.read() != want:
                raise InvalidArgument(f"{metadata_path} names another topic id than {topic_id}: {dest} holds "
                                      "another partition's restore")
    for name in os.listdir(dest):  # an interrupted run's half-written files
        if name.endswith(TMP):
            os.unlink(os.path.join(dest, name))
    return {metadata_path: want}


def verify_segment(dest: str, base: int) -> list[str]:
    """What `lookupd dump --verify-index-only` reports for the restored segment (empty: all good)."""
    seg = LogSegment(dest, base, live=False)
    try:
        scan = scan_segment(seg)
        return scan.problems + index_problems(seg, scan)
    finally:
        seg.close()


def run(args) -> int:
    settings = load_remote(args.config)
    if not settings.bucket:
        raise InvalidArgument(f"{args.config} has no [remote] table with a bucket: restore reads the bucket "
                              "it names")
    # Restore reads each byte once and caches nothing: an empty temporary cache_dir, so that the daemon's
    # cache (and its half-written files) is never touched, whoever runs the restore.
    settings.cache_dir = tempfile.mkdtemp(prefix="lookupd-restore-")
    try:
        return restore_partition(RemoteTier(settings.remote_config()), args.dest, args.topic, args.partition,
                                 topic_id=args.topic_id, verify=args.verify)
    finally:
        shutil.rmtree(settings.cache_dir, ignore_errors=True)


def restore_partition(tier: RemoteTier, dest: str, topic: str, partition: int, *, topic_id: str | None = None,
                      verify: bool = False, out=None) -> int:
    """Restore (or finish restoring) one partition into `dest`; the exit status (1: --verify found problems)."""
    out = out if out is not None else sys.stdout
    with Pipeline() as pipeline:
        rp, listed = _find_partition(tier.store, tier.config.prefix, topic, partition, topic_id)
        head = pipeline.head(tier.store, listed[0]) if listed else None
        segments = tier.list_partition(rp, None, [], listed=listed)  # the manifests: meanwhile, that head
        bases = {info.base_offset for info in segments}
        metadata = pipeline.write_files(_prepare(dest, bases, rp.topic_id))
        todo = []
        for info in segments:
            manifest = tier.manifest(info.keys)  # fetched by the listing
            if not _complete(dest, info.base_offset, expected_files(manifest)):
                todo.append(SegmentFiles(dest, info.base_offset, manifest.chunk_index.file_size,
                                         lambda keys=info.keys: tier.data(keys)))  # made when its turn comes
        counts = Counts(restored=len(todo), skipped=len(segments) - len(todo))
        with Progress(sum(files.size for files in todo), f"restore {rp.topic}-{rp.partition}") as progress:
            counts.bytes = pipeline.run(todo, progress, head)
            metadata.result()
            sync_dir(dest)
            problems = []
            if verify:
                for base in sorted(bases):
                    problems += verify_segment(dest, base)
            for p in problems:
                progress.write(f"error: {p}", sys.stderr)
    verified = f", {len(segments)} verified" if verify and not problems else ""
    out.write(f"restored {rp.topic}-{rp.partition} (topic id {rp.topic_id}) into {dest}: {counts.restored} "
              f"segments ({counts.bytes:,} bytes of log) written, {counts.skipped} already complete{verified}\n")
    return 1 if problems else 0
