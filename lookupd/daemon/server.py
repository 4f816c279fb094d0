"""The lookup daemon (`lookupd serve`): msgpack-rpc over a Unix socket, and TCP if asked, on trio.

Configuration: lookupd.daemon.config; listening sockets: lookupd.daemon.listeners.

systemd: sockets passed by socket activation (LISTEN_FDS, Unix and TCP) replace `socket` and
`tcp`; READY=1, STOPPING=1 and WATCHDOG=1 go to $NOTIFY_SOCKET (an `@` name is abstract).

Structure: a nursery of listeners inside a nursery of connections inside the root nursery
(the reactor, rescans, signals, watchdog). Each connection has a task, plus one task per
request that needs a worker thread. A connection waiting for requests is parked in the
reactor (lookupd.daemon.reactor): one task reads every ready connection and answers what can
be answered at once, and a connection's task wakes only for what must be awaited. Where work runs (see Service.call_inline): a single lookup whose
data is all in memory runs on the event loop (microseconds; a trip through trio.to_thread
costs ~100-200 us on 2 cores: bench/bench_daemon.py); one that would wait for the disk, and
every listing and columnar call, runs in a worker thread under a CapacityLimiter of
`blocking_threads`, so a cold index on a slow disk stalls only its caller.
`stats` counts `connections` currently open, `requests` and `errors` since start.

What clients may hold is bounded: memory per connection and overall (lookupd.daemon.buffers),
worker threads per connection (`blocking_threads_per_connection`), message size, time and
number of connections before `auth` (PRE_AUTH_FRAME_BYTES, `auth_timeout_s`,
`max_unauthenticated_connections`), token guesses per source address (lookupd.daemon.authlimit)
and log lines about clients (lookupd.daemon.clientlog). On SIGTERM every request already read is
answered, then each connection is closed without a reset (Daemon._close).
TLS on the TCP listener (lookupd.daemon.tls): the handshake in the connection's task, then the
same engine, with reads decrypted and writes encrypted at its two I/O points; who may do what
is lookupd.daemon.acl's.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
import signal
import socket
import struct
import time
from functools import partial
from typing import Any, NamedTuple

import trio

from ..errors import InvalidArgument
from ..log.cache import IndexCache
from ..log.logmanager import LogManager
from ..rpc import protocol as rpc
from ..rpc.address import parse_host_port
from ..sdnotify import sd_notify
from .acl import ANONYMOUS, Acl
from .authlimit import AuthThrottle, source_key
from . import memory
from .buffers import REQUEST_MEMORY_FACTOR, Buffers, Holding
from .clientlog import ClientLog, ConnectionErrors
from .config import Config, read_token, read_tokens
from .listeners import Bound, close_listeners, open_listeners
from .metrics import Collector, RequestMetrics, serve_metrics
from .reactor import Reactor
from .tls import TlsError, TlsServer, TlsSession, TlsStream
from .workers import supervise
from .service import MAX_AUTH_FAILURES, METHODS, NEEDS_THREAD, Counters, Service, Session, error_for

log = logging.getLogger(__name__)

RECEIVE_BYTES = 64 * 1024  # one read; a pipelined burst of small requests fits in one
# Answers held before they are written, when a pipelined burst is answered: bounds what one
# connection's burst keeps in memory (a `read` answer may be max_read_bytes long).
MAX_UNWRITTEN_ANSWERS = 64
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
# How long a closing connection may take to write answers it already computed.
FLUSH_ON_CLOSE_S = 1.0
# After its last answer, how long a connection the daemon closes waits for the peer to close too (see
# Daemon._close): long enough for a peer on the same host or network to read its answers.
CLOSE_LINGER_S = 1.0
# Until a TCP peer has sent the token, a message may be at most this long: `auth [token]` takes a few
# hundred bytes, and 300 unauthenticated connections each holding a partial 1 MiB request took 330 MB
# (Kafka caps requests before authentication likewise: sasl.server.max.receive.size, 512 KiB).
PRE_AUTH_FRAME_BYTES = 64 << 10
# Once connections held at least TRIM_AFTER_BYTES (lookupd.daemon.buffers) and now hold under a quarter
# of their most, the daemon gives freed memory back to the system (lookupd.daemon.memory); it looks
# every TRIM_CHECK_S. Below that the allocator's reuse is worth more than the memory.
TRIM_AFTER_BYTES = 32 << 20
TRIM_CHECK_S = 1.0
# Descriptors never given to connections: stdio, the listeners, a rescan's directory listings,
# sockets to systemd, and the one a refused client holds while it reads why. The index cache's
# room (open .log and index files, at most half the limit) is kept free for it as well.
FD_RESERVE = 64
# The clock of connections' idleness: read on every receive, so the cheapest (trio.current_time()
# is three Python calls around the same clock).
_now = time.perf_counter


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a broker host's default soft 1024 is far below
    what thousands of clients and segments need); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as err:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, err)
    return nofile_limit()


def nofile_limit() -> int:
    """The soft RLIMIT_NOFILE in force (unlimited counts as 2**20, the kernel's usual nr_open)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


# ====================================================================== systemd watchdog


def watchdog_interval() -> float | None:
    """Half the manager's WatchdogSec, in seconds, when it asks this process for keep-alives."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6


# ====================================================================== the daemon


class Action(NamedTuple):
    """What a connection's own task must await (see Daemon._act): `kind` is one of the names below."""

    kind: str
    arg: Any = None


FLUSH = "flush"  # write the answers the socket did not take at once
MUTE = "mute"  # the connection holds too much (lookupd.daemon.buffers): read on once its client reads
THREAD_SLOT = "thread slot"  # arg: (request, its size) for a worker thread; every in-flight slot is taken
AUTH_WAIT = "auth wait"  # arg: an auth request, checked once its source address may try again
AUTH_CLOSE = "auth close"  # MAX_AUTH_FAILURES wrong tokens on this connection: answered, then closed
END = "end"  # the peer closed its side between messages
ABORT = "abort"  # arg: why (logged) or None: close now, dropping requests in flight


class Daemon:
    """Serves one LogManager on the given listeners until `stop()` (or SIGTERM/SIGINT)."""

    def __init__(self, cfg: Config, manager: LogManager, listeners: list[Bound], *, token: str | None = None,
                 worker: int = 0, on_ready=None):
        self.cfg = cfg
        self.manager = manager
        self.listeners = listeners
        self.counters = Counters()
        self.acl = Acl.from_config(cfg.acl)
        self.service = Service(manager, limits=cfg.limits, counters=self.counters, token=token,
                               tokens=read_tokens(cfg.auth_tokens_file) if cfg.auth_tokens_file else None,
                               acl=self.acl, inline_hot_lookups=cfg.inline_hot_lookups, worker=worker)
        # The TCP listener's TLS context (reloaded on SIGHUP), or None for plaintext.
        self.tls = TlsServer(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file) if cfg.tls else None
        self.worker = worker
        # Under a supervisor (workers > 1) readiness goes to it, and systemd hears from it alone.
        self._on_ready = on_ready
        self.limiter = trio.CapacityLimiter(cfg.blocking_threads)
        self._reactor: Reactor | None = None  # reads every connection that waits for requests (while serving)
        # Per-method request counts and latencies for Prometheus; None (no cost per request) when off.
        self.request_metrics = RequestMetrics(METHODS) if cfg.metrics else None
        self.metrics_server = None
        self.fd_limit = nofile_limit()
        self._stop: trio.Event | None = None
        self._rescan_now: trio.Event | None = None
        self._stopping = False
        self._states: set[_ConnState] = set()
        self._unauthenticated: dict[_ConnState, None] = {}  # TCP connections yet to send the token, oldest first
        self.buffers = Buffers(cfg.max_buffered_bytes_per_connection, cfg.max_buffered_bytes)
        self.auth_throttle = AuthThrottle()
        self.client_log = ClientLog(log)
        self._conns: trio.Nursery | None = None
        self._forced = False
        self._next_id = 0

    # ------------------------------------------------------------------ lifecycle

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
        self._reactor = Reactor()
        try:
            await self._serve(listeners, handle_signals, task_status)
        finally:
            self._reactor.close()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()

    async def _serve(self, listeners: list[trio.SocketListener], handle_signals: bool, task_status) -> None:
        async with trio.open_nursery() as root:
            if handle_signals:
                await root.start(self._signals)
            root.start_soon(self._reactor.run)
            root.start_soon(self._rescan_loop)
            root.start_soon(self._idle_sweep)
            root.start_soon(self._give_back_memory)
            if self.request_metrics is not None:
                host, port = parse_host_port(self.cfg.metrics)
                spec = f"{host}:{port + self.worker if port else 0}"  # worker N serves port + N
                self.metrics_server = serve_metrics(spec, Collector(
                    self.request_metrics, lambda: self.service.call("stats", [], Session(trusted=True)), self.worker,
                    denials=self.acl.denials if self.acl is not None else None),
                    tls=self.tls if self.cfg.metrics_tls else None)
            interval = watchdog_interval() if self._on_ready is None else None
            if interval:
                root.start_soon(self._watchdog, interval)
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
                self._stopping = True
                for st in list(self._states):  # the others stop reading once they have handled what they read
                    if self._reactor.parked(st.fd):
                        st.reader.cancel()
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
        """After connections held much and let go of most of it, return the freed memory to the system."""
        buffers = self.buffers
        while True:
            await trio.sleep(TRIM_CHECK_S)
            if buffers.high >= TRIM_AFTER_BYTES and buffers.total <= buffers.high // 4:
                buffers.high = buffers.total
                await trio.to_thread.run_sync(memory.give_back)

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
                try:
                    host, port = stream.socket.getpeername()[:2]
                    peer, source = "%s:%d" % (host, port), source_key(host)
                except OSError:  # already gone again
                    peer = f"tcp#{self._next_id}"
            if self.counters.connections >= self.cfg.max_connections:
                conns.start_soon(self._refuse, stream, peer,
                                 f"too many connections (max_connections={self.cfg.max_connections})")
                continue
            if stream.socket.fileno() >= self._connection_fd_ceiling():
                # Descriptors are handed out lowest first: this one's number is how many are open.
                conns.start_soon(self._refuse, stream, peer,
                                 f"out of file descriptors ({stream.socket.fileno() + 1} of {self.fd_limit} open)")
                continue
            self.counters.connections += 1
            if bound.kind == "unix":
                session = Session(trusted=True, source=source, principal=self._unix_principal(stream))
            else:
                session = Session(trusted=False, source=source or peer)
            if bound.tls:
                stream = TlsStream(stream, TlsSession(stream.socket, self.tls.context))
            conns.start_soon(self._connection, stream, session, peer)

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

    async def _refuse(self, stream: trio.SocketStream, peer: str, why: str) -> None:
        self.client_log.line(logging.WARNING, f"{peer}: refused: {why}")
        conn = rpc.Connection("server")
        with trio.move_on_after(REFUSE_GRACE_S):
            try:
                await stream.send_all(conn.send_error(rpc.ProtocolError("UNAVAILABLE", f"{why}; retry later",
                                                                        fatal=True)))
            except trio.BrokenResourceError:
                pass
        await trio.aclose_forcefully(stream)

    async def _connection(self, stream: trio.SocketStream, session: Session, peer: str) -> None:
        """One connection: a reader that starts a task per request, at most max_in_flight at once."""
        cfg = self.cfg
        st = _ConnState(stream, rpc.Connection("server", cfg.max_frame_bytes), peer,
                        trio.Semaphore(cfg.max_in_flight_per_connection),
                        trio.Semaphore(min(cfg.blocking_threads_per_connection, cfg.blocking_threads)))
        st.errors = self.client_log.connection(peer)
        st.holding = self.buffers.open(partial(st.end_with, "UNAVAILABLE"))
        if session.needs_auth and (self.service.tokens or st.tls is not None and self.tls.mutual):
            self._admit_unauthenticated(st)  # a TLS handshake is made under these limits too
        self._states.add(st)
        if self._stopping:
            st.reader.cancel()
        try:
            with st.scope:
                if st.tls is None or await self._handshake(st, session):
                    async with trio.open_nursery() as nursery:
                        st.nursery = nursery
                        with st.reader:
                            await self._read_loop(st, session)
            if st.scope.cancelled_caught and st.ending is None and st in self._unauthenticated:
                st.ending = ("UNAUTHORIZED", f"no auth within {cfg.auth_timeout_s:g} s (auth_timeout_s); "
                                             f"closing the connection")
        except Exception:  # noqa: BLE001 - a bug met by one connection ends that connection, not the daemon
            log.exception("%s: unexpected failure; closing the connection", peer)
        finally:
            self._states.discard(st)
            self._unauthenticated.pop(st, None)
            self.buffers.forget(st.holding)
            self.counters.connections -= 1
            st.errors.closed()
            await self._close(st)

    async def _handshake(self, st: "_ConnState", session: Session) -> bool:
        """A TLS connection's handshake (lookupd.daemon.tls), within the pre-auth limits when clients must
        authenticate; False when it failed (one rate-limited line, lookupd.daemon.clientlog). Under mutual
        TLS the client certificate's subject is the principal, and the certificate authenticates: for the
        pre-auth limits too, whether or not a token is configured, as for every call (Service.authorize)."""
        st.gone = True  # until the handshake is done nothing can be sent on it, not even why it is closed
        try:
            await st.tls.handshake(self.cfg.tls_handshake_timeout_s)
            early = st.tls.decrypt(b"")  # requests that came with the handshake's last read
        except TlsError as err:
            st.errors.error(f"{err}; closing the connection")
            return False
        st.gone = False
        principal = st.tls.principal
        if principal is not None:
            session.principal, session.authenticated = principal, True
            self._lift_pre_auth_limits(st)
        if early:
            st.conn.receive_data(early)
        return True

    def _admit_unauthenticated(self, st: "_ConnState") -> None:
        """A TCP connection that must send the token first: short frames, a deadline, and a place among
        at most max_unauthenticated_connections (the oldest is closed to make room), so connections that
        never authenticate cannot hold what authenticated ones need."""
        st.conn.frame_limit = min(PRE_AUTH_FRAME_BYTES, st.conn.max_frame_bytes)
        st.conn.frame_limit_note = " before auth (send auth [token] first)"
        st.scope.deadline = trio.current_time() + self.cfg.auth_timeout_s
        waiting = self._unauthenticated
        if len(waiting) >= self.cfg.max_unauthenticated_connections:
            oldest = next(iter(waiting))
            del waiting[oldest]
            oldest.end_with("UNAVAILABLE", f"closing: the oldest of {len(waiting) + 1} connections that have not "
                                           f"authenticated (max_unauthenticated_connections)")
        waiting[st] = None

    def _lift_pre_auth_limits(self, st: "_ConnState") -> None:
        """Authenticated: full-size frames, no deadline, no longer among the unauthenticated."""
        st.conn.frame_limit, st.conn.frame_limit_note = st.conn.max_frame_bytes, ""
        st.scope.deadline = math.inf
        self._unauthenticated.pop(st, None)

    async def _close(self, st: "_ConnState") -> None:
        """Close the connection cleanly: the reason first when the daemon ends it, then end of stream, then
        wait (CLOSE_LINGER_S at most) for the peer to close, dropping what it still sends: closing a socket
        with unread bytes in it resets the connection, and the peer may lose answers it has not read."""
        try:
            if st.ending is not None:
                self.client_log.line(logging.INFO, f"{st.peer}: {st.ending[1]}")
            if not st.gone:
                with trio.move_on_after(CLOSE_LINGER_S):
                    if st.ending is not None:
                        code, why = st.ending
                        if not st.cut:  # a notification after half an answer would be garbage
                            await st.stream.send_all(st.conn.send_error(rpc.ProtocolError(code, why, fatal=True)))
                    await st.stream.send_eof()
                    while await st.stream.receive_some(RECEIVE_BYTES):
                        pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(st.stream)

    async def _read_loop(self, st: "_ConnState", session: Session) -> None:
        """Answer the connection's requests until it ends.

        While the connection waits for requests it is parked in the reactor, whose handler
        (`_on_readable`) reads and answers every request it can answer at once, and wakes this
        task only for what must be awaited (`_act`): a request that needs a worker thread when
        the connection's in-flight slots are all taken, a wait before a token is checked, answers
        the socket would not take, a connection holding too much (lookupd.daemon.buffers), the
        end of the connection. Once the daemon stops, the requests already read are answered and
        nothing more is read.
        """
        out: list[bytes] = []  # answers not yet written, in order
        try:
            while True:
                event = st.conn.next_event()
                if event is rpc.NEED_DATA:
                    await self._flush(st, out)
                    if self._stopping:
                        return  # every request read is answered or in flight; nothing more is read
                    if self.buffers.mute(st.holding):
                        await self.buffers.wait_unmuted(st.holding)
                        continue
                    st.waiting = True
                    try:
                        action = await self._reactor.park(st.fd, partial(self._on_readable, st, session, out))
                    finally:
                        st.waiting = False
                else:
                    action = self._step(st, session, event, out)
                if action is not None and not await self._act(st, session, action, out):
                    return
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_ON_CLOSE_S):
                await self._flush(st, out)  # answers already computed still go out on the way down

    def _on_readable(self, st: "_ConnState", session: Session, out: list[bytes]) -> "Action | None":
        """The reactor's handler for a parked connection: read what arrived, answer every complete
        request that can be answered now and write the answers with one system call; the Action
        the connection's task must await, or None to stay parked.

        Read with os.read on the descriptor (after the reactor saw it readable): trio's stream
        layer adds checkpoints and conflict checks that cost as much as the lookup itself."""
        h = st.holding
        if (h.requests or h.answers) and self.buffers.mute(h):
            return Action(MUTE)  # answers sent by worker threads' tasks filled it since it was parked
        try:
            data = os.read(st.fd, RECEIVE_BYTES)
        except BlockingIOError:
            return None  # spurious wake-up
        except OSError as err:
            st.gone = True
            return Action(ABORT, f"connection lost ({err.strerror or err})")
        if st.tls is not None and data:
            try:
                data = st.tls.decrypt(data)
            except TlsError as err:
                return Action(ABORT, str(err))
            if data is None:
                return None  # no whole TLS record yet
        st.last_active = _now()
        st.conn.receive_data(data)
        while True:
            event = st.conn.next_event()
            if event is rpc.NEED_DATA:
                return self._write_now(st, out)
            action = self._step(st, session, event, out)
            if action is None and len(out) >= MAX_UNWRITTEN_ANSWERS:
                action = self._write_now(st, out)
            if action is not None:
                return action

    def _step(self, st: "_ConnState", session: Session, event: rpc.Event, out: list[bytes]) -> "Action | None":
        """Handle one event without waiting: an answer goes on `out`, a request that needs a worker
        thread is started in one if a slot is free; the Action to await otherwise."""
        if isinstance(event, rpc.Request):
            if event.method == "auth" and self.service.tokens:
                return self._auth(st, session, event, out)
            self.counters.requests += 1
            metrics = self.request_metrics
            started = time.perf_counter() if metrics is not None else 0.0
            try:
                result, error = self.service.call_inline(event.method, event.params, session), None
            except Exception as err:  # noqa: BLE001 - every failure becomes an error response
                result, error = None, error_for(err, event.method)
            if result is NEEDS_THREAD:
                size = st.conn.frame_bytes * REQUEST_MEMORY_FACTOR
                if st.slots.value == 0:
                    return Action(THREAD_SLOT, (event, size))
                st.slots.acquire_nowait()
                return self._start_in_thread(st, session, event, size)
            if metrics is not None:
                metrics.observe(event.method, time.perf_counter() - started,
                                error["code"] if error is not None else None)
            out.append(self._answer(st, event, error, result))
            return None
        if event is rpc.CLOSED:
            return Action(END)
        if isinstance(event, rpc.Notification):
            log.debug("%s: ignoring notification %r", st.peer, event.method)
            return None
        self.counters.errors += 1
        st.errors.error(event.message + ("; closing the connection" if event.fatal else ""))
        out.append(st.conn.send_error(event))
        return Action(ABORT) if event.fatal else None

    def _auth(self, st: "_ConnState", session: Session, req: rpc.Request, out: list[bytes]) -> "Action | None":
        """`auth` when a token is configured: checked once the source address may try again
        (lookupd.daemon.authlimit), whichever connection it comes on."""
        now = _now()
        if self.auth_throttle.wait(session.source, now) > 0:
            return Action(AUTH_WAIT, req)
        self.counters.requests += 1
        try:
            result, error = self.service.call_inline("auth", req.params, session), None
        except Exception as err:  # noqa: BLE001 - every failure becomes an error response
            result, error = None, error_for(err, "auth")
        if self.request_metrics is not None:
            self.request_metrics.observe("auth", _now() - now, error["code"] if error is not None else None)
        if error is None:
            self._lift_pre_auth_limits(st)
            self.auth_throttle.succeeded(session.source)
        elif error["code"] == "UNAUTHORIZED":
            self.auth_throttle.failed(session.source, now)
        out.append(self._answer(st, req, error, result))
        return Action(AUTH_CLOSE) if session.auth_failures >= MAX_AUTH_FAILURES else None

    async def _act(self, st: "_ConnState", session: Session, action: "Action", out: list[bytes]) -> bool:
        """Do what `_step` or the reactor could not do without waiting; False when the connection ends."""
        kind, arg = action
        if kind == FLUSH:
            await self._flush(st, out)
            return True
        if kind == MUTE:  # the connection holds too much: read nothing until its client reads answers
            await self._flush(st, out)
            await self.buffers.wait_unmuted(st.holding)
            return True
        if kind == THREAD_SLOT:  # reading pauses until one of the connection's requests in threads ends
            await self._flush(st, out)
            await st.slots.acquire()
            action = self._start_in_thread(st, session, *arg)
            return True if action is None else await self._act(st, session, action, out)
        if kind == AUTH_WAIT:
            await self._flush(st, out)
            while (wait := self.auth_throttle.wait(session.source, _now())) > 0:
                await trio.sleep(wait)
            action = self._auth(st, session, arg, out)
            return True if action is None else await self._act(st, session, action, out)
        if kind == AUTH_CLOSE:
            await self._flush(st, out)
            self.client_log.line(logging.WARNING, f"{st.peer}: {session.auth_failures} wrong tokens; "
                                                  f"closing the connection")
            st.nursery.cancel_scope.cancel()
            return False
        if kind == ABORT:  # the connection cannot go on: answers computed so far are sent, in-flight ones dropped
            if arg:
                self.client_log.line(logging.INFO, f"{st.peer}: {arg}")
            await self._flush(st, out)
            st.nursery.cancel_scope.cancel()
        return False  # END: the peer closed its side; requests in threads still send their answers

    def _write_now(self, st: "_ConnState", out: list[bytes]) -> "Action | None":
        """Write `out` with one system call if the socket takes it all; else FLUSH, for the task."""
        if not out:
            return None
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        try:
            rest = _write_at_once(st, data)
        except OSError as err:
            st.gone = True
            return Action(ABORT, f"went away before reading its responses ({err.strerror})")
        if not rest and (st.tls is None or not st.tls.backlog):  # _ciphertext_held, inlined: this runs per answer
            return None
        out.append(rest)
        return Action(FLUSH)

    async def _idle_sweep(self) -> None:
        """Close connections whose peer sent nothing for idle_timeout_s while nothing was in flight."""
        idle = self.cfg.idle_timeout_s
        while True:
            await trio.sleep(max(IDLE_SWEEP_MIN_S, idle / IDLE_SWEEP_STEPS))
            now = _now()
            for st in list(self._states):
                if st.waiting and now - st.last_active >= idle and \
                        st.slots.value == self.cfg.max_in_flight_per_connection:
                    self.client_log.line(logging.INFO, f"{st.peer}: idle for {idle:.0f} s; closing")
                    st.nursery.cancel_scope.cancel()

    def _start_in_thread(self, st: "_ConnState", session: Session, req: rpc.Request, size: int) -> "Action | None":
        """Start a request (its in-flight slot taken) in a worker thread; MUTE if the connection now
        holds too much to be read further."""
        self.buffers.hold(st.holding, requests=size)
        st.nursery.start_soon(self._in_thread, st, session, req, size)
        return Action(MUTE) if self.buffers.mute(st.holding) else None

    async def _in_thread(self, st: "_ConnState", session: Session, req: rpc.Request, size: int) -> None:
        """One request in a worker thread, within the connection's share of the threads; the answer is
        packed there too (a large one would hold the event loop for milliseconds)."""
        started = time.perf_counter()
        share = st.thread_share
        try:
            try:
                if share.value:  # a free share is taken without the scheduling round acquire() costs
                    share.acquire_nowait()
                else:
                    await share.acquire()
                try:
                    await self.buffers.wait_to_start(st.holding)
                    data, error = await trio.to_thread.run_sync(self._call_packed, st.conn, session, req,
                                                                limiter=self.limiter, abandon_on_cancel=True)
                finally:
                    share.release()
            finally:
                self.buffers.release(st.holding, requests=size)
            if self.request_metrics is not None:
                self.request_metrics.observe(req.method, time.perf_counter() - started,
                                             error["code"] if error is not None else None)
            if error is not None:
                self._rejected(st, req, error)
            await self._send(st, data)
        finally:
            st.slots.release()

    def _call_packed(self, conn: rpc.Connection, session: Session, req: rpc.Request) -> tuple[bytes, dict | None]:
        """In a worker thread: the call's answer as bytes, and its error map (None on success)."""
        try:
            result, error = self.service.call(req.method, req.params, session), None
        except Exception as err:  # noqa: BLE001 - every failure becomes an error response
            result, error = None, error_for(err, req.method)
        return _pack_answer(conn, req, error, result)

    def _answer(self, st: "_ConnState", req: rpc.Request, error: dict | None, result: Any) -> bytes:
        """The response bytes; counts and logs a rejected request."""
        data, error = _pack_answer(st.conn, req, error, result)
        if error is not None:
            self._rejected(st, req, error)
        return data

    def _rejected(self, st: "_ConnState", req: rpc.Request, error: dict) -> None:
        self.counters.errors += 1
        if error["code"] != "INTERNAL":  # INTERNAL was logged with its traceback already
            st.errors.error(f"{req.method} rejected: {error['code']} {error['message']}")

    async def _flush(self, st: "_ConnState", out: list[bytes]) -> None:
        if out:
            data = b"".join(out)
            out.clear()
            await self._send(st, data)

    async def _send(self, st: "_ConnState", data: bytes) -> None:
        """Write one whole message; a peer that stopped reading or went away loses its connection.

        Most answers fit the socket buffer: they are written with one system call and no
        scheduling. The rest (and anything written while another write is under way) go
        through trio under the connection's lock, with idle_timeout_s for the peer to read,
        and count as held by the connection until written (lookupd.daemon.buffers).
        """
        try:
            data = _write_at_once(st, data)
        except OSError as err:
            self._gone(st, f"went away before reading its responses ({err.strerror})")
            return
        size = len(data) if data else _ciphertext_held(st)  # TLS: what the socket did not take is ciphertext
        if not size:
            return
        self.buffers.hold(st.holding, answers=size)
        st.queued_writes += 1
        written = False
        try:
            async with st.send_lock:
                with trio.move_on_after(self.cfg.idle_timeout_s) as timeout:
                    try:
                        await st.stream.send_all(data)
                        written = True
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        self._gone(st, "went away before reading its responses")
                if timeout.cancelled_caught:
                    self.client_log.line(logging.INFO, f"{st.peer}: has not read its responses for "
                                                       f"{self.cfg.idle_timeout_s:.0f} s; closing")
                    st.nursery.cancel_scope.cancel()
        finally:
            st.cut |= not written
            st.queued_writes -= 1
            self.buffers.release(st.holding, answers=size)

    def _gone(self, st: "_ConnState", why: str) -> None:
        st.gone = True
        self.client_log.line(logging.INFO, f"{st.peer}: {why}")
        st.nursery.cancel_scope.cancel()


def _pack_answer(conn: rpc.Connection, req: rpc.Request, error: dict | None, result: Any) -> tuple[bytes, dict | None]:
    """The response bytes and the error they carry: a result msgpack cannot pack is an INTERNAL error."""
    try:
        return conn.send_response(req.msgid, error, result), error
    except (TypeError, ValueError, OverflowError) as err:
        error = error_for(err, req.method)
        return conn.send_response(req.msgid, error, None), error


def _write_at_once(st: "_ConnState", data: bytes) -> bytes:
    """Write what the socket takes now, with one system call and no waiting (nothing while other
    writes hold or wait for `send_lock`: answers must not interleave); returns the rest (a view,
    not a copy of a large answer). OSError: the peer is gone."""
    if st.queued_writes:
        return data
    if st.tls is not None:
        st.tls.write_now(data)  # encrypted: what the socket did not take is held in order (_ciphertext_held)
        return b""
    try:
        n = os.write(st.fd, data)
    except BlockingIOError:
        return data
    return b"" if n == len(data) else memoryview(data)[n:]


def _ciphertext_held(st: "_ConnState") -> int:
    """The ciphertext a TLS connection holds that its socket did not take (written by `_send`'s slow path,
    and counted there as held answers: lookupd.daemon.buffers)."""
    return len(st.tls.backlog) if st.tls is not None else 0


class _ConnState:
    """One connection's state. The reader task writes its own answers; `send_lock` is taken only
    when a write cannot finish at once or a threaded answer is being written (see `_send`)."""

    __slots__ = ("stream", "fd", "conn", "peer", "slots", "thread_share", "send_lock", "queued_writes", "nursery",
                 "last_active", "waiting", "scope", "reader", "holding", "errors", "ending", "gone", "cut", "tls")

    def __init__(self, stream: trio.SocketStream, conn: rpc.Connection, peer: str, slots: trio.Semaphore,
                 thread_share: trio.Semaphore):
        self.stream = stream
        self.fd = stream.socket.fileno()
        self.conn = conn
        self.peer = peer
        self.slots = slots
        self.thread_share = thread_share  # its share of the worker threads (blocking_threads_per_connection)
        self.send_lock = trio.Lock()
        self.queued_writes = 0  # writes holding or waiting for send_lock (an attribute read, not locked()'s call)
        self.nursery: trio.Nursery | None = None
        self.last_active = _now()  # when the peer last sent something (_now's clock)
        self.waiting = False  # the reader waits for the peer (the idle sweep may close it)
        self.tls = stream.session if isinstance(stream, TlsStream) else None  # TLS state (lookupd.daemon.tls)
        self.scope = trio.CancelScope()  # the whole connection (the auth deadline, `end_with`)
        self.reader = trio.CancelScope()  # its reading (cancelled when the daemon stops while it is parked)
        self.holding: Holding | None = None  # what it holds (lookupd.daemon.buffers)
        self.errors: ConnectionErrors | None = None
        self.ending: tuple[str, str] | None = None  # (code, why) the daemon closes it, sent before the close
        self.gone = False  # the peer is gone: nothing more can be sent
        self.cut = False  # a write was cut short: the stream holds part of an answer

    def end_with(self, code: str, why: str) -> None:
        """Close the connection from outside its tasks, telling the peer why (before the close)."""
        if self.ending is None:
            self.ending = (code, why)
        self.scope.cancel()


# ====================================================================== entry point


def open_manager(cfg: Config) -> LogManager:
    """The LogManager over the configured log dirs, its open-file cap within the descriptor limit."""
    for d in cfg.log_dirs:
        if not os.path.isdir(d):
            raise InvalidArgument(f"log dir {d} does not exist or is not a directory")
    fd_limit = raise_nofile_limit()
    max_open = min(cfg.max_open_indexes, max(16, fd_limit // 2))
    if max_open < cfg.max_open_indexes:
        log.info("keeping at most %d files open (max_open_indexes %d; half of the %d-descriptor limit)",
                 max_open, cfg.max_open_indexes, fd_limit)
    remote = cfg.remote.remote_config()
    if remote is not None:
        from ..log.remotelog import RemoteTier

        remote = RemoteTier(remote)
    return LogManager(cfg.log_dirs, cache=IndexCache(max_open, cfg.max_mapped_bytes), remote=remote)


def build(cfg: Config) -> tuple[LogManager, list[Bound], str | None]:
    """Open the log dirs and the listeners (in this order: a bad log dir, token file or certificate binds nothing)."""
    token = read_token(cfg.auth_token_file) if cfg.auth_token_file else None
    tokens = read_tokens(cfg.auth_tokens_file) if cfg.auth_tokens_file else None
    if cfg.tls:
        TlsServer(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file)  # InvalidArgument naming the file
    manager = open_manager(cfg)
    try:
        listeners = open_listeners(cfg, token or tokens)
    except BaseException:
        manager.close()
        raise
    return manager, listeners, token


def run(args) -> int:
    """`lookupd serve`: serve until SIGTERM/SIGINT, then exit 0 (with `workers` > 1: the supervisor)."""
    if not args.verbose:
        logging.getLogger("lookupd").setLevel(logging.INFO)  # a daemon's journal wants the INFO lines
    cfg = Config.load(args.config, log_dirs=args.log_dirs, socket=args.socket, tcp=args.tcp, workers=args.workers)
    manager, listeners, token = build(cfg)
    if cfg.workers > 1:
        manager.close()  # each worker opens its own, after the fork
        try:
            return supervise(cfg.workers, lambda worker, ready: _serve_worker(cfg, listeners, token, worker, ready))
        finally:
            close_listeners(listeners)
    daemon = Daemon(cfg, manager, listeners, token=token)
    try:
        trio.run(lambda: daemon.serve(handle_signals=True))
    finally:
        close_listeners(listeners)
        manager.close()
        log.info("stopped after %d requests", daemon.counters.requests)
    return 0


def _serve_worker(cfg: Config, listeners: list[Bound], token: str | None, worker: int, ready) -> int:
    """One worker process: its own LogManager and event loop on the shared listening sockets."""
    manager = open_manager(cfg)
    daemon = Daemon(cfg, manager, listeners, token=token, worker=worker, on_ready=ready)
    try:
        trio.run(lambda: daemon.serve(handle_signals=True))
    finally:
        for b in listeners:
            b.sock.close()  # the supervisor removes the socket file
        manager.close()
        log.info("worker %d stopped after %d requests", worker, daemon.counters.requests)
    return 0
