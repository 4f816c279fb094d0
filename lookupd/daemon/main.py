"""`lookupd serve`'s process: the descriptor limit, the LogManager and the listeners, then one Daemon
(lookupd.daemon.server) on trio, or `workers` of them under a supervisor (lookupd.daemon.workers)."""

from __future__ import annotations

import logging
import os
import resource

import trio

from ..errors import InvalidArgument
from ..log.cache import IndexCache
from ..log.logmanager import LogManager
from .config import Config, read_token, read_tokens
from .listeners import Bound, close_listeners, open_kafka_listeners, open_listeners
from .server import Daemon
from .tls import TlsServer
from .workers import supervise

log = logging.getLogger(__name__)


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a broker host's default soft 1024 is far below
    what thousands of clients and segments need); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as err:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, err)
    return nofile_limit()


def nofile_limit() -> int:
    """The soft RLIMIT_NOFILE in force (unlimited counts as 2**20, the kernel's usual nr_open)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def watchdog_interval() -> float | None:
    """Half the manager's WatchdogSec, in seconds, when it asks this process for keep-alives."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6


def open_manager(cfg: Config, remote: bool = True) -> LogManager:
    """The LogManager over the configured log dirs, its open-file cap within the descriptor limit.
    `remote`: with the `[remote]` tier, if configured (False: local partitions only, no object-store client
    made: what a supervisor checks before it forks workers, since the store client's runtime threads would
    not survive the fork, and a worker using them hangs)."""
    for d in cfg.log_dirs:
        if not os.path.isdir(d):
            raise InvalidArgument(f"log dir {d} does not exist or is not a directory")
    fd_limit = raise_nofile_limit()
    max_open = min(cfg.max_open_indexes, max(16, fd_limit // 2))
    if max_open < cfg.max_open_indexes:
        log.info("keeping at most %d files open (max_open_indexes %d; half of the %d-descriptor limit)",
                 max_open, cfg.max_open_indexes, fd_limit)
    remote = cfg.remote.remote_config() if remote else None
    if remote is not None:
        from ..log.tiered.listing import RemoteTier

        remote = RemoteTier(remote)
    return LogManager(cfg.log_dirs, cache=IndexCache(max_open, cfg.max_mapped_bytes), remote=remote)


def build(cfg: Config, remote: bool = True) -> tuple[LogManager, list[Bound], str | None]:
    """Open the log dirs and the listeners (in this order: a bad log dir, token file or certificate binds
    nothing); `remote`: as open_manager's."""
    token = read_token(cfg.auth_token_file) if cfg.auth_token_file else None
    tokens = read_tokens(cfg.auth_tokens_file) if cfg.auth_tokens_file else None
    if cfg.tls:
        TlsServer(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file)  # InvalidArgument naming the file
    manager = open_manager(cfg, remote)
    try:
        listeners = open_listeners(cfg, token or tokens)
        try:
            listeners += open_kafka_listeners(cfg, token or tokens)
        except BaseException:
            close_listeners(listeners)
            raise
    except BaseException:
        manager.close()
        raise
    return manager, listeners, token


def run(args) -> int:
    """`lookupd serve`: serve until SIGTERM/SIGINT, then exit 0 (with `workers` > 1: the supervisor)."""
    if not args.verbose:
        logging.getLogger("lookupd").setLevel(logging.INFO)  # a daemon's journal wants the INFO lines
    cfg = Config.load(args.config, kafka_listen=getattr(args, "kafka_listen", None), log_dirs=args.log_dirs,
                      socket=args.socket, tcp=args.tcp, workers=args.workers)
    # With workers, the supervisor checks the log dirs (the [remote] table was checked with the config) but
    # makes no object-store client: each worker makes its own after the fork.
    manager, listeners, token = build(cfg, remote=cfg.workers == 1)
    if cfg.workers > 1:
        manager.close()  # each worker opens its own, after the fork
        try:
            return supervise(cfg.workers, lambda worker, ready: _serve_worker(cfg, listeners, token, worker, ready))
        finally:
            close_listeners(listeners)
    daemon = Daemon(cfg, manager, listeners, token=token, fd_limit=nofile_limit(), watchdog_s=watchdog_interval())
    try:
        trio.run(lambda: daemon.serve(handle_signals=True))
    finally:
        close_listeners(listeners)
        manager.close()
        log.info("stopped after %d requests", daemon.counters.requests)
    return 0


def _serve_worker(cfg: Config, listeners: list[Bound], token: str | None, worker: int, ready) -> int:
    """One worker process: its own LogManager and event loop on the shared listening sockets. The Kafka
    listener is worker 0's alone: one group coordinator, and one view of the groups' commits."""
    if worker != 0:
        for b in listeners:
            if b.protocol == "kafka":
                b.sock.close()
        listeners = [b for b in listeners if b.protocol != "kafka"]
    manager = open_manager(cfg)
    daemon = Daemon(cfg, manager, listeners, token=token, fd_limit=nofile_limit(), worker=worker, on_ready=ready)
    try:
        trio.run(lambda: daemon.serve(handle_signals=True))
    finally:
        for b in listeners:
            b.sock.close()  # the supervisor removes the socket file
        manager.close()
        log.info("worker %d stopped after %d requests", worker, daemon.counters.requests)
    return 0
