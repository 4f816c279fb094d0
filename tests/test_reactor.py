"""lookupd.daemon.reactor: parked tasks wake with their handler's value or error, stay cancellable,
and many sockets are served by the one reactor task, with and without its wait in trio's place;
while it waits there, trio's deadlines, threads and woken tasks are served as trio would."""

from __future__ import annotations

import os
import socket
import threading

import pytest
import trio
import trio.testing

from lookupd.daemon import reactor as reactor_module
from lookupd.daemon.reactor import Reactor


def _reader(fd: int, want: bytes, seen: list[bytes]):
    """A handler that collects what arrives and wakes its task once `want` was read."""
    def handler():
        data = os.read(fd, 1024)
        seen.append(data)
        return data if data == want else None
    return handler


@pytest.mark.trio
@pytest.mark.parametrize("idle_wait", [True, False])
async def test_parked_tasks_wake_with_their_handlers_value(idle_wait):
    reactor = Reactor(idle_wait=idle_wait)
    pairs = [socket.socketpair() for _ in range(5)]
    for a, b in pairs:
        a.setblocking(False)
    woke: dict[int, bytes] = {}
    seen: list[list[bytes]] = [[] for _ in pairs]

    async def park(i: int) -> None:
        fd = pairs[i][0].fileno()
        woke[i] = await reactor.park(fd, _reader(fd, b"stop", seen[i]))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reactor.run)
            async with trio.open_nursery() as parked:
                for i in range(len(pairs)):
                    parked.start_soon(park, i)
                await trio.testing.wait_all_tasks_blocked()
                for _, b in pairs:
                    b.send(b"more")  # handled by the reactor; nobody wakes
                await trio.testing.wait_all_tasks_blocked()
                assert woke == {}
                assert all(s == [b"more"] for s in seen)
                for _, b in pairs:
                    b.send(b"stop")
            assert woke == {i: b"stop" for i in range(len(pairs))}
            # Woken connections were taken out of the set: more data calls no handler.
            pairs[0][1].send(b"late")
            await trio.testing.wait_all_tasks_blocked()
            assert seen[0] == [b"more", b"stop"]
            nursery.cancel_scope.cancel()
    finally:
        reactor.close()
        for a, b in pairs:
            a.close()
            b.close()


@pytest.mark.trio
@pytest.mark.parametrize("idle_wait", [True, False])
async def test_a_handlers_error_is_raised_in_its_task_and_the_reactor_goes_on(idle_wait):
    reactor = Reactor(idle_wait=idle_wait)
    (a1, b1), (a2, b2) = socket.socketpair(), socket.socketpair()

    def broken():
        raise ValueError("handler failed")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reactor.run)
            with pytest.raises(ValueError, match="handler failed"):
                b1.send(b"x")
                await reactor.park(a1.fileno(), broken)
            b2.send(b"ok")
            assert await reactor.park(a2.fileno(), lambda: os.read(a2.fileno(), 10)) == b"ok"
            nursery.cancel_scope.cancel()
    finally:
        reactor.close()
        for s in (a1, b1, a2, b2):
            s.close()


@pytest.mark.trio
@pytest.mark.parametrize("idle_wait", [True, False])
async def test_cancelling_a_parked_task_takes_its_socket_out(idle_wait):
    reactor = Reactor(idle_wait=idle_wait)
    a, b = socket.socketpair()
    calls = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reactor.run)
            with trio.move_on_after(0.05) as scope:
                await reactor.park(a.fileno(), lambda: calls.append(1))
            assert scope.cancelled_caught
            b.send(b"after")  # no handler is called for a socket that is no longer parked
            await trio.testing.wait_all_tasks_blocked()
            assert calls == []
            # The same descriptor can be parked again (as a new connection reusing the number is).
            assert await reactor.park(a.fileno(), lambda: os.read(a.fileno(), 10)) == b"after"
            nursery.cancel_scope.cancel()
    finally:
        reactor.close()
        a.close()
        b.close()


def _echo(fd: int):
    """A handler that answers what arrives (a request answered: its task sleeps on), and wakes its
    task with the last request when it is b"bye;"."""
    def handler():
        data = os.read(fd, 1024)
        if data.endswith(b"bye;"):
            return data
        os.write(fd, data.upper())
    return handler


def _client(sock: socket.socket, stop: threading.Event, answers: list[bytes]) -> None:
    """One blocking client in a thread: a request, its answer, the next, until `stop`; then b"bye;",
    answered by the parked task it wakes."""
    i = 0
    while not stop.is_set():
        sock.sendall(b"req%d;" % i)
        answers.append(sock.recv(1024))
        i += 1
    sock.sendall(b"bye;")
    assert sock.recv(1024) == b"BYE;", "the task the handler woke did not answer"


async def _connection(reactor: Reactor, ours: socket.socket, woke: list[bytes]) -> None:
    """A parked connection's task: parked until its client says b"bye;", which it answers."""
    woke.append(await reactor.park(ours.fileno(), _echo(ours.fileno())))
    ours.send(b"BYE;")  # nothing else happens until this task runs: the client waits for it


async def _serve_clients(reactor: Reactor, n: int, work) -> list[list[bytes]]:
    """Park n connections with echo handlers, drive each from a client thread while `work(answers)`
    runs in another task, and return each client's answers once its b"bye;" woke its task."""
    pairs = [socket.socketpair() for _ in range(n)]
    stop, woke = threading.Event(), []
    answers: list[list[bytes]] = [[] for _ in pairs]
    clients = [threading.Thread(target=_client, args=(theirs, stop, got)) for (_, theirs), got in zip(pairs, answers)]
    for ours, theirs in pairs:
        ours.setblocking(False)
        theirs.settimeout(20)  # a client thread never outlives a failed test
    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reactor.run)
                async with trio.open_nursery() as connections:
                    for ours, _ in pairs:
                        connections.start_soon(_connection, reactor, ours, woke)
                    await trio.testing.wait_all_tasks_blocked()
                    for c in clients:
                        c.start()
                    await work(answers)
                    stop.set()
                    for c in clients:
                        await trio.to_thread.run_sync(c.join)
                nursery.cancel_scope.cancel()
    finally:
        stop.set()
        reactor.close()
        for a, b in pairs:
            a.close()
            b.close()
    assert woke == [b"bye;"] * n
    return answers


@pytest.mark.trio
async def test_waiting_in_trios_place_keeps_its_deadlines_and_threads(monkeypatch):
    """One parked connection, answered while the reactor waits in trio's place; meanwhile sleeps
    end, a thread's result arrives, a deadline cancels and at last a handler wakes its task, as
    through trio's own loop.
    Its own bound on a wait is raised above fail_after's: missing any of these fails the test."""
    monkeypatch.setattr(reactor_module, "IDLE_WAIT_MAX_S", 30.0)  # > fail_after: a miss fails, not hangs
    reactor = Reactor(idle_wait=True)
    seen = {}

    async def work(answers):
        while len(answers[0]) < 50:  # the client is being answered with nothing else to do
            await trio.sleep(0.001)
        before = reactor.idle_waits
        for _ in range(5):
            await trio.sleep(0.01)  # each ends while the client keeps the reactor busy
        seen["thread"] = await trio.to_thread.run_sync(lambda: "from a thread")
        with trio.move_on_after(0.01) as scope:
            await trio.sleep_forever()
        seen["cancelled"] = scope.cancelled_caught
        seen["answered_meanwhile"] = reactor.idle_waits - before

    [answers] = await _serve_clients(reactor, 1, work)
    assert seen["thread"] == "from a thread" and seen["cancelled"]
    assert seen["answered_meanwhile"] > 0, "the reactor never waited in trio's place (trio's run loop changed?)"
    assert answers == [b"REQ%d;" % i for i in range(len(answers))]


@pytest.mark.trio
async def test_with_two_connections_parked_trio_waits_itself():
    """Two parked connections, both answered, none of it in trio's place: with more than one
    connection, trio's longer pass answers more of them at once."""
    reactor = Reactor(idle_wait=True)
    seen = {}

    async def work(answers):
        while min(len(a) for a in answers) < 200:
            await trio.sleep(0.001)
        seen["answered_in_trios_place"] = reactor.idle_waits  # both still parked (their byes follow)

    answers = await _serve_clients(reactor, 2, work)
    assert seen["answered_in_trios_place"] == 0
    assert all(got == [b"REQ%d;" % i for i in range(len(got))] for got in answers)
