"""The mount's link to the lookup daemon: one shared connection that comes back by itself.

Every call goes over one thread-safe `lookupd.client.Client`. When the connection fails
(the daemon stopped or restarted) the client is dropped and the call is tried once more
on a fresh connection, so a restarted daemon is picked up by the next lookup; while it
stays down, calls fail at once with `Unavailable` naming the address and the reason, and
a new connection is tried at most every `retry_s` seconds. A call that times out fails
alone: the connection stays if the daemon still answers a ping on it. An error the daemon
answers (RemoteError) is passed on and is never a reason to reconnect: only a transport
failure is.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from lookupd.rpc.client import Client, RemoteError
from lookupd.errors import LookupdError, Unavailable

log = logging.getLogger(__name__)


class DaemonLink:
    """Calls daemon methods; raises RemoteError for answered errors, Unavailable when unreachable."""

    def __init__(self, address: str, *, token: str | None = None, timeout: float = 10.0, retry_s: float = 0.5,
                 tls: dict[str, str] | None = None):
        self.address = address
        self._token = token
        self._tls = tls or {}  # the Client's tls_ca/tls_cert/tls_key, for a tls:// address
        self._timeout = timeout
        self._retry_s = retry_s
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._down: tuple[float, Unavailable] | None = None  # (when, why) of the last failed connect

    def call(self, method: str, *params: Any) -> Any:
        for attempt in (1, 2):
            client = self._connected()
            try:
                return client.call(method, *params)
            except Unavailable as err:
                if self._alive(client):  # a slow answer (timeout), not a lost connection
                    raise
                self._drop(client, err)
                if attempt == 2:
                    raise
            except RemoteError as err:
                # An answered error (a partition deleted meanwhile answers UNAVAILABLE) leaves the
                # connection as it was; only one closed by the daemon, with this as its reason
                # (refused for too many connections), is dropped, to start over next time.
                if client.closed:
                    self._drop(client, err)
                raise
        raise AssertionError("unreachable")

    @staticmethod
    def _alive(client: Client) -> bool:
        try:
            client.call("ping", timeout=2.0)
        except LookupdError:
            return False
        return True

    def _connected(self) -> Client:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is not None:
                return self._client
            if self._down is not None and time.monotonic() - self._down[0] < self._retry_s:
                raise self._down[1]
            try:
                self._client = Client(self.address, token=self._token, timeout=self._timeout, **self._tls)
            except Unavailable as err:
                self._down = (time.monotonic(), err)
                raise
            if self._down is not None:
                log.warning("reconnected to lookupd at %s", self.address)
            self._down = None
            return self._client

    def _drop(self, client: Client, err: Exception) -> None:
        with self._lock:
            if self._client is client:
                self._client = None
                log.warning("lost the connection to lookupd at %s: %s", self.address, err)
                self._down = (0.0, Unavailable(str(err)))  # reconnect at once, but log the recovery
        client.close()

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
