"""The log layer's one switch between C and Python: lookupd.log._native imported once, or Python
stand-ins under the same names.

The one-call lookups (`locate`, `locate_time`), the index entry search (`entry`) and the header walk
(`find_batch`) may hand a lookup back to the Python path, which names every fault; their stand-ins
hand everything back. The SIGBUS guard's stand-ins guard nothing (`NATIVE` False: callers check
sizes before reads instead). The slot searches' Python versions are lookupd.log.search's own code.

It follows the format layer's switch (lookupd.format._accel): LOOKUPD_PURE_PYTHON=1 leaves this
extension unloaded too, and while `mode.python` is set (`python_only()`, a reference path) this
thread calls none of its searches.
"""

from __future__ import annotations

from typing import Any

from ..format._accel import PURE_PYTHON, load_extension, mode, python_only  # noqa: F401 - the one switch, shared

extension = load_extension(f"{__package__}._native")

NATIVE = extension is not None


def entry(*args: Any) -> None:
    return None  # the index's own search answers


def locate(*args: Any) -> None:
    return None  # the segment's Python path answers


def locate_time(*args: Any) -> None:
    return None


def find_batch(buf, end: int, target: int, by_timestamp: bool) -> tuple[int, bool]:
    return 0, False  # nothing walked: the next batch is the Python walk's


def install() -> None:
    return None


def register(address: int, length: int) -> int:
    return -1  # not guarded


def unregister(slot: int) -> None:
    return None


def faults() -> int:
    return 0


def resident(address: int, length: int) -> bool:
    return False  # cannot be asked: the safe answer


open_sizes = None  # lookupd.log.fileio.open_sizes does it in Python

if extension is not None:
    open_sizes = extension.open_sizes
    entry = extension.entry  # noqa: F811 - the C function replaces its stand-in
    locate = extension.locate  # noqa: F811
    locate_time = extension.locate_time  # noqa: F811
    find_batch = extension.find_batch  # noqa: F811
    install = extension.install  # noqa: F811
    register = extension.register  # noqa: F811
    unregister = extension.unregister  # noqa: F811
    faults = extension.faults  # noqa: F811
    resident = extension.resident  # noqa: F811
    slot = extension.slot
    plain_slot = extension.plain_slot
