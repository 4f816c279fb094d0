"""A bound on how many index files stay open and mapped, least recently used unmapped first.

Opening a log dir maps nothing; each index maps itself on first use and reports here. With
100,000 segments only the indexes actually being searched hold descriptors and address space.

A lookup only stamps its index with a tick (one dict store, no lock: this is on every
lookup's path); the ordering work happens when an open pushes the cache over its bounds.
"""

from __future__ import annotations

import itertools
import resource
import threading
from typing import Protocol


class Mappable(Protocol):
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
        self._last_used: dict[Mappable, int] = {}
        self._sizes: dict[Mappable, int] = {}  # mapped bytes of each, as of its open
        self._total = 0
        self._ticks = itertools.count()
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
            self._last_used[index] = next(self._ticks)
            size = index.mapped_bytes
            self._total += size - self._sizes.get(index, 0)
            self._sizes[index] = size
            if len(self._last_used) > self.max_open or self._total > self.max_mapped_bytes:
                entries = sorted(self._last_used.items(), key=lambda e: e[1])
                # Evict a little more than needed so the next opens do not sort again at once.
                keep = max(1, self.max_open - max(1, self.max_open // 16))
                for victim, _ in entries[:-1]:
                    if len(self._last_used) <= keep and self._total <= self.max_mapped_bytes:
                        break
                    del self._last_used[victim]
                    self._total -= self._sizes.pop(victim, 0)
                    victims.append(victim)
            self.evictions += len(victims)
        for victim in victims:
            victim.unmap()

    def touch(self, index: Mappable) -> None:
        if index in self._last_used:
            self._last_used[index] = next(self._ticks)

    def forget(self, index: Mappable) -> None:
        with self._lock:
            self._last_used.pop(index, None)
            self._total -= self._sizes.pop(index, 0)

    def clear(self) -> None:
        with self._lock:
            victims = list(self._last_used)
            self._last_used.clear()
            self._sizes.clear()
            self._total = 0
        for victim in victims:
            victim.unmap()

    @property
    def open_count(self) -> int:
        return len(self._last_used)

    @property
    def mapped_bytes(self) -> int:
        return sum(i.mapped_bytes for i in list(self._last_used))
