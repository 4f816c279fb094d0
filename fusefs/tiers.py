"""The remote tier for the mount: segments the daemon lists as `"tier": "remote"`, read straight from the
bucket named by the `[remote]` table of the daemon's config (`fusefs mount --config FILE`).

Their `.log` bytes come through the Bucket's chunk cache (chunks fetched on demand, with
read-ahead for sequential reads), their indexes as the files it fetches into `cache_dir`. The bucket is
listed per partition (the plugin's layout: its keys, the manifest last) and the listing kept for
LIST_TTL_S; a base offset it does not know lists again once. Which upload of the offsets is read
follows the local `leader-epoch-checkpoint` as the daemon's choice does.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from lookupd.errors import InvalidArgument
from lookupd.format.names import segment_file_name
from lookupd.log.remote.readpattern import ReadPattern
from lookupd.log.remote.config import RemoteConfig, load_remote
from lookupd.log.tiered.layout import partition_dirs
from lookupd.log.tiered.listing import RemoteTier, local_history
from lookupd.log.segment import LogSegment
from lookupd.log.tiered.segment import RemoteSegmentInfo, UploadData

if TYPE_CHECKING:
    from lookupd.log.remote.bucket import BucketSegment

LIST_TTL_S = 30.0  # as the daemon's REMOTE_RESCAN_S: uploads appear within this, retention is noticed on a miss
MARK = "remote"    # remote segments' files are named <base>.remote.<suffix>: `ls` tells the tiers apart
# A remote `.log` is opened with direct I/O: each read(2) of it reaches the mount as one read of up to this
# (libfuse 3's most), a copy out of a decoded chunk; through the page cache it would come in 128 KiB pieces,
# eight times as many calls into Python.
REMOTE_IO_SIZE = 1 << 20


def load_config(path: str) -> RemoteConfig:
    """The `[remote]` table of the daemon's TOML (the mount sits beside the daemon, not above it), read and
    checked as the daemon reads it; InvalidArgument when it is bad or names no bucket."""
    config = load_remote(path).remote_config()
    if config is None:
        raise InvalidArgument(f"{path} has no [remote] table with a bucket")
    return config


def file_name(base_offset: int, suffix: str, remote: bool) -> str:
    """A segment file's name in the mount: `<base>.<suffix>`, or `<base>.remote.<suffix>` for a remote one."""
    return segment_file_name(base_offset, f".{MARK}.{suffix}" if remote else f".{suffix}")


class BucketLogFile:
    """A remote segment's `.log` open in the mount: `read_into(buf, offset)` of the original bytes.

    A read within SEQUENTIAL_SLACK of where the last one ended counts as sequential and starts the read-ahead
    (reads of one file may come from several FUSE threads, so a little out of order); a read from the start
    does too."""

    SEQUENTIAL_SLACK = 1 << 20

    def __init__(self, data: UploadData | BucketSegment):
        self._data = data
        self._pattern = ReadPattern(self.SEQUENTIAL_SLACK, from_start=True)

    def size(self) -> int:
        return self._data.size

    def read_into(self, buf: memoryview, offset: int) -> int:
        """The original bytes from `offset` into `buf` (libfuse's reply buffer), copied once from the decoded
        chunks; how many went in (fewer at the end of the segment)."""
        return self._data.read_into(offset, buf, sequential=self._pattern.sequential(offset, offset + len(buf)))


class BucketSegments:
    """Remote segments by (topic, partition, base offset), read from the bucket itself (not through the
    daemon: DaemonSource)."""

    def __init__(self, config_path: str):
        self.tier = RemoteTier(load_config(config_path))
        self._lock = threading.Lock()
        self._listed: dict[tuple[str, int], tuple[float, dict[int, RemoteSegmentInfo]]] = {}
        # `.log` key -> its segment (indexes mapped once) and the upload's bytes
        self._segments: dict[str, tuple[LogSegment, UploadData]] = {}

    def _list(self, topic: str, partition: int, local_dir: str | None) -> dict[int, RemoteSegmentInfo]:
        history = local_history(topic, partition, local_dir)
        found = [] if history is None else [rp for rp in partition_dirs(self.tier.store, self.tier.config.prefix,
                                                                        topic, partition) if history.holds(rp)]
        out: dict[int, RemoteSegmentInfo] = {}
        if found:
            out = {info.base_offset: info for info in self.tier.list_partition(found[0], None, history.lineage())}
        with self._lock:
            self._listed[(topic, partition)] = (time.monotonic(), out)
        return out

    def _opened(self, topic: str, partition: int, local_dir: str | None,
                base_offset: int) -> tuple[LogSegment, UploadData]:
        """The remote segment at `base_offset` and its upload's bytes; FileNotFoundError when the bucket has none
        (deleted by retention)."""
        with self._lock:
            listed = self._listed.get((topic, partition))
        infos = listed[1] if listed is not None and time.monotonic() - listed[0] < LIST_TTL_S else None
        if infos is None or base_offset not in infos:
            infos = self._list(topic, partition, local_dir)
        info = infos.get(base_offset)
        if info is None:
            raise FileNotFoundError(f"{topic}-{partition}: no remote segment at offset {base_offset} in "
                                    f"s3://{self.tier.config.bucket}")
        with self._lock:
            opened = self._segments.get(info.log_key)
            if opened is None:
                opened = self._segments[info.log_key] = (self.tier.open(info), self.tier.upload_data(info))
        return opened

    def segment(self, topic: str, partition: int, local_dir: str | None, base_offset: int) -> LogSegment:
        """The remote segment at `base_offset`; FileNotFoundError when the bucket has none (deleted by retention)."""
        return self._opened(topic, partition, local_dir, base_offset)[0]

    def data(self, topic: str, partition: int, local_dir: str | None, base_offset: int) -> UploadData:
        """The bytes and indexes of the upload at `base_offset`, as the bucket holds them."""
        return self._opened(topic, partition, local_dir, base_offset)[1]
