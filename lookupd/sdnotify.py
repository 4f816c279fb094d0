"""systemd's readiness protocol (sd_notify): a leaf module, so the daemon and the FUSE mount share it
without the mount importing the daemon."""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def sd_notify(message: str) -> bool:
    """Send a state line to $NOTIFY_SOCKET (READY=1, STOPPING=1, WATCHDOG=1); False if unset."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr[0] == "@":
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(message.encode())
    except OSError as err:
        log.warning("cannot notify systemd at %s: %s", os.environ["NOTIFY_SOCKET"], err)
        return False
    return True
