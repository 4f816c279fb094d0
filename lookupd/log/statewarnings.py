"""Warnings about a state that persists across rescans (a partition in two log dirs, a log dir that cannot be
listed): logged when the state first holds and again only when it changes, not at every rescan."""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable


class StateWarnings:
    """One rescan's warnings at a time: `warn` during it, `settle` at its end.

    Invariant: `_said` maps each state that held at the last settled rescan to the text logged for it;
    a state that no longer holds is forgotten, so it is logged again should it come back.
    """

    def __init__(self, logger: logging.Logger):
        self._logger = logger
        self._said: dict[Hashable, str] = {}
        self._now: dict[Hashable, str] = {}
        self._lock = threading.Lock()  # rescans run in worker threads, one at a time; the lock keeps it so

    def warn(self, key: Hashable, text: str) -> None:
        """The state `key` holds now, described by `text`: logged unless the same text was, for it, last time."""
        with self._lock:
            self._now[key] = text
            if self._said.get(key) == text:
                return
            self._said[key] = text
        self._logger.warning("%s", text)

    def settle(self) -> None:
        """End of a rescan: the states not warned of in it are over."""
        with self._lock:
            self._said = {k: v for k, v in self._said.items() if k in self._now}
            self._now = {}
