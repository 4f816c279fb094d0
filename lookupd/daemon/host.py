"""What a connection needs of the daemon that accepted it: the shared parts both listeners' connections use.

lookupd.daemon.server's Daemon is the one implementation. The connections (lookupd.daemon.connection,
lookupd.daemon.kafkaconn) are typed against this Protocol instead of the Daemon, so the server imports the
connections and not the other way round.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, TypeVar

from .authlimit import AuthThrottle
from .buffers import Buffers
from .clientlog import ClientLog
from .config import Config
from .kafkabroker import KafkaBroker
from .kafkagroups import KafkaGroups
from .metrics import RequestMetrics
from .reactor import Reactor
from .service import Counters, Service
from .tls import TlsServer

T = TypeVar("T")


class ConnectionHost(Protocol):
    """The daemon as its connections see it."""

    cfg: Config
    service: Service
    counters: Counters
    buffers: Buffers  # what connections hold, each and together (lookupd.daemon.buffers)
    request_metrics: RequestMetrics | None  # None when metrics are off
    client_log: ClientLog
    auth_throttle: AuthThrottle
    tls: TlsServer | None  # the TCP listeners' TLS context; None for plaintext
    reactor: Reactor | None  # set while serving
    stopping: bool  # draining: connections read nothing more
    unauthenticated: dict[Any, None]  # TCP connections yet to authenticate, oldest first
    kafka: KafkaBroker | None  # the Kafka listener's broker, when it has sockets
    kafka_groups: KafkaGroups | None

    async def blocking(self, fn: Callable[[], T], what: str) -> T:
        """fn() in a worker thread, never waiting for the object store there (lookupd.daemon.blocking)."""

    def ended(self, conn: Any) -> None:
        """`conn` is closed: forget it."""
