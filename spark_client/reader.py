"""Reading one split on an executor: batches from the segment files or the daemon, rows as Arrow.

Local files are read with pread through lookupd's FileRecords, in large chunks, and trusted
only while they match the plan: the first batch of each piece must sit at the planned byte
with the planned base offset, and the batches must end exactly at the piece's end. A file
that is missing, or is another broker's replica at the same path, does not match; the split
then goes on through the daemon's `read`, from the offset after the last batch used, and
stops at the next split's first batch, so nothing is read twice.

Like a Kafka consumer, every batch's CRC is checked, control batches are never returned, and
with read_committed the batches of aborted transactions (the daemon's aborted_transactions
answers, shipped in the split) are dropped. Records are decoded straight into Arrow columns
by lookupd.format.columnar (native C, many batches per call), and the split's offset range
and aborted transactions are applied as masks over those columns.
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np
import pyarrow as pa

from lookupd.format.batch import last_offset_at, parse_header, whole_frames
from lookupd.format.columnar import MAX_DATA_BYTES, ColumnBuilder
from lookupd.rpc.client import Client, RemoteError
from lookupd.errors import CorruptRecordError
from lookupd.log.filerecords import FileRecords, read_frames
from lookupd.format.names import segment_file_name

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
                 token: str | None, arrow_schema: pa.Schema, tls: dict[str, str] | None = None):
        self.read_committed = read_committed
        self.include_headers = include_headers
        self.read_from = read_from
        self.fail_on_data_loss = fail_on_data_loss
        self.token = token
        self.arrow_schema = arrow_schema
        self.tls = tls or {}  # the Client's tls_ca/tls_cert/tls_key (lookupd.tls.*)


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
        rows = ColumnRows(self.settings.arrow_schema, s.topic, s.partition, self.settings.include_headers,
                          s.lo, s.hi, self._aborted)
        for buf, start, end, position, where in self.chunks():
            if rows.full(end - start):
                yield rows.flush()
            rows.add(buf, start, end, position, where)
            if rows.count >= ROWS_PER_BATCH:
                yield rows.flush()
        if rows.count:
            yield rows.flush()

    # ------------------------------------------------------------- batches

    def chunks(self) -> Iterator[tuple[bytes, int, int, int, str]]:
        """The split's batches in offset order as runs of whole batches: (buffer, start, end, file position of
        buffer[0], the file they came from): local pieces while they match the plan, then the daemon."""
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
        yield from self._daemon_chunks()

    def _local_piece(self, piece: Piece):
        """Yield the piece's batches from the local file in runs; return whether all of them matched the plan."""
        log_file = FileRecords(piece.path)
        try:
            handle = log_file.handle()
        except FileNotFoundError:
            return False
        pos, checked = piece.start, False
        frames = read_frames(handle, piece.start, piece.end, path=piece.path, chunk=CHUNK_BYTES, whole=True)
        run: list = []  # [buffer, start, end, last frame's offset in it]

        def flush():
            buf, start, end, last = run
            self.cursor = last_offset_at(buf, last) + 1
            run.clear()
            return buf, start, end, pos_of_buf, piece.path

        try:
            while True:
                try:
                    frame = next(frames, None)
                    if frame is None:
                        break
                    buf, off, pos, size = frame
                    if not checked:
                        if parse_header(buf, off, pos, piece.path).base_offset != piece.first_base:
                            return False
                        checked = True
                except CorruptRecordError:
                    if checked:
                        raise
                    return False  # not a batch where the plan has one
                if run and run[0] is not buf:
                    yield flush()
                if not run:
                    run[:] = [buf, off, off, off]
                    pos_of_buf = pos - off
                run[2], run[3] = off + size, off
                pos += size
            if run:
                yield flush()
        finally:
            log_file.close()
        return pos == piece.end

    def _daemon_chunks(self) -> Iterator[tuple[bytes, int, int, int, str]]:
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
            end, done = 0, False
            for off, size in whole_frames(data, answer["position"], where):
                header = parse_header(data, off, answer["position"] + off, where)
                if s.stop is not None and (header.base_offset, header.last_offset) == s.stop:
                    done = True
                    break
                end = off + size
                self.cursor = header.last_offset + 1
                if self.cursor >= limit:
                    done = True
                    break
            if end:
                yield data, 0, end, answer["position"], where
            if done or not end:
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
            self._client = Client(self.split.address, token=self.settings.token, **self.settings.tls)
        return self._client


class ColumnRows:
    """Records of one split gathered as columns (lookupd.format.columnar, native where built), flushed as
    Arrow record batches of the data source's schema. The split's offset range [lo, hi) and, with
    read_committed, aborted transactions are applied as masks over the columns."""

    def __init__(self, schema: pa.Schema, topic: str, partition: int, include_headers: bool, lo: int, hi: int,
                 aborted: dict[int, list[tuple[int, int]]]):
        self.schema = schema
        self.topic = pa.scalar(topic, pa.string())
        self.partition = pa.scalar(partition, pa.int32())
        self.headers_type = schema.field("headers").type if include_headers else None
        self.lo, self.hi, self.aborted = lo, hi, aborted
        self.builder = ColumnBuilder(include_headers)

    @property
    def count(self) -> int:
        return self.builder.count

    def full(self, more: int) -> bool:
        """Whether `more` bytes of batches might not fit Arrow's 32-bit offsets any more: flush first."""
        return self.builder.count > 0 and self.builder.data_bytes + more > MAX_DATA_BYTES

    def add(self, buf, start: int, end: int, position: int, where: str) -> None:
        self.builder.add_frames(buf, position, where, start, end)

    def flush(self) -> pa.RecordBatch:
        keep = self.builder.aborted_mask(self.aborted) if self.aborted else None
        cols = self.builder.arrays(self.headers_type)
        n = len(cols["offset"])
        offsets = cols["offset"].to_numpy(zero_copy_only=True)
        in_range = (offsets >= self.lo) & (offsets < self.hi)
        keep = in_range if keep is None else keep & in_range
        ts = cols["timestamp"].to_numpy(zero_copy_only=True)
        if n and (ts.max() >= MAX_TIMESTAMP_MS or ts.min() < -MAX_TIMESTAMP_MS):
            bad = int(ts[np.argmax(np.abs(ts))])
            raise OverflowError(f"a record's timestamp {bad} ms is outside Spark's timestamp range")
        fields = self.schema.types
        columns = [cols["key"], cols["value"], pa.repeat(self.topic, n), pa.repeat(self.partition, n), cols["offset"],
                   pa.array(ts * 1000, fields[5]), cols["timestamp_type"]]
        if self.headers_type is not None:
            columns.append(cols["headers"])
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        return batch if keep.all() else batch.filter(pa.array(keep))
