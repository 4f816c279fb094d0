"""TLS settings shared by the daemon and its clients: TLS 1.2 and newer, the clients' context, and what a
client's TLS failure most likely means.

The advice names the flags of `lookupd query` and `fusefs mount` (--tls-ca, --tls-cert, --tls-key);
the Spark source's options of the same meaning are lookupd.tls.ca, .cert and .key.
"""

from __future__ import annotations

import socket
import ssl

from ..errors import InvalidArgument

# OpenSSL's certificate verification results (X509_V_ERR_*) that have advice of their own.
X509_CERT_NOT_YET_VALID = 9
X509_CERT_HAS_EXPIRED = 10
X509_HOSTNAME_MISMATCH = 62
X509_IP_ADDRESS_MISMATCH = 64
# The alerts a daemon sends when it wants a client certificate and got none: TLS 1.3's own, and TLS 1.2's
# generic handshake failure.
NO_CLIENT_CERTIFICATE = frozenset({"TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE"})
# How long the check that a port speaks TLS waits for the server's first bytes (a local handshake's
# ServerHello comes in milliseconds).
TLS_PROBE_TIMEOUT_S = 5.0


def tls12_or_newer(ctx: ssl.SSLContext) -> ssl.SSLContext:
    """`ctx` restricted to TLS 1.2+, without renegotiation or compression."""
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    return ctx


def client_context(ca: str | None = None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A client's context: TLS 1.2+, the server's certificate and name verified (against `ca`, else the
    system's CAs), and `cert`/`key` presented for mutual TLS. InvalidArgument naming the file."""
    try:
        ctx = tls12_or_newer(ssl.create_default_context(cafile=ca or None))
    except (OSError, ssl.SSLError) as err:
        raise InvalidArgument(f"cannot load TLS CA file {ca}: {getattr(err, 'strerror', None) or err}") from None
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None)
        except ssl.SSLError as err:
            raise InvalidArgument(_certificate_error(cert, key, err)) from None
        except OSError as err:
            raise InvalidArgument(f"cannot load TLS client certificate {err.filename or cert}: "
                                  f"{err.strerror or err}") from None
    elif key:
        raise InvalidArgument(f"--tls-key {key} needs its certificate too: pass --tls-cert FILE")
    return ctx


def _certificate_error(cert: str, key: str | None, err: ssl.SSLError) -> str:
    """Why --tls-cert (and --tls-key) could not be loaded, in words."""
    if key is None and not _holds_private_key(cert):
        return f"--tls-cert {cert} holds no private key: pass --tls-key FILE"
    if err.reason == "KEY_VALUES_MISMATCH":
        return f"--tls-key {key or cert} is not the private key of --tls-cert {cert}"
    return f"cannot load TLS client certificate {cert}" + (f" with key {key}" if key else "") + \
        f": {err.reason or err} (both must be PEM files)"


def _holds_private_key(path: str) -> bool:
    """Whether a PEM file has a private key in it (its first MiB: a certificate chain is far smaller)."""
    try:
        with open(path, "rb") as f:
            return b"PRIVATE KEY-----" in f.read(1 << 20)
    except OSError:
        return True  # cannot tell: the error from OpenSSL is said as it is


def explain(err: BaseException, host: str, ca: str | None, cert: str | None) -> str | None:
    """The likely cause of a failed TLS connection and what to pass, or None when `err` is not a TLS error."""
    tls = err if isinstance(err, ssl.SSLError) else err.__cause__ if isinstance(err.__cause__, ssl.SSLError) else None
    if tls is None or tls.reason is None:  # the session closed, no alert: said as the OSError it is
        return None
    reason = tls.reason
    if isinstance(tls, ssl.SSLCertVerificationError):
        code = tls.verify_code
        if code in (X509_HOSTNAME_MISMATCH, X509_IP_ADDRESS_MISMATCH):
            why = f"the server's certificate is not for {host}: connect to a name or address it holds"
        elif code in (X509_CERT_HAS_EXPIRED, X509_CERT_NOT_YET_VALID):
            why = f"the server's certificate is not valid now ({tls.verify_message})"
        elif ca:
            why = f"the server's certificate is not signed by --tls-ca {ca}"
        else:
            why = "the server's certificate is not signed by a CA this system trusts: pass --tls-ca FILE"
    elif reason in NO_CLIENT_CERTIFICATE and not cert:
        why = "the daemon wants a client certificate: pass --tls-cert and --tls-key"
    elif reason == "TLSV1_ALERT_UNKNOWN_CA":
        why = f"the daemon does not trust --tls-cert {cert}: it is not signed by the daemon's tls_client_ca_file"
    elif reason == "SSLV3_ALERT_CERTIFICATE_EXPIRED":
        why = f"the daemon refused --tls-cert {cert}: it has expired"
    elif reason == "WRONG_VERSION_NUMBER":
        why = "this port does not speak TLS: leave out tls://"
    else:
        return f"TLS: {reason}"
    return f"{why} (TLS: {reason})"


def speaks_tls(host: str, port: int, timeout: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """Whether the server at host:port answers a TLS ClientHello with a handshake record: asked when a
    plain connection there was closed before any answer. Nothing but the hello is sent."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    hello_out = ssl.MemoryBIO()
    try:
        ctx.wrap_bio(ssl.MemoryBIO(), hello_out).do_handshake()
    except ssl.SSLWantReadError:
        pass
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(hello_out.read())
            head = b""
            while len(head) < 2:
                more = s.recv(2 - len(head))
                if not more:
                    break
                head += more
    except OSError:
        return False
    return head == b"\x16\x03"  # a handshake record of TLS 1.x
