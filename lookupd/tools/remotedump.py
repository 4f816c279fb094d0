"""`lookupd dump s3://bucket/key`: a tiered segment opened as the log layer opens it, for the dumper.

The key is a segment's `.log` (its batches) or `.indexes` object (its offset, time and transaction
indexes) in the plugin's layout. Endpoint, region, cache and encryption keys come from the `[remote]`
table of `--config FILE` (the bucket from the URL); without one, from the AWS chain and a temporary cache.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

from ..log.remote.config import RemoteSettings, load_remote
from ..errors import InvalidArgument
from ..log.tiered.layout import INDEXES, LOG, parse_key
from ..log.tiered.listing import RemoteTier
from ..log.segment import LogSegment
from ..log.tiered.segment import RemoteSegmentInfo

SCHEME = "s3://"


def is_remote(path: str) -> bool:
    return path.startswith(SCHEME)


def split_url(url: str) -> tuple[str, str, str]:
    """(bucket, key, suffix) of `s3://bucket/key`; InvalidArgument unless the key is a segment's `.log` or
    `.indexes` object in the plugin's layout."""
    bucket, _, key = url[len(SCHEME):].partition("/")
    parts = key.split("/")
    prefix = "/".join(parts[:-3]) + "/" if len(parts) > 3 else ""
    parsed = parse_key(prefix, key) if bucket and len(parts) >= 3 else None
    if parsed is None or parsed[1] not in (LOG, INDEXES):
        raise InvalidArgument(f"{url} is not a tiered segment: expected s3://BUCKET/[PREFIX]TOPIC-TOPICID/PARTITION/"
                              f"<20-digit offset>-<segment id>.log (or .indexes)")
    return bucket, key, parsed[1]


class BucketUrls:
    """Segments named by `s3://` URL, read from their buckets (one RemoteTier per bucket)."""

    def __init__(self, config_path: str | None):
        self.settings = load_remote(config_path) if config_path else RemoteSettings()
        self._tiers: dict[str, RemoteTier] = {}
        self._tmp: str | None = None

    def open(self, url: str) -> tuple[LogSegment, str]:
        """(segment, suffix) for a `.log` or `.indexes` URL."""
        bucket, key, suffix = split_url(url)
        parts = key.split("/")
        prefix = "/".join(parts[:-3]) + "/" if len(parts) > 3 else ""
        keys = parse_key(prefix, key)[0]
        tier = self._tiers.get(bucket)
        if tier is None:
            settings = self.settings
            if not self.settings.bucket:  # no [remote] table: a temporary cache
                self._tmp = self._tmp or tempfile.mkdtemp(prefix="lookupd-dump-")
                settings = RemoteSettings(cache_dir=self._tmp, endpoint_url=settings.endpoint_url,
                                          region=settings.region, encryption_keys=settings.encryption_keys)
            settings = RemoteSettings(**{**settings.__dict__, "bucket": bucket})
            config = settings.remote_config()  # (MissingExtra without the tiered extra)
            tier = self._tiers[bucket] = RemoteTier(config)
        info = RemoteSegmentInfo(keys.start_offset, None, None, (), keys.segment_id, keys.log, keys)
        return tier.open(info), suffix

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


@contextmanager
def bucket_urls(config_path: str | None) -> Iterator[BucketUrls]:
    segments = BucketUrls(config_path)
    try:
        yield segments
    finally:
        segments.close()
