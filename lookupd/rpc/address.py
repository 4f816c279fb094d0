"""Where a daemon listens, as clients and the daemon write it: one default and one HOST:PORT grammar.

An address is a Unix socket path, `HOST:PORT` (`:PORT` and `[V6]:PORT` too; the host
defaults to 127.0.0.1) or `tls://HOST:PORT` (TCP with TLS). A client tells them apart by form:
a `tls://` prefix is TLS, no `/` and a numeric port after the last `:` is TCP, anything else a
path. The daemon's `tcp` setting also takes a bare `PORT`.
"""

from __future__ import annotations

import os

from ..errors import InvalidArgument

DEFAULT_SOCKET = os.path.join("run", "lookupd.sock")  # relative to the working directory
DEFAULT_HOST = "127.0.0.1"
TLS_SCHEME = "tls://"


def default_address() -> str:
    """$LOOKUPD_SOCKET, else DEFAULT_SOCKET."""
    return os.environ.get("LOOKUPD_SOCKET") or DEFAULT_SOCKET


def parse_host_port(spec: str) -> tuple[str, int]:
    """"PORT", ":PORT", "HOST:PORT" or "[V6]:PORT" -> (host, port); InvalidArgument otherwise."""
    host, sep, port = spec.rpartition(":")
    if not sep:
        host, port = "", spec
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(f"{spec!r}: expected HOST:PORT, :PORT or PORT with a port from 0 to 65535")
    return host, int(port)


def is_tls(address: str) -> bool:
    """Whether a client address is `tls://HOST:PORT`."""
    return address.startswith(TLS_SCHEME)


def tcp_address(address: str) -> tuple[str, int] | None:
    """(host, port) when a client address is `HOST:PORT` or `tls://HOST:PORT`, None when it is a socket path."""
    if is_tls(address):
        return parse_host_port(address[len(TLS_SCHEME):])
    if "/" in address:
        return None
    _, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return parse_host_port(address)
