"""Files written so a crash leaves the old file or the new one, never half of one: `<name>.tmp`, synced,
then renamed; the directory synced after the renames (recover and restore both write this way)."""

from __future__ import annotations

import os

TMP = ".tmp"


def write_all(fd: int, data, position: int | None = None) -> None:
    """Write all of `data` (at `position` of the file, when given): a write may take fewer bytes than given."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if position is None else os.pwrite(fd, view, position)
        view = view[n:]
        if position is not None:
            position += n


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing these bytes to disk now, so that a later sync waits for less (on Linux
    POSIX_FADV_DONTNEED starts the writeback of dirty pages; it drops the pages only once they are clean)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def drop_cached(fd: int) -> None:
    """Drop a synced file's pages from the page cache (POSIX_FADV_DONTNEED drops clean pages)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def write_atomically(files: dict[str, bytes]) -> None:
    """Write each path's bytes to path + .tmp, sync them all, then rename them all. Every file's writeback
    starts before the first sync, so that one journal commit takes all their blocks, not one a file."""
    fds = []
    try:
        for path, data in files.items():
            fds.append(os.open(path + TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
            write_all(fds[-1], data)
            start_writeback(fds[-1], 0, len(data))
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    for path in files:
        os.replace(path + TMP, path)


def sync_dir(directory: str) -> None:
    """fsync a directory, so the renames in it are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
