"""The `[remote]` settings: where the tiered segments are and how much local disk their cache may use.

RemoteConfig is what the log layer reads with; RemoteSettings is the `[remote]` table of the daemon's TOML
as written, parsed and checked here once for everything that reads that file (the daemon, `lookupd dump`,
`lookupd restore`, `fusefs mount --config`), so each refuses a bad table with the same words.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from ...errors import InvalidArgument
from .extra import require

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


def typed(key: str, value: Any, default: Any, path: str | None) -> Any:
    """A config value checked against the type of its default (bool, float, int, list of str or str);
    InvalidArgument naming the key and the file otherwise. An int is taken for a float."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, list):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, str)
    if not ok:
        where = f" in {path}" if path else ""
        raise InvalidArgument(f"config key {key}{where} must be a {type(default).__name__}, got {value!r}")
    return value


@dataclass
class RemoteSettings:
    """The `[remote]` table: the tiered segments' bucket (KIP-405, Aiven's layout). Off while `bucket`
    is empty. Credentials come from the standard AWS chain, never from this file."""

    bucket: str = ""                    # the bucket the plugin uploads to; "" = no remote tier
    prefix: str = ""                    # the plugin's key.prefix
    endpoint_url: str = ""              # an S3-compatible store's URL; "" = AWS's own for `region`
    region: str = "us-east-1"
    cache_dir: str = "/var/cache/lookupd"  # fetched indexes and chunks (decrypted: mode 0700)
    cache_bytes: int = DEFAULT_CACHE_BYTES  # bound on cache_dir's size
    encryption_keys: dict = field(default_factory=dict)  # [remote.encryption.keys]: key id -> PEM file

    # TOML spellings of the fields that are not a plain key of the table.
    NESTED = {"encryption_keys": ("encryption", "keys")}

    @classmethod
    def from_table(cls, table: Any, path: str | None) -> "RemoteSettings":
        where = f" in {path}" if path else ""
        if not isinstance(table, dict):
            raise InvalidArgument(f"remote{where} must be a table ([remote]), got {table!r}")
        table = dict(table)
        out = cls()
        encryption = table.pop("encryption", {})
        if not isinstance(encryption, dict) or set(encryption) - {"keys"}:
            raise InvalidArgument(f"remote.encryption{where} holds only the table [remote.encryption.keys]")
        keys = encryption.get("keys", {})
        if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
            raise InvalidArgument(f"[remote.encryption.keys]{where} maps key ids to PEM file paths (strings)")
        out.encryption_keys = dict(keys)
        known = {f.name for f in fields(cls)} - set(cls.NESTED)
        for key, value in table.items():
            if key not in known:
                raise InvalidArgument(f"unknown config key 'remote.{key}'{where}; known keys: "
                                      f"{', '.join(sorted(known))}, encryption.keys")
            setattr(out, key, typed(f"remote.{key}", value, getattr(out, key), path))
        return out

    def check(self) -> None:
        if self.bucket and not self.cache_dir:
            raise InvalidArgument("remote.cache_dir must name a directory lookupd may write its cache to")
        if self.cache_bytes < 1:
            raise InvalidArgument("remote.cache_bytes must be at least 1")

    def remote_config(self) -> RemoteConfig | None:
        """The RemoteConfig to read with, None while no bucket is set. MissingExtra, one line naming the extra,
        when the tiered extra is not installed: every reader of a [remote] table or an s3:// URL comes here."""
        if not self.bucket:
            return None
        require()
        try:
            return RemoteConfig(bucket=self.bucket, cache_dir=self.cache_dir, prefix=self.prefix,
                                endpoint_url=self.endpoint_url or None, region=self.region,
                                cache_bytes=self.cache_bytes, encryption_keys=dict(self.encryption_keys))
        except ValueError as err:
            raise InvalidArgument(str(err)) from None


def load_remote(path: str) -> RemoteSettings:
    """The `[remote]` table of a config file alone (`lookupd dump s3://...`, `lookupd restore`, `fusefs mount
    --config`): the rest of the file is the daemon's to check."""
    try:
        with open(path, "rb") as f:
            values = tomllib.load(f)
    except OSError as err:
        raise InvalidArgument(f"cannot read config file {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise InvalidArgument(f"config file {path}: {err}") from None
    settings = RemoteSettings.from_table(values.get("remote", {}), path)
    settings.check()
    return settings
