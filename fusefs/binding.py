"""libfuse 3 through mfusepy (the maintained fork of fusepy), and what fusefs asks of it beyond that.

* **libfuse 3, never 2.** Only libfuse 3's high-level API answers READDIRPLUS: a listing
  then carries every entry's attributes, and `ls -l` of a directory needs no round trip
  per entry (10,000 segments are 60,000 entries). mfusepy takes the first libfuse it
  finds, so FUSE_LIBRARY_NAME is set before it is imported, and anything else is refused
  on import with what to install.
* **Every call through `KafkaFS.__call__`.** mfusepy calls the file system's methods
  directly; fusefs maps its errors (the daemon's codes, corrupt data) to errno in one place.
* **Raw reads by libfuse itself.** mfusepy's `read` asks for a `bytes` and copies it into
  libfuse's buffer; a 128 KiB `bytes` per read, and the copies, were most of the mount's CPU
  on a cold raw read. Here `read_buf` answers with the pinned descriptor of a raw local file
  and a position, and libfuse splices the bytes from the page cache to the kernel
  (FUSE_CAP_SPLICE_WRITE; it reads them into its own buffer where splicing is not offered).
  Generated files, and remote `.log`s (copied from their decoded chunks), are made into a malloc'd
  buffer that libfuse frees, through `KafkaFS.read`.
* **One Python thread state a libfuse thread** (`keep_thread_state`): ctypes would make and delete one for
  every call from libfuse's own threads.
* **Listings by offset, with attributes.** `KafkaFS.readdir` hands over the entries of a
  directory handle once (names and, where known, attributes); each READDIRPLUS asks for
  the next piece from an offset, as libfuse only passes attributes on in that mode. The
  loop over entries, and getattr's `struct stat`, are C (fusefs/_fill.c) when it is built;
  `fill_dir` and `fill_stat` here are their reference.
* **Attributes dropped on demand.** The kernel keeps a file's attributes for a second; a
  generated file that grew while being read (its size is what has been produced: see
  fusefs.stream) has them dropped with libfuse's `fuse_invalidate_path` (`KafkaFS.invalidate`),
  so a `tail -f` that read to its end stats the new size, not the 0 it saw at open.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import struct
import threading

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")

import mfusepy  # noqa: E402 - after choosing the library
from mfusepy import FUSE, FuseOSError, Operations, c_off_t, c_stat, fuse_bufvec_p, set_st_attrs  # noqa: E402,F401

from lookupd.format._accel import load_extension  # noqa: E402 - LOOKUPD_PURE_PYTHON=1: no C in the process

_fill = load_extension(f"{__package__}._fill")  # the same as fill_stat and fill_dir below, in C

if mfusepy.fuse_version_major != 3:
    raise ImportError(f"fusefs needs libfuse 3, found libfuse {mfusepy.fuse_version_major}."
                      f"{mfusepy.fuse_version_minor}: install it (Debian: apt-get install fuse3), "
                      f"and unset FUSE_LIBRARY_PATH if it names another one")

_NS = 1_000_000_000
_STAT_FIELDS = ("st_nlink", "st_mode", "st_uid", "st_gid", "st_size", "st_blksize", "st_blocks")
_STAT_TIMES = ("st_atime", "st_mtime", "st_ctime")


def _stat_struct() -> struct.Struct | None:
    """A Struct writing a whole `struct stat` from getattr's fields (offsets and sizes from mfusepy's
    c_stat), everything else zero; None if the fields are not in this order (then set_st_attrs does it)."""
    types = {name: ctype for name, ctype, *_ in c_stat._fields_}
    fields = [(getattr(c_stat, key).offset, types[key]) for key in _STAT_FIELDS]
    for key in _STAT_TIMES:
        spec = types[key + "spec"]
        base = getattr(c_stat, key + "spec").offset
        fields += [(base + spec.tv_sec.offset, dict(spec._fields_)["tv_sec"]),
                   (base + spec.tv_nsec.offset, dict(spec._fields_)["tv_nsec"])]
    fmt, at = "=", 0
    for offset, ctype in fields:
        size = ctypes.sizeof(ctype)
        if offset < at or size not in (4, 8):
            return None
        code = {4: "i", 8: "q"}[size]
        fmt += "x" * (offset - at) + (code if ctype._type_ in "ilq" else code.upper())
        at = offset + size
    return struct.Struct(fmt + "x" * (ctypes.sizeof(c_stat) - at))


_STAT = _stat_struct()


def fill_stat(st: c_stat, attrs: dict) -> None:
    """`st` = getattr's `attrs` (times in ns), in one pack: mfusepy's set_st_attrs goes field by field,
    which was a third of the time of listing 60,000 entries."""
    if _STAT is None:
        ctypes.memset(ctypes.byref(st), 0, ctypes.sizeof(st))
        set_st_attrs(st, attrs, use_ns=True)
        return
    get = attrs.get
    _STAT.pack_into(st, 0, get("st_nlink", 0), get("st_mode", 0), get("st_uid", 0), get("st_gid", 0),
                    get("st_size", 0), get("st_blksize", 0), get("st_blocks", 0),
                    *divmod(get("st_atime", 0), _NS), *divmod(get("st_mtime", 0), _NS),
                    *divmod(get("st_ctime", 0), _NS))


def fill_dir(filler, buf, entries: list, start: int, plus: bool) -> int:
    """Hand `entries[start:]` ((name, attrs or None) pairs) to libfuse's `filler` until its buffer is full,
    entry i at offset i + 1, with attributes when `plus`; the index of the first entry left. The
    reference for `_fill.fill_dir`, and what runs without it."""
    st = c_stat()
    stp = ctypes.byref(st)
    for i in range(start, len(entries)):
        name, attrs = entries[i]
        if plus and attrs is not None:
            fill_stat(st, attrs)
            if filler(buf, name.encode(), stp, i + 1, _FILL_DIR_PLUS):
                return i
        elif filler(buf, name.encode(), None, i + 1, 0):
            return i  # the kernel's buffer is full: it asks again from this offset
    return len(entries)


class _Buf(ctypes.Structure):  # struct fuse_buf
    _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p), ("fd", ctypes.c_int),
                ("pos", c_off_t)]


class _BufVec(ctypes.Structure):  # struct fuse_bufvec holding one buffer (its last member is buf[1])
    _fields_ = [("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t), ("buf", _Buf)]


_BUF_IS_FD = 1 << 1  # enum fuse_buf_flags: the bytes are in a file
_BUF_FD_SEEK = 1 << 2  # ... at buf.pos (a pread)
_CAP_SPLICE_WRITE = 1 << 7  # FUSE_CAP_SPLICE_WRITE: replies may be spliced from a file to the kernel
_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p  # libfuse frees what read_buf hands it with free()
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

# libfuse 3 itself, for what mfusepy does not wrap (dlopen gives the copy mfusepy loaded).
_fuse3 = ctypes.CDLL(ctypes.util.find_library("fuse3"))
_fuse3.fuse_get_context.restype = ctypes.POINTER(ctypes.c_void_p)  # struct fuse_context, whose first member is the struct fuse *
_fuse3.fuse_invalidate_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_fuse3.fuse_invalidate_path.restype = ctypes.c_int

_READDIR_PLUS = 1 << 0  # enum fuse_readdir_flags: the kernel asked for READDIRPLUS
_FILL_DIR_PLUS = 1 << 1  # enum fuse_fill_dir_flags: this entry's attributes are complete


_pythonapi = ctypes.pythonapi  # the interpreter's own C API, called with the GIL held
_pythonapi.PyGILState_Ensure.restype = ctypes.c_int
_kept = threading.local()  # on a libfuse thread, lasts once its thread state is kept


def keep_thread_state() -> None:
    """Keep the Python thread state of the libfuse thread this runs on for the thread's life.

    libfuse's worker threads are not Python's: ctypes makes a new thread state for each call into Python from
    one (PyGILState_Ensure) and deletes it on return, with its frame stack (fresh memory: a page fault a call)
    and its thread-locals (the msgpack packers, the zstd contexts). One PyGILState_Ensure more, never released,
    keeps the first: one thread state a libfuse thread (at most max_threads), as each Python thread has.
    An eighth of the mount's CPU on a warm read of a remote `.log` (see docs/performance.md)."""
    if not getattr(_kept, "on", False):
        _pythonapi.PyGILState_Ensure()
        _kept.on = True


class _Calls:
    """What mfusepy calls `operations`: the file system's methods, each through its `__call__`."""

    def __init__(self, fs: Operations):
        self._fs = fs

    def __getattr__(self, name: str):
        keep_thread_state()  # every FUSE operation reaches the file system through here
        value = getattr(self._fs, name)
        if not callable(value) or getattr(value, "libfuse_ignore", False):
            return value  # flags, None (the kernel is told ENOSYS) and mfusepy's placeholders as they are
        return functools.partial(self._fs, name)


class KafkaFUSE(FUSE):
    """Mounts `fs` (a KafkaFS) and serves it until unmounted; the keyword arguments are mount options."""

    def __init__(self, fs: Operations, mountpoint: str, *, max_read: int, **options):
        self._max_read = max_read
        self._fs = fs
        self._served = False  # init ran: the mount was in place
        try:
            super().__init__(_Calls(fs), mountpoint, max_read=max_read, **options)
        except RuntimeError:
            if not self._served:
                raise  # mounting failed; libfuse printed why
            # libfuse 3 returns the signal that ended its loop (SIGTERM, SIGINT) as an error: a normal stop

    def init_fuse_3(self, conn, config):
        self._served = True
        fuse = _fuse3.fuse_get_context().contents.value  # this mount's struct fuse *, for fuse_invalidate_path
        self._fs.invalidate = lambda path: _fuse3.fuse_invalidate_path(fuse, path.encode(self.encoding, self.errors))
        conn.contents.max_read = self._max_read  # libfuse 3 refuses to mount unless init asks what the option did
        conn.contents.want |= conn.contents.capable & _CAP_SPLICE_WRITE
        return super().init_fuse_3(conn, config)

    def read_buf(self, path, bufpp, size, offset, fip):
        fi = fip.contents
        fd = self.operations.read_buf(self._path(path), fi)
        vec = _libc.malloc(ctypes.sizeof(_BufVec))
        mem = None if fd is not None else _libc.malloc(max(size, 1))
        if not vec or fd is None and not mem:
            _libc.free(vec)
            _libc.free(mem)
            return -errno.ENOMEM
        if fd is not None:
            buf = _Buf(size, _BUF_IS_FD | _BUF_FD_SEEK, None, fd, offset)
        else:
            try:
                got = self.operations.read(self._path(path), memoryview((ctypes.c_char * size).from_address(mem)).cast("B"),
                                           offset, fi)
            except BaseException:
                _libc.free(vec)
                _libc.free(mem)
                raise
            buf = _Buf(got, 0, mem, -1, 0)
        ctypes.memmove(vec, ctypes.byref(_BufVec(1, 0, 0, buf)), ctypes.sizeof(_BufVec))
        bufpp[0] = ctypes.cast(vec, fuse_bufvec_p)
        return 0

    def fgetattr(self, path, buf, fip):
        fh = fip.contents if fip else None
        attrs = self.operations.getattr(self._path(path), fh)
        if _fill is not None:
            _fill.fill_stat(ctypes.cast(buf, ctypes.c_void_p).value, attrs)
        else:
            fill_stat(buf.contents, attrs)
        return 0

    def readdir_fuse_3(self, path, buf, filler, offset, fip, flags):
        entries = self.operations.readdir(self._path(path), fip.contents.fh)
        if _fill is not None:
            _fill.fill_dir(ctypes.cast(filler, ctypes.c_void_p).value, buf, entries, offset, flags & _READDIR_PLUS)
        else:
            fill_dir(filler, buf, entries, offset, flags & _READDIR_PLUS)
        return 0

    def _path(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)
