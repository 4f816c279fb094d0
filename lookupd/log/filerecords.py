"""A segment's `.log` (Kafka's FileRecords, read side): batches framed from `pread` chunks.

The log is never mapped: the broker truncates it (follower truncation, recovery) and a
mapped read past the new end would be a SIGBUS. `read_frames` is the one loop that reads
a `.log` in chunks and splits them into batches; every reader of `.log` bytes (segments,
the FUSE mount, the Spark reader) goes through it.
"""

from __future__ import annotations

import struct
from typing import Callable, Iterator, NamedTuple, Protocol

from ..format.batch import (HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, RECORD_OVERHEAD_V0, V2_HEADER_SIZE,
                            BatchHeader, frame_size, last_offset_at, max_timestamp_at, parse_header)
from ..errors import INT64_MAX, INT64_MIN, CorruptRecordError
from .fileio import FileHandle, LazyHandle, regular_stat

from . import _accel  # the header walk in C, unless a reference path runs: read_frames walks in Python

# Header scans start at an index entry, at most `index.interval.bytes` (4 KiB by default)
# before the batch looked for: 16 KiB usually reaches it, and what follows, in one pread.
HEADER_SCAN_BYTES = 16 * 1024
# The C walk reads a first chunk of one index interval (4 KiB by default) and a header more: the batch
# looked for nearly always starts in it, and a smaller copy is cheaper (resolve_offset on large-0 went
# from 19.1 to 17.8 us in process here). Further chunks are HEADER_SCAN_BYTES.
FIRST_SCAN_BYTES = 4096 + 64
# (_native.c's one-call lookups read the same chunks: FIRST_CHUNK and NEXT_CHUNK there.)
_BASE = struct.Struct(">q")
# Header bytes holding the field a walk compares, by magic 0, 1, 2: the last offset (legacy: the
# offset field; v2: base offset plus the delta at byte 23), or the max timestamp (v0 has none,
# v1: the message timestamp at byte 18, v2: the field at byte 35). As Kafka, a walk reads those
# bytes even from a batch too short to hold them; only the end of the file stops it, as an error.
_KEY_BYTES = {False: (12, 12, 27), True: (17, 26, 43)}
_SIZE = struct.Struct(">i")
# A preallocated `.log` (log.preallocate=true) is zero-filled past its data: a batch's offset and size
# fields all zero are where the data ends (no batch has size 0).
ZERO_HEADER = bytes(LOG_OVERHEAD)


def read_frames(handle: FileHandle, start: int, end: int, *, path: str, chunk: int = HEADER_SCAN_BYTES,
                need: int = V2_HEADER_SIZE, whole: bool = False,
                strict: bool = False) -> Iterator[tuple[bytes, int, int, int]]:
    """Walk the batches of a `.log` in [start, end): yields (buffer, offset in buffer, file position, size).

    The file is read `chunk` bytes at a time. At least `need` header bytes of each batch
    are in the buffer (fewer only when the file itself ends sooner); with `whole`, all of
    the batch is, a batch larger than `chunk` being read on its own. Stops, like
    FileLogInputStream, at a batch that runs past `end`; with `strict` that is reported as
    a cut-off batch instead, which is right for a rolled segment and wrong for the active
    one, whose last batch may be mid-append. A size field below the smallest legal batch
    is corruption either way, except that without `strict` an all-zero header (ZERO_HEADER: a
    preallocated active segment's tail) ends the walk.
    """
    pos = start
    buf = b""
    buf_start = start
    while True:
        if pos >= end - HEADER_SIZE_UP_TO_MAGIC:
            if strict and pos < end:
                raise CorruptRecordError(path, pos, f"{end - pos} trailing bytes are too few for a batch header")
            return
        off = pos - buf_start
        if off + need > len(buf):
            buf = handle.pread(min(max(chunk, need), end - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < LOG_OVERHEAD + 1:
                if strict:
                    raise CorruptRecordError(path, pos, "log file ended before the batch it was sized to hold")
                return
        try:
            size = frame_size(buf, off, off + end - pos, pos, path)
        except CorruptRecordError:
            if not strict and buf[off:off + LOG_OVERHEAD] == ZERO_HEADER:
                return  # a preallocated active segment's zero-filled tail: the data ends here
            raise
        if size is None:  # runs past `end` (too few bytes for a header was ruled out above)
            if strict:
                declared = _SIZE.unpack_from(buf, off + 8)[0] + LOG_OVERHEAD
                raise CorruptRecordError(path, pos, f"batch is cut off: it declares {declared} bytes "
                                                    f"but only {end - pos} remain in the log")
            return
        if whole and off + size > len(buf):
            buf = handle.pread(min(max(chunk, size), end - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < size:  # the file shrank under us
                if strict:
                    raise CorruptRecordError(path, pos, "log file ended before the batch it was sized to hold")
                return
        yield buf, off, pos, size
        pos += size


class LogOffsetPosition(NamedTuple):
    """FileRecords.LogOffsetPosition: a batch's last offset, position and size (plus its base offset)."""

    offset: int
    position: int
    size: int
    base_offset: int = -1


class ReadHandle(Protocol):
    """What FileRecords reads through: a FileHandle, or a `.log` read from elsewhere (no descriptor: `fd` None,
    and the native paths, which read a descriptor, decline)."""

    fd: int | None

    def pread(self, size: int, position: int) -> bytes: ...

    def size(self) -> int: ...


class RecordsFile(Protocol):
    """Where a `.log`'s handle comes from (LazyHandle: the file at `path`, opened on first use)."""

    is_open: bool

    def get(self) -> ReadHandle: ...

    def close(self) -> None: ...


class FileRecords:
    """Read-only access to one `.log` file (`file`: where its handle comes from, by default the file at `path`;
    a remote segment gives its own, lookupd.log.tiered.segment.RemoteFile, and `path` is then its URL)."""

    def __init__(self, path: str, cache=None, *, file: RecordsFile | None = None):
        self.path = path
        self._file = file if file is not None else LazyHandle(path, cache)
        # handle(): the open handle, opened on first use (LazyHandle.get itself: a call fewer per lookup)
        self.handle: Callable[[], ReadHandle] = self._file.get

    def close(self) -> None:
        self._file.close()

    @property
    def file(self) -> RecordsFile:
        """Where the file's handle comes from, opened on first use (fileio.open_sizes reads many LazyHandles
        at once)."""
        return self._file

    def size(self) -> int:
        """Current size of the file in bytes (an fstat: the broker may be appending)."""
        return self._file.get().size()

    def peek_size(self) -> int:
        """The same, without opening the file when it is not open already (a stat of its path):
        a listing of 10,000 segments then opens none of their logs, nor churns the IndexCache."""
        if self._file.is_open:
            return self._file.get().size()
        return regular_stat(self.path).st_size

    def read(self, position: int, size: int) -> bytes:
        """Bytes [position, position + size), fewer at end of file."""
        return self._file.get().pread(size, position)

    def frames(self, start: int, end: int | None = None, *, strict: bool = False,
               need: int = V2_HEADER_SIZE) -> Iterator[tuple[bytes, int, int, int]]:
        """`read_frames` over this file, from `start` to `end` (default: its current size)."""
        h = self._file.get()
        return read_frames(h, start, h.size() if end is None else end, path=self.path, need=need, strict=strict)

    def batches(self, start: int = 0, end: int | None = None, *, strict: bool = False) -> Iterator[BatchHeader]:
        """Parsed headers of every batch in [start, end)."""
        for buf, off, pos, _ in self.frames(start, end, strict=strict):
            yield parse_header(buf, off, pos, self.path)

    def find_batch(self, target: int, start: int, end: int, *, by_timestamp: bool = False,
                   strict: bool = False) -> tuple[bytes, int, int, int] | None:
        """The first batch from `start` whose last offset (with `by_timestamp`, max timestamp) >= target,
        as `read_frames` yields it (buffer, offset in it, file position, size); None if none before `end`.

        The header walk runs in C (`_accel.find_batch`) a chunk at a time; a batch it leaves
        (cut, corrupt, past the end) is where `read_frames` goes on, so both make the same
        decisions and raise the same errors."""
        h = self._file.get()
        pos = start
        if not _accel.mode.python and INT64_MIN <= target <= INT64_MAX:
            chunk = FIRST_SCAN_BYTES
            while pos < end - HEADER_SIZE_UP_TO_MAGIC:
                buf = h.pread(min(chunk, end - pos), pos)
                chunk = HEADER_SCAN_BYTES
                off, found = _accel.find_batch(buf, end - pos, target, by_timestamp)
                if found:
                    return buf, off, pos + off, _SIZE.unpack_from(buf, off + 8)[0] + LOG_OVERHEAD
                if off == 0:
                    break  # the next batch is the reference walk's to judge
                pos += off
        for buf, off, p, size in read_frames(h, pos, end, path=self.path, need=61 if by_timestamp else 27,
                                             strict=strict):
            if self._header_field(buf, off, p, by_timestamp) >= target:
                return buf, off, p, size
        return None

    def _header_field(self, buf, off: int, pos: int, by_timestamp: bool) -> int:
        """The batch's max timestamp (by_timestamp) or last offset, from its header in buf[off:]; a header
        the file ends inside is corrupt (read_frames gives fewer bytes than asked only where it ends)."""
        held = _KEY_BYTES[by_timestamp][min(buf[off + MAGIC_OFFSET], 2)]
        if len(buf) - off < held:
            raise CorruptRecordError(self.path, pos, f"the log ends {len(buf) - off} bytes into a batch header "
                                                     f"(the field looked for ends at byte {held})")
        return max_timestamp_at(buf, off) if by_timestamp else last_offset_at(buf, off)

    def search_for_offset_with_size(self, target_offset: int, start: int, *, strict: bool = False,
                                    end: int | None = None) -> LogOffsetPosition | None:
        """FileRecords.searchForOffsetWithSize: first batch from `start` whose last offset >= target."""
        found = self.find_batch(target_offset, start, self.size() if end is None else end, strict=strict)
        if found is None:
            return None
        buf, off, pos, size = found
        return LogOffsetPosition(last_offset_at(buf, off), pos, size, _BASE.unpack_from(buf, off)[0])

    def data_end(self, start: int, end: int) -> int:
        """Where the data of a preallocated `.log` ends: the position of the first batch from `start` (a batch
        boundary) whose offset and size fields are all zero (ZERO_HEADER), else `end`. Only sizes are
        read, a chunk at a time; a size below the smallest batch is left to the walks, which name it."""
        h = self._file.get()
        pos = start
        while pos <= end - LOG_OVERHEAD:
            buf = h.pread(min(HEADER_SCAN_BYTES, end - pos), pos)
            off = 0
            while off <= len(buf) - LOG_OVERHEAD:
                if buf[off:off + LOG_OVERHEAD] == ZERO_HEADER:
                    return pos + off
                size = _SIZE.unpack_from(buf, off + 8)[0]
                if size < RECORD_OVERHEAD_V0:
                    return end
                off += size + LOG_OVERHEAD
            if off == 0:
                break  # the file shrank under us: no header left
            pos += off
        return end

    def largest_timestamp_after(self, start: int, *, end: int | None = None) -> tuple[int, int, int]:
        """FileRecords.largestTimestampAfter: (max timestamp, last offset of its first batch, position)."""
        best_ts, best_offset, best_pos = -1, -1, -1
        for buf, off, pos, _ in self.frames(start, end, need=43):
            ts = self._header_field(buf, off, pos, True)
            if ts > best_ts:
                best_ts, best_offset, best_pos = ts, self._header_field(buf, off, pos, False), pos
        return best_ts, best_offset, best_pos

    def last_batch(self, start: int, *, end: int | None = None, most: int | None = None) -> tuple[int, int] | None:
        """(last offset, position) of the last complete batch from `start`, None if none (or, given `most`,
        if more than `most` batches would have to be walked to find it)."""
        found = None
        for n, (buf, off, pos, _) in enumerate(self.frames(start, end, need=27)):
            if most is not None and n >= most:
                return None
            found = (self._header_field(buf, off, pos, False), pos)
        return found

