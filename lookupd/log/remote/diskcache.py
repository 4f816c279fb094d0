"""A bounded two-level LRU cache of decoded remote bytes: a small in-memory level over files in cache_dir
(chunks reach the disk when memory evicts them; indexes are written straight to disk, to be mapped).

The files are lookupd's own (chunks of remote segments, fetched indexes), never Kafka's files and never
the bucket: this is the one module of the log layer that writes, and only under cache_dir. Files are
written atomically (a temporary file, then rename), so a reader never sees half of one. An evicted file
that a reader has already mapped stays readable until unmapped (Linux keeps unlinked inodes alive).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

MEMORY_BYTES_MAX = 64 * 1024 * 1024  # decoded chunks kept in memory: a few read-ahead windows' worth
WRITE_BEHIND_BYTES = 64 * 1024 * 1024  # chunk bytes queued for the disk level; beyond it a write is skipped
TMP_SUFFIX = ".tmp"


def cache_name(object_key: str, part: str) -> str:
    """A flat file name for `part` (a chunk number or index kind) of an object: hashed, so any key fits."""
    return f"{hashlib.sha256(object_key.encode()).hexdigest()[:40]}.{part}"


class DiskCache:
    """name -> bytes, at most `cache_bytes` on disk and min(cache_bytes, MEMORY_BYTES_MAX) in memory.

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
        self._files: OrderedDict[str, int] = OrderedDict()  # name -> size, least recently used first
        self.disk_bytes = 0
        self._pending_bytes = 0  # queued for the write-behind thread
        self._writer: ThreadPoolExecutor | None = None
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)  # decrypted data: readable by lookupd's user only
        self._adopt()

    def _adopt(self) -> None:
        """Take over the files a previous run left, oldest first; drop half-written ones."""
        entries = []
        for entry in os.scandir(self.dir):
            if not entry.is_file(follow_symlinks=False):
                continue
            if entry.name.endswith(TMP_SUFFIX):
                os.unlink(entry.path)
                continue
            st = entry.stat(follow_symlinks=False)
            entries.append((st.st_mtime, entry.name, st.st_size))
        for _, name, size in sorted(entries):
            self._files[name] = size
            self.disk_bytes += size
        with self._lock:
            self._evict_files()

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def get(self, name: str) -> bytes | memoryview | None:
        """The cached bytes (memory first, then disk), or None. A view stays valid: cached data never changes."""
        with self._lock:
            data = self._memory.get(name)
            if data is not None:
                self._memory.move_to_end(name)
                return data
            if name not in self._files:
                return None
            self._files.move_to_end(name)
        try:
            with open(self.path(name), "rb") as f:
                data = f.read()
        except FileNotFoundError:  # evicted by another thread meanwhile
            return None
        self._remember(name, data)
        return data

    def contains(self, name: str) -> bool:
        """Whether `name` is cached at either level (without reading it or marking it used)."""
        with self._lock:
            return name in self._memory or name in self._files

    def file(self, name: str) -> str | None:
        """The path of a cached file, marked recently used, or None."""
        with self._lock:
            if name not in self._files:
                return None
            self._files.move_to_end(name)
        return self.path(name)

    def put(self, name: str, data: bytes | memoryview) -> None:
        """Store `data` in memory; it goes to disk when memory evicts it (the disk level is a victim cache,
        so a scan that is read once from memory costs no disk writes while it runs). Those writes happen
        behind the caller's back; when the disk falls WRITE_BEHIND_BYTES behind, a copy is skipped."""
        self._remember(name, data)

    def _spill(self, evicted: list[tuple[str, bytes]]) -> None:
        """Queue memory's evictions for the disk level (lock held)."""
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
        """Store `data` on disk only (indexes: the caller maps the file); returns its path."""
        return self.put_stream(name, (data,))

    def put_stream(self, name: str, pieces) -> str:
        """`put_file` for data given as an iterable of byte strings (a whole segment, without holding it
        in memory); returns its path."""
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=TMP_SUFFIX)
        size = 0
        try:
            with os.fdopen(fd, "wb") as f:
                for piece in pieces:
                    f.write(piece)
                    size += len(piece)
            os.replace(tmp, self.path(name))
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        with self._lock:
            old = self._files.pop(name, None)
            if old is not None:
                self.disk_bytes -= old
            self._files[name] = size
            self.disk_bytes += size
            self._evict_files(keep=name)
        return self.path(name)

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

    def _evict_files(self, keep: str | None = None) -> None:
        """Unlink least recently used files until the disk level fits (lock held)."""
        while self.disk_bytes > self.limit and self._files:
            name, size = next(iter(self._files.items()))
            if name == keep and len(self._files) == 1:
                break
            if name == keep:
                self._files.move_to_end(name)
                continue
            del self._files[name]
            self.disk_bytes -= size
            try:
                os.unlink(self.path(name))
            except FileNotFoundError:
                pass
