"""TLS for the daemon's TCP listener (and its clients' contexts): certificates, reload, and one connection's relay.

A TLS connection is served by the same engine as every other (lookupd.daemon.server) over
one end of a socketpair; `TlsRelay` carries bytes between the client's socket (ciphertext)
and the other end (plaintext) with an ssl.SSLObject over memory BIOs. Both directions are
parked in the daemon's reactor like any connection, so a request and its answer cross the
relay within the reactor's pass, without a trip through trio's scheduler; the plaintext
path is untouched. A relay direction that cannot write (the client or the engine not
reading) waits for its socket through trio and stops reading meanwhile: back-pressure as
in the engine.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from typing import Any, Awaitable, Callable

import trio

from ..errors import InvalidArgument
from ..rpc.tls import tls12_or_newer
from .reactor import Reactor

log = logging.getLogger(__name__)

# A client gets this long to finish its handshake: a slow or silent one cannot hold a slot longer.
HANDSHAKE_TIMEOUT_S = 10.0
# One read of ciphertext or of answers: several TLS records (16 KiB each) at once.
RELAY_BYTES = 256 * 1024
# Short names of the subject attributes in a principal (`CN=etl,O=acme`), as Kafka writes them.
_SHORT_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
                "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC", "userId": "UID"}


class TlsError(Exception):
    """Why a TLS connection ended (logged with its peer)."""


def server_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """The listener's context: TLS 1.2+, the certificate chain and key, and with `client_ca_file`
    a required client certificate signed by it (mutual TLS). InvalidArgument naming the file."""
    ctx = tls12_or_newer(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as err:
        raise InvalidArgument(f"cannot load tls_cert_file {cert_file} with tls_key_file {key_file}: "
                              f"{getattr(err, 'strerror', None) or err}") from None
    if client_ca_file:
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise InvalidArgument(f"cannot load tls_client_ca_file {client_ca_file}: "
                                  f"{getattr(err, 'strerror', None) or err}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class TlsServer:
    """The listener's current context; `reload` (SIGHUP) swaps in one from the files as they are now."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = ""):
        self._files = (cert_file, key_file, client_ca_file)
        self.mutual = bool(client_ca_file)
        self.context = server_context(*self._files)

    def reload(self) -> bool:
        """Load the files again for new connections (open ones keep theirs); on failure keep the old."""
        try:
            self.context = server_context(*self._files)
        except InvalidArgument as err:
            log.error("SIGHUP: keeping the current TLS certificate: %s", err)
            return False
        log.info("SIGHUP: TLS certificate reloaded from %s", self._files[0])
        return True


def principal_of(cert: dict[str, Any] | None) -> str | None:
    """The ACL principal of a verified peer certificate: its subject, most specific first (`CN=etl,O=acme`)."""
    if not cert or not cert.get("subject"):
        return None
    parts = [f"{_SHORT_NAMES.get(k, k)}={v}" for rdn in reversed(cert["subject"]) for k, v in rdn]
    return ",".join(parts)


def _reason(err: BaseException) -> str:
    if isinstance(err, ssl.SSLError):
        return err.reason or err.strerror or str(err) or type(err).__name__
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


_EOF = "eof"  # a relay direction's read side ended
_BLOCKED = "blocked"  # a relay direction holds bytes its destination did not take


class TlsRelay:
    """One TLS connection: `handshake`, then `serve` relays between `net` and the engine's socketpair end."""

    def __init__(self, net: trio.socket.SocketType, context: ssl.SSLContext):
        self.net = net
        self._net_fd = net.fileno()
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._to_client = bytearray()  # ciphertext the client's socket has not taken yet
        self._to_engine = bytearray()  # plaintext the engine's socket has not taken yet
        self._draining: trio.Event | None = None  # set while a task waits to write _to_client
        self._ours: socket.socket | None = None  # the relay's end of the socketpair

    async def handshake(self, timeout: float = HANDSHAKE_TIMEOUT_S) -> None:
        """Complete the server handshake within `timeout`; TlsError saying why it failed."""
        try:
            with trio.fail_after(timeout):
                while True:
                    try:
                        self._tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        await self._send_outgoing()
                        data = await self.net.recv(RELAY_BYTES)
                        if not data:
                            raise TlsError("closed during the TLS handshake") from None
                        self._incoming.write(data)
                await self._send_outgoing()
        except trio.TooSlowError:
            raise TlsError(f"no TLS handshake within {timeout:.0f} s") from None
        except ssl.SSLError as err:
            with trio.move_on_after(0.1):  # the alert saying why, if the peer still listens
                try:
                    await self._send_outgoing()
                except OSError:
                    pass
            raise TlsError(f"TLS handshake failed: {_reason(err)}") from None
        except OSError as err:
            raise TlsError(f"TLS handshake failed: {_reason(err)}") from None

    async def _send_outgoing(self) -> None:
        view = memoryview(self._outgoing.read())
        while view:
            view = view[await self.net.send(view):]

    @property
    def principal(self) -> str | None:
        """The client certificate's subject (under mutual TLS), or None."""
        return principal_of(self._tls.getpeercert())

    def _engine_end(self) -> trio.SocketStream:
        """The plaintext side for the engine: one end of a socketpair whose other end this relay drives."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        self._ours = ours
        self._ours_fd = ours.fileno()
        return trio.SocketStream(trio.socket.from_stdlib_socket(theirs))

    async def serve(self, reactor: Reactor, engine: Callable[[trio.SocketStream], Awaitable[None]]) -> str | None:
        """Run `engine` on the plaintext side and relay until the engine has closed it and every answer
        went out; returns why the connection broke off instead (to log), or None."""
        inner = self._engine_end()
        failure: list[str] = []

        async def guarded(relay: Callable[[Reactor], Awaitable[None]], last: bool) -> None:
            try:
                await relay(reactor)
            except (TlsError, OSError) as err:
                failure.append(str(err) if isinstance(err, TlsError) else f"connection lost ({_reason(err)})")
                last = True
            if last:
                nursery.cancel_scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(engine, inner)
                nursery.start_soon(guarded, self._from_client, False)
                nursery.start_soon(guarded, self._to_client_loop, True)
        finally:
            self._ours.close()
        return failure[0] if failure else None

    # ---------------------------------------------------------------- client -> engine

    async def _from_client(self, reactor: Reactor) -> None:
        ours = self._ours
        # The handshake's last read may have brought the first requests too: they wait in the BIO.
        state = self._forward() if self._incoming.pending else None
        while True:
            if state is None:
                state = await reactor.park(self._net_fd, self._on_client_readable)
            await self._drain_to_client()
            while self._to_engine:
                await trio.lowlevel.wait_writable(ours)
                self._write_to_engine(b"")
            if state == _EOF:
                ours.shutdown(socket.SHUT_WR)  # the engine reads its peer's end
                return
            state = None

    def _on_client_readable(self) -> str | None:
        """Decrypt what arrived and pass it to the engine; _EOF, _BLOCKED, or None to stay parked."""
        try:
            data = os.read(self._net_fd, RELAY_BYTES)
        except BlockingIOError:
            return None
        if not data:
            return _EOF
        self._incoming.write(data)
        return self._forward()

    def _forward(self) -> str | None:
        """Decrypt what the incoming BIO holds and pass it to the engine; _EOF, _BLOCKED or None."""
        tls, incoming = self._tls, self._incoming
        plain, end = b"", False
        try:
            while True:
                chunk = tls.read(RELAY_BYTES)  # one record's data
                if not chunk:
                    end = True  # the client's close_notify
                    break
                plain = plain + chunk if plain else chunk
                if not incoming.pending:
                    break  # all that arrived is decrypted; no SSLWantReadError raised (and caught) per request
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            end = True
        except ssl.SSLError as err:
            raise TlsError(f"bad TLS record: {_reason(err)}") from None
        blocked = False
        if self._outgoing.pending:  # TLS 1.3 post-handshake messages (a key update's answer)
            blocked = not self._write_to_client(self._outgoing.read())
        if plain and not self._write_to_engine(plain):
            blocked = True
        if end:
            return _EOF
        return _BLOCKED if blocked else None

    def _write_to_engine(self, data: bytes) -> bool:
        """Write `data` after what the engine's socket has not taken; True when nothing is left over."""
        buf = self._to_engine
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        try:
            n = os.write(self._ours_fd, data)
        except BlockingIOError:
            n = 0
        if n < len(data):
            buf += data[n:]
            return False
        return True

    # ---------------------------------------------------------------- engine -> client

    async def _to_client_loop(self, reactor: Reactor) -> None:
        while True:
            done = await reactor.park(self._ours_fd, self._on_engine_readable) == _EOF
            await self._drain_to_client()
            if done:
                try:
                    self._tls.unwrap()  # close_notify
                except ssl.SSLError:
                    pass
                if self._outgoing.pending and not self._write_to_client(self._outgoing.read()):
                    with trio.move_on_after(1.0):
                        await self._drain_to_client()
                return

    def _on_engine_readable(self) -> str | None:
        """Encrypt the engine's answers and send them; _EOF, _BLOCKED, or None to stay parked."""
        try:
            data = os.read(self._ours_fd, RELAY_BYTES)
        except BlockingIOError:
            return None
        if not data:
            return _EOF
        self._tls.write(data)
        return None if self._write_to_client(self._outgoing.read()) else _BLOCKED

    def _write_to_client(self, data: bytes) -> bool:
        """Send ciphertext in order after any not yet taken; True when nothing is left over."""
        if self._to_client:
            self._to_client += data
            return False
        try:
            n = os.write(self._net_fd, data)
        except BlockingIOError:
            n = 0
        except OSError as err:
            raise TlsError(f"connection lost ({_reason(err)})") from None
        if n < len(data):
            self._to_client += data[n:]
            return False
        return True

    async def _drain_to_client(self) -> None:
        """Wait until the client's socket took every byte held for it (one task waits; others wait for it)."""
        while self._to_client:
            if self._draining is not None:
                await self._draining.wait()
                continue
            self._draining = trio.Event()
            try:
                await trio.lowlevel.wait_writable(self._net_fd)
                try:
                    n = os.write(self._net_fd, self._to_client)
                except BlockingIOError:
                    n = 0
                except OSError as err:
                    raise TlsError(f"connection lost ({_reason(err)})") from None
                del self._to_client[:n]
            finally:
                self._draining.set()
                self._draining = None
