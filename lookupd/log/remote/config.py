"""The `[remote]` settings: where the tiered segments are and how much local disk their cache may use."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_CACHE_BYTES = 10 * 1024 ** 3  # 10 GiB: room for the indexes and hot chunks of a few hundred segments


@dataclass(frozen=True)
class RemoteConfig:
    """Where the plugin's objects live and how to read them.

    Credentials are not here: they come from the standard AWS chain (AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance role).
    """

    bucket: str
    cache_dir: str
    prefix: str = ""                      # the plugin's key.prefix, prepended verbatim to every key
    endpoint_url: str | None = None       # None: AWS's own endpoint for `region`
    region: str = "us-east-1"
    cache_bytes: int = DEFAULT_CACHE_BYTES
    encryption_keys: dict[str, str] = field(default_factory=dict)  # key id -> PEM private key file

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("remote.bucket must name the bucket the tiered segments are in")
        if not self.cache_dir:
            raise ValueError("remote.cache_dir must name a directory lookupd may write its cache to")
        if isinstance(self.cache_bytes, bool) or not isinstance(self.cache_bytes, int) or self.cache_bytes <= 0:
            raise ValueError(f"remote.cache_bytes must be a positive integer, got {self.cache_bytes!r}")
