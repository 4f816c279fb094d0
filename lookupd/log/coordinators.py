"""The coordinators' state, replayed from their partitions in the log dirs: consumer groups and their
committed offsets from `__consumer_offsets`, transactional ids from `__transaction_state`.

`PartitionReplay` follows one partition and replays only what was appended since it last looked:
it remembers the segment and byte it reached and the offset after the last batch. When the log
grows or rolls it reads on from there; when the cleaner has rewritten segments it has already
replayed it keeps its state (a compacted log replays to the same state, which is what compaction
guarantees) and goes on from its offset; when segments were deleted from the front, the log was
truncated below that offset, or the partition was created again, it replays from the start. The
format layer (lookupd.format.internal) does the decoding and the state; this module reads bytes.

A record that does not decode, or that Kafka's replay would refuse, is a `Fault` naming its file
and byte and, where the key says so, its group: that group answers with the error, every other
group still answers. A fault that cannot be tied to a group (a batch whose checksum fails, an
unknown record type) is reported beside every answer from that partition.
"""

from __future__ import annotations

import bisect
import logging
import threading
from typing import Any, Callable, Iterator, NamedTuple

from ..errors import CorruptDataError, CorruptRecordError, InvalidArgument, UnknownPartition
from ..format.batch import BatchHeader, ensure_valid, frame_size, parse_header
from ..format.internal import transactions as txn
from ..format.internal.group_state import GroupCoordinatorState, ReplayError, key_group
from ..message import MessageError
from ..format.internal.topics import CONSUMER_OFFSETS, DEFAULT_PARTITIONS, TRANSACTION_STATE, partition_for
from ..format.records import control_record, decode_batch
from .fileio import FileHandle, WouldBlock, mode as nonblocking
from .locallog import LocalLog
from .mapping import SIGBUS_GUARD, LogWindow
from .segment import LogSegment

from ..format import _accel

log = logging.getLogger(__name__)

# Bytes of `.log` read at a time: batches are replayed from whole chunks (a larger batch is read alone).
CHUNK_BYTES = 1 << 20
# Bytes of `.log` mapped at a time where the SIGBUS guard lets a replay read a segment in place: a few
# map calls for a 100 MiB segment, and no more of the file mapped at once than that.
MAP_WINDOW_BYTES = 16 << 20
# Faults kept per partition: a badly damaged log must not grow the daemon's memory without bound.
MAX_FAULTS = 100
# Group ids whose partition is kept (Coordinators.group_partition): the groups asked about lately.
MAX_GROUP_PARTITIONS_KEPT = 4096


class Fault(NamedTuple):
    """A record or batch that could not be replayed: which group it belongs to, if known, and why."""

    group: str | None
    error: CorruptDataError


class _Position(NamedTuple):
    segment: LogSegment  # the object replayed from: another one at that base offset means it was replaced
    byte: int  # where the next batch starts
    stuck: bool  # a batch's framing is broken there: nothing after it in this segment can be read


class _Shrank(Exception):
    """A broken batch in a window of a file that shrank while it was read: not a fault, looked at again."""


class PartitionReplay:
    """One internal-topic partition's state, caught up with its files on each `catch_up`."""

    def __init__(self, llog: LocalLog):
        self.llog = llog
        self.lock = threading.Lock()  # one catch-up at a time; readers of the state hold it too
        self.full_replays = 0  # how often it started over (for tests and stats)
        self.progress: Callable[[int], None] | None = None  # told the bytes of each chunk replayed
        self.cache: dict[Any, Any] = {}  # answers derived from the state (keyed and checked by their reader)
        self._reset()

    def _reset(self) -> None:
        self.cache.clear()
        self.state = self.new_state()
        self.faults: list[Fault] = []
        self.fault_count = 0
        self._window: LogWindow | None = None  # the window being replayed from (a shrink's zeros are no fault)
        self.next_offset = 0  # the offset after the last batch replayed
        self._first_base: int | None = None
        self._position: _Position | None = None
        self._bases: list[int] | None = None  # the listing last seen (LocalLog replaces it when it changes)
        self._end = -1  # the active segment's data end last seen

    def new_state(self) -> Any:
        raise NotImplementedError

    # -------------------------------------------------------------- catching up

    def catch_up(self) -> None:
        """Replay what was appended since the last call (everything, the first time, or when the log was
        replaced, truncated or lost segments at its start). The caller holds `lock`."""
        llog = self.llog
        bases = llog.base_offsets
        if bases is self._bases and self._position is not None and not self._position.stuck and \
                self._position.segment.live and self._position.segment.size() == self._end:
            return  # nothing appended (the common case: a listing and one size)
        if not bases:
            if self._first_base is not None:
                self._start_over("the partition has no segments left")
            return
        if self._first_base is not None and bases[0] != self._first_base:
            self._start_over(f"its first segment is now {bases[0]}, was {self._first_base}")
        elif self._first_base is not None and (end := self._log_end_offset()) is not None and end < self.next_offset:
            self._start_over(f"its log end offset {end} is below {self.next_offset}")
        elif self._position is not None and self._rewritten(bases) and self.faults:
            self._start_over("segments were rewritten after faults were found in them")
        if self._first_base is None:
            self._first_base = bases[0]
            self.state = self.new_state()  # (made here: a reference path's state is all Python)
            self.cache.clear()
        self._bases = bases
        i, byte, stuck = self._resume(bases)
        for j in range(i, len(bases)):
            seg = llog.segment(bases[j])
            if j > i:
                byte, stuck = 0, False
            end = seg.size()
            self._position = _Position(seg, byte, stuck)
            if not stuck:
                self._replay_segment(seg, byte, end)
            self._end = end
            if self._position.stuck and j + 1 < len(bases):
                self.next_offset = max(self.next_offset, bases[j + 1])

    def _start_over(self, why: str) -> None:
        log.info("replaying %s from its start: %s", self.llog.dir, why)
        self._reset()
        self.full_replays += 1

    def _log_end_offset(self) -> int | None:
        """The log end offset, or None where the active segment's batches cannot be walked to it: a broken
        frame, which the replay named as a fault where it stopped (no truncation can be told from it then)."""
        try:
            return self.llog.log_end_offset
        except CorruptDataError:
            return None

    def _rewritten(self, bases: list[int]) -> bool:
        """Whether a segment replayed before is gone or replaced (the cleaner's work, below the position)."""
        pos = self._position
        return self.llog.segment(pos.segment.base_offset) is not pos.segment if pos.segment.base_offset in bases \
            else True

    def _resume(self, bases: list[int]) -> tuple[int, int, bool]:
        """(index in `bases`, byte, stuck) to go on from: the remembered position if that segment is still
        the same file, else the first batch holding `next_offset` (found through the offset index)."""
        pos = self._position
        if pos is not None:
            b = pos.segment.base_offset
            k = bisect.bisect_left(bases, b)
            if k < len(bases) and bases[k] == b and self.llog.segment(b) is pos.segment:
                return k, pos.byte, pos.stuck
        i = max(bisect.bisect_right(bases, self.next_offset) - 1, 0)
        seg = self.llog.segment(bases[i])
        if self.next_offset <= seg.base_offset:
            return i, 0, False
        found = seg.translate_offset(self.next_offset)
        if found is not None:
            return i, found.position, False
        if i + 1 < len(bases):  # nothing at or past it in that segment: the next one
            return i + 1, 0, False
        return i, seg.size(), False

    def _replay_segment(self, seg: LogSegment, byte: int, end: int) -> None:
        """Replay the whole batches of seg.log[byte:end], moving `_position` on after each chunk (so a read
        that would wait, in the daemon's non-blocking mode, leaves the state and the position in step: the
        call is then made again in a worker thread and goes on from there). A broken frame stops the
        segment for good; in a rolled segment so does a batch cut off at its end, while in the active one
        that is a batch the broker is still writing, replayed next time.

        The chunks are windows of the file mapped under the SIGBUS guard (LogWindow: no copy), or where
        reads must not wait or there is no guard, read with pread into one reused buffer."""
        path = seg.log.path
        handle = seg.log.handle()
        self._reserve(end - byte)
        mapped = SIGBUS_GUARD and not nonblocking.on and not _accel.mode.python and isinstance(handle, FileHandle)
        pos = byte
        buf = None
        try:
            while pos < end:
                window = self._window = LogWindow.open(handle, pos, min(end, pos + MAP_WINDOW_BYTES)) \
                    if mapped else None
                if window is not None:  # the chunk is buf[lo:n], buf[i] the file's byte pos - lo + i
                    buf, lo = window.view, pos - window.base
                    want = window.stop - pos
                else:
                    if buf is None or type(buf) is memoryview:
                        buf = bytearray(min(CHUNK_BYTES, end - pos))  # each chunk read into it: no new pages
                    lo, want = 0, min(CHUNK_BYTES, end - pos)
                    if handle.pread_into(memoryview(buf)[:want], pos) < want:
                        return  # the file shrank under us: looked at again next time
                off = lo
                n = lo + want
                at = pos  # where the batch being read starts
                try:
                    while off < n:
                        off = self._fast(buf, off, n)
                        if off >= n:
                            break
                        at = pos + off - lo
                        try:
                            size = frame_size(buf, off, n, at, path)
                        except CorruptRecordError as err:
                            self._bad_frame(err)
                            self._position = _Position(seg, at, True)
                            return
                        if size is None:  # not whole in this chunk: the next one starts with it
                            break
                        # (a copy out of a window: nothing decoded may keep a slice of the map)
                        self._batch(memoryview(buf)[off:off + size] if window is None else bytes(buf[off:off + size]),
                                    at, path)
                        off += size
                    off -= lo
                    if off == 0:  # a batch larger than a chunk, or one cut off at the end of the data
                        at = pos
                        try:
                            size = frame_size(buf, lo, lo + end - pos, pos, path)
                        except CorruptRecordError as err:
                            self._bad_frame(err)
                            self._position = _Position(seg, pos, True)
                            return
                        if size is None:
                            break
                        batch = handle.pread(size, pos)
                        if len(batch) < size:
                            return  # the file shrank under us: looked at again next time
                        self._batch(batch, pos, path)
                        off = size
                except _Shrank:
                    self._position = _Position(seg, at, False)
                    return
                finally:
                    if window is not None:
                        self._window = None
                        window.close()
                pos += off
                self._position = _Position(seg, pos, False)
                if self.progress is not None:
                    self.progress(off)
        finally:
            self._window = None
        if pos < end and not seg.live:
            self._fault(None, CorruptRecordError(path, pos, f"{end - pos} bytes after the last whole batch of a "
                                                            f"rolled segment (a batch cut off)"))
            self._position = _Position(seg, pos, True)

    def _bad_frame(self, err: CorruptRecordError) -> None:
        """A batch whose frame or CRC is broken: a fault, unless it was read from a window of a file that
        shrank meanwhile (the guard's zeros past its new end): then _Shrank, and it is looked at again."""
        if self._window is not None and self._window.shrank():
            raise _Shrank()
        self._fault(None, err)

    def _fast(self, buf, off: int, n: int) -> int:
        """Batches a C scan takes from buf[off:n], applied; where the Python replay goes on."""
        return off

    def _reserve(self, size: int) -> None:
        """Told the bytes of log about to be replayed (a C state makes room for what they may add)."""

    def _batch(self, data, position: int, path: str) -> None:
        """One whole batch, by the reference path: checked, decoded and replayed record by record."""
        try:
            header = parse_header(data, 0, position, path)
            ensure_valid(header, data, path)
        except CorruptRecordError as err:
            self._bad_frame(err)
            try:
                self.next_offset = max(self.next_offset, parse_header(data, 0, position, path).next_offset)
            except CorruptRecordError:
                pass
            return
        try:
            records = decode_batch(header, data, path=path)
        except CorruptRecordError as err:
            self._fault(None, err)
        else:
            self.replay_batch(header, records, path)
        self.next_offset = max(self.next_offset, header.next_offset)

    def replay_batch(self, header: BatchHeader, records: list, path: str) -> None:
        raise NotImplementedError

    def _fault(self, group: str | None, error: CorruptDataError) -> None:
        self.fault_count += 1
        if len(self.faults) < MAX_FAULTS:
            self.faults.append(Fault(group, error))
            log.info("%s", error)  # (the answers that it touches name it too)

    def record_fault(self, header: BatchHeader, offset: int, path: str, group: str | None, err: Exception) -> None:
        where = f"record at offset {offset}: " if offset is not None else ""
        self._fault(group, CorruptRecordError(path, header.position, f"{where}{err}"))

    def faults_for(self, group: str | None) -> tuple[list[Fault], list[Fault]]:
        """(this group's faults, the partition's faults not tied to a group)."""
        mine = [f for f in self.faults if f.group is not None and f.group == group]
        return mine, [f for f in self.faults if f.group is None]


class GroupReplay(PartitionReplay):
    """A `__consumer_offsets` partition: groups and offsets (lookupd.format.internal.group_state)."""

    def new_state(self) -> GroupCoordinatorState:
        return GroupCoordinatorState()

    def _fast(self, buf, off: int, n: int) -> int:
        commits = self.state.commits
        if _accel.mode.python or type(commits) is not _accel.CommitTable:  # a reference path's state
            return off
        state = self.state
        while off < n:
            stop, next_offset, tombstoned, removed, txn, marker = _accel.commit_runs(
                buf, off, n, commits, bool(state.open_transactions))
            if stop == off:
                break  # the batch there is the Python replay's
            # batches taken (their next offset may be anything a damaged base offset makes it)
            state.apply_commits(tombstoned, removed)
            self.next_offset = max(self.next_offset, next_offset)
            off = stop
            if txn is not None:  # (the scan ends after a transactional batch or a marker: on from there)
                state.apply_transactional(*txn)
            elif marker is not None:
                state.replay_marker(*marker)
            else:
                break
        return off

    def _reserve(self, size: int) -> None:
        commits = self.state.commits
        if type(commits) is _accel.CommitTable:
            commits.reserve(size)

    def replay_batch(self, header: BatchHeader, records: list, path: str) -> None:
        state = self.state
        if header.is_control:
            for r in records:
                try:
                    marker = control_record(r, path=path, position=header.position)
                except CorruptRecordError as err:
                    self._fault(None, err)
                    continue
                if marker.type in ("COMMIT", "ABORT"):
                    state.replay_marker(header.producer_id, marker.type == "COMMIT")
            return
        for r in records:
            try:
                state.replay(r.offset, header.producer_id, r.key, r.value)
            except ReplayError as err:
                self.record_fault(header, r.offset, path, err.group, err)
            except MessageError as err:
                self.record_fault(header, r.offset, path, key_group(r.key), err)


class TransactionReplay(PartitionReplay):
    """A `__transaction_state` partition: transactional ids (lookupd.format.internal.transactions)."""

    def new_state(self) -> txn.TransactionLog:
        return txn.TransactionLog()

    def replay_batch(self, header: BatchHeader, records: list, path: str) -> None:
        if header.is_control:
            return
        for r in records:
            try:
                self.state.replay(r.key, r.value)
            except MessageError as err:
                self.record_fault(header, r.offset, path, None, err)


class OpenTransaction(NamedTuple):
    """A transaction open in a data partition: transactional batches of a producer with no marker yet."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    last_offset: int
    start_timestamp: int  # the first batch's max timestamp (the broker's time under LogAppendTime)
    last_timestamp: int


class OpenTransactionScan(PartitionReplay):
    """The open transactions of a data partition (ProducerStateManager's ongoing transactions), from its
    batch headers: a transactional batch opens one for its producer, any control batch of that producer
    (its COMMIT or ABORT marker) closes it. The partition's last stable offset is the first offset of
    the earliest still open, else its log end offset. Transactions begun before the log start (whose
    first batches retention removed) are seen from their first batch still there."""

    def new_state(self) -> dict[int, OpenTransaction]:
        return {}

    def _batch(self, data, position: int, path: str) -> None:
        try:
            h = parse_header(data, 0, position, path)
        except CorruptRecordError as err:
            self._fault(None, err)
            return
        if h.has_producer_id:
            if h.is_control:
                self.state.pop(h.producer_id, None)
            elif h.is_transactional:
                t = self.state.get(h.producer_id)
                self.state[h.producer_id] = OpenTransaction(h.producer_id, h.producer_epoch, h.base_offset,
                                                            h.last_offset, h.max_timestamp, h.max_timestamp) \
                    if t is None else t._replace(last_offset=h.last_offset, last_timestamp=h.max_timestamp)
        self.next_offset = max(self.next_offset, h.next_offset)

    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the log end offset."""
        if self.state:
            return min(t.first_offset for t in self.state.values())
        return self.llog.log_end_offset


class _CaughtUp:
    def __init__(self, r: PartitionReplay):
        self.r = r

    def __enter__(self) -> PartitionReplay:
        if nonblocking.on:
            if not self.r.lock.acquire(blocking=False):
                raise WouldBlock
        else:
            self.r.lock.acquire()
        try:
            self.r.catch_up()
        except BaseException:
            self.r.lock.release()
            raise
        return self.r

    def __exit__(self, *exc) -> None:
        self.r.lock.release()


class Coordinators:
    """The replayed internal-topic partitions of one LogManager, each kept until its LocalLog changes."""

    def __init__(self, manager, partitions: int = DEFAULT_PARTITIONS):
        if not isinstance(partitions, int) or partitions <= 0:
            raise InvalidArgument(f"the coordinator topics' partition count must be a positive integer, "
                                  f"got {partitions!r}")
        self.manager = manager
        self.partitions = partitions
        self.progress: Callable[[int], None] | None = None  # given to each replay (the command's progress line)
        self._replays: dict[tuple[str, int], PartitionReplay] = {}
        self._group_partitions: dict[str, int] = {}  # group id -> its partition, as asked lately
        self._lock = threading.Lock()

    def replay(self, topic: str, partition: int) -> PartitionReplay:
        """The partition's replay (UnknownPartition when it is not in the log dirs): a GroupReplay, a
        TransactionReplay, or for any other topic an OpenTransactionScan. The caller catches it up and
        reads its state under its `lock`."""
        llog = self.manager.get(topic, partition)
        with self._lock:
            r = self._replays.get((topic, partition))
            if r is None or r.llog is not llog:
                kind = {CONSUMER_OFFSETS: GroupReplay, TRANSACTION_STATE: TransactionReplay}.get(topic,
                                                                                           OpenTransactionScan)
                self._prune()
                r = self._replays[(topic, partition)] = kind(llog)
                r.progress = self.progress
        return r

    def _prune(self) -> None:
        """Let go of the replays of partitions gone from the log dirs (when another is added)."""
        served = {(l.topic, l.partition) for l in self.manager.logs()}
        for key in [k for k in self._replays if k not in served]:
            del self._replays[key]

    def _present(self, topic: str) -> list[int]:
        return sorted(l.partition for l in self.manager.logs() if l.topic == topic)

    def each(self, topic: str) -> Iterator[tuple[int, PartitionReplay]]:
        """Every partition of `topic` in the log dirs, caught up and locked while the caller reads it."""
        for p in self._present(topic):
            try:
                r = self.replay(topic, p)
            except UnknownPartition:
                continue  # deleted while listed
            with self.caught_up(r):
                yield p, r

    def group_partition(self, group: str) -> int:
        p = self._group_partitions.get(group)
        if p is None:  # (String.hashCode over the group id's UTF-16: a few us in Python, so kept)
            if len(self._group_partitions) >= MAX_GROUP_PARTITIONS_KEPT:
                self._group_partitions.clear()
            p = self._group_partitions[group] = partition_for(group, self.partitions)
        return p

    def caught_up(self, r: PartitionReplay):
        """A context holding `r`'s lock with `r` caught up. In the daemon's non-blocking mode a lock another
        thread holds (a long replay) would stall the event loop: WouldBlock sends the call to a thread."""
        return _CaughtUp(r)

    def with_group(self, group: str, read: Callable[[GroupReplay], Any]) -> Any:
        """`read` applied to the caught-up replay of the group's partition, under its lock."""
        if not isinstance(group, str):
            raise InvalidArgument(f"group must be a string, got {type(group).__name__}")
        p = self.group_partition(group)
        try:
            r = self.replay(CONSUMER_OFFSETS, p)
        except UnknownPartition:
            raise UnknownPartition(f"group {group!r} lives in {CONSUMER_OFFSETS}-{p} (with {self.partitions} "
                                   f"partitions), which is not in the log dirs ({', '.join(self.manager.log_dirs)})") \
                from None
        with self.caught_up(r):
            return read(r)

