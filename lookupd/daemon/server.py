"""The lookup daemon's lifecycle: accept, signals, rescans, the idle sweep, the drain and stop.

Serves msgpack-rpc over a Unix socket, and TCP if asked, on trio. The process around it (the
descriptor limit, the LogManager, the listeners, workers) is lookupd.daemon.main's; one
connection's engine is lookupd.daemon.connection's. Configuration: lookupd.daemon.config;
listening sockets: lookupd.daemon.listeners.

systemd: sockets passed by socket activation (LISTEN_FDS, Unix and TCP) replace `socket` and
`tcp`; READY=1, STOPPING=1 and WATCHDOG=1 go to $NOTIFY_SOCKET (an `@` name is abstract).

Structure: a nursery of listeners inside a nursery of connections inside the root nursery
(the reactor, rescans, signals, watchdog). Each connection has a task, plus one task per
request that needs a worker thread. A connection waiting for requests is parked in the
reactor (lookupd.daemon.reactor): one task reads every ready connection and answers what can
be answered at once, and a connection's task wakes only for what must be awaited.
`stats` counts `connections` currently open, `requests` and `errors` since start.

What clients may hold is bounded: memory per connection and overall (lookupd.daemon.buffers),
worker threads per connection (`blocking_threads_per_connection`), message size, time and
number of connections before `auth` (connection.PRE_AUTH_FRAME_BYTES, `auth_timeout_s`,
`max_unauthenticated_connections`), token guesses per source address (lookupd.daemon.authlimit)
and log lines about clients (lookupd.daemon.clientlog). On SIGTERM every request already read is
answered, then each connection is closed without a reset (Connection._close).
TLS on the TCP listener (lookupd.daemon.tls): the handshake in the connection's task, then the
same engine, with reads decrypted and writes encrypted at its two I/O points; who may do what
is lookupd.daemon.acl's.
"""

from __future__ import annotations

import errno
import logging
import select
import signal
import socket
import struct
from typing import Callable, TypeVar

import trio

from ..log.logmanager import LogManager
from ..rpc import protocol as rpc
from ..rpc.address import parse_host_port
from ..sdnotify import sd_notify
from . import kafkasocket, memory
from .acl import Acl
from .authlimit import AuthThrottle, source_key
from .blocking import REMOTE_THREADS, run_blocking
from .buffers import Buffers
from .clientlog import ClientLog
from .config import Config, read_tokens
from .connection import Connection, now
from .kafkaconn import METRIC_NAMES as KAFKA_METRIC_NAMES, KafkaConnection
from .listeners import Bound
from .metrics import Collector, RequestMetrics, serve_metrics
from .reactor import Reactor
from .service import METHODS, Counters, Service, Session
from .tls import TlsServer, TlsSession, TlsStream

log = logging.getLogger(__name__)
T = TypeVar("T")

# accept() failing for want of descriptors or memory is the machine's state, not this listener's:
# wait a little (as trio.serve_listeners does) and accept again, instead of ending the daemon.
ACCEPT_RESOURCE_ERRORS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS))
ACCEPT_RETRY_S = 0.1
# How long a refused client is given to read its UNAVAILABLE notification before the close.
REFUSE_GRACE_S = 1.0
# The idle sweep looks at every connection IDLE_SWEEP_STEPS times per idle_timeout_s (at most
# every IDLE_SWEEP_MIN_S): an idle connection is closed within a quarter of the timeout late.
IDLE_SWEEP_STEPS = 4
IDLE_SWEEP_MIN_S = 0.05
# Once connections held at least TRIM_AFTER_BYTES (lookupd.daemon.buffers) and now hold under a quarter
# of their most, the daemon gives freed memory back to the system (lookupd.daemon.memory); it looks
# every TRIM_CHECK_S. Below that the allocator's reuse is worth more than the memory.
TRIM_AFTER_BYTES = 32 << 20
TRIM_CHECK_S = 1.0
TRIM_FOLLOW_UPS = 60
# A connection that is not being read (it holds too much, or waits for a thread slot) does not see its peer
# close: every HANGUP_CHECK_S the daemon asks the kernel which of them hung up (one poll() for all), and
# drops their waiting requests at once. Before, a client that sent a burst of columnar calls and left had
# them all run for nobody, its memory held meanwhile: the 1.1 GB still held 20 s after.
HANGUP_CHECK_S = 0.25
# Descriptors never given to connections: stdio, the listeners, a rescan's directory listings,
# sockets to systemd, and the one a refused client holds while it reads why. The index cache's
# room (open .log and index files, at most half the limit) is kept free for it as well.
FD_RESERVE = 64


class Daemon:
    """Serves one LogManager on the given listeners until `stop()` (or SIGTERM/SIGINT)."""

    def __init__(self, cfg: Config, manager: LogManager, listeners: list[Bound], *, fd_limit: int,
                 token: str | None = None, watchdog_s: float | None = None, worker: int = 0,
                 on_ready: Callable[[], None] | None = None):
        self.cfg = cfg
        self.manager = manager
        self.listeners = listeners
        self.counters = Counters()
        self.acl = Acl.from_config(cfg.acl)
        self.service = Service(manager, limits=cfg.limits, counters=self.counters, token=token,
                               tokens=read_tokens(cfg.auth_tokens_file) if cfg.auth_tokens_file else None,
                               acl=self.acl, inline_hot_lookups=cfg.inline_hot_lookups, worker=worker,
                               schemas_topic=cfg.schemas_topic,
                               offsets_topic_partitions=cfg.offsets_topic_partitions)
        # The TCP listener's TLS context (reloaded on SIGHUP), or None for plaintext.
        self.tls = TlsServer(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file) if cfg.tls else None
        self.worker = worker
        # Under a supervisor (workers > 1) readiness goes to it, and systemd hears from it alone.
        self._on_ready = on_ready
        self.limiter = trio.CapacityLimiter(cfg.blocking_threads)
        self.remote_limiter = trio.CapacityLimiter(REMOTE_THREADS)  # calls that wait for the object store
        self.reactor: Reactor | None = None  # reads every connection that waits for requests (while serving)
        # Per-method request counts and latencies for Prometheus; None (no cost per request) when off.
        self.request_metrics = RequestMetrics((*METHODS, *KAFKA_METRIC_NAMES)) if cfg.metrics else None
        # The Kafka listener's broker (lookupd.daemon.kafkabroker) and group coordinator, when it has sockets.
        self.kafka, self.kafka_groups = _kafka_broker(cfg, manager, self.acl, listeners)
        self.metrics_server = None
        self.fd_limit = fd_limit  # the soft RLIMIT_NOFILE (lookupd.daemon.main)
        self._watchdog_s = watchdog_s  # keep-alives to systemd's watchdog this often, when it asks
        self._stop: trio.Event | None = None
        self._rescan_now: trio.Event | None = None
        self.stopping = False  # draining: connections read nothing more
        self.connections: set[Connection] = set()
        self.unauthenticated: dict[Connection, None] = {}  # TCP connections yet to send the token, oldest first
        self.buffers = Buffers(cfg.max_buffered_bytes_per_connection, cfg.max_buffered_bytes)
        self.auth_throttle = AuthThrottle()
        self.client_log = ClientLog(log)
        self._conns: trio.Nursery | None = None
        self._forced = False
        self._next_id = 0

    # ------------------------------------------------------------------ lifecycle

    async def blocking(self, fn: Callable[[], T], what: str) -> T:
        """fn() in a worker thread (blocking_threads), never waiting for the object store there: a call that would
        runs on the remote pool (lookupd.daemon.blocking); Unavailable when the store does not answer in time."""
        return await run_blocking(fn, self.limiter, self.remote_limiter, what)

    def stop(self) -> None:
        """Begin a graceful shutdown (callable from the event loop)."""
        if self._stop is not None:
            self._stop.set()

    def rescan(self) -> None:
        if self._rescan_now is not None:
            self._rescan_now.set()

    async def serve(self, *, handle_signals: bool = False, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept and serve until stopped, then drain: in-flight requests get shutdown_grace_s."""
        self._stop, self._rescan_now = trio.Event(), trio.Event()
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(b.sock)) for b in self.listeners]
        self.reactor = Reactor()
        try:
            await self._serve(listeners, handle_signals, task_status)
        finally:
            self.reactor.close()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()

    async def _serve(self, listeners: list[trio.SocketListener], handle_signals: bool, task_status) -> None:
        async with trio.open_nursery() as root:
            if handle_signals:
                await root.start(self._signals)
            root.start_soon(self.reactor.run)
            root.start_soon(self._rescan_loop)
            root.start_soon(self._idle_sweep)
            root.start_soon(self._give_back_memory)
            root.start_soon(self._hangup_sweep)
            if self.kafka_groups is not None:
                root.start_soon(self.kafka_groups.run)
            if self.request_metrics is not None:
                host, port = parse_host_port(self.cfg.metrics)
                spec = f"{host}:{port + self.worker if port else 0}"  # worker N serves port + N
                self.metrics_server = serve_metrics(spec, Collector(
                    self.request_metrics, lambda: self.service.call("stats", [], Session(trusted=True)), self.worker,
                    denials=self.acl.denials if self.acl is not None else None,
                    kafka=self._kafka_counters if self.kafka is not None else None),
                    tls=self.tls if self.cfg.metrics_tls else None)
            if self._watchdog_s:
                root.start_soon(self._watchdog, self._watchdog_s)
            async with trio.open_nursery() as conns:
                self._conns = conns
                async with trio.open_nursery() as accepting:
                    for listener, b in zip(listeners, self.listeners):
                        accepting.start_soon(self._accept_loop, listener, b, conns)
                    log.info("serving %d partitions (%d segments) on %s", len(self.manager.logs()),
                             self.manager.segment_count, ", ".join(b.label for b in self.listeners))
                    if self._on_ready is None:
                        sd_notify("READY=1\nSTATUS=serving")
                    else:
                        self._on_ready()
                    task_status.started()
                    await self._stop.wait()
                    accepting.cancel_scope.cancel()
                for listener in listeners:
                    await listener.aclose()
                if self._on_ready is None:
                    sd_notify("STOPPING=1\nSTATUS=draining in-flight requests")
                log.info("shutting down: %d connections, up to %.1f s for in-flight requests",
                         self.counters.connections, self.cfg.shutdown_grace_s)
                self.stopping = True
                for conn in list(self.connections):  # the others stop reading once they have handled what they read
                    if self.reactor.parked(conn.fd):
                        conn.reader.cancel()
                conns.cancel_scope.deadline = trio.current_time() + self.cfg.shutdown_grace_s
            if conns.cancel_scope.cancelled_caught and not self._forced:
                log.warning("shutdown grace of %.1f s ran out; dropped the remaining requests",
                            self.cfg.shutdown_grace_s)
            root.cancel_scope.cancel()

    async def _signals(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("SIGHUP: rescanning the log dirs now")
                    self.rescan()
                    if self.tls is not None:
                        self.tls.reload()
                elif self._stop.is_set() and self._conns is not None:
                    log.warning("%s again: dropping in-flight requests", signal.Signals(signum).name)
                    self._forced = True
                    self._conns.cancel_scope.cancel()
                else:
                    log.info("%s: stopping", signal.Signals(signum).name)
                    self.stop()

    async def _rescan_loop(self) -> None:
        while True:
            asked = False
            with trio.move_on_after(self.cfg.rescan_interval_s):
                await self._rescan_now.wait()
                asked = True  # SIGHUP (systemctl reload): the bucket is listed again too
            self._rescan_now = trio.Event()
            try:
                counts = await trio.to_thread.run_sync(self.manager.refresh, asked)
            except Exception as err:  # noqa: BLE001 - keep serving what we have
                log.warning("rescan failed: %s", err)
                continue
            if any(counts.values()):
                log.info("rescan: %(added)d partitions added, %(removed)d removed, %(changed)d changed", counts)

    async def _give_back_memory(self) -> None:
        """After connections held much and let go of most of it, return the freed memory to the system; again
        each TRIM_CHECK_S while worker threads still run (calls of clients that left finish, and free what they
        made, after their connections are gone), for up to TRIM_FOLLOW_UPS checks, and once after they end."""
        buffers, owed = self.buffers, 0
        while True:
            await trio.sleep(TRIM_CHECK_S)
            if buffers.high >= TRIM_AFTER_BYTES and buffers.total <= buffers.high // 4:
                buffers.high = buffers.total
                owed = TRIM_FOLLOW_UPS + 1
            if owed:
                busy = self.limiter.borrowed_tokens  # before the trim: what ends meanwhile is trimmed next time
                await trio.to_thread.run_sync(memory.give_back)
                owed = owed - 1 if busy else 0

    async def _hangup_sweep(self) -> None:
        """End the connections whose peer hung up while they were not being read (see HANGUP_CHECK_S).
        POLLHUP and POLLERR only: a peer that closed just its sending side (a FIN) still gets its answers."""
        while True:
            await trio.sleep(HANGUP_CHECK_S)
            reactor = self.reactor
            unread = {c.fd: c for c in self.connections if not c.gone and not reactor.parked(c.fd)}
            if not unread:
                continue
            poller = select.poll()
            for fd in unread:
                poller.register(fd, 0)  # POLLHUP and POLLERR are reported whatever is asked
            for fd, events in poller.poll(0):
                conn = unread.get(fd)
                if conn is not None and events & (select.POLLHUP | select.POLLERR):
                    conn.hung_up()

    def _kafka_counters(self) -> dict[str, int]:
        """The Kafka listener's counters for the metrics (lookupd.daemon.metrics.KAFKA_COUNTERS)."""
        reactor = self.reactor
        return {"fetches_read_ahead": self.counters.fetches_read_ahead,
                "requests_caught_polling": reactor.caught_polling if reactor is not None else 0}

    async def _watchdog(self, interval: float) -> None:
        while True:
            sd_notify("WATCHDOG=1")
            await trio.sleep(interval)

    # ------------------------------------------------------------------ connections

    async def _accept_loop(self, listener: trio.SocketListener, bound: Bound, conns: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as err:
                if err.errno in ACCEPT_RESOURCE_ERRORS:
                    log.warning("accept on %s: %s; retrying in %.0f ms", bound.label, err.strerror,
                                ACCEPT_RETRY_S * 1000)
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                raise
            self._next_id += 1
            source = None
            if bound.kind == "unix":
                peer, source = f"unix#{self._next_id}", "unix"
            else:
                host = None
                try:
                    host, port = stream.socket.getpeername()[:2]
                    peer, source = "%s:%d" % (host, port), source_key(host)
                except OSError:  # already gone again
                    peer = f"tcp#{self._next_id}"
                if bound.protocol == "kafka":
                    kafkasocket.accepted(stream.socket, bound.congestion_control, host)
            if self.counters.connections >= self.cfg.max_connections:
                conns.start_soon(self._refuse, stream, peer, bound,
                                 f"too many connections (max_connections={self.cfg.max_connections})")
                continue
            if stream.socket.fileno() >= self._connection_fd_ceiling():
                # Descriptors are handed out lowest first: this one's number is how many are open.
                conns.start_soon(self._refuse, stream, peer, bound,
                                 f"out of file descriptors ({stream.socket.fileno() + 1} of {self.fd_limit} open)")
                continue
            self.counters.connections += 1
            if bound.kind == "unix":
                session = Session(trusted=True, source=source, principal=self._unix_principal(stream))
            else:
                session = Session(trusted=False, source=source or peer)
            if bound.tls:
                stream = TlsStream(stream, TlsSession(stream.socket, self.tls.context))
            serve = self._kafka_connection if bound.protocol == "kafka" else self._connection
            conns.start_soon(serve, stream, session, peer)

    def _unix_principal(self, stream: trio.SocketStream) -> str:
        """`unix:<uid>` of the peer (SO_PEERCRED), when ACLs need it."""
        if self.acl is None:
            return "unix"
        try:
            _, uid, _ = struct.unpack("3i", stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return "unix"  # gone already; no rule names this
        return f"unix:{uid}"

    def _connection_fd_ceiling(self) -> int:
        """The lowest descriptor number a new connection may not have: what the reserve and the
        index cache's unused room leave of the limit."""
        cache = self.manager.cache
        return self.fd_limit - FD_RESERVE - max(0, cache.max_open - cache.open_count)

    async def _refuse(self, stream: trio.SocketStream, peer: str, bound: Bound, why: str) -> None:
        self.client_log.line(logging.WARNING, f"{peer}: refused: {why}")
        conn = rpc.Connection("server")
        if bound.protocol == "kafka":  # a Kafka client has no way to hear why: the close says it
            await trio.aclose_forcefully(stream)
            return
        with trio.move_on_after(REFUSE_GRACE_S):
            try:
                await stream.send_all(conn.send_error(rpc.ProtocolError("UNAVAILABLE", f"{why}; retry later",
                                                                        fatal=True)))
            except trio.BrokenResourceError:
                pass
        await trio.aclose_forcefully(stream)

    async def _connection(self, stream: trio.SocketStream, session: Session, peer: str) -> None:
        """One connection (lookupd.daemon.connection), known to the daemon while it is served."""
        conn = Connection(self, stream, session, peer)
        self.connections.add(conn)
        await conn.serve()

    async def _kafka_connection(self, stream: trio.SocketStream, session: Session, peer: str) -> None:
        """One connection of the Kafka listener (lookupd.daemon.kafkaconn)."""
        conn = KafkaConnection(self, stream, session, peer)
        self.connections.add(conn)
        await conn.serve()

    def ended(self, conn: Connection) -> None:
        """The connection is done with (it still closes its stream): it no longer counts."""
        self.connections.discard(conn)
        self.unauthenticated.pop(conn, None)
        self.counters.connections -= 1

    async def _idle_sweep(self) -> None:
        """Close connections whose peer sent nothing for idle_timeout_s while nothing was in flight."""
        idle = self.cfg.idle_timeout_s
        while True:
            await trio.sleep(max(IDLE_SWEEP_MIN_S, idle / IDLE_SWEEP_STEPS))
            at = now()
            for conn in list(self.connections):
                if conn.is_idle(at):
                    self.client_log.line(logging.INFO, f"{conn.peer}: idle for {idle:.0f} s; closing")
                    conn.nursery.cancel_scope.cancel()



def _kafka_broker(cfg: Config, manager: LogManager, acl: Acl | None, listeners: list[Bound]):
    """The Kafka listener's broker and group coordinator, (None, None) without a Kafka socket. Metadata names
    `advertised`, else the first Kafka socket's address as bound."""
    kafka = [b for b in listeners if b.protocol == "kafka"]
    if not kafka:
        return None, None
    from .kafkabroker import Endpoint, KafkaBroker
    from .kafkasettings import identity

    node_id, cluster_id = identity(cfg.kafka, cfg.log_dirs)
    if cfg.kafka.advertised:
        host, port = parse_host_port(cfg.kafka.advertised)
    else:
        host, port = kafka[0].sock.getsockname()[:2]
    from .kafkagroups import KafkaGroups

    broker = KafkaBroker(manager, acl, Endpoint(node_id, host, port), cluster_id)
    return broker, KafkaGroups(broker, cfg.kafka.state_dir, cfg.offsets_topic_partitions,
                               cfg.kafka.group_initial_rebalance_delay_ms / 1000)
