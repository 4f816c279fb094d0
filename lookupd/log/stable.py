"""The last stable offset of a partition (UnifiedLog.lastStableOffset, read side), from its files alone.

A transaction is open from its producer's first transactional batch until the producer's next control
batch (its COMMIT or ABORT marker); the last stable offset is the first offset of the earliest open
transaction, or the log end offset when none is open. The broker keeps this in memory
(ProducerStateManager); here it is found by walking batch headers, once from where the walk can start
and then only over what the broker appended since: `StableOffset.at_end` remembers how far it walked
and which transactions were open there.

Where the walk starts: the first local segment (the local log start offset). A transaction left open
across the local log start for longer than local retention (which a broker would abort long before) is
not seen; the remote tier is never walked for it.
"""

from __future__ import annotations

import bisect
import threading

from .locallog import LocalLog, SegmentList


class StableOffset:
    """One partition's walk: how far it went and the transactions open there."""

    __slots__ = ("log", "next_offset", "open", "lock")

    def __init__(self, llog: LocalLog):
        self.log = llog
        self.next_offset = -1  # the next offset to walk from (-1: not started)
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.lock = threading.Lock()

    def at_end(self, log_end_offset: int) -> int:
        """The last stable offset with the log ending at `log_end_offset` (taken by the caller, so that the
        answer and the data it serves agree)."""
        with self.lock:
            self._walk(log_end_offset)
            return min(self.open.values()) if self.open else log_end_offset

    def _walk(self, end: int) -> None:
        v = SegmentList(self.log, self.log.base_offsets)
        start = v.local_log_start_offset
        if not start <= self.next_offset <= end:  # the first walk, retention passed it, or the log was truncated
            self.next_offset, self.open = start, {}
        if self.next_offset >= end:
            return
        bases = v.bases
        for base in bases[max(bisect.bisect_right(bases, self.next_offset) - 1, 0):]:
            seg = v.segment(base)
            size = seg.size()
            position = 0
            if base < self.next_offset:
                found = seg.translate_offset(self.next_offset)
                if found is None:
                    continue
                position = found.position
            for header in seg.log.batches(position, size):
                if header.base_offset >= end:
                    return
                if header.last_offset < self.next_offset:
                    continue
                if header.magic >= 2 and header.producer_id >= 0:
                    if header.is_control:  # the producer's COMMIT or ABORT marker ends its transaction
                        self.open.pop(header.producer_id, None)
                    elif header.is_transactional and header.producer_id not in self.open:
                        self.open[header.producer_id] = header.base_offset
                self.next_offset = header.last_offset + 1
