"""The Kafka listener's TCP socket options: what lets a 1 MiB Fetch answer leave in one sendfile, unpaced.

Measured with bench/bench_kafka.py's raw Fetch client on a 2-vCPU VM (docs/performance.md, "Kafka listener:
a plain 1 MiB Fetch"), two of the kernel's choices cost a loopback consumer the most:

* **Pacing.** A congestion control that paces (BBR, a common default) needs the `fq` qdisc, or else TCP
  paces itself with a high-resolution timer between packets. Over loopback, with neither loss nor a queue,
  BBR's model of the path collapses (a minimum RTT of a few µs, a bandwidth estimate its own pacing keeps
  low) and a 1 MiB answer leaves in some 30 timed packets, each a timer and a wake-up of an idle vCPU:
  800-1000 µs a request instead of 260-330. Congestion control has nothing to do there, so the listening
  socket gets reno, which never asks for pacing, and its connections inherit it from the start (set after
  accept it would be too late: the pacing BBR asked for at connect stays on). A connection from another
  host gets the host's default back at once: the network keeps the congestion control its administrator
  chose.
* **TCP_NOTSENT_LOWAT.** trio's SocketStream sets it to 16 KiB. The listener corks the socket while it
  writes an answer's header and records, so nothing leaves and a non-blocking sendfile stops after its
  first 64 KiB: the rest of every answer went to the connection's task and a wait for writability. The
  Kafka connections take the host's value back (unlimited by default): an answer goes out as far as the
  send buffer takes it (a 1 MiB one whole, in one call), and what it queues is page-cache pages.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

log = logging.getLogger(__name__)

# Never asks for pacing, and any process may choose it (the kernel marks it unrestricted): cubic may need
# privileges where it is not the default.
LOCAL_CONGESTION_CONTROL = b"reno"
# Linux's TCP_CONG_NAME_MAX: the longest congestion control name, with its terminating NUL.
NAME_BYTES = 16
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", None)  # Linux's
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", None)
# What the Kafka connections set TCP_NOTSENT_LOWAT to: 0 means the host's (net.ipv4.tcp_notsent_lowat).
NOTSENT_LOWAT = 0


def congestion_control(sock: socket.socket) -> bytes | None:
    """The socket's congestion control (b"bbr", b"cubic"...), None where the system has no such option."""
    if TCP_CONGESTION is None:
        return None
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, NAME_BYTES).split(b"\0", 1)[0]
    except OSError:
        return None


def unpaced_listener(sock: socket.socket) -> bytes | None:
    """Give the listening socket LOCAL_CONGESTION_CONTROL, inherited by what it accepts; return the congestion
    control it had (the host's default), for `accepted` to give back to remote peers, or None if unchanged."""
    default = congestion_control(sock)
    if default is None or default == LOCAL_CONGESTION_CONTROL:
        return None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, LOCAL_CONGESTION_CONTROL)
    except OSError as err:
        log.info("the Kafka listener keeps congestion control %s (cannot set %s: %s)", default.decode(),
                 LOCAL_CONGESTION_CONTROL.decode(), err.strerror or err)
        return None
    return default


def accepted(sock: socket.socket, default: bytes | None, peer_host: str | None) -> None:
    """A connection the Kafka listener accepted: the host's TCP_NOTSENT_LOWAT; and `default` congestion control
    (what `unpaced_listener` replaced) for a peer on another host. A peer on this host (a loopback address, or
    the address it connected to, which the kernel routes over loopback too) keeps reno."""
    try:
        if TCP_NOTSENT_LOWAT is not None:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
        if default is None or peer_host is None:
            return
        peer = ipaddress.ip_address(peer_host)
        if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
            peer = peer.ipv4_mapped  # a dual-stack listener's IPv4 peer
        if peer.is_loopback or peer_host == sock.getsockname()[0]:
            return
        sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, default)
    except (OSError, ValueError) as err:  # gone already; or served as it is, only slower
        log.debug("cannot set the socket options of %s's Kafka connection: %s", peer_host, err)
