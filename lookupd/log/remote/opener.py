"""`open_bucket`, the one way to a Bucket for the daemon, the mount, the Spark executors and restore.
Importable without the `tiered` extra: the object-store packages are imported only once a bucket is opened."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import RemoteConfig
from .extra import require

if TYPE_CHECKING:
    from .bucket import Bucket
    from .store import ObjectStore


def open_bucket(config: RemoteConfig, *, store: ObjectStore | None = None, cached: bool = True) -> Bucket:
    """The Bucket `config` names (its store, disk cache, keyring and manifest cache); `cached` False: no disk
    cache (a reader that takes each byte once: restore). MissingExtra without the tiered extra."""
    require()
    from .bucket import Bucket  # the object-store packages: imported only where a bucket is used

    return Bucket.open(config, store=store, cached=cached)
