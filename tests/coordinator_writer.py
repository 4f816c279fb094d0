"""`__consumer_offsets` and `__transaction_state` partitions written as a broker writes them, for tests and
benchmarks: records serialized as GroupCoordinatorRecordSerde / TransactionLog serialize them, batched
as CoordinatorRuntime batches them (plain writes together, each transactional write in a batch of its
own, end markers as control batches), appended through lookupd's LogWriter (lookupd/tools/writer.py).

`Cleaner` rewrites a partition's segments as Kafka's LogCleaner would, and swaps them in as it does.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from lookupd.format import _accel
from lookupd.format.batch import NO_PRODUCER_ID, Compression, parse_header, whole_frames
from lookupd.format.builder import build_batch, build_control_batch
from lookupd.format.records import control_record, decode_batch
from lookupd.log.coordinators import Coordinators, GroupReplay
from lookupd.log.locallog import list_segments
from lookupd.log.logmanager import LogManager
from lookupd.tools.writer import LogWriter


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def uvarint(n: int) -> bytes:
    """An unsigned varint (the length prefixes of flexible versions)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def commit_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return struct.pack(">h", version) + _s(group) + _s(topic) + struct.pack(">i", partition)


def commit_value(offset: int, metadata: str = "", timestamp: int = 0, leader_epoch: int = -1, version: int = 3,
                 expire: int = -1) -> bytes:
    """OffsetCommitValue at `version` (0-4); fields the version lacks are left out."""
    out = struct.pack(">hq", version, offset)
    if version >= 3:
        out += struct.pack(">i", leader_epoch)
    if version == 4:
        m = metadata.encode()
        return out + uvarint(len(m) + 1) + m + struct.pack(">q", timestamp) + b"\x00"
    out += _s(metadata) + struct.pack(">q", timestamp)
    if version == 1:
        out += struct.pack(">q", expire)
    return out


def group_key(group: str) -> bytes:
    return struct.pack(">h", 2) + _s(group)


def group_value(protocol_type: str, generation: int, protocol: str | None, members: list[str]) -> bytes:
    """GroupMetadataValue v3 with members that subscribe to nothing (enough for state and membership)."""
    out = struct.pack(">h", 3) + _s(protocol_type) + struct.pack(">i", generation)
    out += _s(protocol) if protocol is not None else struct.pack(">h", -1)
    out += (_s(members[0]) if members else struct.pack(">h", -1)) + struct.pack(">q", 0) + struct.pack(">i", len(members))
    for m in members:
        out += _s(m) + struct.pack(">h", -1) + _s("client") + _s("/10.0.0.1") + struct.pack(">ii", 300000, 45000)
        out += struct.pack(">i", 0) + struct.pack(">i", 0)
    return out


def txn_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _s(transactional_id)


def txn_value(producer_id: int, epoch: int, status: int, partitions: dict[str, list[int]] | None, timeout_ms: int = 60000,
              start: int = 0, updated: int = 0) -> bytes:
    """TransactionLogValue v0."""
    out = struct.pack(">hqhib", 0, producer_id, epoch, timeout_ms, status)
    if partitions is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(partitions))
        for topic, ps in partitions.items():
            out += _s(topic) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">qq", updated, start)


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None


class CoordinatorLog:
    """Appends coordinator writes to a partition directory through LogWriter; `offset` is the log end."""

    def __init__(self, directory: str, *, segment_bytes: int = 1 << 30, clock: int = 1_700_000_000_000):
        self.dir = directory
        self.writer = LogWriter(directory, segment_bytes=segment_bytes, index_interval_bytes=1024,
                                max_index_size=1 << 16)
        self.offset = 0
        self.clock = clock

    def write(self, records: list[Record], *, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
              compression: Compression = Compression.NONE) -> int:
        """One batch; returns the offset of its first record."""
        self.clock += 1
        first = self.offset
        self.writer.append(build_batch([(self.clock, r.key, r.value, ()) for r in records], base_offset=first,
                                       compression=compression, producer_id=producer_id,
                                       producer_epoch=producer_epoch, base_sequence=0,
                                       transactional=producer_id != NO_PRODUCER_ID))
        self.offset += len(records)
        return first

    def marker(self, producer_id: int, producer_epoch: int, commit: bool) -> int:
        self.clock += 1
        at = self.offset
        self.writer.append(build_control_batch(at, self.clock, producer_id=producer_id, producer_epoch=producer_epoch,
                                               commit=commit, coordinator_epoch=17))
        self.offset += 1
        return at

    def roll(self) -> None:
        self.writer.roll()

    def close(self) -> None:
        self.writer.close()


def replayed(log_dirs, partition: int = 0, *, python: bool = False, partitions: int = 1) -> GroupReplay:
    """A full replay of `__consumer_offsets-<partition>` in the log dirs: the fast path, or (`python`) the
    reference path alone."""
    r = Coordinators(LogManager(list(log_dirs)), partitions).replay("__consumer_offsets", partition)
    with r.lock:
        if python:
            with _accel.python_only():
                r.catch_up()
        else:
            r.catch_up()
    return r


def read_batches(directory: str) -> list[tuple[bytes, object]]:
    """Every batch of a partition directory, in order: (bytes, header)."""
    out = []
    for base in list_segments(directory):
        with open(os.path.join(directory, f"{base:020d}.log"), "rb") as f:
            data = f.read()
        for off, size in whole_frames(data):
            out.append((data[off:off + size], parse_header(data, off)))
    return out


class Cleaner:
    """Compaction as Kafka's LogCleaner does it, over the segments of [start, end) of a partition (end: a
    segment boundary at or below the first offset of any transaction still open there): the last record
    of each key is kept, records of aborted transactions go, markers stay, and tombstones stay unless
    `drop_tombstones` (past delete.retention.ms: then what they deleted is gone too). The cleaned
    records are written as one segment named by the first segment's base offset, swapped in as the
    cleaner does (`.cleaned` -> `.swap`, old files deleted, `.swap` -> `.log`)."""

    def __init__(self, directory: str):
        self.dir = directory

    def clean(self, end_segment: int, *, drop_tombstones: bool = False) -> None:
        bases = list_segments(self.dir)
        group = [b for b in bases if b < end_segment]
        if not group:
            return
        every = read_batches(self.dir)
        batches = [(d, h) for d, h in every if h.base_offset < end_segment]
        # each transaction's outcome, from its marker wherever it is (Kafka's cleaner asks the .txnindex)
        aborted: set[tuple[int, int]] = set()  # (producer id, batch base offset) of aborted data batches
        open_: dict[int, list[int]] = {}
        for d, h in every:
            if h.is_control:
                kind = control_record(decode_batch(h, d)[0]).type
                for b in open_.pop(h.producer_id, []):
                    if kind == "ABORT":
                        aborted.add((h.producer_id, b))
            elif h.is_transactional:
                open_.setdefault(h.producer_id, []).append(h.base_offset)
        assert all(b >= end_segment for bs in open_.values() for b in bs), \
            "the cleaned range must end before any open transaction"
        last: dict[bytes, int] = {}
        for d, h in batches:
            if h.is_control or (h.producer_id, h.base_offset) in aborted:
                continue
            for r in decode_batch(h, d):
                last[r.key] = r.offset
        out = bytearray()
        for d, h in batches:
            if h.is_control:
                out += d
                continue
            if (h.producer_id, h.base_offset) in aborted:
                continue
            kept = [r for r in decode_batch(h, d) if last.get(r.key) == r.offset and
                    not (drop_tombstones and r.value is None)]
            if kept:  # as MemoryRecords.filterTo: the batch's offsets and producer kept
                out += build_batch(kept, base_offset=h.base_offset, producer_id=h.producer_id,
                                   producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                                   transactional=h.is_transactional, compression=h.compression)
        first = group[0]
        name = os.path.join(self.dir, f"{first:020d}")
        with open(name + ".log.cleaned", "wb") as f:
            f.write(out)
        os.rename(name + ".log.cleaned", name + ".log.swap")
        for b in group:
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                path = os.path.join(self.dir, f"{b:020d}{suffix}")
                if os.path.exists(path):
                    os.rename(path, path + ".deleted")
                    os.unlink(path + ".deleted")
        os.rename(name + ".log.swap", name + ".log")
