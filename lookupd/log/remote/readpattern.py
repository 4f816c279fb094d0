"""Whether a reader reads on from where it last stopped: the one "sequential read" decision, which starts the
chunk cache's read-ahead (the daemon's and Spark's reads through ChunkCache, the mount's through its files)."""

from __future__ import annotations


class ReadPattern:
    """Whether a read continues where the last one of the same reader ended (within `slack` bytes: reads of one
    file from several threads come a little out of order): the one "sequential read" decision, which starts
    the read-ahead. The first read counts as sequential only `from_start` and at position 0."""

    def __init__(self, slack: int = 0, *, from_start: bool = False):
        self.slack = slack
        self._end: int | None = 0 if from_start else None  # where the last read ended

    def sequential(self, position: int, end: int) -> bool:
        """Whether a read of [position, end) is sequential; it is the last read from now on."""
        last, self._end = self._end, end
        return last is not None and abs(position - last) <= self.slack
