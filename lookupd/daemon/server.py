"""The lookup daemon (`lookupd serve`): msgpack-rpc over a Unix socket, and TCP if asked, on trio.

Config file (TOML, `--config FILE`). Every key is optional; `--log-dir`, `--socket` and
`--tcp` override the file. Defaults:

    log_dirs = []                         # broker log dirs (or --log-dir, repeatable); at least one
    socket = "run/lookupd.sock"           # Unix socket path, relative to the working dir; "" = none
    socket_mode = 0o660                   # permissions of the Unix socket (who may connect)
    tcp = ""                              # "HOST:PORT", ":PORT" or "PORT" (= 127.0.0.1:PORT); "" = none
    auth_token_file = ""                  # shared secret that TCP clients send with `auth`; required
                                          # when tcp binds a non-loopback address
    max_frame_bytes = 1048576             # longest request accepted (a longer one closes the connection)
    max_connections = 1024                # beyond this new connections get UNAVAILABLE and are closed
    max_in_flight_per_connection = 64     # requests running at once per connection; then reading pauses
    idle_timeout_s = 300.0                # close a connection silent this long with nothing in flight;
                                          # also how long a peer may leave a response unread
    max_read_bytes = 8388608              # cap on `read`'s max_bytes (TOO_LARGE above)
    max_batch_lookups = 100000            # cap on the list length of columnar calls (TOO_LARGE above);
                                          # ~110,000 int64 targets fit max_frame_bytes' default anyway
    rescan_interval_s = 1.0               # how often the log dirs are rescanned (SIGHUP: at once)
    shutdown_grace_s = 10.0               # SIGTERM/SIGINT: time in-flight requests get to finish
    max_open_indexes = 4096               # index/log files kept open and mapped (LRU)
    max_mapped_bytes = 4294967296         # bytes of index maps kept (LRU)
    blocking_threads = 16                 # worker threads for calls that may touch the disk
    inline_hot_lookups = true             # run lookup_offset on the event loop when its index is mapped

systemd: sockets passed by socket activation (LISTEN_FDS, Unix and TCP) replace `socket` and
`tcp`; READY=1, STOPPING=1 and WATCHDOG=1 go to $NOTIFY_SOCKET (an `@` name is abstract).

Structure: a nursery of listeners inside a nursery of connections inside the root nursery
(rescans, signals, watchdog). Each connection is a reader task plus one task per request
that needs a worker thread. Where work runs (see Service.call_inline): lookup_offset on an
already mapped index runs on the event loop (~10 us; through trio.to_thread the same call
costs ~200 us on 2 cores, and a daemon doing every lookup in threads has ~2.5x the
single-client latency and a fifth of the 8-client throughput: bench/bench_daemon.py);
anything that may page an index in or read a `.log` runs in a worker thread under a
CapacityLimiter of `blocking_threads`, so a cold index on a slow disk stalls only its caller.
`stats` counts `connections` currently open, `requests` and `errors` since start.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import signal
import socket
import stat
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

import trio

from ..rpc import protocol as rpc
from ..log.cache import IndexCache
from ..errors import InvalidArgument, Unavailable
from ..log.logmanager import LogManager
from .service import NEEDS_THREAD, Counters, Limits, Service, Session, error_for

log = logging.getLogger(__name__)

DEFAULT_SOCKET = os.path.join("run", "lookupd.sock")
RECEIVE_BYTES = 64 * 1024


# ====================================================================== configuration


@dataclass
class Config:
    log_dirs: list = field(default_factory=list)
    socket: str = DEFAULT_SOCKET
    socket_mode: int = 0o660
    tcp: str = ""
    auth_token_file: str = ""
    max_frame_bytes: int = rpc.DEFAULT_MAX_FRAME_BYTES
    max_connections: int = 1024
    max_in_flight_per_connection: int = 64
    idle_timeout_s: float = 300.0
    max_read_bytes: int = 8 << 20
    max_batch_lookups: int = 100_000
    rescan_interval_s: float = 1.0
    shutdown_grace_s: float = 10.0
    max_open_indexes: int = 4096
    max_mapped_bytes: int = 4 << 30
    blocking_threads: int = 16
    inline_hot_lookups: bool = True

    @classmethod
    def load(cls, path: str | None, **overrides: Any) -> "Config":
        """Defaults, then the TOML file, then the non-None `overrides` (command-line flags)."""
        values: dict[str, Any] = {}
        if path:
            try:
                with open(path, "rb") as f:
                    values = tomllib.load(f)
            except tomllib.TOMLDecodeError as err:
                raise InvalidArgument(f"config file {path}: {err}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls()
        known = {f.name: f for f in fields(cls)}
        for key, value in values.items():
            if key not in known:
                raise InvalidArgument(f"unknown config key {key!r} in {path}; known keys: {', '.join(known)}")
            setattr(cfg, key, _coerce(key, value, getattr(cfg, key), path))
        cfg.check()
        return cfg

    def check(self) -> None:
        if not self.log_dirs:
            raise InvalidArgument("no log dir to serve: pass --log-dir DIR or set log_dirs in the config file")
        if not self.socket and not self.tcp:
            raise InvalidArgument("nothing to listen on: set socket or tcp")
        for key in ("max_frame_bytes", "max_connections", "max_in_flight_per_connection", "max_open_indexes",
                    "blocking_threads"):
            if getattr(self, key) < 1:
                raise InvalidArgument(f"{key} must be at least 1")
        for key in ("idle_timeout_s", "rescan_interval_s", "shutdown_grace_s"):
            if getattr(self, key) <= 0:
                raise InvalidArgument(f"{key} must be positive")
        if self.max_frame_bytes < 64:
            raise InvalidArgument("max_frame_bytes must be at least 64")

    @property
    def limits(self) -> Limits:
        return Limits(max_read_bytes=self.max_read_bytes, max_batch_lookups=self.max_batch_lookups)


def _coerce(key: str, value: Any, default: Any, path: str | None) -> Any:
    where = f" in {path}" if path else ""
    if key == "socket_mode" and isinstance(value, str):
        try:
            return int(value, 8)
        except ValueError:
            raise InvalidArgument(f"socket_mode{where} must be octal like \"0660\", got {value!r}") from None
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, list):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise InvalidArgument(f"config key {key}{where} must be a {type(default).__name__}, got {value!r}")
    return value


def parse_tcp(spec: str) -> tuple[str, int]:
    """"PORT", ":PORT", "HOST:PORT" or "[V6]:PORT" -> (host, port); the host defaults to 127.0.0.1."""
    host, sep, port = spec.rpartition(":")
    if not sep:
        host, port = "", spec
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(f"tcp {spec!r}: expected HOST:PORT, :PORT or PORT")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as err:
        raise InvalidArgument(f"cannot read auth_token_file {path}: {err.strerror}") from None
    if not token:
        raise InvalidArgument(f"auth_token_file {path} is empty")
    if os.stat(path).st_mode & stat.S_IROTH:
        log.warning("auth_token_file %s is world-readable; chmod 600 it", path)
    return token


# ====================================================================== listeners


@dataclass
class Bound:
    """A listening socket and what it means: Unix peers are trusted, TCP ones may need auth."""

    sock: socket.socket
    kind: str  # "unix" or "tcp"
    label: str
    remove_path: str | None = None  # the socket file we created, removed at exit


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
    sock.listen(512)
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
    sock.listen(512)
    return Bound(sock, "tcp", "tcp %s:%d" % sock.getsockname()[:2])


def open_listeners(cfg: Config, token: str | None) -> list[Bound]:
    """Activated sockets if systemd passed any, else the configured socket and TCP address."""
    activated = activated_sockets()
    if activated:
        bound = []
        for s in activated:
            if s.family == socket.AF_UNIX:
                bound.append(Bound(s, "unix", f"activated {s.getsockname() or 'unix socket'}"))
            else:
                host = s.getsockname()[0]
                _require_token(host, token)
                bound.append(Bound(s, "tcp", "activated tcp %s:%d" % s.getsockname()[:2]))
        return bound
    bound = []
    try:
        if cfg.socket:
            bound.append(bind_unix(cfg.socket, cfg.socket_mode))
        if cfg.tcp:
            host, port = parse_tcp(cfg.tcp)
            _require_token(host, token)
            bound.append(bind_tcp(host, port))
    except BaseException:
        close_listeners(bound)
        raise
    return bound


def _require_token(host: str, token: str | None) -> None:
    if token is None and not is_loopback(host):
        raise InvalidArgument(f"refusing to listen on non-loopback TCP address {host} without a token: "
                              f"set auth_token_file in the config file")


def close_listeners(bound: list[Bound]) -> None:
    for b in bound:
        b.sock.close()
        if b.remove_path:
            try:
                os.unlink(b.remove_path)
            except FileNotFoundError:
                pass


# ====================================================================== systemd notify


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


def watchdog_interval() -> float | None:
    """Half the manager's WatchdogSec, in seconds, when it asks this process for keep-alives."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6


# ====================================================================== the daemon


class Daemon:
    """Serves one LogManager on the given listeners until `stop()` (or SIGTERM/SIGINT)."""

    def __init__(self, cfg: Config, manager: LogManager, listeners: list[Bound], *, token: str | None = None):
        self.cfg = cfg
        self.manager = manager
        self.listeners = listeners
        self.counters = Counters()
        self.service = Service(manager, limits=cfg.limits, counters=self.counters, token=token,
                               inline_hot_lookups=cfg.inline_hot_lookups)
        self.limiter = trio.CapacityLimiter(cfg.blocking_threads)
        self._stop: trio.Event | None = None
        self._rescan_now: trio.Event | None = None
        self._stopping = False
        self._readers: set[trio.CancelScope] = set()
        self._conns: trio.Nursery | None = None
        self._forced = False
        self._next_id = 0

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Begin a graceful shutdown (callable from the event loop)."""
        if self._stop is not None:
            self._stop.set()

    def rescan(self) -> None:
        if self._rescan_now is not None:
            self._rescan_now.set()

    async def serve(self, *, handle_signals: bool = False, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept and serve until stopped, then drain: in-flight requests get shutdown_grace_s."""
        self._stop, self._rescan_now = trio.Event(), trio.Event()
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(b.sock)) for b in self.listeners]
        async with trio.open_nursery() as root:
            if handle_signals:
                await root.start(self._signals)
            root.start_soon(self._rescan_loop)
            interval = watchdog_interval()
            if interval:
                root.start_soon(self._watchdog, interval)
            async with trio.open_nursery() as conns:
                self._conns = conns
                async with trio.open_nursery() as accepting:
                    for listener, b in zip(listeners, self.listeners):
                        accepting.start_soon(self._accept_loop, listener, b, conns)
                    log.info("serving %d partitions (%d segments) on %s", len(self.manager.logs()),
                             self.manager.segment_count, ", ".join(b.label for b in self.listeners))
                    sd_notify("READY=1\nSTATUS=serving")
                    task_status.started()
                    await self._stop.wait()
                    accepting.cancel_scope.cancel()
                for listener in listeners:
                    await listener.aclose()
                sd_notify("STOPPING=1\nSTATUS=draining in-flight requests")
                log.info("shutting down: %d connections, up to %.1f s for in-flight requests",
                         self.counters.connections, self.cfg.shutdown_grace_s)
                self._stopping = True
                for scope in list(self._readers):
                    scope.cancel()
                conns.cancel_scope.deadline = trio.current_time() + self.cfg.shutdown_grace_s
            if conns.cancel_scope.cancelled_caught and not self._forced:
                log.warning("shutdown grace of %.1f s ran out; dropped the remaining requests",
                            self.cfg.shutdown_grace_s)
            root.cancel_scope.cancel()

    async def _signals(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("SIGHUP: rescanning the log dirs now")
                    self.rescan()
                elif self._stop.is_set() and self._conns is not None:
                    log.warning("%s again: dropping in-flight requests", signal.Signals(signum).name)
                    self._forced = True
                    self._conns.cancel_scope.cancel()
                else:
                    log.info("%s: stopping", signal.Signals(signum).name)
                    self.stop()

    async def _rescan_loop(self) -> None:
        while True:
            with trio.move_on_after(self.cfg.rescan_interval_s):
                await self._rescan_now.wait()
            self._rescan_now = trio.Event()
            try:
                counts = await trio.to_thread.run_sync(self.manager.refresh)
            except Exception as err:  # noqa: BLE001 - keep serving what we have
                log.warning("rescan failed: %s", err)
                continue
            if any(counts.values()):
                log.info("rescan: %(added)d partitions added, %(removed)d removed, %(changed)d changed", counts)

    async def _watchdog(self, interval: float) -> None:
        while True:
            sd_notify("WATCHDOG=1")
            await trio.sleep(interval)

    # ------------------------------------------------------------------ connections

    async def _accept_loop(self, listener: trio.SocketListener, bound: Bound, conns: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                    log.warning("accept on %s: %s; retrying in 100 ms", bound.label, err.strerror)
                    await trio.sleep(0.1)
                    continue
                raise
            self._next_id += 1
            if bound.kind == "unix":
                peer = f"unix#{self._next_id}"
            else:
                try:
                    peer = "%s:%d" % stream.socket.getpeername()[:2]
                except OSError:  # already gone again
                    peer = f"tcp#{self._next_id}"
            if self.counters.connections >= self.cfg.max_connections:
                conns.start_soon(self._refuse, stream, peer)
                continue
            self.counters.connections += 1
            conns.start_soon(self._connection, stream, Session(trusted=bound.kind == "unix"), peer)

    async def _refuse(self, stream: trio.SocketStream, peer: str) -> None:
        log.warning("%s: refused, already %d connections (max_connections)", peer, self.cfg.max_connections)
        conn = rpc.Connection("server")
        with trio.move_on_after(1):
            try:
                await stream.send_all(conn.send_error(rpc.ProtocolError(
                    "UNAVAILABLE", f"too many connections (max_connections={self.cfg.max_connections}); retry later",
                    fatal=True)))
            except trio.BrokenResourceError:
                pass
        await trio.aclose_forcefully(stream)

    async def _connection(self, stream: trio.SocketStream, session: Session, peer: str) -> None:
        """One connection: a reader that starts a task per request, at most max_in_flight at once."""
        conn = rpc.Connection("server", self.cfg.max_frame_bytes)
        state = _ConnState(stream, conn, peer, trio.Semaphore(self.cfg.max_in_flight_per_connection))
        reader = trio.CancelScope()
        self._readers.add(reader)
        if self._stopping:
            reader.cancel()
        try:
            async with trio.open_nursery() as nursery:
                state.nursery = nursery
                with reader:
                    await self._read_loop(state, session)
        except Exception:  # noqa: BLE001 - a bug met by one connection ends that connection, not the daemon
            log.exception("%s: unexpected failure; closing the connection", peer)
        finally:
            self._readers.discard(reader)
            self.counters.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _read_loop(self, st: "_ConnState", session: Session) -> None:
        """Read requests; answer inline ones at once, hand the rest to tasks with worker threads.

        Inline answers to one chunk of input are written together (one system call for a
        pipelined burst); a request that needs a thread takes one of the connection's
        in-flight slots, and when none is free reading pauses until one is.
        """
        out: list[bytes] = []
        try:
            while True:
                event = st.conn.next_event()
                if event is rpc.NEED_DATA:
                    await self._flush(st, out)
                    data = await self._receive(st)
                    if data is None:
                        return
                    st.conn.receive_data(data)
                elif event is rpc.CLOSED:
                    return
                elif isinstance(event, rpc.Request):
                    self.counters.requests += 1
                    try:
                        result, error = self.service.call_inline(event.method, event.params, session), None
                    except Exception as err:  # noqa: BLE001 - every failure becomes an error response
                        result, error = None, error_for(err, event.method)
                    if result is NEEDS_THREAD:
                        if st.slots.value == 0:
                            await self._flush(st, out)
                        await st.slots.acquire()
                        st.nursery.start_soon(self._in_thread, st, session, event)
                    else:
                        out.append(self._answer(st, event, error, result))
                        if len(out) >= 64:
                            await self._flush(st, out)
                elif isinstance(event, rpc.Notification):
                    log.debug("%s: ignoring notification %r", st.peer, event.method)
                else:
                    self.counters.errors += 1
                    log.info("%s: %s%s", st.peer, event.message, "; closing the connection" if event.fatal else "")
                    out.append(st.conn.send_error(event))
                    if event.fatal:
                        await self._flush(st, out)
                        st.nursery.cancel_scope.cancel()
                        return
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self._flush(st, out)  # answers already computed still go out on the way down

    async def _receive(self, st: "_ConnState") -> bytes | None:
        """The next bytes (b"" at end of stream), None when the peer went idle or away."""
        while True:
            with trio.move_on_after(self.cfg.idle_timeout_s):
                try:
                    return await st.stream.receive_some(RECEIVE_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                    log.info("%s: connection lost (%s)", st.peer, err.__cause__ or err)
                    st.nursery.cancel_scope.cancel()
                    return None
            if st.slots.value == self.cfg.max_in_flight_per_connection:
                log.info("%s: idle for %.0f s; closing", st.peer, self.cfg.idle_timeout_s)
                return None

    async def _in_thread(self, st: "_ConnState", session: Session, req: rpc.Request) -> None:
        try:
            try:
                result, error = await trio.to_thread.run_sync(self.service.call, req.method, req.params, session,
                                                              limiter=self.limiter, abandon_on_cancel=True), None
            except Exception as err:  # noqa: BLE001 - every failure becomes an error response
                result, error = None, error_for(err, req.method)
            await self._send(st, self._answer(st, req, error, result))
        finally:
            st.slots.release()

    def _answer(self, st: "_ConnState", req: rpc.Request, error: dict | None, result: Any) -> bytes:
        """The response bytes; counts and logs (one line) a rejected request."""
        try:
            data = st.conn.send_response(req.msgid, error, result)
        except (TypeError, ValueError, OverflowError) as err:
            error = error_for(err, req.method)
            data = st.conn.send_response(req.msgid, error, None)
        if error is not None:
            self.counters.errors += 1
            if error["code"] != "INTERNAL":  # INTERNAL was logged with its traceback already
                log.info("%s: %s rejected: %s %s", st.peer, req.method, error["code"], error["message"])
        return data

    async def _flush(self, st: "_ConnState", out: list[bytes]) -> None:
        if out:
            data = b"".join(out)
            out.clear()
            await self._send(st, data)

    async def _send(self, st: "_ConnState", data: bytes) -> None:
        """Write one whole message; a peer that stopped reading or went away loses its connection."""
        async with st.send_lock:
            with trio.move_on_after(self.cfg.idle_timeout_s) as timeout:
                try:
                    await st.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    log.info("%s: went away before reading its responses", st.peer)
                    st.nursery.cancel_scope.cancel()
            if timeout.cancelled_caught:
                log.info("%s: has not read its responses for %.0f s; closing", st.peer, self.cfg.idle_timeout_s)
                st.nursery.cancel_scope.cancel()


class _ConnState:
    __slots__ = ("stream", "conn", "peer", "slots", "send_lock", "nursery")

    def __init__(self, stream: trio.SocketStream, conn: rpc.Connection, peer: str, slots: trio.Semaphore):
        self.stream = stream
        self.conn = conn
        self.peer = peer
        self.slots = slots
        self.send_lock = trio.Lock()
        self.nursery: trio.Nursery | None = None


# ====================================================================== entry point


def build(cfg: Config) -> tuple[LogManager, list[Bound], str | None]:
    """Open the log dirs and the listeners (in this order: a bad log dir binds nothing)."""
    token = read_token(cfg.auth_token_file) if cfg.auth_token_file else None
    for d in cfg.log_dirs:
        if not os.path.isdir(d):
            raise InvalidArgument(f"log dir {d} does not exist or is not a directory")
    manager = LogManager(cfg.log_dirs, cache=IndexCache(cfg.max_open_indexes, cfg.max_mapped_bytes))
    try:
        listeners = open_listeners(cfg, token)
    except BaseException:
        manager.close()
        raise
    return manager, listeners, token


def run(args) -> int:
    """`lookupd serve`: serve until SIGTERM/SIGINT, then exit 0."""
    if not args.verbose:
        logging.getLogger("lookupd").setLevel(logging.INFO)  # a daemon's journal wants the INFO lines
    cfg = Config.load(args.config, log_dirs=args.log_dirs, socket=args.socket, tcp=args.tcp)
    manager, listeners, token = build(cfg)
    daemon = Daemon(cfg, manager, listeners, token=token)
    try:
        trio.run(lambda: daemon.serve(handle_signals=True))
    finally:
        close_listeners(listeners)
        manager.close()
        log.info("stopped after %d requests", daemon.counters.requests)
    return 0
