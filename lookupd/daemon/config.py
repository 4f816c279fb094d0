"""The daemon's configuration: every key and its default, in one place.

`lookupd serve --config FILE` reads TOML; `--log-dir`, `--socket` and `--tcp` override the
file. Every key is optional. The configuration table of docs/configuration.md and
`systemd/lookupd.toml.example` state these defaults too; tests/test_server.py checks that all
three agree.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import InvalidArgument
from ..log.remote.config import RemoteSettings, typed
from ..rpc import protocol as rpc
from ..rpc.address import DEFAULT_SOCKET, parse_host_port
from .acl import Acl
from .kafkasettings import KafkaSettings
from .service import Limits
from .tls import HANDSHAKE_TIMEOUT_S

log = logging.getLogger(__name__)


@dataclass
class Config:
    log_dirs: list = field(default_factory=list)  # broker log dirs (or --log-dir, repeatable); at least one
    socket: str = DEFAULT_SOCKET        # Unix socket path, relative to the working dir; "" = none
    socket_mode: int = 0o660            # permissions of the Unix socket (who may connect)
    tcp: str = ""                       # "HOST:PORT", ":PORT" or "PORT" (= 127.0.0.1:PORT); "" = none
    auth_token_file: str = ""           # shared secret TCP clients send with `auth` (principal token:default)
    auth_tokens_file: str = ""          # `name:secret` lines: one token per client (principal token:<name>)
    tls_cert_file: str = ""             # PEM certificate chain: TLS on the tcp listener (TLS 1.2+)
    tls_key_file: str = ""              # its PEM private key
    tls_client_ca_file: str = ""        # PEM CA(s): clients must present a certificate it signed (mutual TLS)
    tls_handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S  # a TLS client must finish its handshake within this
    allow_plaintext_tcp: bool = False   # allow a non-loopback tcp or metrics address without TLS
    acl: list = field(default_factory=list)  # [[acl]] tables {principal, topics, groups, operations}; none = all allowed
    max_frame_bytes: int = rpc.DEFAULT_MAX_FRAME_BYTES  # longest request; a longer one closes the connection
    max_connections: int = 1024         # beyond this new connections get UNAVAILABLE and are closed
    max_in_flight_per_connection: int = 64  # requests running at once per connection; then reading pauses
    blocking_threads_per_connection: int = 2  # worker threads one connection's requests may hold at once
    max_buffered_bytes_per_connection: int = 16 << 20  # requests waiting for a thread and unsent answers
                                        # held for one connection; above it the connection is not read
    max_buffered_bytes: int = 256 << 20  # the same for all connections together; above it the one holding
                                        # the most is closed
    max_unauthenticated_connections: int = 64  # TCP connections that have not sent the token yet; a new
                                        # one beyond it closes the oldest
    auth_timeout_s: float = 10.0        # a TCP connection that has not authenticated by then is closed
    idle_timeout_s: float = 300.0       # close a connection silent this long with nothing in flight;
                                        # also how long a peer may leave a response unread
    max_read_bytes: int = Limits.max_read_bytes  # cap on `read`'s max_bytes (TOO_LARGE above)
    max_batch_lookups: int = Limits.max_batch_lookups  # cap on columnar list lengths (TOO_LARGE above)
    rescan_interval_s: float = 1.0      # how often the log dirs are rescanned (SIGHUP: at once)
    shutdown_grace_s: float = 10.0      # SIGTERM/SIGINT: time in-flight requests get to finish
    max_open_indexes: int = 4096        # index/log files kept open and mapped (LRU)
    max_mapped_bytes: int = 4 << 30     # bytes of index maps kept (LRU)
    blocking_threads: int = 16          # worker threads for calls that may touch the disk
    inline_hot_lookups: bool = True     # single lookups on the event loop when all they read is in memory
    metrics: str = ""                   # "HOST:PORT" (or "PORT": loopback) to serve Prometheus metrics; "" = off
    metrics_tls: bool = False           # serve metrics over TLS with tls_cert_file/tls_key_file
    workers: int = 1                    # processes serving the same sockets (one event loop each)
    schemas_topic: str = "_schemas"     # the Schema Registry's topic (its kafkastore.topic): `schemas`, decoded reads
    offsets_topic_partitions: int = 50  # __consumer_offsets' partition count (offsets.topic.num.partitions):
                                        # which partition holds a group
    remote: RemoteSettings = field(default_factory=RemoteSettings)  # [remote]: the tiered segments' bucket
    kafka: KafkaSettings = field(default_factory=KafkaSettings)  # [kafka]: the Kafka-protocol listener

    @classmethod
    def load(cls, path: str | None, kafka_listen: list[str] | None = None, **overrides: Any) -> "Config":
        """Defaults, then the TOML file, then the non-None `overrides` (command-line flags); `kafka_listen`
        (--kafka-listen) replaces [kafka] listen."""
        values: dict[str, Any] = {}
        if path:
            try:
                with open(path, "rb") as f:
                    values = tomllib.load(f)
            except tomllib.TOMLDecodeError as err:
                raise InvalidArgument(f"config file {path}: {err}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls()
        known = {f.name: f for f in fields(cls)}
        for key, value in values.items():
            if key not in known:
                raise InvalidArgument(f"unknown config key {key!r} in {path}; known keys: {', '.join(known)}")
            if key == "remote":
                cfg.remote = value if isinstance(value, RemoteSettings) else RemoteSettings.from_table(value, path)
                continue
            if key == "kafka":
                cfg.kafka = KafkaSettings.from_table(value, path)
                continue
            setattr(cfg, key, _coerce(key, value, getattr(cfg, key), path))
        if kafka_listen:
            cfg.kafka.listen = list(kafka_listen)
        cfg.check()
        return cfg

    def check(self) -> None:
        if not self.log_dirs:
            raise InvalidArgument("no log dir to serve: pass --log-dir DIR or set log_dirs in the config file")
        if not self.socket and not self.tcp and not self.kafka.listen:
            raise InvalidArgument("nothing to listen on: set socket, tcp or [kafka] listen")
        for key in ("max_frame_bytes", "max_connections", "max_in_flight_per_connection", "max_open_indexes",
                    "blocking_threads", "workers", "blocking_threads_per_connection",
                    "max_buffered_bytes_per_connection", "max_buffered_bytes", "max_unauthenticated_connections",
                    "offsets_topic_partitions"):
            if getattr(self, key) < 1:
                raise InvalidArgument(f"{key} must be at least 1")
        for key in ("idle_timeout_s", "rescan_interval_s", "shutdown_grace_s", "auth_timeout_s",
                    "tls_handshake_timeout_s"):
            if getattr(self, key) <= 0:
                raise InvalidArgument(f"{key} must be positive")
        if self.max_frame_bytes < 64:
            raise InvalidArgument("max_frame_bytes must be at least 64")
        if self.metrics:
            parse_host_port(self.metrics)  # InvalidArgument naming the value
        self.remote.check()
        self.kafka.check()
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise InvalidArgument("TLS needs both tls_cert_file and tls_key_file: set both, or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise InvalidArgument("tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file too")
        if self.metrics_tls and not (self.metrics and self.tls_cert_file):
            raise InvalidArgument("metrics_tls needs metrics and tls_cert_file/tls_key_file (the same certificate)")
        Acl.from_config(self.acl)  # InvalidArgument naming the bad [[acl]] table

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def limits(self) -> Limits:
        return Limits(max_read_bytes=self.max_read_bytes, max_batch_lookups=self.max_batch_lookups)


def _coerce(key: str, value: Any, default: Any, path: str | None) -> Any:
    where = f" in {path}" if path else ""
    if key == "acl":  # tables, checked by Config.check
        if not isinstance(value, list):
            raise InvalidArgument(f"acl{where} must be [[acl]] tables, got {value!r}")
        return value
    if key == "socket_mode" and isinstance(value, str):
        try:
            return int(value, 8)
        except ValueError:
            raise InvalidArgument(f"socket_mode{where} must be octal like \"0660\", got {value!r}") from None
    return typed(key, value, default, path)


def _read_secret(key: str, path: str) -> str:
    """The text of a secrets file (warning when others may read it)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError as err:
        raise InvalidArgument(f"cannot read {key} {path}: {err.strerror}") from None
    if not text:
        raise InvalidArgument(f"{key} {path} is empty")
    if os.stat(path).st_mode & stat.S_IROTH:
        log.warning("%s %s is world-readable; chmod 600 it", key, path)
    return text


def read_token(path: str) -> str:
    return _read_secret("auth_token_file", path)


_TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def read_tokens(path: str) -> dict[str, str]:
    """auth_tokens_file: one `name:secret` a line (blank lines and `#` comments skipped) -> {name: secret}."""
    tokens: dict[str, str] = {}
    for n, line in enumerate(_read_secret("auth_tokens_file", path).splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, secret = line.partition(":")
        if not sep or not _TOKEN_NAME.fullmatch(name) or not secret:
            raise InvalidArgument(f"auth_tokens_file {path} line {n}: expected name:secret with a name of letters, "
                                  f"digits, '.', '_' or '-' (at most 64) and a non-empty secret")
        if name in tokens:
            raise InvalidArgument(f"auth_tokens_file {path} line {n}: token name {name!r} appears twice")
        tokens[name] = secret
    return tokens
