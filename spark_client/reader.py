"""Reading one split on an executor: batches from the segment files or the daemon, rows as Arrow.

Local files are read with pread through lookupd's FileRecords, in large chunks, and trusted
only while they match the plan: the first batch of each piece must sit at the planned byte
with the planned base offset, and the batches must end exactly at the piece's end. A file
that is missing, or is another broker's replica at the same path, does not match; the split
then goes on through the daemon's `read`, from the offset after the last batch used, and
stops at the next split's first batch, so nothing is read twice.

Like a Kafka consumer, every batch's CRC is checked, control batches are never returned, and
with read_committed the batches of aborted transactions (the daemon's aborted_transactions
answers, shipped in the split) are dropped.
"""

from __future__ import annotations

import bisect
import logging
from typing import Iterator

import numpy as np
import pyarrow as pa

from lookupd.format.batch import BatchHeader, ensure_valid, parse_header, whole_frames
from lookupd.rpc.client import Client, RemoteError
from lookupd.errors import CorruptRecordError
from lookupd.log.filerecords import FileRecords, read_frames
from lookupd.format.names import segment_file_name
from lookupd.format.records import decode_batch

from .errors import DataLossError
from .splits import Piece, Split

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20  # pread size: a split reads whole pieces front to back, so few large reads
DAEMON_READ_BYTES = 4 << 20  # max_bytes of each `read` (the daemon's default cap is 8 MiB)
MIN_DAEMON_READ_BYTES = 64 << 10
ROWS_PER_BATCH = 32_768
MAX_TIMESTAMP_MS = (1 << 63) // 1000  # Spark's microseconds overflow past this


class ReadSettings:
    """What every split of a read shares (picklable)."""

    def __init__(self, *, read_committed: bool, include_headers: bool, read_from: str, fail_on_data_loss: bool,
                 token: str | None, arrow_schema: pa.Schema):
        self.read_committed = read_committed
        self.include_headers = include_headers
        self.read_from = read_from
        self.fail_on_data_loss = fail_on_data_loss
        self.token = token
        self.arrow_schema = arrow_schema


def read_split(split: Split, settings: ReadSettings) -> Iterator[pa.RecordBatch]:
    """The split's records as Arrow record batches of the data source's schema."""
    reader = _SplitReader(split, settings)
    try:
        yield from reader.record_batches()
    finally:
        reader.close()


class _SplitReader:
    def __init__(self, split: Split, settings: ReadSettings):
        self.split = split
        self.settings = settings
        self.cursor = split.start  # offset after the last batch used
        self._client: Client | None = None
        aborted: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in split.aborted:
            aborted.setdefault(pid, []).append((first, last))
        self._aborted = {pid: sorted(spans) for pid, spans in aborted.items()}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # ------------------------------------------------------------- rows

    def record_batches(self) -> Iterator[pa.RecordBatch]:
        s = self.split
        rows = ArrowRows(self.settings.arrow_schema, s.topic, s.partition, self.settings.include_headers)
        lo, hi = s.lo, s.hi
        for header, data, where in self.batches():
            ensure_valid(header, data, where)
            if header.is_control or (self._aborted and self._is_aborted(header)):
                continue
            records = decode_batch(header, data, path=where)
            if header.base_offset < lo or header.last_offset >= hi or header.magic < 2:
                records = [r for r in records if lo <= r.offset < hi]
            if records:
                rows.add(records, int(header.timestamp_type))
                if rows.count >= ROWS_PER_BATCH:
                    yield rows.flush()
        if rows.count:
            yield rows.flush()

    def _is_aborted(self, header: BatchHeader) -> bool:
        """Kafka's consumer rule: a transactional batch of producer P is aborted when an aborted
        transaction of P spans it (first offset <= batch offset <= ABORT marker offset)."""
        spans = self._aborted.get(header.producer_id)
        if not spans or not header.is_transactional:
            return False
        i = bisect.bisect_right(spans, (header.base_offset, 1 << 63)) - 1  # a producer's transactions never overlap
        return i >= 0 and header.base_offset <= spans[i][1]

    # ------------------------------------------------------------- batches

    def batches(self) -> Iterator[tuple[BatchHeader, memoryview, str]]:
        """The split's batches in offset order, each with the file it came from (for errors):
        local pieces while they match the plan, then the daemon."""
        if self.settings.read_from != "daemon":
            for piece in self.split.pieces:
                whole = yield from self._local_piece(piece)
                if not whole:
                    if self.settings.read_from == "files":
                        raise FileNotFoundError(f"{piece.path} is not the segment the read was planned on "
                                                f"(lookupd.readFrom is 'files')")
                    log.info("%s: bytes [%d, %d) are not as planned here; reading through lookupd at %s",
                             piece.path, piece.start, piece.end, self.split.address)
                    break
            else:
                return
        yield from self._daemon_batches()

    def _local_piece(self, piece: Piece):
        """Yield the piece's batches from the local file; return whether all of them matched the plan."""
        log_file = FileRecords(piece.path)
        try:
            handle = log_file.handle()
        except FileNotFoundError:
            return False
        pos, checked = piece.start, False
        frames = read_frames(handle, piece.start, piece.end, path=piece.path, chunk=CHUNK_BYTES, whole=True)
        mv, last = None, None
        try:
            while True:
                try:
                    frame = next(frames, None)
                    if frame is None:
                        break
                    buf, off, pos, size = frame
                    header = parse_header(buf, off, pos, piece.path)
                except CorruptRecordError:
                    if checked:
                        raise
                    return False  # not a batch where the plan has one
                if not checked:
                    if header.base_offset != piece.first_base:
                        return False
                    checked = True
                if buf is not last:
                    mv, last = memoryview(buf), buf
                yield header, mv[off:off + size], piece.path
                self.cursor = header.last_offset + 1
                pos += size
        finally:
            log_file.close()
        return pos == piece.end

    def _daemon_batches(self) -> Iterator[tuple[BatchHeader, memoryview, str]]:
        """Batches from the cursor through the daemon's `read`, up to the next split's first batch."""
        s = self.split
        limit = s.stop[0] if s.stop else s.hi
        max_bytes = DAEMON_READ_BYTES
        client = self._connect()
        while self.cursor < limit:
            try:
                answer = client.read(s.topic, s.partition, self.cursor, max_bytes)
            except RemoteError as err:
                if err.code == "TOO_LARGE" and max_bytes > MIN_DAEMON_READ_BYTES:
                    max_bytes //= 4
                    continue
                if err.code == "OFFSET_OUT_OF_RANGE":
                    self._skip_deleted(client)
                    continue
                raise
            data = answer["records"]
            if not data:
                return
            where = f"{s.topic}-{s.partition}/{segment_file_name(answer['segment'], '.log')} through lookupd at {s.address}"
            view = memoryview(data)
            for off, size in whole_frames(data, answer["position"], where):
                header = parse_header(data, off, answer["position"] + off, where)
                if s.stop is not None and (header.base_offset, header.last_offset) == s.stop:
                    return
                yield header, view[off:off + size], where
                self.cursor = header.last_offset + 1
                if self.cursor >= limit:
                    return

    def _skip_deleted(self, client: Client) -> None:
        """The cursor is below the log start now (retention ran after planning)."""
        s = self.split
        earliest = client.offset_for_timestamp(s.topic, s.partition, -2)["offset"]
        if earliest <= self.cursor:
            raise RemoteError("OFFSET_OUT_OF_RANGE", f"offset {self.cursor} of {s.topic}-{s.partition} is out of "
                                                     f"range though the log starts at {earliest}")
        reason = (f"Could not read records in offset [{self.cursor}, {min(earliest, s.end)}) for topic partition "
                  f"{s.topic}-{s.partition}: the log now starts at {earliest}.")
        if self.settings.fail_on_data_loss:
            raise DataLossError(reason)
        log.warning("%s Skipping them (failOnDataLoss is false).", reason)
        self.cursor = earliest

    def _connect(self) -> Client:
        if self._client is None:
            self._client = Client(self.split.address, token=self.settings.token)
        return self._client


class ArrowRows:
    """Records of one partition gathered column by column, flushed as Arrow record batches."""

    def __init__(self, schema: pa.Schema, topic: str, partition: int, include_headers: bool):
        self.schema = schema
        self.topic = pa.scalar(topic, pa.string())
        self.partition = pa.scalar(partition, pa.int32())
        self.include_headers = include_headers
        self._clear()

    def _clear(self) -> None:
        self.count = 0
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list = []
        self.values: list = []
        self.headers: list = []
        self.types: list[int] = []
        self.type_runs: list[int] = []

    def add(self, records: list, timestamp_type: int) -> None:
        offsets, timestamps, keys, values, headers = zip(*records)
        self.offsets += offsets
        self.timestamps += timestamps
        self.keys += keys
        self.values += values
        if self.include_headers:
            self.headers += [h or None for h in headers]  # Spark: null, not [], when a record has none
        self.types.append(timestamp_type)
        self.type_runs.append(len(records))
        self.count += len(records)

    def flush(self) -> pa.RecordBatch:
        n = self.count
        ts = np.asarray(self.timestamps, dtype=np.int64)
        if n and (ts.max() >= MAX_TIMESTAMP_MS or ts.min() < -MAX_TIMESTAMP_MS):
            bad = int(ts[np.argmax(np.abs(ts))])
            raise OverflowError(f"a record's timestamp {bad} ms is outside Spark's timestamp range")
        fields = self.schema.types
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(self.topic, n),
            pa.repeat(self.partition, n),
            pa.array(self.offsets, pa.int64()),
            pa.array(ts * 1000, fields[5]),
            pa.array(np.repeat(np.asarray(self.types, np.int32), self.type_runs), pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, fields[7]))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._clear()
        return batch
