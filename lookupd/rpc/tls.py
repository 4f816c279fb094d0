"""TLS settings shared by the daemon and its clients: TLS 1.2 and newer, and the clients' context."""

from __future__ import annotations

import ssl

from ..errors import InvalidArgument


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
        except (OSError, ssl.SSLError) as err:
            raise InvalidArgument(f"cannot load TLS client certificate {cert} (key {key}): "
                                  f"{getattr(err, 'strerror', None) or err}") from None
    elif key:
        raise InvalidArgument("a TLS client key needs its certificate too (tls cert)")
    return ctx
