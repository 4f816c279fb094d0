"""A progress line for long runs (dump, recover) when stderr is a terminal; silent otherwise."""

from __future__ import annotations

import sys
import time


class Progress:
    """Bytes done out of `total`, with rate and time left, redrawn at most 10 times a second."""

    def __init__(self, total: int, label: str, stream=None, *, enabled: bool | None = None):
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self._start = time.monotonic()
        self._drawn = 0.0
        self._shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._start, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        pct = min(100.0, 100.0 * self.done / self.total)
        self.stream.write(f"\r{self.label}: {pct:5.1f}% {self.done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB "
                          f"{rate / 1e6:,.1f} MB/s, {left:,.0f} s left ")
        self.stream.flush()
        self._shown = True

    def write(self, line: str, stream=None) -> None:
        """Print a line (to stdout by default) without mixing it into the progress line."""
        self._clear()
        out = stream if stream is not None else sys.stdout
        out.write(line + "\n")
        out.flush()

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False

    def finish(self) -> None:
        self._clear()
