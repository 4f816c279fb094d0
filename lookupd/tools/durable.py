"""Files written so a crash leaves the old file or the new one, never half of one: `<name>.tmp`, synced,
then renamed; the directory synced after the renames (recover and restore both write this way).

Every write goes through a `Directory`: the directory is opened once and each later operation is relative
to that descriptor, so a directory renamed or swapped for a symbolic link meanwhile changes nothing. A new
file is created with O_EXCL|O_NOFOLLOW (a name someone planted, a symbolic link included, is an error, never
followed), and renames stay inside the directory (a rename replaces a symbolic link, never writes through it).
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import InvalidArgument

TMP = ".tmp"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a planted FIFO never blocks


class Directory:
    """One directory, opened once; names are plain file names in it (never paths)."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def join(self, name: str) -> str:
        """The name's path, for messages."""
        return os.path.join(self.path, name)

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    def create(self, name: str, mode: int = 0o644) -> int:
        """A new file `name`, open for writing. FileExistsError when anything has that name (a symbolic link,
        a leftover): the caller removes what it may remove and asks again, or stops."""
        return os.open(name, _CREATE, mode, dir_fd=self.fd)

    def create_fresh(self, name: str, mode: int = 0o644) -> int:
        """`create`, after removing whatever had the name (a half-written leftover of a crash; a symbolic
        link is removed, not followed). Someone creating it again meanwhile is an error, not a retry."""
        self.unlink(name)
        try:
            return self.create(name, mode)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "created by someone else while lookupd was writing it",
                                  self.join(name)) from None

    def replace(self, src: str, dst: str) -> None:
        """Rename `src` to `dst`, both in this directory (atomically replacing `dst`, whatever it is)."""
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        """Remove `name` if it is there (a symbolic link itself, not what it names)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def lstat(self, name: str) -> os.stat_result | None:
        """The name's own stat (not following a symbolic link), or None when nothing has that name."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def regular_size(self, name: str) -> int | None:
        """The size of `name` if it is a regular file, else None (missing, a symbolic link, anything else)."""
        st = self.lstat(name)
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None

    def read_small(self, name: str, limit: int) -> bytes | None:
        """The bytes of regular file `name` (at most `limit`; more is refused), None when missing;
        InvalidArgument for a symbolic link or anything else that is not a regular file."""
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise InvalidArgument(f"{self.join(name)} is a symbolic link; lookupd never follows one "
                                      "where it writes") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InvalidArgument(f"{self.join(name)} is not a regular file")
            if st.st_size > limit:
                raise InvalidArgument(f"{self.join(name)} holds {st.st_size} bytes, more than its {limit}")
            return os.pread(fd, limit + 1, 0)
        finally:
            os.close(fd)

    def listdir(self) -> list[str]:
        return os.listdir(self.fd)

    def sync(self) -> None:
        """fsync the directory, so the renames in it are durable."""
        os.fsync(self.fd)


def check_private(directory: Directory, what: str) -> None:
    """InvalidArgument unless the directory is owned by the user running lookupd and no one else may write
    to it: anyone who may plant files there could steer what lookupd writes."""
    st = directory.stat()
    if st.st_uid != os.geteuid():
        raise InvalidArgument(f"{what} {directory.path} is owned by uid {st.st_uid}, not by the user running "
                              f"lookupd (uid {os.geteuid()}); use a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InvalidArgument(f"{what} {directory.path} may be written by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); run chmod go-w on it, or use another directory")


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


def write_atomically(directory: Directory, files: dict[str, bytes]) -> None:
    """Write each name's bytes to name + .tmp in `directory`, sync them all, then rename them all. Every
    file's writeback starts before the first sync, so that one journal commit takes all their blocks, not
    one a file. A leftover `.tmp` of a crash is removed first; a name created meanwhile is an error."""
    fds = []
    try:
        for name, data in files.items():
            fds.append(directory.create_fresh(name + TMP))
            write_all(fds[-1], data)
            start_writeback(fds[-1], 0, len(data))
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    for name in files:
        directory.replace(name + TMP, name)
