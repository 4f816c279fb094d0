"""The Schema Registry's `_schemas` topic read from the log, as the registry reads it at start-up.

`read_registry` applies every record of partition 0, from the log start offset up, to a
`lookupd.format.schemas.Registry` (batches CRC-checked, control batches passed over, aborted
transactions' records kept: the registry's consumer reads uncommitted). `SchemaStore` keeps one
registry for a log and, when the log has grown, applies only the new records; a log whose start
moved past what was applied (compaction, retention, a new topic) is read again from its start.
"""

from __future__ import annotations

import threading

from ..errors import LookupdError
from ..format.batch import CONTROL_MASK, ensure_valid, parse_header, whole_frames
from ..format.names import LOG_SUFFIX, segment_file_name
from ..format.records import decode_batch
from ..format.schemas import Registry

READ_BYTES = 4 << 20  # one read of the topic
# The most of the topic read: a compacted `_schemas` is megabytes; one past this is refused rather than
# held in memory.
MAX_TOPIC_BYTES = 512 << 20


class SchemasTooLarge(LookupdError):
    code = "TOO_LARGE"


def apply_log(reg: Registry, llog, start: int, end: int) -> Registry:
    """Apply the records of `llog` in [start, end) to `reg` (offset order)."""
    offset, total = start, 0
    while offset < end:
        r = llog.read(offset, READ_BYTES)
        if r is None or not r.records:
            break
        total += len(r.records)
        if total > MAX_TOPIC_BYTES:
            raise SchemasTooLarge(f"{llog.topic}-{llog.partition} holds more than {MAX_TOPIC_BYTES >> 20} MiB: "
                                  f"too large for a schemas topic")
        where = f"{llog.dir}/{segment_file_name(r.segment, LOG_SUFFIX)}"
        for off, size in whole_frames(r.records, r.position, where):
            header = parse_header(r.records, off, r.position + off, where)
            batch = memoryview(r.records)[off:off + size]
            ensure_valid(header, batch, where)
            if header.magic >= 2 and header.attributes & CONTROL_MASK:
                continue
            for rec in decode_batch(header, batch, path=where):
                if start <= rec.offset < end:
                    reg.apply(rec.offset, rec.key, rec.value)
        if r.next_offset <= offset:
            break
        offset = r.next_offset
    return reg


def read_registry(llog) -> Registry:
    """The registry state after every record of the log."""
    return apply_log(Registry(), llog, llog.log_start_offset, llog.log_end_offset)


class SchemaStore:
    """One log's registry, brought up to its log end at each `registry()` (thread-safe)."""

    def __init__(self, llog):
        self.llog = llog
        self._lock = threading.Lock()
        self._reg: Registry | None = None
        self._start = -1

    def registry(self) -> Registry:
        with self._lock:
            start, end = self.llog.log_start_offset, self.llog.log_end_offset
            reg = self._reg
            if reg is None or start != self._start or end < reg.end_offset:
                reg = apply_log(Registry(), self.llog, start, end)
            elif end > reg.end_offset:
                reg = apply_log(reg.copy(), self.llog, reg.end_offset, end)
            reg.end_offset = max(reg.end_offset, end)
            self._reg, self._start = reg, start
            return reg

