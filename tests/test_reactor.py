"""lookupd.daemon.reactor: parked tasks wake with their handler's value or error, stay cancellable,
and many sockets are served by the one reactor task while trio's deadlines, threads and woken tasks
are served as ever; the daemon's request path lets a mock clock jump while a connection is parked."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
import trio
import trio.testing

import reference as R
from daemon_helpers import RawPeer, running, short_dir  # noqa: F401 - fixture
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
@pytest.mark.parametrize("connections", [1, 2])
async def test_parked_connections_are_answered_while_trio_keeps_its_deadlines_and_threads(connections):
    """Parked connections answered by the reactor while clients keep it busy; meanwhile sleeps end,
    a thread's result arrives, a deadline cancels and at last a handler wakes its task, as ever."""
    reactor = Reactor()
    seen = {}

    async def work(answers):
        while min(len(a) for a in answers) < 50:  # the clients are being answered
            await trio.sleep(0.001)
        for _ in range(5):
            await trio.sleep(0.01)  # each ends while the clients keep the reactor busy
        seen["thread"] = await trio.to_thread.run_sync(lambda: "from a thread")
        with trio.move_on_after(0.01) as scope:
            await trio.sleep_forever()
        seen["cancelled"] = scope.cancelled_caught

    answers = await _serve_clients(reactor, connections, work)
    assert seen["thread"] == "from a thread" and seen["cancelled"]
    assert all(got == [b"REQ%d;" % i for i in range(len(got))] for got in answers)


# Real seconds the mock-clock test waits for its virtual minute before it fails (it would hang instead).
MOCK_CLOCK_GIVE_UP_S = 20


@pytest.mark.trio
@pytest.mark.parametrize("threshold", [0, 0.01])
async def test_a_mock_clock_jumps_while_a_connection_is_parked_in_the_daemon(short_dir, mock_clock, threshold):
    """The daemon's request path under trio's MockClock(autojump_threshold=0, and 0.01): with a
    connection parked in the reactor (answered, waiting for its next request), every task is
    blocked, so the clock jumps to each next deadline, a virtual minute (60 rescans) passes in moments, and the
    connection still answers. A reactor that waits in trio's place (before trio's I/O wait) and
    then wakes trio with a callback leaves a clock with a threshold standing forever."""
    R.require()
    mock_clock.autojump_threshold = threshold
    async with running(os.path.join(short_dir, "d.sock")) as d:
        p = await RawPeer.unix(os.path.join(short_dir, "d.sock"))
        assert await p.call("ping") == (None, "pong")
        await trio.testing.wait_all_tasks_blocked()
        (conn,) = d.connections
        assert d.reactor.parked(conn.fd), "the connection is parked in the reactor"
        token, gave_up = trio.lowlevel.current_trio_token(), threading.Event()
        with trio.CancelScope() as scope:
            def give_up():
                if not gave_up.wait(MOCK_CLOCK_GIVE_UP_S):
                    trio.from_thread.run_sync(scope.cancel, trio_token=token)
            watchdog = threading.Thread(target=give_up, daemon=True)
            watchdog.start()
            t0, real0 = trio.current_time(), time.monotonic()
            await trio.sleep(60)
        gave_up.set()
        assert not scope.cancelled_caught, f"the mock clock stood still for {MOCK_CLOCK_GIVE_UP_S} s"
        assert trio.current_time() - t0 >= 60 and time.monotonic() - real0 < MOCK_CLOCK_GIVE_UP_S
        assert await p.call("resolve_offset", "plain", 0, 100) == (None, {
            "segment": 0, "base_offset": 90, "last_offset": 111, "position": 25241, "size": 6513})
        await p.aclose()
