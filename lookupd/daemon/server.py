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
TLS on the TCP listener (lookupd.daemon.tls): the handshake in the connection's task, then the
same engine, with reads decrypted and writes encrypted at its two I/O points; who may do what
is lookupd.daemon.acl's.
"""

from __future__ import annotations

import errno
import logging
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
from .config import Config, read_token, read_tokens
from .listeners import Bound, close_listeners, open_listeners
from .metrics import Collector, RequestMetrics, serve_metrics
from .reactor import Reactor
from .tls import TlsError, TlsServer, TlsSession, TlsStream
from .workers import supervise
from .service import METHODS, NEEDS_THREAD, Counters, Service, Session, auth_penalty, error_for

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
THREAD_SLOT = "thread slot"  # arg: a request for a worker thread; every in-flight slot is taken
AUTH_PENALTY = "auth penalty"  # arg: (request, error): a wrong token, answered after a delay
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
        self._readers: set[trio.CancelScope] = set()
        self._states: set[_ConnState] = set()
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
                for scope in list(self._readers):
                    scope.cancel()
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
            with trio.move_on_after(self.cfg.rescan_interval_s):
                await self._rescan_now.wait()
            self._rescan_now = trio.Event()
            try:
                counts = await trio.to_thread.run_sync(self.manager.refresh)
            except Exception as err:  # noqa: BLE001 - keep serving what we have
                log.warning("rescan failed: %s", err)
                continue
            if any(counts.values()):
                log.info("rescan: %(added)d partitions added, %(removed)d removed, %(changed)d changed", counts)

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
            if bound.kind == "unix":
                peer = f"unix#{self._next_id}"
            else:
                try:
                    peer = "%s:%d" % stream.socket.getpeername()[:2]
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
            if bound.tls:
                conns.start_soon(self._tls_connection, stream, peer)
            elif bound.kind == "unix":
                conns.start_soon(self._connection, stream, Session(trusted=True, principal=self._unix_principal(stream)),
                                 peer)
            else:
                conns.start_soon(self._connection, stream, Session(trusted=False), peer)

    def _unix_principal(self, stream: trio.SocketStream) -> str:
        """`unix:<uid>` of the peer (SO_PEERCRED), when ACLs need it."""
        if self.acl is None:
            return "unix"
        try:
            _, uid, _ = struct.unpack("3i", stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return "unix"  # gone already; no rule names this
        return f"unix:{uid}"

    async def _tls_connection(self, stream: trio.SocketStream, peer: str) -> None:
        """A TLS connection: the handshake (closed with the reason logged if it fails), then the engine
        with TLS state on the connection (lookupd.daemon.tls); the principal is the client
        certificate's subject under mutual TLS."""
        tls = TlsSession(stream.socket, self.tls.context)
        try:
            await tls.handshake(self.cfg.tls_handshake_timeout_s)
            early = tls.decrypt(b"")  # requests that came with the handshake's last read
        except TlsError as err:
            log.info("%s: %s; closing the connection", peer, err)
            self.counters.connections -= 1
            await trio.aclose_forcefully(stream)
            return
        except BaseException:
            self.counters.connections -= 1
            await trio.aclose_forcefully(stream)
            raise
        principal = tls.principal
        session = Session(trusted=False, authenticated=principal is not None, principal=principal or ANONYMOUS)
        await self._connection(TlsStream(stream, tls, early), session, peer)

    def _connection_fd_ceiling(self) -> int:
        """The lowest descriptor number a new connection may not have: what the reserve and the
        index cache's unused room leave of the limit."""
        cache = self.manager.cache
        return self.fd_limit - FD_RESERVE - max(0, cache.max_open - cache.open_count)

    async def _refuse(self, stream: trio.SocketStream, peer: str, why: str) -> None:
        log.warning("%s: refused: %s", peer, why)
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
        conn = rpc.Connection("server", self.cfg.max_frame_bytes)
        state = _ConnState(stream, conn, peer, trio.Semaphore(self.cfg.max_in_flight_per_connection))
        if state.tls is not None and stream.early:
            conn.receive_data(stream.early)  # requests that came with the TLS handshake's last read
        reader = trio.CancelScope()
        self._readers.add(reader)
        self._states.add(state)
        if self._stopping:
            reader.cancel()
        try:
            async with trio.open_nursery() as nursery:
                state.nursery = nursery
                with reader:
                    await self._read_loop(state, session)
        except Exception:  # noqa: BLE001 - a bug met by one connection ends that connection, not the daemon
            log.exception("%s: unexpected failure; closing the connection", peer)
        finally:
            self._readers.discard(reader)
            self._states.discard(state)
            self.counters.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _read_loop(self, st: "_ConnState", session: Session) -> None:
        """Answer the connection's requests until it ends.

        While the connection waits for requests it is parked in the reactor, whose handler
        (`_on_readable`) reads and answers every request it can answer at once, and wakes this
        task only for what must be awaited (`_act`): a request that needs a worker thread when
        the connection's in-flight slots are all taken, a wrong token's delay, answers the socket
        would not take, the end of the connection.
        """
        out: list[bytes] = []  # answers not yet written, in order
        try:
            while True:
                event = st.conn.next_event()
                if event is rpc.NEED_DATA:
                    await self._flush(st, out)
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
        try:
            data = os.read(st.fd, RECEIVE_BYTES)
        except BlockingIOError:
            return None  # spurious wake-up
        except OSError as err:
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
            self.counters.requests += 1
            metrics = self.request_metrics
            started = time.perf_counter() if metrics is not None else 0.0
            try:
                result, error = self.service.call_inline(event.method, event.params, session), None
            except Exception as err:  # noqa: BLE001 - every failure becomes an error response
                result, error = None, error_for(err, event.method)
            if result is NEEDS_THREAD:
                if st.slots.value == 0:
                    return Action(THREAD_SLOT, event)
                st.slots.acquire_nowait()
                st.nursery.start_soon(self._in_thread, st, session, event)
                return None
            if metrics is not None:
                metrics.observe(event.method, time.perf_counter() - started,
                                error["code"] if error is not None else None)
            if error is not None and error["code"] == "UNAUTHORIZED" and event.method == "auth":
                return Action(AUTH_PENALTY, (event, error))
            out.append(self._answer(st, event, error, result))
            return None
        if event is rpc.CLOSED:
            return Action(END)
        if isinstance(event, rpc.Notification):
            log.debug("%s: ignoring notification %r", st.peer, event.method)
            return None
        self.counters.errors += 1
        log.info("%s: %s%s", st.peer, event.message, "; closing the connection" if event.fatal else "")
        out.append(st.conn.send_error(event))
        return Action(ABORT) if event.fatal else None

    async def _act(self, st: "_ConnState", session: Session, action: "Action", out: list[bytes]) -> bool:
        """Do what `_step` or the reactor could not do without waiting; False when the connection ends."""
        kind, arg = action
        if kind == FLUSH:
            await self._flush(st, out)
            return True
        if kind == THREAD_SLOT:  # reading pauses until one of the connection's requests in threads ends
            await self._flush(st, out)
            await st.slots.acquire()
            st.nursery.start_soon(self._in_thread, st, session, arg)
            return True
        if kind == AUTH_PENALTY:
            req, error = arg
            delay, close = auth_penalty(session)
            await self._flush(st, out)
            await trio.sleep(delay)
            out.append(self._answer(st, req, error, None))
            if close:
                log.warning("%s: %d wrong tokens; closing the connection", st.peer, session.auth_failures)
                await self._flush(st, out)
                st.nursery.cancel_scope.cancel()
                return False
            return True
        if kind == ABORT:  # the connection cannot go on: answers computed so far are sent, in-flight ones dropped
            if arg:
                log.info("%s: %s", st.peer, arg)
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
            return Action(ABORT, f"went away before reading its responses ({err.strerror})")
        if not rest and (st.tls is None or not st.tls.backlog):  # _held, inlined: this runs per answer
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
                    log.info("%s: idle for %.0f s; closing", st.peer, idle)
                    st.nursery.cancel_scope.cancel()

    async def _in_thread(self, st: "_ConnState", session: Session, req: rpc.Request) -> None:
        started = time.perf_counter()
        try:
            try:
                result, error = await trio.to_thread.run_sync(self.service.call, req.method, req.params, session,
                                                              limiter=self.limiter, abandon_on_cancel=True), None
            except Exception as err:  # noqa: BLE001 - every failure becomes an error response
                result, error = None, error_for(err, req.method)
            if self.request_metrics is not None:
                self.request_metrics.observe(req.method, time.perf_counter() - started,
                                             error["code"] if error is not None else None)
            await self._send(st, self._answer(st, req, error, result))
        finally:
            st.slots.release()

    def _answer(self, st: "_ConnState", req: rpc.Request, error: dict | None, result: Any) -> bytes:
        """The response bytes; counts and logs (one line) a rejected request."""
        try:
            data = st.conn.send_response(req.msgid, error, result)
        except (TypeError, ValueError, OverflowError) as err:
            error = error_for(err, req.method)
            data = st.conn.send_response(req.msgid, error, None)
        if error is not None:
            self.counters.errors += 1
            if error["code"] != "INTERNAL":  # INTERNAL was logged with its traceback already
                log.info("%s: %s rejected: %s %s", st.peer, req.method, error["code"], error["message"])
        return data

    async def _flush(self, st: "_ConnState", out: list[bytes]) -> None:
        if out:
            data = b"".join(out)
            out.clear()
            await self._send(st, data)

    async def _send(self, st: "_ConnState", data: bytes) -> None:
        """Write one whole message; a peer that stopped reading or went away loses its connection.

        Most answers fit the socket buffer: they are written with one system call and no
        scheduling. The rest (and anything written while another write is under way) go
        through trio under the connection's lock, with idle_timeout_s for the peer to read.
        """
        try:
            data = _write_at_once(st, data)
        except OSError as err:
            log.info("%s: went away before reading its responses (%s)", st.peer, err.strerror)
            st.nursery.cancel_scope.cancel()
            return
        if not data and not _held(st):
            return
        st.queued_writes += 1
        try:
            async with st.send_lock:
                with trio.move_on_after(self.cfg.idle_timeout_s) as timeout:
                    try:
                        await st.stream.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        log.info("%s: went away before reading its responses", st.peer)
                        st.nursery.cancel_scope.cancel()
                if timeout.cancelled_caught:
                    log.info("%s: has not read its responses for %.0f s; closing", st.peer, self.cfg.idle_timeout_s)
                    st.nursery.cancel_scope.cancel()
        finally:
            st.queued_writes -= 1


def _write_at_once(st: "_ConnState", data: bytes) -> bytes:
    """Write what the socket takes now, with one system call and no waiting (nothing while other
    writes hold or wait for `send_lock`: answers must not interleave); returns the rest. OSError:
    the peer is gone."""
    if st.queued_writes:
        return data
    if st.tls is not None:
        st.tls.write_now(data)  # encrypted: what the socket did not take is held in order (_held)
        return b""
    try:
        return data[os.write(st.fd, data):]
    except BlockingIOError:
        return data


def _held(st: "_ConnState") -> bool:
    """Whether a TLS connection holds ciphertext its socket did not take (written by `_send`'s slow path)."""
    return st.tls is not None and bool(st.tls.backlog)


class _ConnState:
    """One connection's state. The reader task writes its own answers; `send_lock` is taken only
    when a write cannot finish at once or a threaded answer is being written (see `_send`)."""

    __slots__ = ("stream", "fd", "conn", "peer", "slots", "send_lock", "queued_writes", "nursery", "last_active",
                 "waiting", "tls")

    def __init__(self, stream: trio.SocketStream, conn: rpc.Connection, peer: str, slots: trio.Semaphore):
        self.stream = stream
        self.fd = stream.socket.fileno()
        self.conn = conn
        self.peer = peer
        self.slots = slots
        self.send_lock = trio.Lock()
        self.queued_writes = 0  # writes holding or waiting for send_lock (an attribute read, not locked()'s call)
        self.nursery: trio.Nursery | None = None
        self.last_active = _now()  # when the peer last sent something (_now's clock)
        self.waiting = False  # the reader waits for the peer (the idle sweep may close it)
        self.tls = stream.session if isinstance(stream, TlsStream) else None  # TLS state (lookupd.daemon.tls)


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
    return LogManager(cfg.log_dirs, cache=IndexCache(max_open, cfg.max_mapped_bytes))


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
