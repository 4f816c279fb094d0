"""Where a call that may block runs: a worker thread that never waits for the object store, and, for a call
that would, a pool of threads of its own with a deadline, so that a slow or stalled store holds remote calls
only, never the calls on local data (the msgpack methods' and the Kafka listener's alike)."""

from __future__ import annotations

from typing import Callable, TypeVar

import trio

from ..errors import Unavailable
from ..log.remote.errors import StoreWouldWait, local_only

T = TypeVar("T")

# Calls that read from the object store at once, in threads of their own: each mostly waits for the store
# with the GIL released, and decodes on the remote tier's own pool; more would only queue at the store.
REMOTE_THREADS = 8
# How long a call that reads from the object store may take before it is answered UNAVAILABLE: a cold remote
# lookup is three GETs (manifest, indexes, a chunk) of milliseconds each on a healthy store, and this is one
# request's timeout in lookupd.log.remote.store. Its thread finishes on its own (its GET has its timeouts),
# keeping its place in the remote pool until then.
REMOTE_DEADLINE_S = 30.0


def _local_only(fn: Callable[[], T]) -> tuple[bool, T | None]:
    """(True, fn()) unless fn would wait for the object store: (False, None) then (lookupd.log.remote.errors)."""
    local_only.on = True
    try:
        return True, fn()
    except StoreWouldWait:
        return False, None
    finally:
        local_only.on = False


async def run_blocking(fn: Callable[[], T], local: trio.CapacityLimiter, remote: trio.CapacityLimiter,
                       what: str) -> T:
    """fn() in a worker thread under `local` that never waits for the store; where it would, fn() again (a
    lookup only reads: nothing is left half done) under `remote`, Unavailable past REMOTE_DEADLINE_S."""
    done, result = await trio.to_thread.run_sync(_local_only, fn, limiter=local, abandon_on_cancel=True)
    if done:
        return result
    with trio.move_on_after(REMOTE_DEADLINE_S):
        return await trio.to_thread.run_sync(fn, limiter=remote, abandon_on_cancel=True)
    raise Unavailable(f"{what} did not get its answer from the object store within {REMOTE_DEADLINE_S:g} s "
                      "(REMOTE_DEADLINE_S): the store is slow or stalled; try again later")
