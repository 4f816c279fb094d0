"""A bound on how many index files stay open and mapped, least recently used unmapped first.

Opening a log dir maps nothing; each index maps itself on first use and reports here. With
100,000 segments only the indexes actually being searched hold descriptors and address space.

A lookup only stamps its index with a tick (`index.last_used = tick()`: one C call and an
attribute store, no lock, no Python call: this is on every lookup's path); the ordering work
happens when an open pushes the cache over its bounds.
"""

from __future__ import annotations

import itertools
import resource
import threading
from operator import attrgetter
from typing import Protocol


# The ticks of use, shared by every cache (they are only compared): larger is more recent.
tick = itertools.count(1).__next__


class Mappable(Protocol):
    last_used: int  # tick() of its last use, stamped by the index itself

    @property
    def mapped_bytes(self) -> int: ...

    def unmap(self) -> None: ...


def default_max_open() -> int:
    """Half the soft descriptor limit (each open index holds one), at most 4096."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft // 2))


class IndexCache:
    """Open indexes, bounded by count and by mapped bytes; least recently used go first."""

    def __init__(self, max_open: int | None = None, max_mapped_bytes: int = 4 << 30):
        max_open = default_max_open() if max_open is None else max_open
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self.max_mapped_bytes = max_mapped_bytes
        self._open: dict[Mappable, int] = {}  # open index -> its mapped bytes as of its open
        self._total = 0
        self._lock = threading.Lock()
        self.lazy_loads = 0
        self.evictions = 0

    def opened(self, index: Mappable) -> None:
        """Record a fresh open and unmap the least recently used beyond the bounds.

        Callers must not hold their own lock here: victims are unmapped after this cache's
        lock is released, so two indexes opening at once cannot wait on each other.
        """
        victims = []
        with self._lock:
            self.lazy_loads += 1
            index.last_used = tick()
            size = index.mapped_bytes
            self._total += size - self._open.get(index, 0)
            self._open[index] = size
            if len(self._open) > self.max_open or self._total > self.max_mapped_bytes:
                by_use = sorted(self._open, key=attrgetter("last_used"))
                # Evict a little more than needed so the next opens do not sort again at once.
                keep = max(1, self.max_open - max(1, self.max_open // 16))
                for victim in by_use[:-1]:
                    if len(self._open) <= keep and self._total <= self.max_mapped_bytes:
                        break
                    self._total -= self._open.pop(victim)
                    victims.append(victim)
            self.evictions += len(victims)
        for victim in victims:
            victim.unmap()

    def forget(self, index: Mappable) -> None:
        with self._lock:
            self._total -= self._open.pop(index, 0)

    def clear(self) -> None:
        with self._lock:
            victims = list(self._open)
            self._open.clear()
            self._total = 0
        for victim in victims:
            victim.unmap()

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def mapped_bytes(self) -> int:
        return sum(i.mapped_bytes for i in list(self._open))
