"""The format layer's one switch between C and Python: lookupd.format._decode imported once, or Python
stand-ins under the same names.

Every C function here either computes what its Python stand-in computes (the Arrow bitmaps, whose
Python versions are also exported as `*_reference`) or may hand its input back (None or False) for
the caller's reference path, which names every fault; the stand-ins of those hand everything back.
So callers call `_accel.X` with no check of their own, but for one: while `mode.python` is set, a
reference path runs, and they call no C function (the bitmaps' `*_reference` instead).

The reference paths run in Python alone: within `python_only()` this thread calls no C function of
either layer (lookupd.log._accel shares `mode`) but the SIGBUS guard's, which compute no answer; that
is how tests take the answers of record beside the fast paths' (tests/test_accel.py checks it).
LOOKUPD_PURE_PYTHON=1 makes the whole process pure Python, as on a machine without a compiler
(`make test` runs the format, log, conformance and daemon tests so a second time).
"""

from __future__ import annotations

from typing import Any

from ..native import PURE_PYTHON, load_extension, mode, python_only  # noqa: F401 - the one switch, shared

extension = load_extension(f"{__package__}._decode")

NATIVE = extension is not None


# ------------------------------------------------------------------ stand-ins: every input handed back


def decode_frames(buf, start: int, end: int, position: int, headers: bool, facts, *columns) -> int:
    return start  # no batch taken: the caller decodes the next one


def decode_v2(*args: Any) -> bool:
    return False


def render_batch(*args: Any) -> None:
    return None


def find_timestamp(*args: Any) -> bool:
    return False


def find_timestamp_batch(batch, target: int, start_offset: int) -> None:
    return None


def sound_batches(buf) -> None:
    return None


def commit_runs(buf, start: int, end: int, table, note_tombstones: bool) -> tuple[int, int, list | None, list, None,
                                                                                 None]:
    return start, -1, [] if note_tombstones else None, [], None, None  # no batch taken: the caller replays the next


CommitTable = None  # the C table of committed offsets (lookupd.format.internal.group_state.DictCommits: its reference)


def decompress(codec: int, data, max_size: int) -> None:
    return None


def codecs() -> dict[str, bool]:
    return {"gzip": False, "snappy": False, "lz4": False, "zstd": False}


def avro_program(nodes, arrow: bool) -> None:
    return None  # no program: every Avro value goes to the reference path (lookupd.format.avrocolumns)


def avro_json(*args: Any) -> None:
    return None


def avro_arrow(*args: Any) -> None:
    return None


def validity_bitmap(flags) -> tuple[Any, int]:
    """(Arrow validity bitmap, null count) of one byte per item, 0 for null; (None, 0) without nulls."""
    import numpy as np

    valid = np.frombuffer(flags, np.uint8)
    nulls = len(valid) - int(np.count_nonzero(valid))
    return (np.packbits(valid, bitorder="little").tobytes() if nulls else None), nulls


def nonempty_bitmap(ends) -> tuple[Any, int]:
    """(Arrow validity bitmap of the lists holding items, count of empty ones) from n + 1 int32 offsets."""
    import numpy as np

    has = np.diff(np.frombuffer(ends, np.int32).astype(np.int64)) > 0  # int32 differences could wrap
    nulls = len(has) - int(np.count_nonzero(has))
    return (np.packbits(has, bitorder="little").tobytes() if nulls else None), nulls


def spread_flag(facts, flag: int) -> bytes:
    """Per record of the batches in `facts` (six int64 each, as decode_frames writes them: position, base
    offset, last offset, producer id, flags, records), in order: the int32 1 where its batch's flags
    have `flag`, else 0."""
    import numpy as np

    f = np.frombuffer(facts, np.int64).reshape(-1, 6)
    return np.repeat(((f[:, 4] & flag) != 0).astype(np.int32), f[:, 5]).tobytes()


# The Python versions of the functions above that compute rather than hand back: their references.
validity_bitmap_reference, nonempty_bitmap_reference, spread_flag_reference = validity_bitmap, nonempty_bitmap, spread_flag


if extension is not None:
    decode_frames = extension.decode_frames  # noqa: F811 - the C function replaces its stand-in
    decode_v2 = extension.decode_v2  # noqa: F811
    render_batch = extension.render_batch  # noqa: F811
    find_timestamp = extension.find_timestamp  # noqa: F811
    find_timestamp_batch = extension.find_timestamp_batch  # noqa: F811
    sound_batches = extension.sound_batches  # noqa: F811
    commit_runs = extension.commit_runs  # noqa: F811
    CommitTable = extension.CommitTable  # noqa: F811
    decompress = extension.decompress  # noqa: F811
    codecs = extension.codecs  # noqa: F811
    validity_bitmap = extension.validity_bitmap  # noqa: F811
    nonempty_bitmap = extension.nonempty_bitmap  # noqa: F811
    spread_flag = extension.spread_flag  # noqa: F811
    avro_program = extension.avro_program  # noqa: F811
    avro_json = extension.avro_json  # noqa: F811
    avro_arrow = extension.avro_arrow  # noqa: F811
