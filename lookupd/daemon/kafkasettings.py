"""The `[kafka]` table: the Kafka-protocol listener (lookupd.daemon.kafkaconn), off while `listen` is empty.

Identity defaults come from the log dirs' own `meta.properties` (node.id, cluster.id), as a broker's do.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import InvalidArgument
from ..kafka.groups import INITIAL_REBALANCE_DELAY_S
from ..log.remote.config import typed
from ..rpc.address import parse_host_port
from .reactor import MAX_BUSY_POLL_S

META_PROPERTIES = "meta.properties"
# A Kafka cluster id: 22 characters of base64url (Uuid.toString) in KRaft; older ZooKeeper clusters used
# other strings, so any short printable id is taken.
_CLUSTER_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
DEFAULT_CLUSTER_ID = "lookupd-read-only-cluster"
# A join is answered within the member's rebalance timeout anyway; a delay past 5 minutes only stalls consumers.
MAX_INITIAL_REBALANCE_DELAY_MS = 300_000
# A consumer keeping up (bench/bench_kafka.py's raw client, 1 MiB fetches) asks again 20-70 µs after its next
# answer was read ahead when the daemon polls for it, 100-250 µs when the daemon sleeps and is woken;
# confluent-kafka mostly 1-7 ms later, which a 200 µs poll leaves alone (docs/performance.md).
DEFAULT_BUSY_POLL_US = 200


@dataclass
class KafkaSettings:
    listen: list = field(default_factory=list)  # ["HOST:PORT", ...] to serve the Kafka protocol on; [] = off
    advertised: str = ""                # "HOST:PORT" Metadata names as the broker; "" = the first listen address
    node_id: int = -1                   # the broker id clients see; -1 = node.id of meta.properties, else 0
    cluster_id: str = ""                # "" = cluster.id of meta.properties, else DEFAULT_CLUSTER_ID
    state_dir: str = ""                 # where consumer-group commits are kept; "" = in memory until the daemon stops
    # a new group's first join waits this for more members (Kafka's 3 s, the coordinator's own default)
    group_initial_rebalance_delay_ms: int = round(INITIAL_REBALANCE_DELAY_S * 1000)
    # after an answer read ahead for a consumer that came back within this for the last one, poll for its
    # next request this long before sleeping (lookupd.daemon.reactor); 0 = never
    busy_poll_us: int = DEFAULT_BUSY_POLL_US

    @classmethod
    def from_table(cls, table: Any, path: str | None) -> "KafkaSettings":
        where = f" in {path}" if path else ""
        if isinstance(table, KafkaSettings):
            return table
        if not isinstance(table, dict):
            raise InvalidArgument(f"kafka{where} must be a table ([kafka]), got {table!r}")
        out = cls()
        known = {f.name for f in fields(cls)}
        for key, value in table.items():
            if key not in known:
                raise InvalidArgument(f"unknown config key 'kafka.{key}'{where}; known keys: {', '.join(sorted(known))}")
            if key == "listen" and isinstance(value, str):
                value = [value]
            setattr(out, key, typed(f"kafka.{key}", value, getattr(out, key), path))
        return out

    def check(self) -> None:
        for spec in self.listen:
            parse_host_port(spec)  # InvalidArgument naming the value
        if self.advertised:
            host, port = parse_host_port(self.advertised)
            if not port:
                raise InvalidArgument(f"kafka.advertised {self.advertised!r} needs a port")
        if self.node_id < -1 or self.node_id > 0x7FFFFFFF:
            raise InvalidArgument(f"kafka.node_id must be a broker id >= 0 (or -1 for meta.properties'), "
                                  f"got {self.node_id}")
        if not 0 <= self.group_initial_rebalance_delay_ms <= MAX_INITIAL_REBALANCE_DELAY_MS:
            raise InvalidArgument(f"kafka.group_initial_rebalance_delay_ms must be 0-{MAX_INITIAL_REBALANCE_DELAY_MS}, "
                                  f"got {self.group_initial_rebalance_delay_ms}")
        if not 0 <= self.busy_poll_us <= MAX_BUSY_POLL_S * 1e6:
            raise InvalidArgument(f"kafka.busy_poll_us must be 0-{round(MAX_BUSY_POLL_S * 1e6)} (microseconds), "
                                  f"got {self.busy_poll_us}")
        if self.cluster_id and not _CLUSTER_ID.fullmatch(self.cluster_id):
            raise InvalidArgument(f"kafka.cluster_id {self.cluster_id!r:.80} must be 1-64 letters, digits, '_', '-', "
                                  f"'.' or ':'")


def read_meta_properties(log_dirs: list[str]) -> dict[str, str]:
    """The first log dir's `meta.properties` (`key=value` lines), {} when none has one."""
    for d in log_dirs:
        try:
            with open(os.path.join(d, META_PROPERTIES), encoding="utf-8", errors="replace") as f:
                text = f.read(1 << 16)
        except OSError:
            continue
        out = {}
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                out[k.strip()] = v.strip()
        return out
    return {}


def identity(settings: KafkaSettings, log_dirs: list[str]) -> tuple[int, str]:
    """(node id, cluster id) the listener names: the settings', else meta.properties', else 0 and a fixed id."""
    meta = read_meta_properties(log_dirs)
    node_id = settings.node_id
    if node_id < 0:
        raw = meta.get("node.id", meta.get("broker.id", ""))
        node_id = int(raw) if raw.isdigit() and int(raw) <= 0x7FFFFFFF else 0
    cluster_id = settings.cluster_id
    if not cluster_id:
        raw = meta.get("cluster.id", "")
        cluster_id = raw if _CLUSTER_ID.fullmatch(raw) else DEFAULT_CLUSTER_ID
    return node_id, cluster_id


def busy_poll_seconds(settings: KafkaSettings) -> float:
    """`kafka.busy_poll_us` in seconds; 0 where the daemon may run on one CPU only, as polling there would take
    that CPU from the client it waits for."""
    return settings.busy_poll_us / 1e6 if len(os.sched_getaffinity(0)) > 1 else 0.0
