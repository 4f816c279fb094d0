"""One connection of the Kafka listener: framing (lookupd.kafka.framing), authentication, the answers of
lookupd.daemon.kafkabroker, and their writing, with sendfile for records where no TLS is in the way.

Requests are answered one at a time, in order, as Kafka does (it mutes a channel until its response is
sent): the connection reads nothing more while a request is being answered, so what a client holds is one
request and one response. Waiting for a request, the connection is parked in the daemon's reactor, like a
msgpack connection, so the daemon's shutdown, idle sweep and limits treat both alike.

A Fetch with less than min_bytes to give waits up to max_wait_ms for the broker to append (a long poll),
looking at the partitions' log end every LONG_POLL_CHECK_S. A ListOffsets whose answer is in memory, and a
plaintext Fetch whose indexes are and which needs no long poll (a consumer keeping up), are answered right in
the reactor's handler, the records sent with sendfile as far as the socket takes them and the rest by the
connection's task; anything that may wait for the disk or the bucket runs in a worker thread.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import socket
import struct
import time
from typing import Any, Callable

import trio

from ..errors import Unavailable
from ..kafka import apis, framing
from ..kafka import errors as E
from ..kafka import fetch as F
from ..kafka import listoffsets as LO
from ..kafka.messages import (API_VERSIONS_RESPONSE, METADATA_REQUEST, PRODUCE_REQUEST,
                              SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE, SASL_HANDSHAKE_REQUEST,
                              SASL_HANDSHAKE_RESPONSE)
from ..message.wire import MessageError
from ..log.fileio import CAN_READ_NOWAIT, WouldBlock, mode as nonblocking_mode
from .connection import CLOSE_LINGER_S, PRE_AUTH_FRAME_BYTES, RECEIVE_BYTES, admit_unauthenticated, tls_handshake
from .fetchahead import FetchAhead
from .host import ConnectionHost
from .kafkasettings import busy_poll_seconds
from .tls import TlsError, TlsStream

log = logging.getLogger(__name__)

# How often a waiting Fetch looks whether its partitions grew: a consumer at the log end sees an append
# about this late (Kafka's purgatory is woken by the append itself; here the files are all there is).
LONG_POLL_CHECK_S = 0.01
# The longest a Fetch may wait, whatever its max_wait_ms: a client asking for more is answered empty
# then, and fetches again.
MAX_WAIT_S = 30.0
# Responses whose bytes in memory (not sendfile regions) exceed this are counted as held by the
# connection while written (lookupd.daemon.buffers): a TLS consumer's Fetch is read into memory.
HOLD_ABOVE_BYTES = 64 << 10
SASL_PLAIN = "PLAIN"
TCP_CORK = getattr(socket, "TCP_CORK", None)  # Linux's; elsewhere answers are not written inline anyway
_I32 = struct.Struct(">i")


def _name(api_key: int) -> str:
    return "kafka:" + apis.NAMES.get(api_key, "other")


METRIC_NAMES = tuple(_name(k) for k in apis.NAMES)


def _with_correlation(answer: list, correlation_id: int) -> list:
    """A framed answer prepared with correlation id 0 (FetchAhead), for the request with `correlation_id`."""
    first = answer[0]
    return [first[:4] + _I32.pack(correlation_id) + first[8:], *answer[1:]]


class Closing(Exception):
    """The connection must end, after one log line saying why."""


class KafkaConnection:
    """One client connection's state and engine (see the module's docstring)."""

    def __init__(self, daemon: ConnectionHost, stream: trio.SocketStream, session, peer: str):
        cfg = daemon.cfg
        self.daemon = daemon
        self.cfg = cfg
        self.broker = daemon.kafka
        self.stream = stream
        self.fd = stream.socket.fileno()
        self.session = session
        self.peer = peer
        self.tls = stream.session if isinstance(stream, TlsStream) else None
        self.protocol = framing.Connection(cfg.max_frame_bytes)
        self.scope = trio.CancelScope()
        self.reader = trio.CancelScope()
        self.nursery: trio.Nursery | None = None
        self.last_active = time.perf_counter()
        self.waiting = False
        self.holding = daemon.buffers.open(self._end_unavailable)
        self.errors = daemon.client_log.connection(peer)
        self.metrics = daemon.request_metrics
        self.ending: str | None = None
        self.gone = False  # the peer hung up while the connection was not being read (the daemon's hang-up sweep)
        self.sasl: str | None = None  # the mechanism a SaslHandshake chose
        self.needs_auth = False
        self.abort_reason: str | None = None  # why the reactor's handler could not go on reading
        self.close_after: str | None = None  # why the connection ends once the current answer is sent
        self.taken: framing.Event | None = None  # an event the reactor's handler read and left to the task
        self.unsent: list = []  # the rest of an answer the reactor's handler wrote in part: bytes and Regions
        self.ahead = FetchAhead(self.broker, daemon.counters, cfg.max_read_bytes)  # the next Fetch's answer, read ahead
        self.busy_poll_s = busy_poll_seconds(cfg.kafka)

    # ------------------------------------------------------------------ the daemon's view

    def end_with(self, code: str, why: str) -> None:
        if self.ending is None:
            self.ending = why
        self.scope.cancel()

    def _end_unavailable(self, why: str) -> None:
        self.end_with("UNAVAILABLE", why)

    def hung_up(self) -> None:
        """The peer closed (or reset) the connection while a request of its was being answered (a long poll,
        a fetch in a thread): nothing more can reach it, so the answer is dropped now."""
        self.gone = True
        self.end_with("UNAVAILABLE", "went away while its request was being answered")

    def is_idle(self, at: float) -> bool:
        return self.waiting and at - self.last_active >= self.cfg.idle_timeout_s

    # ------------------------------------------------------------------ lifecycle

    async def serve(self) -> None:
        daemon = self.daemon
        self.needs_auth = self.session.needs_auth and bool(self.daemon.service.tokens or
                                                           (self.tls is not None and daemon.tls.mutual))
        if self.needs_auth:
            self._admit_unauthenticated()
        if daemon.stopping:
            self.reader.cancel()
        try:
            with self.scope:
                if self.tls is None or await tls_handshake(self, self._authenticated):
                    async with trio.open_nursery() as nursery:
                        self.nursery = nursery
                        with self.reader:
                            try:
                                await self._read_loop()
                            except Closing as why:
                                self.daemon.client_log.line(logging.INFO, f"{self.peer}: {why}; closing the "
                                                                          f"Kafka connection")
            if self.scope.cancelled_caught and self.ending is None and self.needs_auth:
                self.ending = f"no SASL authentication within {self.cfg.auth_timeout_s:g} s (auth_timeout_s)"
        except Exception:  # noqa: BLE001 - a bug met by one connection ends that connection, not the daemon
            log.exception("%s: unexpected failure on the Kafka listener; closing the connection", self.peer)
        finally:
            daemon.ended(self)
            self.daemon.buffers.forget(self.holding)
            self.errors.closed()
            if self.ending is not None:
                self.daemon.client_log.line(logging.INFO, f"{self.peer}: {self.ending}; closing the Kafka connection")
            await self._close()

    def _admit_unauthenticated(self) -> None:
        """As a msgpack connection before `auth`: small frames, a deadline, a place among at most
        max_unauthenticated_connections (the oldest is closed to make room)."""
        self.protocol.frame_limit = min(PRE_AUTH_FRAME_BYTES, self.protocol.max_frame_bytes)
        self.protocol.frame_limit_note = " before SASL authentication"
        self.scope.deadline = trio.current_time() + self.cfg.auth_timeout_s
        admit_unauthenticated(self.daemon, self)

    def _authenticated(self) -> None:
        self.needs_auth = False
        self.protocol.frame_limit, self.protocol.frame_limit_note = self.protocol.max_frame_bytes, ""
        self.scope.deadline = math.inf
        self.daemon.unauthenticated.pop(self, None)

    async def _close(self) -> None:
        try:
            with trio.move_on_after(CLOSE_LINGER_S):
                await self.stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(self.stream)

    # ------------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        daemon, protocol = self.daemon, self.protocol
        while True:
            if self._held():  # the rest of an answer the reactor's handler began
                parts, self.unsent = self.unsent, []
                await self._send(parts)
            event, self.taken = (self.taken, None) if self.taken is not None else (protocol.next_event(), None)
            if event is framing.NEED_DATA:
                if daemon.stopping:
                    return
                self.waiting = True
                try:
                    await daemon.reactor.park(self.fd, self._on_readable)
                finally:
                    self.waiting = False
                if self.abort_reason is not None:
                    raise Closing(self.abort_reason)
                continue
            if event is framing.CLOSED:
                return
            if isinstance(event, framing.Violation):
                self.daemon.counters.errors += 1
                raise Closing(event.message)
            await self._answer(event)

    def _on_readable(self) -> bool | None:
        """The reactor's handler: read what arrived and answer, right here, the requests that need no waiting
        (ListOffsets whose answer is in memory, ApiVersions), as the msgpack engine answers hot lookups; wake
        the task for anything else (`taken`), for the end of the stream, or to write what the socket did not take."""
        try:
            data = os.read(self.fd, RECEIVE_BYTES)
        except BlockingIOError:
            return None
        except OSError as err:
            self.abort_reason = f"connection lost ({err.strerror or err})"
            return True
        if self.tls is not None and data:
            try:
                data = self.tls.decrypt(data)
            except TlsError as err:
                self.abort_reason = str(err)
                return True
            if data is None:
                return None
        self.last_active = time.perf_counter()
        protocol = self.protocol
        if self.ahead.matches(data) and not protocol.buffered and self._answer_ahead(data):
            return True if self._held() or self.abort_reason is not None else None
        protocol.receive_data(data)
        while True:
            event = protocol.next_event()
            if event is framing.NEED_DATA:
                return None
            if not isinstance(event, framing.Request) or not self._answer_now(event):
                self.taken = event
                return True
            if self._held() or self.abort_reason is not None:
                return True

    def _answer_now(self, req: framing.Request) -> bool:
        """Answer `req` without waiting, if it is one that can be and everything it reads is in memory; False
        leaves it to the task (nothing was done)."""
        if self.needs_auth or not req.supported:
            return False
        k = req.api_key
        started = time.perf_counter() if self.metrics is not None else 0.0
        if k == apis.FETCH:
            answer = self._fetch_now(req)
            if answer is None:
                return False
        elif k == apis.LIST_OFFSETS:
            if not (CAN_READ_NOWAIT and self.cfg.inline_hot_lookups):
                return False
            try:
                r = LO.decode_request(req.body, req.body_at, req.api_version)
            except MessageError:
                return False  # the task closes the connection, saying why
            nonblocking_mode.on = True
            try:
                body = self.broker.list_offsets(r, req.api_version, self.session.principal)
            except WouldBlock:
                return False
            finally:
                nonblocking_mode.on = False
        elif k == apis.API_VERSIONS:
            body = self._api_versions(req.api_version, E.NONE)
        else:
            return False
        self.daemon.counters.requests += 1
        if k == apis.FETCH:  # (plaintext: _fetch_now answers no other)
            self._write_fetch(*answer, req.body, req.body_at)
        else:
            self._write_now(b"".join(framing.response(req, body)))
        if self.metrics is not None:
            self.metrics.observe(_name(k), time.perf_counter() - started)
        return True

    def _answer_ahead(self, data: bytes) -> bool:
        """Answer the Fetch whose frame `data` is (`FetchAhead.matches`) with the answer read ahead for it, if
        that still holds; False leaves `data` to be read as any request (nothing was done)."""
        started = time.perf_counter() if self.metrics is not None else 0.0
        nonblocking_mode.on = True
        try:
            taken = self.ahead.take_frame(self.session.principal)
        finally:
            nonblocking_mode.on = False
        if taken is None:
            return False
        r, version, plan, answer, body_at = taken
        self.daemon.counters.requests += 1
        self._write_fetch(_with_correlation(answer, _I32.unpack_from(data, 8)[0]),
                          (r, version, self.session.principal, plan), data[4:], body_at)
        if self.metrics is not None:
            self.metrics.observe(_name(apis.FETCH), time.perf_counter() - started)
        return True

    def _write_fetch(self, parts: list, fetched: tuple, frame: bytes, frame_at: int) -> None:
        """Write a Fetch's framed answer (`_write_parts_now`) and, once it is all on its way, read the next one
        ahead while the client takes it in (FetchAhead.prepare: `fetched` is the request, version, principal
        and plan answered; `frame` the request's bytes after the size prefix, its body from `frame_at`)."""
        self._write_parts_now(parts, coalesced=True)
        if not self._held() and self.abort_reason is None:
            self.ahead.prepare(*fetched, frame, frame_at)
            if self.busy_poll_s and self.ahead.expected_within(self.busy_poll_s):
                self.daemon.reactor.expect_request(self.busy_poll_s)

    def _fetch_now(self, req: framing.Request) -> tuple[list, tuple] | None:
        """A plaintext Fetch's framed answer (coalesced pieces: bytes, and Regions for sendfile) and what it
        answered (request, version, principal, plan), when everything it reads is in memory and it has not to
        wait for the log to grow (a long poll); None leaves it to the task. This is what a consumer keeping up
        sends, request after request, so it skips a wake-up of the task and its scopes; the answer read ahead
        for it (FetchAhead), if any, goes out as it is."""
        if self.tls is not None or not (CAN_READ_NOWAIT and self.cfg.inline_hot_lookups):
            return None
        version = req.api_version
        try:
            r = F.decode_request(req.body, req.body_at, version)
        except MessageError:
            return None  # the task closes the connection, saying why
        if r.session_id != 0 or r.forgotten:
            return None
        principal = self.session.principal
        nonblocking_mode.on = True
        try:
            prepared = self.ahead.take(r, version, principal)
            if prepared is not None:
                return _with_correlation(prepared[1], req.correlation_id), (r, version, principal, prepared[0])
            plan = self.broker.fetch(r, version, principal, regions=True, max_bytes_cap=self.cfg.max_read_bytes)
        except WouldBlock:
            return None
        finally:
            nonblocking_mode.on = False
        if plan.total_bytes < max(r.min_bytes, 1) and r.max_wait_ms > 0 and not plan.has_error:
            return None  # a long poll: the task waits for the log to grow
        parts = F.coalesced(framing.response(req, F.encode_response(version, plan.topics)))
        return parts, (r, version, principal, plan)

    def _held(self) -> bool:
        """Whether part of an answer waits to be written (plaintext in `unsent`, or ciphertext in the TLS backlog)."""
        return bool(self.unsent) or (self.tls is not None and bool(self.tls.backlog))

    def _write_now(self, data: bytes) -> None:
        """Write with one system call what the socket takes now; the rest goes to `unsent`, for the task."""
        try:
            if self.tls is not None:
                self.tls.write_now(data)  # what the socket did not take stays in the TLS backlog, in order
                return
            n = os.write(self.fd, data)
        except BlockingIOError:
            n = 0
        except OSError as err:
            self.abort_reason = f"went away before reading its responses ({err.strerror or err})"
            return
        if n < len(data):
            self.unsent = [data[n:]]

    def _write_parts_now(self, parts: list, coalesced: bool = False) -> None:
        """`_write_now` for a plaintext answer in pieces, file Regions sent with sendfile: what the socket takes
        now; the rest (bytes, or a Region from where sendfile stopped, and what follows) goes to `unsent`.
        The socket is corked meanwhile (TCP_CORK): the header leaves with the first records rather than in a
        packet of its own, which woke the consumer once more per answer and cost the listener CPU (measured
        with bench/bench_kafka.py's raw Fetch client)."""
        fd = self.fd
        if not coalesced:
            parts = F.coalesced(parts)
        cork = TCP_CORK is not None and len(parts) > 1
        if cork:
            self.stream.socket.setsockopt(socket.IPPROTO_TCP, TCP_CORK, 1)
        try:
            self._write_pieces(fd, parts)
        finally:
            if cork:
                try:  # uncorked: what is held goes out now
                    self.stream.socket.setsockopt(socket.IPPROTO_TCP, TCP_CORK, 0)
                except OSError:
                    pass  # the peer is gone: the next read or write says so

    def _write_pieces(self, fd: int, parts: list) -> None:
        for i, p in enumerate(parts):
            try:
                if isinstance(p, F.Region):
                    n = os.sendfile(fd, p.handle.fd, p.position, p.size) if p.size else 0
                    if n == 0 and p.size:
                        self.abort_reason = f"a segment file became shorter while being sent ({p.size} bytes short)"
                        return
                    rest = F.Region(p.handle, p.position + n, p.size - n) if n < p.size else None
                else:
                    n = os.write(fd, p)
                    rest = p[n:] if n < len(p) else None
            except BlockingIOError:
                rest = p
            except OSError as err:
                self.abort_reason = f"went away before reading its responses ({err.strerror or err})"
                return
            if rest is not None:
                self.unsent = [rest, *parts[i + 1:]]
                return

    # ------------------------------------------------------------------ answering

    async def _answer(self, req: framing.Request) -> None:
        daemon = self.daemon
        daemon.counters.requests += 1
        started = time.perf_counter()
        name = apis.NAMES.get(req.api_key)
        if self.needs_auth and req.api_key not in apis.PRE_AUTH:
            raise Closing(f"{name or f'API key {req.api_key}'} request before SASL authentication")
        if not req.supported:
            if req.api_key == apis.API_VERSIONS:  # KIP-511: the versions, in a v0 body, with the error
                await self._send(framing.response(req, self._api_versions(0, E.UNSUPPORTED_VERSION)))
                return
            daemon.counters.errors += 1
            raise Closing(f"{name or 'unknown API'} (key {req.api_key}) version {req.api_version} is not served "
                          f"(supported: {self._advertised(req.api_key)})")
        try:
            body = await self._dispatch(req)
        except MessageError as err:
            daemon.counters.errors += 1
            raise Closing(f"malformed {name} v{req.api_version} request: {err}") from None
        await self._send(framing.response(req, body))
        if self.metrics is not None:
            self.metrics.observe(_name(req.api_key), time.perf_counter() - started)
        if self.close_after is not None:
            raise Closing(self.close_after)

    @staticmethod
    def _advertised(api_key: int) -> str:
        rng = apis.ADVERTISED.get(api_key)
        return f"{rng[0]}-{rng[1]}" if rng else "none"

    async def _dispatch(self, req: framing.Request) -> bytes | list:
        k, v, principal = req.api_key, req.api_version, self.session.principal
        broker = self.broker
        if k == apis.FETCH:
            return await self._fetch(F.decode_request(req.body, req.body_at, v), v)
        if k == apis.LIST_OFFSETS:
            r = LO.decode_request(req.body, req.body_at, v)
            return await self._blocking(broker.list_offsets, r, v, principal, inline=True)
        if k == apis.METADATA:
            return await self._blocking(broker.metadata, METADATA_REQUEST.decode(req.body, v, req.body_at), v,
                                        principal)
        if k == apis.API_VERSIONS:
            return self._api_versions(v, E.NONE)
        if k == apis.PRODUCE:
            r = PRODUCE_REQUEST.decode(req.body, v, req.body_at)
            if r["acks"] == 0:  # no response is awaited: as Kafka does with a failed acks=0 produce, close
                raise Closing("produce with acks=0 refused: this listener is read-only")
            self.errors.error(f"produce to {', '.join(t['name'] for t in r['topic_data'])[:200]} refused: read-only")
            return broker.produce(r, v)
        if k == apis.SASL_HANDSHAKE:
            return self._sasl_handshake(SASL_HANDSHAKE_REQUEST.decode(req.body, v, req.body_at), v)
        if k == apis.SASL_AUTHENTICATE:
            return await self._sasl_authenticate(SASL_AUTHENTICATE_REQUEST.decode(req.body, v, req.body_at), v)
        coordinator = self.daemon.kafka_groups
        if coordinator is not None and k in coordinator.APIS:
            return await coordinator.answer(req, principal)
        raise Closing(f"{apis.NAMES.get(k, k)} is advertised but has no handler")

    def _api_versions(self, version: int, error: int) -> bytes:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(apis.ADVERTISED.items())]
        return API_VERSIONS_RESPONSE.encode({"error_code": error, "api_keys": keys}, version)

    async def _blocking(self, fn: Callable[..., Any], *args, inline: bool = False) -> Any:
        """`fn(*args)` on the event loop in non-blocking mode when `inline` and all it reads is in memory,
        else in a worker thread that never waits for the object store (lookupd.daemon.service's rule for the
        msgpack methods, lookupd.daemon.blocking's for the store)."""
        if inline and CAN_READ_NOWAIT and self.daemon.cfg.inline_hot_lookups:
            nonblocking_mode.on = True
            try:
                return fn(*args)
            except WouldBlock:
                pass
            finally:
                nonblocking_mode.on = False
        try:
            return await self.daemon.blocking(lambda: fn(*args), getattr(fn, "__name__", "a Kafka request"))
        except Unavailable as err:  # the object store did not answer in time: the client retries on a new one
            raise Closing(str(err)) from None

    # ------------------------------------------------------------------ Fetch

    async def _fetch(self, r: F.FetchRequest, version: int) -> list:
        if r.session_id != 0 or r.forgotten:  # sessions are declined (session id 0 in every answer)
            return F.encode_response(version, [], error_code=E.FETCH_SESSION_ID_NOT_FOUND)
        broker, principal = self.broker, self.session.principal
        regions = self.tls is None
        cap = self.cfg.max_read_bytes
        # With sendfile nothing but headers and indexes is read: on the event loop when they are in memory
        plan = await self._blocking(lambda: broker.fetch(r, version, principal, regions=regions, max_bytes_cap=cap),
                                    inline=regions)
        if plan.total_bytes < max(r.min_bytes, 1) and r.max_wait_ms > 0 and not plan.has_error:
            deadline = trio.current_time() + min(r.max_wait_ms / 1000, MAX_WAIT_S)
            ends = await self._blocking(broker.ends, r, version, inline=True)
            while trio.current_time() < deadline:
                await trio.sleep(min(LONG_POLL_CHECK_S, max(0.0, deadline - trio.current_time())))
                now_ends = await self._blocking(broker.ends, r, version, inline=True)
                if now_ends == ends:
                    continue
                ends = now_ends
                plan = await self._blocking(lambda: broker.fetch(r, version, principal, regions=regions,
                                                                 max_bytes_cap=cap), inline=regions)
                if plan.total_bytes >= r.min_bytes or plan.has_error:
                    break
        return F.encode_response(version, plan.topics)

    # ------------------------------------------------------------------ SASL

    def _sasl_handshake(self, r: dict, version: int) -> bytes:
        mechanism = r["mechanism"]
        if mechanism != SASL_PLAIN:
            self.errors.error(f"SASL mechanism {mechanism!r:.40} refused (this listener offers PLAIN)")
            return SASL_HANDSHAKE_RESPONSE.encode({"error_code": E.UNSUPPORTED_SASL_MECHANISM,
                                                   "mechanisms": [SASL_PLAIN]}, version)
        self.sasl = mechanism
        return SASL_HANDSHAKE_RESPONSE.encode({"error_code": E.NONE, "mechanisms": [SASL_PLAIN]}, version)

    async def _sasl_authenticate(self, r: dict, version: int) -> bytes:
        """SASL/PLAIN (RFC 4616: authzid NUL authcid NUL password): the password of the token named authcid
        in auth_tokens_file (or "default" for auth_token_file); the principal is then `token:<name>`, as for
        a msgpack client's named token. Wrong ones are throttled per source address (lookupd.daemon.authlimit)."""
        if self.sasl != SASL_PLAIN or not self.needs_auth:
            return SASL_AUTHENTICATE_RESPONSE.encode({"error_code": E.ILLEGAL_SASL_STATE,
                                                      "error_message": "SaslAuthenticate without a SaslHandshake "
                                                                       "for PLAIN, or after authentication"}, version)
        throttle, source = self.daemon.auth_throttle, self.session.source
        while (wait := throttle.wait(source, time.perf_counter())) > 0:
            await trio.sleep(wait)
        parts = r["auth_bytes"].split(b"\x00")
        name = password = None
        if len(parts) == 3:
            name, password = parts[1].decode("utf-8", "replace"), parts[2]
        secret = self.daemon.service.tokens.get(name) if name is not None else None
        if secret is None or not hmac.compare_digest(password, secret.encode()):
            throttle.failed(source, time.perf_counter())
            self.daemon.counters.errors += 1
            self.close_after = "SASL/PLAIN authentication failed"  # answered, then closed, as Kafka does
            return SASL_AUTHENTICATE_RESPONSE.encode({"error_code": E.SASL_AUTHENTICATION_FAILED,
                                                      "error_message": "authentication failed: wrong user name or "
                                                                       "password"}, version)
        throttle.succeeded(source)
        self.session.principal, self.session.authenticated = f"token:{name}", True
        self._authenticated()
        return SASL_AUTHENTICATE_RESPONSE.encode({"error_code": E.NONE, "auth_bytes": b""}, version)

    # ------------------------------------------------------------------ writing

    async def _send(self, parts: list) -> None:
        """Write a framed response's pieces in order: bytes, and file Regions with sendfile. A peer that does
        not read for idle_timeout_s loses the connection."""
        held = sum(len(p) for p in parts if isinstance(p, bytes))
        hold = held > HOLD_ABOVE_BYTES
        if hold:
            self.daemon.buffers.hold(self.holding, answers=held)
        try:
            with trio.move_on_after(self.cfg.idle_timeout_s) as timeout:
                if self.tls is not None:
                    await self.stream.send_all(b"".join(parts))
                else:
                    await self._send_plain(parts)
            if timeout.cancelled_caught:
                raise Closing(f"has not read its responses for {self.cfg.idle_timeout_s:.0f} s")
        except (trio.BrokenResourceError, trio.ClosedResourceError, BrokenPipeError, ConnectionError) as err:
            raise Closing(f"went away before reading its responses ({err})") from None
        finally:
            if hold:
                self.daemon.buffers.release(self.holding, answers=held)

    async def _send_plain(self, parts: list) -> None:
        for p in F.coalesced(parts):
            if isinstance(p, F.Region):
                await self._sendfile(p)
            else:
                await self._write_all(p)

    async def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.stream.socket)
                continue
            view = view[n:]

    async def _sendfile(self, region: F.Region) -> None:
        """Kafka's zero-copy path (FileRecords.writeTo): the segment's bytes go from the page cache to the
        socket. A file cut shorter meanwhile (a truncated log) ends the connection: its frame size is sent."""
        fd, position, left = region.handle.fd, region.position, region.size
        while left:
            try:
                n = os.sendfile(self.fd, fd, position, left)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.stream.socket)
                continue
            if n == 0:
                raise Closing(f"a segment file became shorter while being sent ({left} bytes short)")
            position += n
            left -= n
