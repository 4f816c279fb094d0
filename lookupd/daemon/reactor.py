"""One task that waits on many sockets at once, for the daemon's idle connections.

A trio task per connection costs a task switch and an epoll_ctl every time it waits for its
peer: measured on 2 cores, more CPU per request than everything else the daemon does for a
warm lookup (bench/bench_daemon.py). Here connections waiting for requests are parked: their
descriptors sit in one level-triggered epoll set, and one task (`run`) calls each parked
connection's handler when its socket is readable, as many as are ready in one pass. A handler
returns None to stay parked (it answered what it read), or a value to wake its connection's
task with; an exception it raises is raised in that task instead. Parked tasks stay
cancellable: cancelling one takes its descriptor out of the set.

While trio is about to wait for I/O with nothing else to do, and one connection is parked, the
reactor waits for that connection in trio's place (`_IdleWait`, an instrument on trio's I/O
waits) and answers it there, without a pass through trio's run loop per request: about 5 us
of a one-client round trip here (bench/bench_daemon.py, pinned to one core). With more
connections parked it leaves the waiting to trio, whose longer pass answers more of them at once.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any, Callable

import outcome
import trio

log = logging.getLogger(__name__)

# How long the reactor goes on answering sockets that keep becoming ready before it lets trio run
# other tasks (connections' own tasks, threads' results, accepts): they wait at most about this.
REPOLL_BUDGET_S = 0.0005
# The longest the reactor waits and answers in trio's place before trio's loop runs again. Every
# way trio gets work ends the wait at once, but an event of trio's own that arrives while the
# parked socket is being answered waits until that socket is quiet; this bounds that wait.
IDLE_WAIT_MAX_S = 0.01


class Reactor:
    """Parks connection tasks until their socket's handler has something for them."""

    def __init__(self, *, idle_wait: bool = True) -> None:
        self._epoll = select.epoll()
        # descriptor -> (the parked task, its handler). Invariant: exactly the descriptors
        # registered in _epoll, so a stale event for a descriptor no longer parked is skipped.
        self._parked: dict[int, tuple[trio.lowlevel.Task, Callable[[], Any]]] = {}
        self._idle_wait = idle_wait  # whether `run` may wait in trio's place (`_IdleWait`)
        self.idle_waits = 0  # passes made while waiting in trio's place

    def close(self) -> None:
        self._epoll.close()

    async def run(self) -> None:
        """Call the handlers of ready sockets, forever; one system call finds them all. While a pass
        leaves more sockets ready, another follows at once, for up to REPOLL_BUDGET_S: a wait
        through trio's scheduler costs about as much as answering a request."""
        epoll = self._epoll
        # Installed only while this loop runs, whose one await is the wait for the epoll set: trio
        # calls the instrument only with no task running, so always while that wait is on.
        idle = _IdleWait.of_this_run(self) if self._idle_wait else None
        if idle is not None:
            trio.lowlevel.add_instrument(idle)
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                started = time.perf_counter()
                while ready := epoll.poll(0):
                    self._pass(ready)
                    if time.perf_counter() - started >= REPOLL_BUDGET_S:
                        break
        finally:
            if idle is not None:
                trio.lowlevel.remove_instrument(idle)

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


def _nothing() -> None:
    pass


class _IdleWait(trio.abc.Instrument):
    """Waits for the reactor's one parked connection in trio's place, and answers it there.

    Trio calls `before_io_wait` when its run loop, with no task to run, is about to wait on its
    epoll set until an event or its next deadline (the timeout). The reactor's epoll set is in
    that set while `run` waits, so trio's set becomes readable when a parked socket does, or
    when anything else for trio arrives: a socket another task waits for, a thread's result or
    a signal through trio's wake-up socket. Here the reactor waits on trio's set and the parked
    socket together instead, and when the socket is ready, answers it and waits again, without
    trio's pass.
    The wait ends, and trio's own wait follows at once, when trio has anything else to do: an
    event of its own (still pending in its set), a task made runnable by a handler, the
    timeout, or IDLE_WAIT_MAX_S; in the last three, a no-op callback through trio's wake-up
    socket keeps trio's wait from waiting again.

    This reads three pieces of trio's private run-loop state (Runner.io_manager._epoll, runq,
    waiting_for_idle); where they are not as expected, `of_this_run` says so and the reactor
    waits through trio only. An exception here would make trio remove the instrument and go on.
    """

    def __init__(self, reactor: Reactor, runner, theirs: int) -> None:
        self._reactor = reactor
        self._runner = runner
        # trio's epoll set (readable while it holds an event), and the parked socket while it is waited for
        self._waits = select.poll()
        self._waits.register(theirs, select.POLLIN)
        self._token = trio.lowlevel.current_trio_token()

    @classmethod
    def of_this_run(cls, reactor: Reactor) -> "_IdleWait | None":
        """For the current trio run, or None (logged) where its run loop is not the one known here."""
        try:
            runner = trio._core._run.GLOBAL_RUN_CONTEXT.runner
            theirs = runner.io_manager._epoll.fileno()
            len(runner.runq), len(runner.waiting_for_idle)  # what before_io_wait reads, read once here
            if runner.is_guest:  # trio's waits happen in another thread: never block its host's loop
                return None
        except (AttributeError, TypeError):
            log.info("trio %s: its run loop is not the one the reactor knows; waiting through trio only",
                     trio.__version__)
            return None
        return cls(reactor, runner, theirs)

    def before_io_wait(self, timeout: float) -> None:
        reactor, r = self._reactor, self._runner
        parked = reactor._parked
        if timeout <= 0 or len(parked) != 1 or r.waiting_for_idle:
            return  # trio waits itself (a task in wait_all_tasks_blocked needs trio's idle detection)
        (fd,) = parked
        # One poll on trio's set and the parked socket: which of them is ready says whose event it is,
        # without asking the reactor's set (a system call per request). Trio's set is readable too
        # while the socket is, through the reactor's set inside it, so only trio's alone is trio's.
        waits, runq, ready = self._waits, r.runq, ((fd, select.EPOLLIN),)
        waits.register(fd, select.POLLIN)
        try:
            until = time.perf_counter() + min(timeout, IDLE_WAIT_MAX_S)
            while (left := until - time.perf_counter()) > 0:
                events = waits.poll(left * 1000)
                if not events:
                    break  # the timeout passed
                if len(events) == 1 and events[0][0] != fd:
                    return  # the event is trio's own: its wait returns at once
                reactor._pass(ready)
                reactor.idle_waits += 1
                if runq:
                    break  # a handler made a task runnable (its connection is no longer parked)
        finally:
            waits.unregister(fd)
        self._token.run_sync_soon(_nothing)  # trio's wait must not wait again
