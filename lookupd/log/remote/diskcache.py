"""A bounded two-level LRU cache of decoded remote bytes: a small in-memory level over files in cache_dir
(chunks reach the disk when memory evicts them; indexes are written straight to disk, to be mapped).

The files are lookupd's own (chunks of remote segments, fetched indexes), never Kafka's files and never
the bucket: this is the one module of the log layer that writes, and only under cache_dir. What it trusts:

- cache_dir is lookupd's only if it is empty or carries the MARKER file this module writes there (or holds
  nothing but files named as a version before the marker named its entries). A directory holding anything
  else is refused with one line and never cleaned: a typo in a config must not delete a user's files. In a
  marked directory, only names this module makes are ever deleted.
- cache_dir must be owned by the user running lookupd, and is made mode 0700 (it holds decrypted bytes).
  One found open to others is made 0700 and its entries are dropped: anyone could have planted them.
- An entry is `<name>.<crc32c>`, its checksum over its name and bytes. It is opened with O_NOFOLLOW and
  checked: a symbolic link, a file of another size or other bytes is a miss (and removed), never an answer.
  Every operation is relative to the directory's descriptor, opened once.
- Several processes may share cache_dir (a daemon's workers, several daemons, the FUSE mount) and keep its
  bound together: every change to its set of files (a new entry, an eviction) is made under an exclusive
  flock on the marker, which holds the ledger, the bytes of every process's entries. A process evicts the
  entries it used least recently, and looks for the others' (a directory listing) only once it has none.

Files are written atomically (a temporary file, then rename), so a reader never sees half of one. An evicted
file that a reader has already mapped stays readable until unmapped (Linux keeps unlinked inodes alive).
When cache_dir's filesystem is full, nothing is written: chunks are served from memory and the bucket,
and a caller that needs a file (an index, to map it) is told by an OSError, and keeps the bytes in memory.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import stat
import struct
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterable, Iterator

import crc32c

from ...errors import InvalidArgument

MEMORY_BYTES_MAX = 64 * 1024 * 1024  # decoded chunks kept in memory: a few read-ahead windows' worth
WRITE_BEHIND_BYTES = 64 * 1024 * 1024  # chunk bytes queued for the disk level; beyond it a write is skipped
TMP_SUFFIX = ".tmp"
MARKER = ".lookupd-cache"
MARKER_TEXT = (b"lookupd's cache of remote segments. Every file here named <name>.<8 hex digits> (or ending in "
               b".tmp) is lookupd's, and may be deleted at any time.\n")
_LEDGER = struct.Struct(">q")  # after MARKER_TEXT: the bytes of all entries, kept under the marker's flock
STALE_TMP_S = 3600  # a temporary file untouched this long belongs to a writer that died (one may be alive:
                    # cache_dir is shared, and a whole segment takes minutes to write)
VERIFY_PIECE = 1 << 20  # bytes read at a time when checking a file entry's checksum
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")  # what callers may name an entry
_ENTRY = re.compile(r"(?P<name>[A-Za-z0-9_-][A-Za-z0-9_.-]*)\.(?P<crc>[0-9a-f]{8})")
_TMP = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*\.tmp")
_LEGACY = re.compile(r"[0-9a-f]{40}\.[a-z0-9_]+|tmp[a-z0-9_]{8}\.tmp")  # entries of versions before the marker
_FULL = (errno.ENOSPC, errno.EDQUOT)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a planted FIFO never blocks

log = logging.getLogger(__name__)


def cache_name(object_key: str, part: str) -> str:
    """A flat file name for `part` (a chunk number or index kind) of an object: hashed, so any key fits."""
    return f"{hashlib.sha256(object_key.encode()).hexdigest()[:40]}.{part}"


def _checksum(name: str, pieces: Iterable) -> int:
    crc = crc32c.crc32c(name.encode())
    for piece in pieces:
        crc = crc32c.crc32c(piece, crc)
    return crc


class CacheDirectory:
    """cache_dir, opened once and checked (see the module docstring); its marker holds the shared flock."""

    def __init__(self, path: str):
        self.path = path
        try:
            os.makedirs(path, mode=0o700)
        except FileExistsError:
            pass
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except NotADirectoryError:
            raise InvalidArgument(f"remote.cache_dir {path} is not a directory") from None
        self.lock_fd = -1
        self._fds = [self.fd]  # closed with the object
        weakref.finalize(self, _close_all, self._fds)
        self._thread_lock = threading.Lock()  # flock does not exclude the threads of one process
        st = os.fstat(self.fd)
        if st.st_uid != os.geteuid():
            raise InvalidArgument(f"remote.cache_dir {path} is owned by uid {st.st_uid}, not by the user running "
                                  f"lookupd (uid {os.geteuid()}): whoever owns it could swap what lookupd serves; "
                                  "give lookupd a directory of its own")
        names = os.listdir(self.fd)
        self.unmarked = MARKER not in names  # new, or left by a version before the marker
        if self.unmarked:
            foreign = sorted(n for n in names if not _LEGACY.fullmatch(n))
            if foreign:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                raise InvalidArgument(f"remote.cache_dir {path} holds files lookupd did not make ({shown}); "
                                      "lookupd keeps its cache only in an empty directory or one it made (with "
                                      f"its {MARKER} file), and never deletes anything else: choose another "
                                      "directory")
        self.opened_to_others = bool(st.st_mode & 0o022)  # its entries could have been planted
        if st.st_mode & 0o077:
            os.fchmod(self.fd, 0o700)
            log.warning("remote.cache_dir %s was open to others (mode %04o): made it 0700%s", path,
                        stat.S_IMODE(st.st_mode), "; any entries in it are dropped (anyone could have planted "
                        "them)" if self.opened_to_others else "")
        self.lock_fd = self._open_marker()
        self._fds.append(self.lock_fd)

    def _open_marker(self) -> int:
        try:
            fd = os.open(MARKER, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self.fd)
        except FileExistsError:
            try:
                fd = os.open(MARKER, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self.fd)
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise InvalidArgument(f"remote.cache_dir {self.path}: its {MARKER} is a symbolic link; "
                                          "choose another directory") from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                os.close(fd)
                raise InvalidArgument(f"remote.cache_dir {self.path}: its {MARKER} is not a regular file of the "
                                      "user running lookupd; choose another directory")
        else:
            try:
                _write_all(fd, MARKER_TEXT + _LEDGER.pack(0))
            except BaseException:
                os.close(fd)
                os.unlink(MARKER, dir_fd=self.fd)
                raise
        return fd

    def close(self) -> None:
        _close_all(self._fds)
        self.fd = self.lock_fd = -1

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held while the set of files changes: by one thread of one process at a time."""
        with self._thread_lock:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def ledger(self) -> int:
        raw = os.pread(self.lock_fd, _LEDGER.size, len(MARKER_TEXT))
        return max(0, _LEDGER.unpack(raw)[0]) if len(raw) == _LEDGER.size else 0

    def set_ledger(self, total: int) -> None:
        os.pwrite(self.lock_fd, _LEDGER.pack(max(0, total)), len(MARKER_TEXT))

    def create(self, name: str) -> int:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=self.fd)

    def open_entry(self, name: str, size: int) -> int | None:
        """A descriptor for the regular file `name` of `size` bytes, or None (gone, a link, another size)."""
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except OSError:  # gone (evicted meanwhile), or ELOOP: a symbolic link
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            os.close(fd)
            return None
        return fd

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def unlink(self, name: str) -> int:
        """Remove `name` (a link itself, never what it names); the bytes of the regular file it was, else 0."""
        st = self.lstat(name)
        try:
            os.unlink(name, dir_fd=self.fd)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            return 0
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def touch(self, name: str) -> None:
        """Mark an entry used now (its mtime orders entries after a restart and among processes)."""
        try:
            os.utime(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            pass

    def scan(self, *, first: bool = False) -> list[tuple[int, str, int]]:
        """(mtime, name, size) of every entry, oldest first, resyncing the ledger (lock held). Removes what
        is lookupd's and cannot be an entry: an entry's name that is not a regular file, a temporary file a
        dead writer left, and (`first`: the scan at start) the files of a version before the marker."""
        legacy = first and self.unmarked
        entries, foreign = [], []
        for e in os.scandir(self.fd):
            name = e.name
            if name == MARKER:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if legacy and _LEGACY.fullmatch(name):
                self.unlink(name)
            elif _ENTRY.fullmatch(name):
                if stat.S_ISREG(st.st_mode):
                    entries.append((st.st_mtime_ns, name, st.st_size))
                elif not stat.S_ISDIR(st.st_mode):
                    self.unlink(name)  # a link where an entry would be: planted
            elif _TMP.fullmatch(name) and not stat.S_ISDIR(st.st_mode):
                if time.time() - st.st_mtime > STALE_TMP_S or not stat.S_ISREG(st.st_mode):
                    self.unlink(name)
            else:
                foreign.append(name)
        if foreign and first:
            log.warning("remote.cache_dir %s holds files lookupd did not make (%s): left alone, and not counted "
                        "in cache_bytes", self.path, ", ".join(sorted(foreign)[:5]))
        entries.sort()
        self.set_ledger(sum(size for _, _, size in entries))
        return entries


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _close_all(fds: list[int]) -> None:
    """Close the descriptors and empty the list (so that a second call closes nothing)."""
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass


class DiskCache:
    """name -> bytes, at most `cache_bytes` on disk (with every process sharing cache_dir) and
    min(cache_bytes, MEMORY_BYTES_MAX) in memory.

    The one exception: an index file larger than `cache_bytes` on its own is still written (the caller
    maps it), and is the first to go when anything else is stored.
    """

    def __init__(self, cache_dir: str, cache_bytes: int):
        self.dir = cache_dir
        self.limit = cache_bytes
        self.memory_limit = min(cache_bytes, MEMORY_BYTES_MAX)
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, bytes] = OrderedDict()
        self._memory_bytes = 0
        # name -> (file name, size), least recently used by this process first: its own entries and those
        # it found (at start, or listing the directory once it had none of its own left to evict).
        self._files: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._pending_bytes = 0  # queued for the write-behind thread
        self._writer: ThreadPoolExecutor | None = None
        self._full_warned = False
        self._disk: CacheDirectory | None = None
        try:
            self._disk = CacheDirectory(cache_dir)
        except OSError as err:
            if err.errno not in _FULL:
                raise
            log.warning("remote.cache_dir %s: its filesystem is full (%s); the cache keeps no files until "
                        "lookupd restarts, and reads go to the bucket", cache_dir, err.strerror)
            return
        with self._disk.locked():
            for _mtime, disk_name, size in self._disk.scan(first=True):
                if self._disk.opened_to_others:
                    self._disk.unlink(disk_name)
                else:
                    self._files[_ENTRY.fullmatch(disk_name)["name"]] = (disk_name, size)
            if self._disk.opened_to_others:
                self._disk.set_ledger(0)
            self._disk.set_ledger(self._evict(self._disk.ledger()))

    @property
    def disk_bytes(self) -> int:
        """The bytes of every entry in cache_dir (of all the processes sharing it)."""
        return self._disk.ledger() if self._disk is not None else 0

    def path(self, name: str) -> str | None:
        """The file holding `name`, if this process knows one (tests; readers use `file`)."""
        with self._lock:
            found = self._files.get(name)
        return self._disk.join(found[0]) if found is not None and self._disk is not None else None

    def close(self) -> None:
        """Finish queued writes and close the directory."""
        self.flush()
        if self._disk is not None:
            self._disk.close()

    # -- reading -----------------------------------------------------------------------------------------------

    def get(self, name: str) -> bytes | memoryview | None:
        """The cached bytes (memory first, then disk), or None. A view stays valid: cached data never changes."""
        with self._lock:
            data = self._memory.get(name)
            if data is not None:
                self._memory.move_to_end(name)
                return data
            found = self._files.get(name)
            if found is None:
                return None
            self._files.move_to_end(name)
        data = self._read(name, *found)
        if data is None:
            return None
        self._remember(name, data)
        return data

    def contains(self, name: str) -> bool:
        """Whether `name` is cached at either level (without reading it or marking it used)."""
        with self._lock:
            return name in self._memory or name in self._files

    def file(self, name: str) -> str | None:
        """The path of a cached file, its checksum checked, marked recently used; or None."""
        with self._lock:
            found = self._files.get(name)
            if found is None:
                return None
            self._files.move_to_end(name)
        disk_name, size = found
        fd = self._disk.open_entry(disk_name, size)
        ok = False
        if fd is not None:
            try:
                crc = crc32c.crc32c(name.encode())
                for position in range(0, size, VERIFY_PIECE):
                    crc = crc32c.crc32c(os.pread(fd, min(VERIFY_PIECE, size - position), position), crc)
                ok = f"{crc:08x}" == _ENTRY.fullmatch(disk_name)["crc"]
            finally:
                os.close(fd)
        if not ok:
            self._drop(name, disk_name)
            return None
        self._disk.touch(disk_name)
        return self._disk.join(disk_name)

    def _read(self, name: str, disk_name: str, size: int) -> bytes | None:
        """An entry's bytes if its file is the regular file it was written as, else None (and it is dropped)."""
        fd = self._disk.open_entry(disk_name, size)
        data = None
        if fd is not None:
            try:
                data = os.pread(fd, size, 0)
            finally:
                os.close(fd)
            if len(data) != size or f"{_checksum(name, (data,)):08x}" != _ENTRY.fullmatch(disk_name)["crc"]:
                data = None
        if data is None:
            self._drop(name, disk_name)
            return None
        self._disk.touch(disk_name)
        return data

    def _drop(self, name: str, disk_name: str) -> None:
        """Forget an entry whose file is gone or is not what was written, and remove that file."""
        log.info("%s: not the entry lookupd wrote (gone, a link, or other bytes): a cache miss",
                 self._disk.join(disk_name))
        with self._lock:
            if self._files.get(name, (None,))[0] == disk_name:
                del self._files[name]
        with self._disk.locked():
            self._disk.set_ledger(self._disk.ledger() - self._disk.unlink(disk_name))

    # -- writing -----------------------------------------------------------------------------------------------

    def put(self, name: str, data: bytes | memoryview) -> None:
        """Store `data` in memory; it goes to disk when memory evicts it (the disk level is a victim cache,
        so a scan that is read once from memory costs no disk writes while it runs). Those writes happen
        behind the caller's back; when the disk falls WRITE_BEHIND_BYTES behind, a copy is skipped."""
        self._remember(name, data)

    def _spill(self, evicted: list[tuple[str, bytes]]) -> None:
        """Queue memory's evictions for the disk level (lock held)."""
        if self._disk is None:
            return
        for name, data in evicted:
            if name in self._files or len(data) > self.limit or \
                    self._pending_bytes + len(data) > WRITE_BEHIND_BYTES:
                continue
            self._pending_bytes += len(data)
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="lookupd-cache-writer")
            self._writer.submit(self._write_behind, name, data)

    def _write_behind(self, name: str, data: bytes) -> None:
        try:
            self.put_file(name, data)
        except OSError:
            pass  # a full or failing cache disk only costs refetches: the bytes are still served from S3
        finally:
            with self._lock:
                self._pending_bytes -= len(data)

    def flush(self) -> None:
        """Wait until every queued disk write is done (tests, shutdown); memory stays as it is."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)

    def put_file(self, name: str, data: bytes) -> str:
        """Store `data` on disk only (indexes: the caller maps the file); returns its path. OSError when it
        cannot be written (ENOSPC: cache_dir's filesystem is full)."""
        return self.put_stream(name, (data,))

    def put_stream(self, name: str, pieces) -> str:
        """`put_file` for data given as an iterable of byte strings (a whole segment, without holding it
        in memory); returns its path."""
        if not _NAME.fullmatch(name) or name.endswith(TMP_SUFFIX):
            raise ValueError(f"{name!r} cannot name a cache entry")
        disk = self._disk
        if disk is None:
            raise OSError(errno.ENOSPC, "cache_dir's filesystem was full when lookupd started", self.dir)
        tmp = f"{name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        size, crc = 0, crc32c.crc32c(name.encode())
        try:
            fd = disk.create(tmp)
            try:
                for piece in pieces:
                    _write_all(fd, piece)
                    crc = crc32c.crc32c(piece, crc)
                    size += len(piece)
            except BaseException:
                disk.unlink(tmp)
                raise
            finally:
                os.close(fd)
        except OSError as err:
            if err.errno in _FULL and not self._full_warned:
                self._full_warned = True
                log.warning("remote.cache_dir %s: its filesystem is full; reads go on, from memory and the "
                            "bucket, without writing to it", self.dir)
            raise
        disk_name = f"{name}.{crc:08x}"
        with disk.locked():
            replaced = disk.lstat(disk_name)
            disk.rename(tmp, disk_name)
            total = disk.ledger() + size - (replaced.st_size if replaced and stat.S_ISREG(replaced.st_mode) else 0)
            with self._lock:
                old = self._files.pop(name, None)
                self._files[name] = (disk_name, size)
            if old is not None and old[0] != disk_name:
                total -= disk.unlink(old[0])
            disk.set_ledger(self._evict(total, keep=name))
        return disk.join(disk_name)

    def _evict(self, total: int, keep: str | None = None) -> int:
        """Unlink least recently used files until the directory's entries fit (directory locked); the new
        total. When this process knows no entry left to evict, it lists the directory once for the others'."""
        listed = False
        while total > self.limit:
            with self._lock:
                victim = next(((n, f) for n, f in self._files.items() if n != keep), None)
                if victim is not None:
                    del self._files[victim[0]]
            if victim is not None:
                total -= self._disk.unlink(victim[1][0])
                continue
            if listed:
                break
            listed = True
            scanned = self._disk.scan()
            with self._lock:
                known = {f[0] for f in self._files.values()}
                for _, d, s in reversed(scanned):  # the others' entries, oldest first, before this process's
                    n = _ENTRY.fullmatch(d)["name"]
                    if d not in known and n not in self._files:
                        self._files[n] = (d, s)
                        self._files.move_to_end(n, last=False)
            total = self._disk.ledger()
        return total

    def _remember(self, name: str, data: bytes) -> None:
        if len(data) > self.memory_limit:
            with self._lock:
                self._spill([(name, data)])
            return
        with self._lock:
            old = self._memory.pop(name, None)
            if old is not None:
                self._memory_bytes -= len(old)
            self._memory[name] = data
            self._memory_bytes += len(data)
            evicted = []
            while self._memory_bytes > self.memory_limit:
                dropped = self._memory.popitem(last=False)
                self._memory_bytes -= len(dropped[1])
                evicted.append(dropped)
            self._spill(evicted)
