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
import stat
import sys
from dataclasses import dataclass

from ..errors import InvalidArgument
from ..format.names import LOG_SUFFIX, PARTITION_METADATA, parse_segment_file, segment_file_name
from ..log.remote.config import load_remote
from ..log.tiered.layout import ListedSegment, RemotePartition, segments_in, topic_ids
from ..log.remote.indexes import index_size
from ..log.tiered.listing import History, RemoteTier
from ..log.tiered.segment import INDEX_SUFFIXES
from ..log.segment import LogSegment
from .progress import Progress
from .durable import TMP, Directory, check_private
from .restorefetch import Pipeline, SegmentFiles
from .verify import check_segment



def partition_metadata(topic_id: str) -> bytes:
    """Kafka's PartitionMetadataFile: exactly these two lines, no final newline."""
    return f"version: 0\ntopic_id: {topic_id}".encode()


def expected_files(manifest) -> dict[str, int]:
    """suffix -> size of every file a segment restores to (its `.log` and the indexes it has)."""
    out = {LOG_SUFFIX: manifest.chunk_index.file_size}
    for kind, suffix in INDEX_SUFFIXES.items():
        size = index_size(manifest, kind)
        if size is not None:
            out[suffix] = size
    return out


def foreign_files(names: list[str], bases: set[int]) -> list[str]:
    """The names in DEST_DIR that a restore of segments `bases` would not write (refused: not ours)."""
    out = []
    for name in names:
        if name in (PARTITION_METADATA, PARTITION_METADATA + TMP):
            continue
        segment = parse_segment_file(name[:-len(TMP)] if name.endswith(TMP) else name)
        if segment is not None and segment[0] in bases:
            continue
        out.append(name)
    return sorted(out)


def not_regular(dest: Directory, names: list[str]) -> list[str]:
    """The names in DEST_DIR that are not regular files (a symbolic link, a directory...): restore writes
    through none of them and replaces none of them, it refuses."""
    out = []
    for name in names:
        st = dest.lstat(name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            out.append(f"{name} (a symbolic link)" if stat.S_ISLNK(st.st_mode) else f"{name} (not a regular file)")
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
    history = History(topic_id)
    for rp in (RemotePartition(topic, partition, tid) for tid in topic_ids(store, prefix, topic)):
        if history.holds(rp):
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


def _complete(dest: Directory, base: int, expected: dict[str, int]) -> bool:
    return all(dest.regular_size(segment_file_name(base, suffix)) == size for suffix, size in expected.items())


def open_dest(path: str) -> Directory:
    """DEST_DIR, made if missing (not writable by others, whatever the umask), opened once; InvalidArgument
    unless it is a directory of the user running restore that no one else may write to (anyone who may
    plant a file there could steer what restore writes, and restore usually runs as root)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        os.mkdir(path, 0o755)
    except FileExistsError:
        made = False
    else:
        made = True
    try:
        dest = Directory(path)
    except NotADirectoryError:
        raise InvalidArgument(f"{path} is not a directory; restore into a directory") from None
    try:
        if made:
            os.fchmod(dest.fd, 0o755)
        check_private(dest, "DEST_DIR")
    except BaseException:
        dest.close()
        raise
    return dest


def _prepare(dest: Directory, bases: set[int], topic_id: str) -> dict[str, bytes]:
    """Check that `dest` is empty or an interrupted restore of this partition, and delete that one's
    half-written files; the partition.metadata to write there (name -> bytes)."""
    names = dest.listdir()
    refused = foreign_files(names, bases) + not_regular(dest, names)
    if refused:
        shown = ", ".join(refused[:5]) + (f" and {len(refused) - 5} more" if len(refused) > 5 else "")
        raise InvalidArgument(f"{dest.path} holds files that are not this partition's restore ({shown}); restore "
                              "into an empty directory (or the one an interrupted restore left)")
    want = partition_metadata(topic_id)
    found = dest.read_small(PARTITION_METADATA, len(want))
    if found is not None and found != want:
        raise InvalidArgument(f"{dest.join(PARTITION_METADATA)} names another topic id than {topic_id}: "
                              f"{dest.path} holds another partition's restore")
    for name in names:  # an interrupted run's half-written files
        if name.endswith(TMP):
            dest.unlink(name)
    return {PARTITION_METADATA: want}


def verify_segment(dest: str, base: int) -> list[str]:
    """What `lookupd dump --verify-index-only` reports for the restored segment (empty: all good)."""
    seg = LogSegment.open(dest, base, live=False)
    try:
        check = check_segment(seg)
    finally:
        seg.close()
    return check.scan.problems + [message for _, message in check.index_problems]


def run(args) -> int:
    settings = load_remote(args.config)
    if not settings.bucket:
        raise InvalidArgument(f"{args.config} has no [remote] table with a bucket: restore reads the bucket "
                              "it names")
    # Restore reads each byte once and caches nothing: no disk cache, so that the daemon's cache (and its
    # half-written files) is never touched, whoever runs the restore.
    return restore_partition(RemoteTier(settings.remote_config(), cached=False), args.dest, args.topic,
                             args.partition, topic_id=args.topic_id, verify=args.verify)


def restore_partition(tier: RemoteTier, dest: str, topic: str, partition: int, *, topic_id: str | None = None,
                      verify: bool = False, out=None) -> int:
    """Restore (or finish restoring) one partition into `dest`; the exit status (1: --verify found problems)."""
    out = out if out is not None else sys.stdout
    opened: list[Directory] = []  # DEST_DIR, closed once the pipeline's threads have ended
    try:
        with Pipeline() as pipeline:
            rp, counts, problems = _restore(tier, pipeline, dest, opened, topic, partition, topic_id, verify)
    finally:
        for directory in opened:
            directory.close()
    verified = f", {counts.restored + counts.skipped} verified" if verify and not problems else ""
    out.write(f"restored {rp.topic}-{rp.partition} (topic id {rp.topic_id}) into {dest}: {counts.restored} "
              f"segments ({counts.bytes:,} bytes of log) written, {counts.skipped} already complete{verified}\n")
    return 1 if problems else 0


def _restore(tier: RemoteTier, pipeline: Pipeline, dest: str, opened: list[Directory], topic: str, partition: int,
             topic_id: str | None, verify: bool) -> tuple[RemotePartition, Counts, list[str]]:
    """restore_partition's work (DEST_DIR opened only once the partition is found); what --verify found."""
    rp, listed = _find_partition(tier.store, tier.config.prefix, topic, partition, topic_id)
    head = pipeline.head(tier.store, listed[0]) if listed else None
    segments = tier.list_partition(rp, None, [], listed=listed)  # the manifests: meanwhile, that head
    bases = {info.base_offset for info in segments}
    directory = open_dest(dest)
    opened.append(directory)
    metadata = pipeline.write_files(directory, _prepare(directory, bases, rp.topic_id))
    todo = []
    for info in segments:
        manifest = tier.manifest(info.keys)  # fetched by the listing
        if not _complete(directory, info.base_offset, expected_files(manifest)):
            todo.append(SegmentFiles(directory, info.base_offset, manifest.chunk_index.file_size,
                                     tier.bucket, info.keys.log))
    counts = Counts(restored=len(todo), skipped=len(segments) - len(todo))
    with Progress(sum(files.size for files in todo), f"restore {rp.topic}-{rp.partition}") as progress:
        counts.bytes = pipeline.run(todo, progress, head)
        metadata.result()
        directory.sync()
        problems = []
        if verify:
            for base in sorted(bases):
                problems += verify_segment(dest, base)
        for p in problems:
            progress.write(f"error: {p}", sys.stderr)
    return rp, counts, problems
