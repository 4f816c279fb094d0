"""TLS for the daemon's TCP listener: certificates, their reload, and one connection's TLS state.

A TLS connection is served by the same engine as every other (lookupd.daemon.connection), parked
in the same reactor on its TCP socket: an ssl.SSLObject over memory BIOs decrypts what the
engine reads (`TlsSession.decrypt`) and encrypts what it writes (`write_now`, and
`TlsStream.send_all` for writes that must wait), so a request is answered within the
reactor's pass as over plaintext, and the plaintext path only checks that a connection has
no TLS state. Ciphertext is written strictly in the order it was made (one backlog), so
answers written from the event loop and from worker threads never interleave records.
"""

from __future__ import annotations

import logging
import os
import ssl
import trio

from ..errors import InvalidArgument
from ..rpc.tls import tls12_or_newer
from .principal import principal_of

log = logging.getLogger(__name__)

# A client gets this long to finish its handshake: a slow or silent one cannot hold a slot longer.
HANDSHAKE_TIMEOUT_S = 10.0
# One read during the handshake, and the most plaintext one decrypt call returns per record read.
RECEIVE_BYTES = 64 * 1024
# How long a refused client is given to read the alert that says why.
ALERT_GRACE_S = 0.1


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


def _reason(err: BaseException) -> str:
    if isinstance(err, ssl.SSLError):
        return err.reason or err.strerror or str(err) or type(err).__name__
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


class TlsSession:
    """One TLS connection's state: the handshake, then `decrypt` and `write_now`, the engine's hooks on its
    reads and writes (lookupd.daemon.connection). Ciphertext leaves in the order it was made: everything
    encrypted goes behind `backlog`, the bytes the socket has not taken yet."""

    def __init__(self, sock: trio.socket.SocketType, context: ssl.SSLContext):
        self.sock = sock
        self.fd = sock.fileno()
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.backlog = bytearray()  # ciphertext made and not yet written, in order

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
                        data = await self.sock.recv(RECEIVE_BYTES)
                        if not data:
                            raise TlsError("closed during the TLS handshake") from None
                        self._incoming.write(data)
                await self._send_outgoing()
        except trio.TooSlowError:
            raise TlsError(f"no TLS handshake within {timeout:.0f} s") from None
        except ssl.SSLError as err:
            with trio.move_on_after(ALERT_GRACE_S):  # the alert saying why, if the peer still listens
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
            view = view[await self.sock.send(view):]

    @property
    def principal(self) -> str | None:
        """The client certificate's subject as Kafka writes it (under mutual TLS), or None
        (lookupd.daemon.principal)."""
        return principal_of(self._tls.getpeercert(binary_form=True))

    def decrypt(self, data: bytes) -> bytes | None:
        """The plaintext in what arrived: None while no whole record has, b"" at the client's close_notify.
        TlsError for a record that does not decrypt (the connection cannot go on)."""
        if data:
            self._incoming.write(data)
        tls, incoming = self._tls, self._incoming
        plain, end = b"", False
        try:
            while True:
                chunk = tls.read(RECEIVE_BYTES)  # one record's data
                if not chunk:
                    end = True
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
        if self._outgoing.pending:  # TLS 1.3 post-handshake messages: they go out with the next answer
            self.backlog += self._outgoing.read()
        if plain:
            return plain
        return b"" if end else None

    def write_now(self, data: bytes) -> None:
        """Encrypt `data` behind the backlog and write what the socket takes now, without waiting (OSError:
        the peer is gone); what it does not take stays in `backlog`."""
        if data:
            self._tls.write(data)
        out = self._outgoing.read()
        backlog = self.backlog
        if backlog:
            backlog += out
            out = backlog
        if not out:
            return
        try:
            n = os.write(self.fd, out)
        except BlockingIOError:
            n = 0
        if out is backlog:
            del backlog[:n]
        elif n < len(out):
            backlog += out[n:]


class TlsStream(trio.abc.Stream):
    """The engine's stream for a TLS connection: `send_all` encrypts (behind anything held) and waits until
    the socket took it all; `socket` is the TCP socket the engine parks on."""

    def __init__(self, raw: trio.SocketStream, session: TlsSession):
        self.raw = raw
        self.socket = raw.socket
        self.session = session

    async def send_all(self, data: bytes) -> None:
        session = self.session
        try:
            session.write_now(data)
            while session.backlog:
                await trio.lowlevel.wait_writable(session.fd)
                session.write_now(b"")
        except OSError as err:
            raise trio.BrokenResourceError(f"connection lost ({_reason(err)})") from err

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.wait_writable(self.session.fd)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next plaintext, b"" at the end. The engine reads the socket itself (TlsSession.decrypt);
        this is for draining the peer before a close."""
        while True:
            data = await self.raw.receive_some(RECEIVE_BYTES)
            try:
                plain = self.session.decrypt(data) if data else b""
            except TlsError as err:
                raise trio.BrokenResourceError(str(err)) from None
            if plain is not None:
                return plain

    async def send_eof(self) -> None:
        await self.raw.send_eof()

    async def aclose(self) -> None:
        await self.raw.aclose()
