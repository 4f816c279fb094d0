"""The daemon's listening sockets: systemd-activated ones, or the configured Unix socket and TCP address.

Unix peers are trusted (the socket file's permissions guard them); a TCP listener (or the
metrics endpoint) on a non-loopback address is refused without TLS unless allow_plaintext_tcp,
and the TCP listener there needs clients to authenticate: a token, or mutual TLS.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat
from dataclasses import dataclass

from ..errors import InvalidArgument, Unavailable
from ..rpc.address import parse_host_port
from . import kafkasocket
from .config import Config

log = logging.getLogger(__name__)

# How many connections the kernel queues for accept() (the listen backlog).
BACKLOG = 512


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


@dataclass
class Bound:
    """A listening socket and what it means: Unix peers are trusted, TCP ones may need auth."""

    sock: socket.socket
    kind: str  # "unix" or "tcp"
    label: str
    tls: bool = False  # connections start with a TLS handshake (lookupd.daemon.tls)
    remove_path: str | None = None  # the socket file we created, removed at exit
    protocol: str = "msgpack"  # what its connections speak: msgpack-rpc, or "kafka" (lookupd.daemon.kafkaconn)
    # The host's congestion control, given back to connections from other hosts; the listener's own is
    # reno, which never paces (lookupd.daemon.kafkasocket). None: the listener has the host's.
    congestion_control: bytes | None = None


def activated_sockets() -> list[socket.socket]:
    """Sockets passed by systemd socket activation (LISTEN_FDS from fd 3), or []."""
    count, pid = os.environ.get("LISTEN_FDS"), os.environ.get("LISTEN_PID")
    if not count or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return []
    for var in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
        os.environ.pop(var, None)
    socks = []
    for fd in range(3, 3 + int(count)):
        os.set_inheritable(fd, False)
        s = socket.socket(fileno=fd)
        if s.type != socket.SOCK_STREAM or not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise InvalidArgument(f"activated fd {fd} is not a listening stream socket: use ListenStream=")
        socks.append(s)
    return socks


def bind_unix(path: str, mode: int) -> Bound:
    """Listen on `path`: create its dir, replace a stale socket file, refuse if a daemon answers there."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise InvalidArgument(f"{path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            log.info("removing stale socket %s (nothing listens on it)", path)
            os.unlink(path)
        except OSError as err:
            raise Unavailable(f"cannot check existing socket {path}: {err.strerror}") from None
        else:
            raise Unavailable(f"another lookupd is already listening on {path}; stop it or choose another --socket")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o777 & ~mode)  # no window in which the socket has looser permissions
    try:
        sock.bind(path)
    except OSError as err:
        sock.close()
        raise Unavailable(f"cannot listen on {path}: {err.strerror or err}") from None
    finally:
        os.umask(old)
    os.chmod(path, mode)
    sock.listen(BACKLOG)
    return Bound(sock, "unix", path, remove_path=path)


def bind_tcp(host: str, port: int) -> Bound:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as err:
        sock.close()
        raise Unavailable(f"cannot listen on TCP {host}:{port}: {err.strerror}") from None
    sock.listen(BACKLOG)
    return Bound(sock, "tcp", "tcp %s:%d" % sock.getsockname()[:2])


def open_listeners(cfg: Config, token: str | None) -> list[Bound]:
    """Activated sockets if systemd passed any, else the configured socket and TCP address.
    `token`: whether clients authenticate with a token (any non-empty value)."""
    if cfg.metrics:
        _require_tls(parse_host_port(cfg.metrics)[0], cfg.metrics_tls, cfg, "metrics", "metrics_tls = true")
    activated = activated_sockets()
    if activated:
        bound = []
        for s in activated:
            if s.family == socket.AF_UNIX:
                bound.append(Bound(s, "unix", f"activated {s.getsockname() or 'unix socket'}"))
            else:
                _require_auth(s.getsockname()[0], token, cfg)
                bound.append(Bound(s, "tcp", "activated tcp %s:%d" % s.getsockname()[:2], tls=cfg.tls))
        return bound
    bound = []
    try:
        if cfg.socket:
            bound.append(bind_unix(cfg.socket, cfg.socket_mode))
        if cfg.tcp:
            host, port = parse_host_port(cfg.tcp)
            _require_auth(host, token, cfg)
            b = bind_tcp(host, port)
            b.tls = cfg.tls
            bound.append(b)
    except BaseException:
        close_listeners(bound)
        raise
    return bound


def open_kafka_listeners(cfg: Config, token: str | None) -> list[Bound]:
    """The [kafka] listen addresses, under the TCP listener's rules: TLS off loopback (or allow_plaintext_tcp),
    and there a way to authenticate (SASL/PLAIN against the token files, or mutual TLS)."""
    bound = []
    try:
        for spec in cfg.kafka.listen:
            host, port = parse_host_port(spec)
            _require_auth(host, token, cfg)
            b = bind_tcp(host, port)
            b.tls, b.protocol, b.label = cfg.tls, "kafka", "kafka " + b.label
            b.congestion_control = kafkasocket.unpaced_listener(b.sock)
            bound.append(b)
    except BaseException:
        close_listeners(bound)
        raise
    return bound


def _require_tls(host: str, tls: bool, cfg: Config, what: str, fix: str) -> None:
    if not tls and not cfg.allow_plaintext_tcp and not is_loopback(host):
        raise InvalidArgument(f"refusing to serve {what} on non-loopback address {host} without TLS: tokens and "
                              f"records would cross the network in clear. Set {fix}, or allow_plaintext_tcp = "
                              f"true if the network is trusted")


def _require_auth(host: str, token: str | None, cfg: Config) -> None:
    """A non-loopback TCP listener: TLS (or allow_plaintext_tcp), and a token or mutual TLS."""
    _require_tls(host, cfg.tls, cfg, "TCP", "tls_cert_file and tls_key_file")
    if not token and not cfg.tls_client_ca_file and not is_loopback(host):
        raise InvalidArgument(f"refusing to listen on non-loopback TCP address {host} with no way for clients to "
                              f"authenticate: set auth_token_file or auth_tokens_file, or tls_client_ca_file "
                              f"(mutual TLS)")


def close_listeners(bound: list[Bound]) -> None:
    for b in bound:
        b.sock.close()
        if b.remove_path:
            try:
                os.unlink(b.remove_path)
            except FileNotFoundError:
                pass
