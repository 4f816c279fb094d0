"""Remote segments (tiered storage) read by the executors straight from the bucket.

The driver resolves where the bucket is (`resolve_location`: the lookupd.remote.* options, else the
daemon's [remote] setting from its `stats`) and ships it in each split. On an executor, a remote piece
is read by ranged GETs through a lookupd.log.remote Bucket, so chunk decryption, decompression, caching and
read-ahead are the daemon's own; no daemon is needed for these pieces.
Credentials come from the standard AWS chain on each executor.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lookupd.log.remote.config import RemoteConfig
from lookupd.log.remote.opener import open_bucket

from .options import RemoteOptions

if TYPE_CHECKING:
    from lookupd.log.remote.bucket import Bucket, BucketSegment

DEFAULT_REGION = "us-east-1"  # RemoteConfig's default, when neither the options nor the daemon name one
# Decoded chunks and indexes an executor process keeps on its local disk (a private temp dir): a split reads
# its pieces once, front to back, so only read-ahead windows need to stay; this bounds the disk a task uses.
EXECUTOR_CACHE_BYTES = 256 << 20


@dataclass(frozen=True)
class BucketLocation:
    """Where remote segments are read from (picklable, shipped in splits; no credentials)."""

    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str
    encryption_keys: tuple[tuple[str, str], ...]

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def resolve_location(options: RemoteOptions, daemon: dict | None) -> BucketLocation | None:
    """Each lookupd.remote.* option, else the daemon's [remote] value (`stats`' `remote`), else the default;
    None when no bucket is named either way (remote pieces are then read through the daemon)."""
    daemon = daemon or {}
    bucket = options.bucket or daemon.get("bucket")
    if not bucket:
        return None
    return BucketLocation(
        bucket=bucket,
        prefix=options.prefix if options.prefix is not None else daemon.get("prefix") or "",
        endpoint_url=options.endpoint_url or daemon.get("endpoint_url"),
        region=options.region or daemon.get("region") or DEFAULT_REGION,
        encryption_keys=options.encryption_keys)


def _open(location: BucketLocation) -> Bucket:
    """This executor process's Bucket for `location`: its cache in a private temporary directory."""
    cache_dir = tempfile.mkdtemp(prefix="lookupd-spark-cache-")
    atexit.register(shutil.rmtree, cache_dir, True)
    return open_bucket(RemoteConfig(bucket=location.bucket, cache_dir=cache_dir, prefix=location.prefix,
                                    endpoint_url=location.endpoint_url, region=location.region,
                                    cache_bytes=EXECUTOR_CACHE_BYTES,
                                    encryption_keys=dict(location.encryption_keys)))


_buckets: dict[BucketLocation, Bucket] = {}
_buckets_lock = threading.Lock()


def segment_data(location: BucketLocation, key: str) -> BucketSegment:
    """The remote segment whose `.log` object is `key`, shared by the tasks of this executor process."""
    with _buckets_lock:
        bucket = _buckets.get(location)
        if bucket is None:
            bucket = _buckets[location] = _open(location)
    return bucket.segment(key)  # its manifest: one GET, the first time


class BucketHandle:
    """FileHandle's reading surface (`pread`, `size`) over a remote segment's original bytes, for
    lookupd.log.filerecords.read_frames. Reads go front to back: each starts the next chunks' read-ahead."""

    def __init__(self, data: BucketSegment):
        self.data = data

    def size(self) -> int:
        return self.data.size

    def pread(self, size: int, position: int) -> bytes:
        return self.data.read(position, size, sequential=True)
