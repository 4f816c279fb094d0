"""A bound on how many index files stay open and mapped, least recently used unmapped first.

Opening a log dir maps nothing; each index maps itself on first use and reports here. With
100,000 segments only the indexes actually being searched hold descriptors and address space.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol


class Mappable(Protocol):
    @property
    def mapped_bytes(self) -> int: ...

    def unmap(self) -> None: ...


class IndexCache:
    """LRU of open indexes, bounded by count and by mapped bytes."""

    def __init__(self, max_open: int = 4096, max_mapped_bytes: int = 4 << 30):
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self.max_mapped_bytes = max_mapped_bytes
        self._lru: OrderedDict[Mappable, None] = OrderedDict()
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
            self._lru[index] = None
            self._lru.move_to_end(index)
            total = sum(i.mapped_bytes for i in self._lru) if self.max_mapped_bytes else 0
            while len(self._lru) > 1 and (len(self._lru) > self.max_open or total > self.max_mapped_bytes):
                victim, _ = self._lru.popitem(last=False)
                total -= victim.mapped_bytes
                victims.append(victim)
            self.evictions += len(victims)
        for victim in victims:
            victim.unmap()

    def touch(self, index: Mappable) -> None:
        with self._lock:
            if index in self._lru:
                self._lru.move_to_end(index)

    def forget(self, index: Mappable) -> None:
        with self._lock:
            self._lru.pop(index, None)

    def clear(self) -> None:
        with self._lock:
            victims = list(self._lru)
            self._lru.clear()
        for victim in victims:
            victim.unmap()

    @property
    def open_count(self) -> int:
        return len(self._lru)

    @property
    def mapped_bytes(self) -> int:
        with self._lock:
            return sum(i.mapped_bytes for i in self._lru)
