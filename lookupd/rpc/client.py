"""Clients for the lookup daemon.

`Client` is blocking and thread-safe: one socket, a lock around writes, and a reader thread
that hands each response to the caller waiting for its msgid, so any number of threads can
share one client and have calls in flight at once. `TrioClient` is the async equivalent
for trio code. Both take a Unix socket path, "HOST:PORT" or "tls://HOST:PORT", an optional
token (sent with `auth` before anything else), `tls_ca`/`tls_cert`/`tls_key` files for TLS
(the server's certificate and name are verified; the client certificate is for mutual TLS)
and a per-call timeout, and raise:

* RemoteError(code, message) for an error the daemon answered (a LookupdError: `.code` is
  the wire code, e.g. "OFFSET_OUT_OF_RANGE");
* Unavailable naming the address when the daemon cannot be reached, closes the connection,
  or does not answer within the timeout.

Convenience methods mirror the daemon's methods (see lookupd.service) and return what the
daemon sends: maps with string keys, None where nothing matches, bytes for records.
"""

from __future__ import annotations

import socket
import ssl
import threading
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, Callable, NamedTuple

import trio

from . import protocol as rpc
from ..errors import InvalidArgument, LookupdError, TooLarge, Unavailable
from .address import default_address, is_tls, tcp_address
from .tls import TLS_PROBE_TIMEOUT_S, client_context, explain, speaks_tls

DEFAULT_MAX_RESPONSE_BYTES = 1 << 30  # columnar answers of a million targets run to tens of MB
BYTES_MARKER = "$base64"  # how `lookupd query` (lookupd.tools.query) prints bytes in JSON


class RemoteError(LookupdError):
    """An error response from the daemon; `code` is its wire code."""

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def _remote_error(error: Any) -> RemoteError:
    if isinstance(error, dict):
        return RemoteError(str(error.get("code", "INTERNAL")), str(error.get("message", error)))
    return RemoteError("INTERNAL", repr(error))


def topic_denial(call: Callable[..., Any], topic: str) -> RemoteError | None:
    """Why the daemon does not list `topic`, when an [[acl]] rule is why: `partitions` leaves out what the
    principal may not describe, so a client that looks for a topic and does not find it asks about that
    topic alone (as a Kafka client's Metadata request names its topics). The UNAUTHORIZED answer names the
    principal, the operation and the topic; None when the topic is simply not there (or is there now)."""
    try:
        call("segments", topic, 0)
    except RemoteError as err:
        if err.code == "UNAUTHORIZED":
            return err
    return None


class TlsFiles(NamedTuple):
    """The TLS files a client was given, for the advice when its handshake fails."""

    ca: str | None = None
    cert: str | None = None


def _unreachable(address: str, err: BaseException, tls: TlsFiles = TlsFiles()) -> Unavailable:
    tcp = tcp_address(address)
    why = explain(err, tcp[0] if tcp else address, tls.ca, tls.cert) or \
        getattr(err, "strerror", None) or str(err) or type(err).__name__
    hint = "" if tcp else "; is `lookupd serve` running, and is this its --socket?"
    return Unavailable(f"cannot reach lookupd at {address}: {why}{hint}")


def _closed_before_answering(address: str, timeout: float) -> Unavailable:
    """A connection closed before any answer: on a plain TCP address, the port may be the daemon's TLS one."""
    tcp = tcp_address(address)
    if tcp is not None and not is_tls(address) and speaks_tls(*tcp, timeout=min(timeout, TLS_PROBE_TIMEOUT_S)):
        return Unavailable(f"cannot reach lookupd at {address}: this port speaks TLS: use tls://{address}")
    return Unavailable(f"lookupd at {address} closed the connection")


def tls_context(address: str, ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The client's TLS context for a `tls://` address (None for others); InvalidArgument when TLS files are
    given for an address that is not `tls://`."""
    if not is_tls(address):
        if ca or cert or key:
            raise InvalidArgument(f"TLS files given but {address} is not a tls://HOST:PORT address")
        return None
    return client_context(ca, cert, key)


class _TlsSocket:
    """TLS over a connected blocking socket, for `Client`: one thread receives while others send (an
    ssl.SSLSocket is not safe for that), so the TLS state is driven through memory buffers under a lock
    and the socket's reads and writes happen outside it."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, host: str):
        self._sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._in, self._out, server_hostname=host)
        self._lock = threading.Lock()
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._sock.sendall(self._out.read())
                data = self._sock.recv(1 << 16)
                if not data:
                    raise ConnectionResetError("the daemon closed the connection during the TLS handshake")
                self._in.write(data)
        self._sock.sendall(self._out.read())

    def sendall(self, data: bytes) -> None:  # callers hold Client's write lock: ciphertext goes out in order
        with self._lock:
            self._tls.write(data)
            out = self._out.read()
        self._sock.sendall(out)

    def recv(self, n: int) -> bytes:
        while True:
            with self._lock:
                try:
                    return self._tls.read(n)
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b""
            data = self._sock.recv(max(n, 1 << 16))
            if not data:
                return b""
            with self._lock:
                self._in.write(data)

    def settimeout(self, t: float | None) -> None:
        self._sock.settimeout(t)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()


class _Methods:
    """Typed wrappers over `call` (for TrioClient they return awaitables)."""

    def call(self, method: str, *params: Any) -> Any:
        raise NotImplementedError

    def ping(self):
        return self.call("ping")

    def stats(self):
        return self.call("stats")

    def partitions(self):
        return self.call("partitions")

    def segments(self, topic: str, partition: int):
        return self.call("segments", topic, partition)

    def lookup_offset(self, topic: str, partition: int, offset: int, mode: str = "floor"):
        return self.call("lookup_offset", topic, partition, offset, mode)

    def lookup_timestamp(self, topic: str, partition: int, timestamp: int, mode: str = "floor"):
        return self.call("lookup_timestamp", topic, partition, timestamp, mode)

    def resolve_offset(self, topic: str, partition: int, offset: int):
        return self.call("resolve_offset", topic, partition, offset)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int):
        return self.call("offset_for_timestamp", topic, partition, timestamp)

    def aborted_transactions(self, topic: str, partition: int, start_offset: int, end_offset: int):
        return self.call("aborted_transactions", topic, partition, start_offset, end_offset)

    def read(self, topic: str, partition: int, offset: int, max_bytes: int):
        return self.call("read", topic, partition, offset, max_bytes)

    def lookup_offsets(self, topic: str, partition: int, offsets: list[int], mode: str = "floor"):
        return self.call("lookup_offsets", topic, partition, list(offsets), mode)

    def resolve_offsets(self, topic: str, partition: int, offsets: list[int]):
        return self.call("resolve_offsets", topic, partition, list(offsets))

    def offsets_for_timestamps(self, topic: str, partition: int, timestamps: list[int]):
        return self.call("offsets_for_timestamps", topic, partition, list(timestamps))

    def groups(self):
        return self.call("groups")

    def group_offsets(self, group: str, isolation: str = "read_uncommitted"):
        return self.call("group_offsets", group, isolation)


# ====================================================================== blocking


class Client(_Methods):
    """Blocking, thread-safe client over one connection (use as a context manager)."""

    def __init__(self, address: str | None = None, *, token: str | None = None, timeout: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 max_request_bytes: int = rpc.DEFAULT_MAX_FRAME_BYTES,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None):
        self.address = address or default_address()
        self.timeout = timeout
        self.max_request_bytes = max_request_bytes
        self._tls = TlsFiles(tls_ca, tls_cert)
        tcp = tcp_address(self.address)
        ctx = tls_context(self.address, tls_ca, tls_cert, tls_key)
        try:
            if tcp:
                self._sock = socket.create_connection(tcp, timeout=timeout)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if ctx is not None:
                    self._sock = _TlsSocket(self._sock, ctx, tcp[0])
            else:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sock.settimeout(timeout)
                self._sock.connect(self.address)
        except OSError as err:  # ssl.SSLError too: a certificate the other side refused
            if hasattr(self, "_sock"):
                self._sock.close()
            raise _unreachable(self.address, err, self._tls) from None
        self._sock.settimeout(None)  # the reader blocks; calls time out on their futures
        self._conn = rpc.Connection("client", max_response_bytes)
        self._write_lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._closed: LookupdError | None = None
        self._closing = False
        self._reader = threading.Thread(target=self._read_loop, name=f"lookupd-client {self.address}", daemon=True)
        self._reader.start()
        if token is not None:
            self.call("auth", token)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closing = True  # the reader's end is ours, not the daemon's: nothing to find out about the port
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(timeout=5)
        self._sock.close()

    @property
    def closed(self) -> bool:
        """Whether the connection is gone (calls fail at once with the reason)."""
        return self._closed is not None

    def call(self, method: str, *params: Any, timeout: float | None = None) -> Any:
        """Send one request and wait for its answer; several threads may call at once."""
        fut: Future = Future()
        failure = None
        with self._write_lock:
            if self._closed is not None:
                raise self._closed
            msgid, data = self._conn.send_request(method, params)
            if len(data) > self.max_request_bytes:
                raise TooLarge(f"a {method} request of {len(data):,} bytes is over the daemon's frame limit of "
                               f"{self.max_request_bytes:,} bytes (max_frame_bytes): split the list into smaller calls")
            self._pending[msgid] = fut
            try:
                self._sock.sendall(data)
            except OSError as err:
                self._pending.pop(msgid, None)
                failure = _unreachable(self.address, err, self._tls)
        if failure is not None:
            # The daemon may have said why it closed the connection (an error notification, a TLS alert):
            # the reader has its words.
            self._reader.join(timeout=1.0)
            raise self._closed if self._closed is not None else failure
        wait = self.timeout if timeout is None else timeout
        try:
            error, result = fut.result(wait)
        except FutureTimeout:
            self._pending.pop(msgid, None)
            raise Unavailable(f"no answer from lookupd at {self.address} to {method} within {wait} s") from None
        if error is not None:
            raise _remote_error(error)
        return result

    def _read_loop(self) -> None:
        failure: LookupdError | None = None
        heard = False  # whether anything came from the daemon
        try:
            while True:
                event = self._conn.next_event()
                if event is rpc.NEED_DATA:
                    self._conn.receive_data(self._sock.recv(1 << 20))
                    continue
                if event is rpc.CLOSED:
                    break
                heard = True
                if isinstance(event, rpc.Response):
                    fut = self._pending.pop(event.msgid, None)
                    if fut is not None:
                        fut.set_result((event.error, event.result))
                elif isinstance(event, rpc.Notification):
                    if event.method == rpc.ERROR_NOTIFICATION and event.params:
                        failure = _remote_error(event.params[0])  # the daemon is about to close
                else:  # a ProtocolError: the daemon sent something we cannot read
                    failure = Unavailable(f"bad answer from lookupd at {self.address}: {event.message}")
                    if event.fatal:
                        break
        except OSError as err:
            # The daemon's own reason outranks the reset that follows it; a reset before any word is a close.
            if not isinstance(failure, RemoteError) and (heard or not isinstance(err, ConnectionResetError)):
                failure = _unreachable(self.address, err, self._tls)
        if failure is None:
            # Closed with calls waiting and not a word said: on a plain TCP address, maybe the TLS port.
            failure = _closed_before_answering(self.address, self.timeout) \
                if self._pending and not heard and not self._closing else \
                Unavailable(f"lookupd at {self.address} closed the connection")
        with self._write_lock:
            self._closed = failure
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(failure)


# ====================================================================== trio


class TrioClient(_Methods):
    """Async client over one connection: `async with await TrioClient.connect(path) as c: await c.ping()`.

    No background task: whichever caller is waiting reads the stream for everyone and wakes
    the others, so a client needs no nursery and may be shared by any number of tasks.
    """

    def __init__(self, stream: trio.abc.Stream, address: str, timeout: float, max_response_bytes: int,
                 tls: TlsFiles = TlsFiles()):
        self.address = address
        self.timeout = timeout
        self._tls = tls
        self._heard = False  # whether anything came from the daemon
        self._stream = stream
        self._conn = rpc.Connection("client", max_response_bytes)
        self._send_lock = trio.Lock()
        self._pending: set[int] = set()  # msgids whose callers still wait
        self._answers: dict[int, tuple] = {}  # msgid -> (error, result)
        self._reading = False
        self._progress = trio.Event()
        self._closed: LookupdError | None = None

    @classmethod
    async def connect(cls, address: str | None = None, *, token: str | None = None, timeout: float = 30.0,
                      max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, tls_ca: str | None = None,
                      tls_cert: str | None = None, tls_key: str | None = None) -> "TrioClient":
        address = address or default_address()
        tcp = tcp_address(address)
        ctx = tls_context(address, tls_ca, tls_cert, tls_key)
        try:
            with trio.fail_after(timeout):
                stream = await (trio.open_tcp_stream(*tcp) if tcp else trio.open_unix_socket(address))
                if ctx is not None:
                    stream = trio.SSLStream(stream, ctx, server_hostname=tcp[0])
                    try:
                        await stream.do_handshake()
                    except BaseException:
                        await trio.aclose_forcefully(stream)
                        raise
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as err:
            raise _unreachable(address, err, TlsFiles(tls_ca, tls_cert)) from None
        client = cls(stream, address, timeout, max_response_bytes, TlsFiles(tls_ca, tls_cert))
        if token is not None:
            try:
                await client.call("auth", token)
            except BaseException:
                await client.aclose()
                raise
        return client

    async def __aenter__(self) -> "TrioClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self._stream)

    async def call(self, method: str, *params: Any, timeout: float | None = None) -> Any:
        if self._closed is not None:
            raise self._closed
        msgid, data = self._conn.send_request(method, params)
        wait = self.timeout if timeout is None else timeout
        self._answers.pop(msgid, None)
        self._pending.add(msgid)
        try:
            with trio.fail_after(wait):
                async with self._send_lock:
                    try:
                        await self._stream.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                        raise _unreachable(self.address, err, self._tls) from None
                while msgid not in self._answers:
                    if self._closed is not None:
                        raise self._closed
                    if self._reading:
                        await self._progress.wait()
                    else:
                        await self._read_some()
        except trio.TooSlowError:
            raise Unavailable(f"no answer from lookupd at {self.address} to {method} within {wait} s") from None
        finally:
            self._pending.discard(msgid)
        error, result = self._answers.pop(msgid)
        if error is not None:
            raise _remote_error(error)
        return result

    async def _read_some(self) -> None:
        """Read one chunk and hand out every answer in it (only one caller reads at a time)."""
        self._reading = True
        try:
            try:
                data = await self._stream.receive_some(1 << 20)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                if not self._heard and isinstance(err.__cause__, ConnectionResetError):
                    data = b""  # a reset before any word: as a close
                else:
                    self._closed = self._closed or _unreachable(self.address, err, self._tls)  # keep the daemon's reason
                    return
            self._conn.receive_data(data)
            while True:
                event = self._conn.next_event()
                if event is rpc.NEED_DATA:
                    return
                if event is rpc.CLOSED:
                    if self._closed is None and not self._heard:  # not a word said: maybe the TLS port
                        self._closed = await trio.to_thread.run_sync(_closed_before_answering, self.address,
                                                                     self.timeout)
                    self._closed = self._closed or Unavailable(f"lookupd at {self.address} closed the connection")
                    return
                self._heard = True
                if isinstance(event, rpc.Response):
                    if event.msgid in self._pending:
                        self._answers[event.msgid] = (event.error, event.result)
                elif isinstance(event, rpc.Notification):
                    if event.method == rpc.ERROR_NOTIFICATION and event.params:
                        self._closed = _remote_error(event.params[0])  # the daemon is about to close
                else:
                    if event.fatal:
                        self._closed = Unavailable(f"bad answer from lookupd at {self.address}: {event.message}")
                        return
        finally:
            self._reading = False
            self._progress.set()
            self._progress = trio.Event()
