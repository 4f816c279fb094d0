"""libfuse 3 through mfusepy (the maintained fork of fusepy), and what fusefs asks of it beyond that.

* **libfuse 3, never 2.** Only libfuse 3's high-level API answers READDIRPLUS: a listing
  then carries every entry's attributes, and `ls -l` of a directory needs no round trip
  per entry (10,000 segments are 60,000 entries). mfusepy takes the first libfuse it
  finds, so FUSE_LIBRARY_NAME is set before it is imported, and anything else is refused
  on import with what to install.
* **Every call through `KafkaFS.__call__`.** mfusepy calls the file system's methods
  directly; fusefs maps its errors (the daemon's codes, corrupt data) to errno in one place.
* **Reads into libfuse's own buffer.** mfusepy asks for a `bytes` and copies it. A 128 KiB
  `bytes` per read is fresh memory every time (malloc hands out blocks that size by mmap),
  and faulting its pages in cost more than the copy: a cold raw read through the mount
  spent half its CPU there. `KafkaFS.read` gets the buffer as a writable memoryview.
* **Listings by offset, with attributes.** `KafkaFS.readdir` hands over the entries of a
  directory handle once (names and, where known, attributes); each READDIRPLUS asks for
  the next piece from an offset, as libfuse only passes attributes on in that mode.
"""

from __future__ import annotations

import ctypes
import functools
import os

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")

import mfusepy  # noqa: E402 - after choosing the library
from mfusepy import FUSE, FuseOSError, Operations, c_stat, set_st_attrs  # noqa: E402,F401

if mfusepy.fuse_version_major != 3:
    raise ImportError(f"fusefs needs libfuse 3, found libfuse {mfusepy.fuse_version_major}."
                      f"{mfusepy.fuse_version_minor}: install it (Debian: apt-get install fuse3), "
                      f"and unset FUSE_LIBRARY_PATH if it names another one")

_READDIR_PLUS = 1 << 0  # enum fuse_readdir_flags: the kernel asked for READDIRPLUS
_FILL_DIR_PLUS = 1 << 1  # enum fuse_fill_dir_flags: this entry's attributes are complete


class _Calls:
    """What mfusepy calls `operations`: the file system's methods, each through its `__call__`."""

    def __init__(self, fs: Operations):
        self._fs = fs

    def __getattr__(self, name: str):
        value = getattr(self._fs, name)
        if not callable(value) or getattr(value, "libfuse_ignore", False):
            return value  # flags, None (the kernel is told ENOSYS) and mfusepy's placeholders as they are
        return functools.partial(self._fs, name)


class KafkaFUSE(FUSE):
    """Mounts `fs` (a KafkaFS) and serves it until unmounted; the keyword arguments are mount options."""

    def __init__(self, fs: Operations, mountpoint: str, *, max_read: int, **options):
        self._max_read = max_read
        self._served = False  # init ran: the mount was in place
        try:
            super().__init__(_Calls(fs), mountpoint, max_read=max_read, **options)
        except RuntimeError:
            if not self._served:
                raise  # mounting failed; libfuse printed why
            # libfuse 3 returns the signal that ended its loop (SIGTERM, SIGINT) as an error: a normal stop

    def init_fuse_3(self, conn, config):
        self._served = True
        conn.contents.max_read = self._max_read  # libfuse 3 refuses to mount unless init asks what the option did
        return super().init_fuse_3(conn, config)

    def read(self, path, buf, size, offset, fip):
        target = (ctypes.c_char * size).from_address(ctypes.addressof(buf.contents))
        return self.operations.read(self._path(path), memoryview(target).cast("B"), offset, fip.contents)

    def readdir_fuse_3(self, path, buf, filler, offset, fip, flags):
        entries = self.operations.readdir(self._path(path), fip.contents.fh)
        plus = flags & _READDIR_PLUS
        st = c_stat()
        for i in range(offset, len(entries)):
            name, attrs = entries[i]
            if plus and attrs is not None:
                ctypes.memset(ctypes.byref(st), 0, ctypes.sizeof(st))
                set_st_attrs(st, attrs, use_ns=True)
                full = filler(buf, name.encode(self.encoding, self.errors), ctypes.byref(st), i + 1, _FILL_DIR_PLUS)
            else:
                full = filler(buf, name.encode(self.encoding, self.errors), None, i + 1, 0)
            if full:
                break
        return 0

    def _path(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)
