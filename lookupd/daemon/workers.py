"""`workers = N`: N daemon processes serving the same listening sockets, and the supervisor above them.

The supervisor binds nothing itself: it forks after the listeners are open (socket activation
included), so every worker accepts on the same sockets and the kernel spreads connections
among them. Each worker opens its own LogManager and maps its indexes lazily; the page cache
under the maps is shared. The supervisor forwards SIGTERM, SIGINT and SIGHUP to every worker,
tells systemd READY once every worker is serving, restarts a worker that dies unexpectedly, and
exits when all workers have stopped after a stop signal.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Callable

from ..sdnotify import sd_notify

log = logging.getLogger(__name__)

# A worker that dies within this many seconds of its start is not restarted at once: a worker
# that cannot start (bad config seen only after fork, exhausted memory) must not spin.
RESTART_BACKOFF_S = 1.0
# The longest a worker may take to say it is serving before the supervisor gives up on starting.
START_TIMEOUT_S = 60.0


def supervise(workers: int, serve: Callable[[int, Callable[[], None]], int]) -> int:
    """Run `serve(worker_id, ready)` in `workers` forked processes until they all stop.

    `serve` runs in the child and returns its exit status; it calls `ready()` once it accepts.
    Returns 0 when every worker stopped cleanly after a stop signal, else 1.
    """
    stopping = False
    children: dict[int, tuple[int, float]] = {}  # pid -> (worker id, start time)
    ready_r, ready_w = os.pipe()

    def start(worker: int, first: bool) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            if first:
                os.close(ready_r)
            ready = (lambda: os.write(ready_w, b"r")) if first else (lambda: None)
            status = 1
            try:
                status = serve(worker, ready)
            except BaseException:  # noqa: BLE001 - report, then leave without running the parent's cleanup
                log.exception("worker %d failed", worker)
            finally:
                os._exit(status)
        children[pid] = (worker, time.monotonic())

    def forward(signum: int, _frame) -> None:
        nonlocal stopping
        if signum != signal.SIGHUP:
            stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    for worker in range(workers):
        start(worker, first=True)
    os.close(ready_w)
    _await_ready(ready_r, workers)
    sd_notify(f"READY=1\nSTATUS=serving with {workers} workers")
    log.info("%d workers serving (pids %s)", workers, ", ".join(str(p) for p in sorted(children)))

    failed = False
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        worker, started = children.pop(pid, (None, 0.0))
        if worker is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        if stopping:
            failed |= code != 0
            continue
        log.warning("worker %d (pid %d) exited with %s; starting it again", worker, pid, code)
        time.sleep(max(0.0, RESTART_BACKOFF_S - (time.monotonic() - started)))
        if not stopping:
            start(worker, first=False)
    sd_notify("STOPPING=1")
    return 1 if failed else 0


def _await_ready(fd: int, workers: int) -> None:
    """Block until `workers` readiness bytes arrived (or every worker's end closed the pipe)."""
    got, deadline = 0, time.monotonic() + START_TIMEOUT_S
    while got < workers and time.monotonic() < deadline:
        try:
            data = os.read(fd, workers - got)
        except InterruptedError:
            continue
        if not data:
            break
        got += len(data)
    os.close(fd)
    if got < workers:
        log.warning("only %d of %d workers said they are serving", got, workers)
