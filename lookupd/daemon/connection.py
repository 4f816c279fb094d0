"""One client connection of the daemon: its protocol state, session and unwritten answers, and everything
done with them, from the first byte read to the close.

A request's path: the socket (`_on_readable`, called by the reactor while the connection is parked) ->
the framing (`protocol`, lookupd.rpc.protocol, no I/O) -> the method (`_step`: Service.call_inline,
or `_start_in_thread` for one that must wait for the disk) -> the partition, its segment and its
index (lookupd.log) -> the answer, written at once (`_write_now`) or by the connection's task (`_act`).
What the reactor's handler cannot do without waiting it hands the connection's task as an Action.

Where work runs (see Service.call_inline): a single lookup whose data is all in memory runs on the
event loop (microseconds; a trip through trio.to_thread costs ~100-200 us on 2 cores:
bench/bench_daemon.py); one that would wait for the disk, and every listing and columnar call, runs
in a worker thread under a CapacityLimiter of `blocking_threads`, so a cold index on a slow disk
stalls only its caller. Those threads never wait for the object store: a call that would (a remote
segment's bytes not cached yet) is run again on the remote pool with a deadline (lookupd.daemon.blocking),
so a slow or stalled store holds remote calls only, never local ones.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import time
from typing import Any, Callable

import trio

from ..errors import Unavailable
from ..rpc import protocol as rpc
from .buffers import REQUEST_MEMORY_FACTOR
from .service import MAX_AUTH_FAILURES, NEEDS_THREAD, Session, compact_targets, error_for
from .host import ConnectionHost
from .tls import TlsError, TlsStream

log = logging.getLogger(__name__)

RECEIVE_BYTES = 64 * 1024  # one read; a pipelined burst of small requests fits in one
# Answers held before they are written, when a pipelined burst is answered: bounds what one
# connection's burst keeps in memory (a `read` answer may be max_read_bytes long).
MAX_UNWRITTEN_ANSWERS = 64
# How long a closing connection may take to write answers it already computed.
FLUSH_ON_CLOSE_S = 1.0
# After its last answer, how long a connection the daemon closes waits for the peer to close too (see
# Connection._close): long enough for a peer on the same host or network to read its answers.
CLOSE_LINGER_S = 1.0
# Until a TCP peer has sent the token, a message may be at most this long: `auth [token]` takes a few
# hundred bytes, and 300 unauthenticated connections each holding a partial 1 MiB request took 330 MB
# (Kafka caps requests before authentication likewise: sasl.server.max.receive.size, 512 KiB).
PRE_AUTH_FRAME_BYTES = 64 << 10
# The clock of connections' idleness: read on every receive, so the cheapest (trio.current_time()
# is three Python calls around the same clock).
now = time.perf_counter


def admit_unauthenticated(daemon: ConnectionHost, conn) -> None:
    """Count `conn` among the connections that have not authenticated, at most max_unauthenticated_connections
    of them whatever their protocol: the oldest is closed to make room."""
    waiting = daemon.unauthenticated
    if len(waiting) >= daemon.cfg.max_unauthenticated_connections:
        oldest = next(iter(waiting))
        del waiting[oldest]
        oldest.end_with("UNAVAILABLE", f"closing: the oldest of {len(waiting) + 1} connections that have not "
                                       f"authenticated (max_unauthenticated_connections)")
    waiting[conn] = None


async def tls_handshake(conn, authenticated: Callable[[], None]) -> bool:
    """`conn`'s TLS handshake (lookupd.daemon.tls), for either listener; False when it failed (one
    rate-limited line, lookupd.daemon.clientlog). Under mutual TLS the client certificate's subject is the
    principal and the certificate authenticates (`authenticated()` lifts the pre-auth limits), whether or
    not a token is configured, as for every call (Service.authorize). Requests that came with the
    handshake's last read go to the connection's protocol."""
    try:
        await conn.tls.handshake(conn.cfg.tls_handshake_timeout_s)
        early = conn.tls.decrypt(b"")
    except TlsError as err:
        conn.errors.error(f"{err}; closing the connection")
        return False
    principal = conn.tls.principal
    if principal is not None:
        conn.session.principal, conn.session.authenticated = principal, True
        authenticated()
    if early:
        conn.protocol.receive_data(early)
    return True


class Action(enum.Enum):
    """What a connection's own task must await (Connection._act). THREAD_SLOT and AUTH_WAIT carry a
    request in `Connection.deferred`, ABORT a reason in `Connection.abort_why`."""

    FLUSH = "flush"  # write the answers the socket did not take at once
    MUTE = "mute"  # the connection holds too much (lookupd.daemon.buffers): read on once its client reads
    THREAD_SLOT = "thread slot"  # a request for a worker thread; every in-flight slot is taken
    AUTH_WAIT = "auth wait"  # an auth request, checked once its source address may try again
    AUTH_CLOSE = "auth close"  # MAX_AUTH_FAILURES wrong tokens on this connection: answered, then closed
    END = "end"  # the peer closed its side between messages
    ABORT = "abort"  # close now, dropping requests in flight (the reason, if any, is logged)


class Connection:
    """One connection's state and engine. Its task writes its own answers; `send_lock` is taken only
    when a write cannot finish at once or a threaded answer is being written (see `_send`)."""

    __slots__ = ("daemon", "cfg", "service", "counters", "buffers", "metrics", "session", "stream", "fd", "protocol",
                 "peer", "out", "slots", "thread_share", "send_lock", "queued_writes", "nursery", "last_active",
                 "waiting", "scope", "reader", "holding", "errors", "ending", "gone", "cut", "tls", "deferred",
                 "deferred_size", "abort_why")

    def __init__(self, daemon: ConnectionHost, stream: trio.SocketStream, session: Session, peer: str):
        cfg = daemon.cfg
        self.daemon = daemon
        self.cfg = cfg
        self.service = daemon.service
        self.counters = daemon.counters
        self.buffers = daemon.buffers
        self.metrics = daemon.request_metrics  # None when metrics are off (no cost per request)
        self.session = session
        self.stream = stream
        self.fd = stream.socket.fileno()
        self.protocol = rpc.Connection("server", cfg.max_frame_bytes)
        self.peer = peer
        self.out: list[bytes] = []  # answers not yet written, in order
        self.slots = trio.Semaphore(cfg.max_in_flight_per_connection)
        # its share of the worker threads (blocking_threads_per_connection)
        self.thread_share = trio.Semaphore(min(cfg.blocking_threads_per_connection, cfg.blocking_threads))
        self.send_lock = trio.Lock()
        self.queued_writes = 0  # writes holding or waiting for send_lock (an attribute read, not locked()'s call)
        self.nursery: trio.Nursery | None = None
        self.last_active = now()  # when the peer last sent something (`now`'s clock)
        self.waiting = False  # the reader waits for the peer (the idle sweep may close it)
        self.tls = stream.session if isinstance(stream, TlsStream) else None  # TLS state (lookupd.daemon.tls)
        self.scope = trio.CancelScope()  # the whole connection (the auth deadline, `end_with`)
        self.reader = trio.CancelScope()  # its reading (cancelled when the daemon stops while it is parked)
        self.holding = daemon.buffers.open(self._end_unavailable)  # what it holds (lookupd.daemon.buffers)
        self.errors = daemon.client_log.connection(peer)
        self.ending: tuple[str, str] | None = None  # (code, why) the daemon closes it, sent before the close
        self.gone = False  # the peer is gone: nothing more can be sent
        self.cut = False  # a write was cut short: the stream holds part of an answer
        self.deferred: rpc.Request | None = None  # THREAD_SLOT's or AUTH_WAIT's request
        self.deferred_size = 0  # THREAD_SLOT's request's size as held (lookupd.daemon.buffers)
        self.abort_why: str | None = None  # ABORT's reason

    # ------------------------------------------------------------------ lifecycle

    def end_with(self, code: str, why: str) -> None:
        """Close the connection from outside its tasks, telling the peer why (before the close)."""
        if self.ending is None:
            self.ending = (code, why)
        self.scope.cancel()

    def hung_up(self) -> None:
        """The peer closed (or reset) the connection while it was not being read (the daemon's hang-up sweep):
        nothing more can reach it, so what it still waits for is dropped now rather than run for nobody."""
        self.gone = True
        self.daemon.client_log.line(logging.INFO, f"{self.peer}: went away; dropping its "
                                                  f"{self.cfg.max_in_flight_per_connection - self.slots.value} "
                                                  f"requests in flight")
        self.scope.cancel()

    def _end_unavailable(self, why: str) -> None:
        self.end_with("UNAVAILABLE", why)

    def is_idle(self, at: float) -> bool:
        """The peer sent nothing for idle_timeout_s while the connection waits for it, nothing in flight."""
        return self.waiting and at - self.last_active >= self.cfg.idle_timeout_s and \
            self.slots.value == self.cfg.max_in_flight_per_connection

    async def serve(self) -> None:
        """Serve the connection until it ends, then close it; the caller forgets it."""
        daemon = self.daemon
        if self.session.needs_auth and (self.service.tokens or self.tls is not None and daemon.tls.mutual):
            self._admit_unauthenticated()  # a TLS handshake is made under these limits too
        if daemon.stopping:
            self.reader.cancel()
        try:
            with self.scope:
                if self.tls is None or await self._handshake():
                    async with trio.open_nursery() as nursery:
                        self.nursery = nursery
                        with self.reader:
                            await self._read_loop()
            if self.scope.cancelled_caught and self.ending is None and self in daemon.unauthenticated:
                self.ending = ("UNAUTHORIZED", f"no auth within {self.cfg.auth_timeout_s:g} s (auth_timeout_s); "
                                               f"closing the connection")
        except Exception:  # noqa: BLE001 - a bug met by one connection ends that connection, not the daemon
            log.exception("%s: unexpected failure; closing the connection", self.peer)
        finally:
            daemon.ended(self)
            self.buffers.forget(self.holding)
            self.errors.closed()
            await self._close()

    async def _handshake(self) -> bool:
        """A TLS connection's handshake within the pre-auth limits when clients must authenticate (see
        tls_handshake); nothing can be sent on it until it is done, not even why it is closed."""
        self.gone = True
        done = await tls_handshake(self, self._lift_pre_auth_limits)
        self.gone = not done
        return done

    def _admit_unauthenticated(self) -> None:
        """A TCP connection that must send the token first: short frames, a deadline, and a place among
        at most max_unauthenticated_connections (the oldest is closed to make room), so connections that
        never authenticate cannot hold what authenticated ones need."""
        self.protocol.frame_limit = min(PRE_AUTH_FRAME_BYTES, self.protocol.max_frame_bytes)
        self.protocol.frame_limit_note = " before auth (send auth [token] first)"
        self.scope.deadline = trio.current_time() + self.cfg.auth_timeout_s
        admit_unauthenticated(self.daemon, self)

    def _lift_pre_auth_limits(self) -> None:
        """Authenticated: full-size frames, no deadline, no longer among the unauthenticated."""
        self.protocol.frame_limit, self.protocol.frame_limit_note = self.protocol.max_frame_bytes, ""
        self.scope.deadline = math.inf
        self.daemon.unauthenticated.pop(self, None)

    async def _close(self) -> None:
        """Close the connection cleanly: the reason first when the daemon ends it, then end of stream, then
        wait (CLOSE_LINGER_S at most) for the peer to close, dropping what it still sends: closing a socket
        with unread bytes in it resets the connection, and the peer may lose answers it has not read."""
        try:
            if self.ending is not None:
                self.daemon.client_log.line(logging.INFO, f"{self.peer}: {self.ending[1]}")
            if not self.gone:
                with trio.move_on_after(CLOSE_LINGER_S):
                    if self.ending is not None:
                        code, why = self.ending
                        if not self.cut:  # a notification after half an answer would be garbage
                            await self.stream.send_all(self.protocol.send_error(rpc.ProtocolError(code, why,
                                                                                                  fatal=True)))
                    await self.stream.send_eof()
                    while await self.stream.receive_some(RECEIVE_BYTES):
                        pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(self.stream)

    # ------------------------------------------------------------------ reading and answering

    async def _read_loop(self) -> None:
        """Answer the connection's requests until it ends.

        While the connection waits for requests it is parked in the reactor, whose handler
        (`_on_readable`) reads and answers every request it can answer at once, and wakes this
        task only for what must be awaited (`_act`): a request that needs a worker thread when
        the connection's in-flight slots are all taken, a wait before a token is checked, answers
        the socket would not take, a connection holding too much (lookupd.daemon.buffers), the
        end of the connection. Once the daemon stops, the requests already read are answered and
        nothing more is read.
        """
        daemon, protocol, buffers, holding = self.daemon, self.protocol, self.buffers, self.holding
        try:
            while True:
                event = protocol.next_event()
                if event is rpc.NEED_DATA:
                    await self._flush()
                    if daemon.stopping:
                        return  # every request read is answered or in flight; nothing more is read
                    if buffers.mute(holding):
                        await buffers.wait_unmuted(holding)
                        continue
                    self.waiting = True
                    try:
                        action = await daemon.reactor.park(self.fd, self._on_readable)
                    finally:
                        self.waiting = False
                else:
                    action = self._step(event)
                if action is not None and not await self._act(action):
                    return
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_ON_CLOSE_S):
                await self._flush()  # answers already computed still go out on the way down

    def _on_readable(self) -> Action | None:
        """The reactor's handler for a parked connection: read what arrived, answer every complete
        request that can be answered now and write the answers with one system call; the Action
        the connection's task must await, or None to stay parked.

        Read with os.read on the descriptor (after the reactor saw it readable): trio's stream
        layer adds checkpoints and conflict checks that cost as much as the lookup itself."""
        h = self.holding
        if (h.requests or h.answers) and self.buffers.mute(h):
            return Action.MUTE  # answers sent by worker threads' tasks filled it since it was parked
        try:
            data = os.read(self.fd, RECEIVE_BYTES)
        except BlockingIOError:
            return None  # spurious wake-up
        except OSError as err:
            self.gone = True
            return self._abort(f"connection lost ({err.strerror or err})")
        if self.tls is not None and data:
            try:
                data = self.tls.decrypt(data)
            except TlsError as err:
                return self._abort(str(err))
            if data is None:
                return None  # no whole TLS record yet
        self.last_active = now()
        protocol, out = self.protocol, self.out
        protocol.receive_data(data)
        while True:
            event = protocol.next_event()
            if event is rpc.NEED_DATA:
                return self._write_now()
            action = self._step(event)
            if action is None and len(out) >= MAX_UNWRITTEN_ANSWERS:
                action = self._write_now()
            if action is not None:
                return action

    def _step(self, event: rpc.Event) -> Action | None:
        """Handle one event without waiting: an answer goes on `out`, a request that needs a worker
        thread is started in one if a slot is free; the Action to await otherwise."""
        if isinstance(event, rpc.Request):
            if event.method == "auth" and self.service.tokens:
                return self._auth(event)
            self.counters.requests += 1
            metrics = self.metrics
            started = time.perf_counter() if metrics is not None else 0.0
            try:
                result, error = self.service.call_inline(event.method, event.params, self.session), None
            except Exception as err:  # noqa: BLE001 - every failure becomes an error response
                result, error = None, error_for(err, event.method)
            if result is NEEDS_THREAD:
                compact_targets(event.method, event.params)  # a long list of targets waits as an array
                size = self.protocol.frame_bytes * REQUEST_MEMORY_FACTOR
                if self.slots.value == 0:
                    self.deferred, self.deferred_size = event, size
                    return Action.THREAD_SLOT
                self.slots.acquire_nowait()
                return self._start_in_thread(event, size)
            if metrics is not None:
                metrics.observe(event.method, time.perf_counter() - started,
                                error["code"] if error is not None else None)
            self.out.append(self._answer(event, error, result))
            return None
        if event is rpc.CLOSED:
            return Action.END
        if isinstance(event, rpc.Notification):
            log.debug("%s: ignoring notification %r", self.peer, event.method)
            return None
        self.counters.errors += 1
        self.errors.error(event.message + ("; closing the connection" if event.fatal else ""))
        self.out.append(self.protocol.send_error(event))
        return self._abort(None) if event.fatal else None

    def _auth(self, req: rpc.Request) -> Action | None:
        """`auth` when a token is configured: checked once the source address may try again
        (lookupd.daemon.authlimit), whichever connection it comes on."""
        session, throttle = self.session, self.daemon.auth_throttle
        at = now()
        if throttle.wait(session.source, at) > 0:
            self.deferred = req
            return Action.AUTH_WAIT
        self.counters.requests += 1
        try:
            result, error = self.service.call_inline("auth", req.params, session), None
        except Exception as err:  # noqa: BLE001 - every failure becomes an error response
            result, error = None, error_for(err, "auth")
        if self.metrics is not None:
            self.metrics.observe("auth", now() - at, error["code"] if error is not None else None)
        if error is None:
            self._lift_pre_auth_limits()
            throttle.succeeded(session.source)
        elif error["code"] == "UNAUTHORIZED":
            throttle.failed(session.source, at)
        self.out.append(self._answer(req, error, result))
        return Action.AUTH_CLOSE if session.auth_failures >= MAX_AUTH_FAILURES else None

    def _abort(self, why: str | None) -> Action:
        """ABORT, with the reason to log (None: already logged)."""
        self.abort_why = why
        return Action.ABORT

    def _take_deferred(self) -> rpc.Request:
        req, self.deferred = self.deferred, None
        return req

    async def _act(self, action: Action) -> bool:
        """Do what `_step` or the reactor could not do without waiting; False when the connection ends."""
        match action:
            case Action.FLUSH:
                await self._flush()
                return True
            case Action.MUTE:  # the connection holds too much: read nothing until its client reads answers
                await self._flush()
                await self.buffers.wait_unmuted(self.holding)
                return True
            case Action.THREAD_SLOT:  # reading pauses until one of the connection's requests in threads ends
                await self._flush()
                await self.slots.acquire()
                action = self._start_in_thread(self._take_deferred(), self.deferred_size)
                return True if action is None else await self._act(action)
            case Action.AUTH_WAIT:
                await self._flush()
                req = self._take_deferred()
                while (wait := self.daemon.auth_throttle.wait(self.session.source, now())) > 0:
                    await trio.sleep(wait)
                action = self._auth(req)
                return True if action is None else await self._act(action)
            case Action.AUTH_CLOSE:
                await self._flush()
                self.daemon.client_log.line(logging.WARNING, f"{self.peer}: {self.session.auth_failures} wrong "
                                                             f"tokens; closing the connection")
                self.nursery.cancel_scope.cancel()
                return False
            case Action.ABORT:  # the connection cannot go on: answers computed so far are sent, in-flight ones dropped
                if self.abort_why:
                    self.daemon.client_log.line(logging.INFO, f"{self.peer}: {self.abort_why}")
                await self._flush()
                self.nursery.cancel_scope.cancel()
                return False
            case Action.END:  # the peer closed its side; requests in threads still send their answers
                return False
            case _:
                raise AssertionError(f"unhandled action {action!r}")

    # ------------------------------------------------------------------ worker threads

    def _start_in_thread(self, req: rpc.Request, size: int) -> Action | None:
        """Start a request (its in-flight slot taken) in a worker thread; MUTE if the connection now
        holds too much to be read further."""
        self.buffers.hold(self.holding, requests=size)
        self.nursery.start_soon(self._in_thread, req, size)
        return Action.MUTE if self.buffers.mute(self.holding) else None

    async def _in_thread(self, req: rpc.Request, size: int) -> None:
        """One request in a worker thread, within the connection's share of the threads; the answer is
        packed there too (a large one would hold the event loop for milliseconds)."""
        started = time.perf_counter()
        share = self.thread_share
        try:
            try:
                if share.value:  # a free share is taken without the scheduling round acquire() costs
                    share.acquire_nowait()
                else:
                    await share.acquire()
                try:
                    await self.buffers.wait_to_start(self.holding)
                    try:
                        data, error = await self.daemon.blocking(lambda: self._call_packed(req), req.method)
                    except Unavailable as err:  # the object store did not answer in time
                        data, error = self._pack_answer(req, error_for(err, req.method), None)
                finally:
                    share.release()
            finally:
                self.buffers.release(self.holding, requests=size)
            if self.metrics is not None:
                self.metrics.observe(req.method, time.perf_counter() - started,
                                     error["code"] if error is not None else None)
            if error is not None:
                self._rejected(req, error)
            await self._send(data)
        finally:
            self.slots.release()

    def _call_packed(self, req: rpc.Request) -> tuple[bytes, dict | None]:
        """In a worker thread: the call's answer as bytes, and its error map (None on success)."""
        try:
            result, error = self.service.call(req.method, req.params, self.session, packed=True), None
        except Exception as err:  # noqa: BLE001 - every failure becomes an error response
            result, error = None, error_for(err, req.method)
        return self._pack_answer(req, error, result)

    def _pack_answer(self, req: rpc.Request, error: dict | None, result: Any) -> tuple[bytes, dict | None]:
        """The response bytes and the error they carry: a result msgpack cannot pack is an INTERNAL error."""
        try:
            return self.protocol.send_response(req.msgid, error, result), error
        except (TypeError, ValueError, OverflowError) as err:
            error = error_for(err, req.method)
            return self.protocol.send_response(req.msgid, error, None), error

    def _answer(self, req: rpc.Request, error: dict | None, result: Any) -> bytes:
        """The response bytes; counts and logs a rejected request."""
        data, error = self._pack_answer(req, error, result)
        if error is not None:
            self._rejected(req, error)
        return data

    def _rejected(self, req: rpc.Request, error: dict) -> None:
        self.counters.errors += 1
        if error["code"] != "INTERNAL":  # INTERNAL was logged with its traceback already
            self.errors.error(f"{req.method} rejected: {error['code']} {error['message']}")

    # ------------------------------------------------------------------ writing

    def _write_now(self) -> Action | None:
        """Write `out` with one system call if the socket takes it all; else FLUSH, for the task."""
        out = self.out
        if not out:
            return None
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        try:
            rest = self._write_at_once(data)
        except OSError as err:
            self.gone = True
            return self._abort(f"went away before reading its responses ({err.strerror})")
        if not rest and (self.tls is None or not self.tls.backlog):  # _ciphertext_held, inlined: this runs per answer
            return None
        out.append(rest)
        return Action.FLUSH

    def _write_at_once(self, data: bytes) -> bytes:
        """Write what the socket takes now, with one system call and no waiting (nothing while other
        writes hold or wait for `send_lock`: answers must not interleave); returns the rest (a view,
        not a copy of a large answer). OSError: the peer is gone."""
        if self.queued_writes:
            return data
        if self.tls is not None:
            self.tls.write_now(data)  # encrypted: what the socket did not take is held in order (_ciphertext_held)
            return b""
        try:
            n = os.write(self.fd, data)
        except BlockingIOError:
            return data
        return b"" if n == len(data) else memoryview(data)[n:]

    def _ciphertext_held(self) -> int:
        """The ciphertext a TLS connection holds that its socket did not take (written by `_send`'s slow path,
        and counted there as held answers: lookupd.daemon.buffers)."""
        return len(self.tls.backlog) if self.tls is not None else 0

    async def _flush(self) -> None:
        if self.out:
            data = b"".join(self.out)
            self.out.clear()
            await self._send(data)

    async def _send(self, data: bytes) -> None:
        """Write one whole message; a peer that stopped reading or went away loses its connection.

        Most answers fit the socket buffer: they are written with one system call and no
        scheduling. The rest (and anything written while another write is under way) go
        through trio under the connection's lock, with idle_timeout_s for the peer to read,
        and count as held by the connection until written (lookupd.daemon.buffers).
        """
        try:
            data = self._write_at_once(data)
        except OSError as err:
            self._gone(f"went away before reading its responses ({err.strerror})")
            return
        size = len(data) if data else self._ciphertext_held()  # TLS: what the socket did not take is ciphertext
        if not size:
            return
        self.buffers.hold(self.holding, answers=size)
        self.queued_writes += 1
        written = False
        try:
            async with self.send_lock:
                with trio.move_on_after(self.cfg.idle_timeout_s) as timeout:
                    try:
                        await self.stream.send_all(data)
                        written = True
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        self._gone("went away before reading its responses")
                if timeout.cancelled_caught:
                    self.daemon.client_log.line(logging.INFO, f"{self.peer}: has not read its responses for "
                                                              f"{self.cfg.idle_timeout_s:.0f} s; closing")
                    self.nursery.cancel_scope.cancel()
        finally:
            self.cut |= not written
            self.queued_writes -= 1
            self.buffers.release(self.holding, answers=size)

    def _gone(self, why: str) -> None:
        self.gone = True
        self.daemon.client_log.line(logging.INFO, f"{self.peer}: {why}")
        self.nursery.cancel_scope.cancel()
