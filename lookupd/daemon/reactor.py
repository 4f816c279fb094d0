"""One task that waits on many sockets at once, for the daemon's idle connections.

A trio task per connection costs a task switch and an epoll_ctl every time it waits for its
peer: measured on 2 cores, more CPU per request than everything else the daemon does for a
warm lookup (bench/bench_daemon.py). Here connections waiting for requests are parked: their
descriptors sit in one level-triggered epoll set, and one task (`run`) calls each parked
connection's handler when its socket is readable, as many as are ready in one pass. A handler
returns None to stay parked (it answered what it read), or a value to wake its connection's
task with; an exception it raises is raised in that task instead. Parked tasks stay
cancellable: cancelling one takes its descriptor out of the set.

It uses trio's public API only (trio.lowlevel.wait_readable on the epoll set's descriptor,
wait_task_rescheduled, reschedule): every request waits through trio's run loop, so trio's clocks,
deadlines and idle detection see it as any other I/O wait.
"""

from __future__ import annotations

import select
import time
from typing import Any, Callable

import outcome
import trio

# How long the reactor goes on answering sockets that keep becoming ready before it lets trio run
# other tasks (connections' own tasks, threads' results, accepts): they wait at most about this.
REPOLL_BUDGET_S = 0.0005


class Reactor:
    """Parks connection tasks until their socket's handler has something for them."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        # descriptor -> (the parked task, its handler). Invariant: exactly the descriptors
        # registered in _epoll, so a stale event for a descriptor no longer parked is skipped.
        self._parked: dict[int, tuple[trio.lowlevel.Task, Callable[[], Any]]] = {}

    def close(self) -> None:
        self._epoll.close()

    async def run(self) -> None:
        """Call the handlers of ready sockets, forever; one system call finds them all. While a pass
        leaves more sockets ready, another follows at once, for up to REPOLL_BUDGET_S: a wait
        through trio's scheduler costs about as much as answering a request."""
        epoll = self._epoll
        while True:
            await trio.lowlevel.wait_readable(epoll.fileno())
            started = time.perf_counter()
            while ready := epoll.poll(0):
                self._pass(ready)
                if time.perf_counter() - started >= REPOLL_BUDGET_S:
                    break

    def _pass(self, ready: list[tuple[int, int]]) -> None:
        """Call the handlers of the ready descriptors (their tasks woken where one returns a value)."""
        parked = self._parked
        for fd, _ in ready:
            entry = parked.get(fd)
            if entry is None:
                continue
            try:
                result = entry[1]()
                if result is None:
                    continue
                woken = outcome.Value(result)
            except Exception as err:  # noqa: BLE001 - a handler's failure is its connection's, not ours
                woken = outcome.Error(err)
            self._release(fd)
            trio.lowlevel.reschedule(entry[0], woken)

    async def park(self, fd: int, handler: Callable[[], Any]) -> Any:
        """Sleep until `handler()`, called whenever `fd` is readable, returns something other than
        None; return that (or raise what the handler raised)."""
        self._epoll.register(fd, select.EPOLLIN)
        self._parked[fd] = (trio.lowlevel.current_task(), handler)

        def abort(_raise_cancel) -> trio.lowlevel.Abort:
            self._release(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def parked(self, fd: int) -> bool:
        """Whether a task is parked on `fd` now (and not yet woken by its handler)."""
        return fd in self._parked

    def _release(self, fd: int) -> None:
        del self._parked[fd]
        self._epoll.unregister(fd)

