"""lookupd's one switch between its C code and Python, shared by every layer that has C beside a reference path
(lookupd.format._accel, lookupd.log._accel, the tiered-storage key unwrapping in lookupd.log.remote.oaep).

LOOKUPD_PURE_PYTHON=1 makes the whole process pure Python, as on a machine without a compiler; within
`python_only()` this thread calls no C function of lookupd's (the reference paths' answers).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from types import ModuleType
from typing import Iterator

PURE_PYTHON = os.environ.get("LOOKUPD_PURE_PYTHON", "") == "1"


def load_extension(name: str) -> ModuleType | None:
    """The C extension module `name` (e.g. "lookupd.format._decode"), or None when it was built
    without a C compiler or LOOKUPD_PURE_PYTHON=1 asks not to use it: each layer's one import."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class _Mode(threading.local):
    python = False  # this thread runs a reference path: no C


mode = _Mode()


@contextlib.contextmanager
def python_only() -> Iterator[None]:
    """Within it, this thread calls no C function of lookupd's (the reference paths' answers)."""
    saved = mode.python
    mode.python = True
    try:
        yield
    finally:
        mode.python = saved
