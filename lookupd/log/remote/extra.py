"""The `tiered` extra (obstore, boto3, cryptography, pycryptodome): whether it is installed, and `open_bucket`, the
one way to a Bucket, which says in one line what to install when it is not. Importable without it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import MissingExtra
from .config import RemoteConfig

if TYPE_CHECKING:
    from .bucket import Bucket
    from .store import ObjectStore

EXTRA_HINT = "pip install 'kafka-lookupd[tiered]' (obstore, boto3, cryptography, pycryptodome)"


def require() -> None:
    """Raise MissingExtra (one line naming the extra) unless the object-store packages import."""
    try:
        import boto3  # noqa: F401
        import Crypto  # noqa: F401 - pycryptodome
        import cryptography  # noqa: F401
        import obstore  # noqa: F401
    except ImportError as err:
        missing = "pycryptodome" if err.name == "Crypto" else err.name
        raise MissingExtra(f"tiered storage ([remote]) needs {missing}: {EXTRA_HINT}") from None


def open_bucket(config: RemoteConfig, *, store: "ObjectStore | None" = None, cached: bool = True) -> "Bucket":
    """The Bucket `config` names (its store, disk cache, keyring and manifest cache); `cached` False: no disk
    cache (a reader that takes each byte once: restore). MissingExtra without the tiered extra."""
    require()
    from .bucket import Bucket  # the object-store packages: imported only where a bucket is used

    return Bucket.open(config, store=store, cached=cached)
