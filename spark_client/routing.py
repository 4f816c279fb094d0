"""Which daemon serves which partition, and connections to the daemons.

`lookupd.address` is one address (a Unix socket path or HOST:PORT) when one daemon serves every
partition, or a JSON object when several daemons each serve one broker's log dirs:

* every value is a daemon address; the driver asks each one for its `partitions`;
* a key that names a partition one of them serves, as `topic-N` (Kafka's TopicPartition
  form), pins that partition to its address;
* any other key is only a label (the broker's host name, say).

A partition that several daemons serve (replicas on several brokers) is read from the one
whose copy is longest (highest log end offset, then lowest log start offset, then the first
in the map), unless it is pinned.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lookupd.rpc.client import Client
from lookupd.errors import UnknownPartition

from .errors import OptionError
from .options import TopicPartition, tp_name

DAEMON_TIMEOUT_S = 60.0
# Targets per columnar request: 50,000 int64s pack to under 500 KB, inside the daemon's
# default 1 MiB request frame limit (max_frame_bytes).
TARGETS_PER_CALL = 50_000


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as a daemon's `partitions` answer describes it, and that daemon's address."""

    topic: str
    partition: int
    address: str
    log_dir: str
    log_start_offset: int
    log_end_offset: int

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition


class Daemons:
    """One blocking Client per daemon address, connected on first use and shared by threads."""

    def __init__(self, token: str | None = None, timeout: float = DAEMON_TIMEOUT_S, tls: dict[str, str] | None = None):
        self.token = token
        self.tls = tls or {}  # the Client's tls_ca/tls_cert/tls_key, for tls:// addresses
        self.timeout = timeout
        self._clients: dict[str, Client] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "Daemons":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def client(self, address: str) -> Client:
        """The connection to `address`; lookupd's Unavailable, naming it, when it cannot be reached."""
        with self._lock:
            c = self._clients.get(address)
            if c is None:
                c = Client(address, token=self.token, timeout=self.timeout, **self.tls)
                self._clients[address] = c
            return c

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


def read_token(path: str | None) -> str | None:
    """The shared secret in `path` (lookupd.tokenFile), for daemons that want `auth`; None without a path."""
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def columnar(client: Client, method: str, topic: str, partition: int, targets: list[int]) -> dict[str, list]:
    """One columnar many-lookup (resolve_offsets, offsets_for_timestamps...), sent in requests
    of at most TARGETS_PER_CALL targets, answers joined."""
    out: dict[str, list] = {}
    for i in range(0, max(len(targets), 1), TARGETS_PER_CALL):
        for name, values in client.call(method, topic, partition, targets[i:i + TARGETS_PER_CALL]).items():
            out.setdefault(name, []).extend(values)
    return out


def addresses(spec: str | dict[str, str]) -> list[str]:
    """The distinct daemon addresses of a `lookupd.address` value, in the order given."""
    return [spec] if isinstance(spec, str) else list(dict.fromkeys(spec.values()))


def discover(spec: str | dict[str, str], daemons: Daemons) -> dict[TopicPartition, PartitionInfo]:
    """Every partition the daemons serve, each routed to one daemon (see the module doc)."""
    served: dict[TopicPartition, list[PartitionInfo]] = {}
    for address in addresses(spec):
        for p in daemons.client(address).partitions():
            info = PartitionInfo(p["topic"], p["partition"], address, p["log_dir"],
                                 p["log_start_offset"], p["log_end_offset"])
            served.setdefault(info.tp, []).append(info)
    routes = {tp: max(infos, key=lambda i: (i.log_end_offset, -i.log_start_offset)) for tp, infos in served.items()}
    if isinstance(spec, dict):
        by_name = {tp_name(tp): tp for tp in served}
        for key, address in spec.items():
            tp = by_name.get(key)
            if tp is None:
                continue
            pinned = [i for i in served[tp] if i.address == address]
            if not pinned:
                raise OptionError(f"lookupd.address pins {key} to {address}, but the daemon there does not serve it "
                                  f"(served by {', '.join(i.address for i in served[tp])})")
            routes[tp] = pinned[0]
    return routes


def route(routes: dict[TopicPartition, PartitionInfo], tp: TopicPartition, spec: str | dict[str, str]) -> PartitionInfo:
    info = routes.get(tp)
    if info is None:
        raise UnknownPartition(f"partition {tp_name(tp)} is not served by lookupd at {', '.join(addresses(spec))}")
    return info
