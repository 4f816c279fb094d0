"""Wrong `auth` tokens, throttled per source address across connections (no I/O: the daemon waits).

A delay per connection is no limit: a client that reconnects after each wrong token starts
afresh (one thread made 2,337 guesses a second that way). Here the delay belongs to the
source address: after its n-th recent wrong token, no token from that address is checked
before AUTH_DELAY_S * 2**(n-1) seconds (at most AUTH_DELAY_MAX_S) have passed, whichever
connection it comes on, and tokens sent at once on parallel connections are checked one per
delay. So an address guesses at most once per AUTH_DELAY_MAX_S after a handful of tries. An
address with no wrong token for FORGET_S, or that sends the right one, starts afresh.
IPv6 addresses count per /64 (one host can use a whole /64).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict

AUTH_DELAY_S = 0.1  # the wait after an address's first wrong token; it doubles with each further one
AUTH_DELAY_MAX_S = 2.0  # the longest wait: an address guesses at most once per this many seconds
FORGET_S = 60.0  # an address with no wrong token for this long starts afresh
# Addresses remembered at once (a few dozen bytes each); past it the one whose last wrong token is
# oldest is forgotten, so a flood of addresses costs bounded memory and loses only old history.
MAX_ADDRESSES = 4096


def source_key(host: str) -> str:
    """What the throttle counts by: the IPv4 address, the IPv6 /64, or `host` as it is (Unix peers)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.version == 4:
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


class AuthThrottle:
    """Per source: its recent wrong tokens and when the next token from it may be checked."""

    def __init__(self) -> None:
        self._sources: OrderedDict[str, tuple[int, float]] = OrderedDict()  # key -> (wrong tokens, last one's time)

    def wait(self, key: str, now: float) -> float:
        """Seconds before a token from `key` may be checked (0: now)."""
        entry = self._sources.get(key)
        if entry is None:
            return 0.0
        failures, last = entry
        if now - last >= FORGET_S:
            del self._sources[key]
            return 0.0
        return max(0.0, last + delay(failures) - now)

    def failed(self, key: str, now: float) -> None:
        """A wrong token from `key` was just checked."""
        failures = self._sources.pop(key, (0, now))[0]
        self._sources[key] = (failures + 1, now)
        if len(self._sources) > MAX_ADDRESSES:
            self._sources.popitem(last=False)

    def succeeded(self, key: str) -> None:
        self._sources.pop(key, None)


def delay(failures: int) -> float:
    """The wait after `failures` recent wrong tokens from one source."""
    return min(AUTH_DELAY_S * 2 ** min(failures - 1, 16), AUTH_DELAY_MAX_S) if failures > 0 else 0.0
