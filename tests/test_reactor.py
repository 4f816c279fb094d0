"""lookupd.daemon.reactor: parked tasks wake with their handler's value or error, stay cancellable,
and many sockets are served by the one reactor task."""

from __future__ import annotations

import os
import socket

import pytest
import trio
import trio.testing

from lookupd.daemon.reactor import Reactor


def _reader(fd: int, want: bytes, seen: list[bytes]):
    """A handler that collects what arrives and wakes its task once `want` was read."""
    def handler():
        data = os.read(fd, 1024)
        seen.append(data)
        return data if data == want else None
    return handler


@pytest.mark.trio
async def test_parked_tasks_wake_with_their_handlers_value():
    reactor = Reactor()
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
async def test_a_handlers_error_is_raised_in_its_task_and_the_reactor_goes_on():
    reactor = Reactor()
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
async def test_cancelling_a_parked_task_takes_its_socket_out():
    reactor = Reactor()
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
