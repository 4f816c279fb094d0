"""One task that waits on many sockets at once, for the daemon's idle connections.

A trio task per connection costs a task switch and an epoll_ctl every time it waits for its
peer: measured on 2 cores, more CPU per request than everything else the daemon does for a
warm lookup (bench/bench_daemon.py). Here connections waiting for requests are parked: their
descriptors sit in one level-triggered epoll set, and one task (`run`) calls each parked
connection's handler when its socket is readable, as many as are ready in one pass. A handler
returns None to stay parked (it answered what it read), or a value to wake its connection's
task with; an exception it raises is raised in that task instead. Parked tasks stay
cancellable: cancelling one takes its descriptor out of the set.

A handler that has just answered a client it expects back within moments (a Kafka consumer keeping up,
lookupd.daemon.fetchahead) may ask for a busy poll (`expect_request`): once nothing is ready the reactor then
polls its set for up to that long before sleeping. An idle CPU halts, and waking it costs tens of
microseconds on a VM (40-70 µs on the benchmarks' machine, about a tenth of a 1 MiB Fetch's round trip,
docs/performance.md); a request caught while polling skips that wake-up.

It uses trio's public API only (trio.lowlevel.wait_readable on the epoll set's descriptor, checkpoint,
wait_task_rescheduled, reschedule): the reactor sleeps only through trio's run loop, so trio's clocks,
deadlines and idle detection see it as any other I/O wait.
"""

from __future__ import annotations

import select
import time
from typing import Any, Callable

import outcome
import trio

# How long the reactor goes on answering sockets that keep becoming ready (or busy-polling for one, see
# expect_request) before it lets trio run other tasks (connections' own tasks, threads' results, accepts):
# they wait at most about this, and a busy poll more.
REPOLL_BUDGET_S = 0.0005
# The longest busy poll a handler may ask for: the reactor holds trio's other tasks meanwhile.
MAX_BUSY_POLL_S = 0.001


class Reactor:
    """Parks connection tasks until their socket's handler has something for them."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        # descriptor -> (the parked task, its handler). Invariant: exactly the descriptors
        # registered in _epoll, so a stale event for a descriptor no longer parked is skipped.
        self._parked: dict[int, tuple[trio.lowlevel.Task, Callable[[], Any]]] = {}
        # time.perf_counter() until which to poll for a ready socket rather than sleep, once none is ready
        # (0.0: sleep at once); a handler sets it (expect_request), the next idle moment spends it.
        self._poll_until = 0.0
        self.caught_polling = 0  # busy polls that found a socket ready: requests read without a wake-up

    def close(self) -> None:
        self._epoll.close()

    async def run(self) -> None:
        """Call the handlers of ready sockets, forever; one system call finds them all. While a pass
        leaves more sockets ready (or a handler expects a request soon), another follows at once:
        a wait through trio's scheduler costs about as much as answering a request. Every
        REPOLL_BUDGET_S trio runs the other tasks, without the reactor going to sleep."""
        epoll = self._epoll
        while True:
            await trio.lowlevel.wait_readable(epoll.fileno())
            started = time.perf_counter()
            while ready := epoll.poll(0) or self._busy_poll():
                self._pass(ready)
                if time.perf_counter() - started >= REPOLL_BUDGET_S:
                    await trio.lowlevel.checkpoint()  # the other tasks' turn
                    started = time.perf_counter()

    def expect_request(self, seconds: float) -> None:
        """Once no socket is ready, poll for one for up to `seconds` from now (at most MAX_BUSY_POLL_S)
        before sleeping: for a handler that has just answered a client expected back about that soon."""
        self._poll_until = max(self._poll_until, time.perf_counter() + min(seconds, MAX_BUSY_POLL_S))

    def _busy_poll(self) -> list[tuple[int, int]]:
        """The sockets that become ready before the expected request's time is up ([]: none, sleep)."""
        until, self._poll_until = self._poll_until, 0.0
        epoll, clock = self._epoll, time.perf_counter
        while clock() < until:
            if ready := epoll.poll(0):
                self.caught_polling += 1
                return ready
        return []

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

