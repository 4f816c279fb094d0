"""Reading one split on an executor: batches from the segment files or the daemon, rows as Arrow.

A split returns exactly the records of its own offsets [start, end), whatever the files hold
when it runs. Local files are read with pread through lookupd's FileRecords, in large chunks,
and trusted only while they match the plan: the first batch of each piece must sit at the
planned byte with the planned base offset, every later one must follow the one before it in
offset order without reaching past the split's end, and the batches must end exactly at the
piece's end. A file that is missing, compacted by the log cleaner since planning, or another
broker's replica at the same path, does not match; the split then goes on through the daemon's
`read`, from the offset after the last batch used, and stops at the next split's first batch,
so nothing is read twice.

Pieces of remote (tiered) segments are read straight from the bucket by ranged GETs
(spark_client.remote), checked against the plan the same way; one whose objects retention deleted
since planning goes on through the daemon too, which then reports what the log holds.

Offsets the split needs that the log no longer holds (retention below them, or a truncation
of the log's end) are data loss, handled as Spark's Kafka source does (KafkaDataConsumer):
with failOnDataLoss the task fails naming the partition and offsets; without, they are
skipped with a warning.

Like a Kafka consumer, every batch's CRC is checked, control batches are never returned, and
with read_committed the batches of aborted transactions (the daemon's aborted_transactions
answers, shipped in the split) are dropped. Records are decoded straight into Arrow columns
by lookupd.format.columnar (native C, many batches per call), and the split's own offsets
and aborted transactions are applied as masks over those columns.
"""

from __future__ import annotations

import logging
import struct
from typing import Iterator

import numpy as np
import pyarrow as pa

from lookupd.format.batch import last_offset_at, parse_header, whole_frames
from lookupd.format.columnar import MAX_DATA_BYTES, ColumnBuilder
from lookupd.rpc.client import Client, RemoteError
from lookupd.errors import CorruptRecordError
from lookupd.log.filerecords import FileRecords, read_frames
from lookupd.format.names import segment_file_name
from lookupd.log.remote.errors import ObjectNotFound

from .errors import DataLossError
from .remote import BucketHandle, segment_data
from .options import EARLIEST, LATEST
from .splits import Piece, Split

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20  # pread size: a split reads whole pieces front to back, so few large reads
DAEMON_READ_BYTES = 4 << 20  # max_bytes of each `read` (the daemon's default cap is 8 MiB)
MIN_DAEMON_READ_BYTES = 64 << 10
ROWS_PER_BATCH = 32_768
MAX_TIMESTAMP_MS = (1 << 63) // 1000  # Spark's microseconds overflow past this
# `read` found nothing at an offset the log's bounds say it holds: the log changed between the two
# answers (a truncation, then new appends). Spark's Kafka source reads again; a few times is enough
# for a log that settles, more means the daemon's answers disagree.
MOVED_RETRIES = 3
# Base offset, magic and last offset delta of a v2 batch in one unpack, for the local reader's loop over
# every batch (lookupd.format.batch.last_offset_at reads the same fields in two, for any magic).
_BATCH_OFFSETS = struct.Struct(">q8xb6xi")


class ReadSettings:
    """What every split of a read shares (picklable)."""

    def __init__(self, *, read_committed: bool, include_headers: bool, read_from: str, fail_on_data_loss: bool,
                 token: str | None, arrow_schema: pa.Schema, tls: dict[str, str] | None = None, decoding=None):
        self.read_committed = read_committed
        self.include_headers = include_headers
        self.read_from = read_from
        self.fail_on_data_loss = fail_on_data_loss
        self.token = token
        self.arrow_schema = arrow_schema
        self.tls = tls or {}  # the Client's tls_ca/tls_cert/tls_key (lookupd.tls.*)
        self.decoding = decoding  # lookupd.decodeValues: spark_client.decoded.Decoding, or None


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
        self._moved = 0  # times the log's bounds disagreed with a `read` (see _out_of_range)
        # A batch following one whose last offset reaches this is not the split's: the next split's first
        # batch starts at `end`; the last split also reads the batch holding the range's end.
        self._past = split.end - 1 if split.stop else split.end
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
                          s.start, s.end, self._aborted, self.settings.decoding)
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
        """Yield the piece's batches from the local file (a remote segment's: from the bucket), in runs sharing
        a buffer, while they match the plan; return whether all of them did and they ended exactly at the
        piece's end.

        A batch matches when the first one sits at the piece's start with the planned base offset, and each
        later one follows the batch before it in offset order and belongs to the split: a file compacted or
        replaced since planning holds other batches at the planned bytes, and those may reach into the next
        split's offsets. The cursor stays after the last batch yielded, for the daemon to go on from."""
        if piece.key is not None:
            if self.split.remote is None:
                return False  # no bucket named: the daemon reads it
            try:
                handle = BucketHandle(segment_data(self.split.remote, piece.key))
            except ObjectNotFound:
                return False  # deleted by retention since planning: the daemon says what the log holds now
            log_file = None
        else:
            log_file = FileRecords(piece.path)
            try:
                handle = log_file.handle()
            except FileNotFoundError:
                return False
        frames = read_frames(handle, piece.start, piece.end, path=piece.path, chunk=CHUNK_BYTES, whole=True)
        try:
            try:
                frame = next(frames, None)
                if frame is None or parse_header(*frame[:3], piece.path).base_offset != piece.first_base:
                    return False
            except CorruptRecordError:
                return False  # not a batch where the plan has one
            run_buf, start, at, size = frame  # the run of batches sharing a buffer, not yielded yet
            run_pos, end, pos = at - start, start + size, at + size
            cursor, past = last_offset_at(run_buf, start) + 1, self._past
            for buf, off, at, size in frames:
                try:
                    base, magic, delta = _BATCH_OFFSETS.unpack_from(buf, off)
                    last = base + delta if magic >= 2 else base
                except struct.error:  # fewer than 27 bytes left: a legacy message, or a batch cut short
                    last = _last_offset(buf, off, at, size, piece.path)
                if last < cursor or cursor > past:
                    break  # not the planned batch: out of order, or past the split's end
                if buf is not run_buf:
                    self.cursor = cursor  # after the run yielded, should the rest fail (a remote object deleted)
                    yield run_buf, start, end, run_pos, piece.path
                    run_buf, start, run_pos = buf, off, at - off
                end = off + size
                cursor = last + 1
                pos = at + size
            self.cursor = cursor
            yield run_buf, start, end, run_pos, piece.path
        except ObjectNotFound:
            return False  # a chunk's object deleted mid-read: the daemon goes on from the cursor
        finally:
            if log_file is not None:
                log_file.close()
        return pos == piece.end

    def _daemon_chunks(self) -> Iterator[tuple[bytes, int, int, int, str]]:
        """Batches from the cursor through the daemon's `read`, up to the next split's first batch."""
        s = self.split
        max_bytes = DAEMON_READ_BYTES
        client = self._connect()
        while self.cursor < s.end:
            try:
                answer = client.read(s.topic, s.partition, self.cursor, max_bytes)
            except RemoteError as err:
                if err.code == "TOO_LARGE" and max_bytes > MIN_DAEMON_READ_BYTES:
                    max_bytes //= 4
                    continue
                if err.code != "OFFSET_OUT_OF_RANGE":
                    raise
                answer = None
            data = answer["records"] if answer is not None else b""
            if not data:  # nothing at the cursor: below the log start, or at or past the log end
                self._out_of_range(client)
                continue
            where = f"{s.topic}-{s.partition}/{segment_file_name(answer['segment'], '.log')} through lookupd at {s.address}"
            end = 0
            for off, size in whole_frames(data, answer["position"], where):
                header = parse_header(data, off, answer["position"] + off, where)
                if header.base_offset >= s.end:  # the next split's first batch
                    self.cursor = s.end
                    break
                end = off + size
                self.cursor = header.last_offset + 1
                if self.cursor >= s.end:
                    break
            if not end and self.cursor < s.end:
                raise CorruptRecordError(where, answer["position"], "lookupd's `read` answered no whole batch")
            if end:
                yield data, 0, end, answer["position"], where

    def _out_of_range(self, client: Client) -> None:
        """The log holds nothing at the cursor though the split needs [cursor, end): retention deleted it, or
        the log's end was truncated below it (unclean leader election, a follower's truncation). As Spark's
        KafkaDataConsumer on OffsetOutOfRangeException: with failOnDataLoss, fail naming the offsets; without,
        warn and go on at the log start if it is inside the split, else skip the rest of the split. A cursor
        the log's bounds hold after all is read again."""
        s = self.split
        earliest, latest = client.offsets_for_timestamps(s.topic, s.partition, [EARLIEST, LATEST])["offset"]
        held = f"the log now holds offsets [{earliest}, {latest})"
        if earliest <= self.cursor < latest:
            # The log moved between the two answers (it was truncated and written again, say): no loss, as
            # Spark's consumer finds the offset in range. Read again.
            self._moved += 1
            if self._moved > MOVED_RETRIES:
                raise RemoteError("OFFSET_OUT_OF_RANGE", f"lookupd at {s.address} has no batch at offset "
                                                         f"{self.cursor} of {s.topic}-{s.partition}, though {held}")
            return
        if self.settings.fail_on_data_loss:
            raise DataLossError(f"Could not read records in offset [{self.cursor}, {s.end}) for topic partition "
                                f"{s.topic}-{s.partition}: {held}.")
        skip_to = earliest if self.cursor < earliest < s.end else s.end
        log.warning("Records in offset [%d, %d) of topic partition %s-%d are skipped: %s. Some data may have been "
                    "lost (failOnDataLoss is false).", self.cursor, skip_to, s.topic, s.partition, held)
        self.cursor = skip_to

    def _connect(self) -> Client:
        if self._client is None:
            self._client = Client(self.split.address, token=self.settings.token, **self.settings.tls)
        return self._client


def _last_offset(buf, off: int, at: int, size: int, path: str) -> int:
    """Last offset of a batch too short for _BATCH_OFFSETS: a legacy message has one; a v2 batch that short
    is corrupt."""
    try:
        return last_offset_at(buf, off)
    except struct.error:
        raise CorruptRecordError(path, at, f"batch of {size} bytes is shorter than its header") from None


class ColumnRows:
    """Records of one split gathered as columns (lookupd.format.columnar, native where built), flushed as
    Arrow record batches of the data source's schema. The split's own offsets [start, end) and, with
    read_committed, aborted transactions are applied as masks over the columns."""

    def __init__(self, schema: pa.Schema, topic: str, partition: int, include_headers: bool, start: int, end: int,
                 aborted: dict[int, list[tuple[int, int]]], decoding=None):
        self.schema = schema
        self.decoding = decoding
        self.topic = pa.scalar(topic, pa.string())
        self.partition = pa.scalar(partition, pa.int32())
        self.headers_type = schema.field("headers").type if include_headers else None
        self.start, self.end, self.aborted = start, end, aborted
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
        in_range = (offsets >= self.start) & (offsets < self.end)
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
        if self.decoding is not None:
            columns += self.decoding.arrays(cols["key"], cols["value"], self.schema.field("decodedValue").type)
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        return batch if keep.all() else batch.filter(pa.array(keep))
