"""Where the partition directories are when a log dir given has none: one level up or down.

A log dir holds `<topic>-<partition>` directories. Given the broker's data dir above it (holding
several log dirs) or a partition dir below it, a reader would otherwise serve nothing and say
nothing; `misplaced` says which directory was meant.
"""

from __future__ import annotations

import os

from ..format.names import parse_partition_dir, parse_segment_file

# Entries looked at per directory when looking for partition dirs around a log dir that has none (a broker's
# data dir holds a handful of log dirs; a directory of thousands of entries is not one of those).
MAX_ENTRIES_LOOKED_AT = 1000
MAX_SUBDIRS_LOOKED_INTO = 64  # directories of a data dir looked into (each listed, up to MAX_ENTRIES_LOOKED_AT)
MAX_NAMED = 5  # directories named in the message, then "and N more"


def _entries(path: str) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            out = []
            for entry in it:
                out.append(entry)
                if len(out) >= MAX_ENTRIES_LOOKED_AT:
                    break
            return out
    except OSError:
        return []


def holds_partition_dirs(path: str) -> bool:
    """Whether `path` has a `<topic>-<partition>` directory in it (among its first entries)."""
    return any(parse_partition_dir(e.name) and e.is_dir(follow_symlinks=False) for e in _entries(path))


def _holds_segments(path: str) -> bool:
    return any(parse_segment_file(e.name) for e in _entries(path))


def names(paths: list[str]) -> str:
    """'a', 'a and b', 'a, b and c', ... 'a, b, c, d, e and 3 more'."""
    shown = paths[:MAX_NAMED]
    rest = len(paths) - len(shown)
    if rest:
        return f"{', '.join(shown)} and {rest} more"
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def log_dirs_below(path: str) -> list[str]:
    """The directories in `path` that hold partition directories, sorted."""
    subdirs = sorted(e.path for e in _entries(path) if e.is_dir(follow_symlinks=False))
    return [d for d in subdirs[:MAX_SUBDIRS_LOOKED_INTO] if holds_partition_dirs(d)]


def misplaced(root: str) -> str | None:
    """For a log dir with no partition directory: where they are, one level up (`root` is itself a partition
    dir: it holds segment files) or down (directories in it hold them), as a sentence; None when neither."""
    what = f"log dir {root} holds no partition directories (<topic>-<partition>)"
    if _holds_segments(root):
        parent = os.path.dirname(os.path.normpath(root))
        return f"{what}: it is a partition directory; give its parent {parent} as the log dir"
    below = log_dirs_below(root)
    if below:
        them = "it" if len(below) == 1 else "them"
        return f"{what}, but {names(below)} in it {'does' if len(below) == 1 else 'do'}: give {them} as the log dir"
    return None
