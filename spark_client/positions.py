"""`resolve_positions`: where rows' offsets or timestamps sit in the brokers' files, in bulk.

Each Spark task opens one connection per daemon it needs and sends columnar requests:
rows are gathered into chunks, grouped by partition, and each group is one resolve_offsets
(or offsets_for_timestamps, then resolve_offsets for the offsets found) call, never one
request per row.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import IntegralType, LongType, StructField, StructType, TimestampType

from .options import parse_address
from .routing import Daemons, addresses, columnar, discover, read_token

LOOKUPS_PER_CHUNK = 200_000  # rows gathered before the grouped calls
BATCH_FIELDS = ("segment", "base_offset", "last_offset", "position", "size")
TIMESTAMP_FIELDS = ("offset", "offset_timestamp")


def resolve_positions(df: DataFrame, address: str | dict[str, str], *, by: str | None = None,
                      token_file: str | None = None) -> DataFrame:
    """`df` with columns added for each row's (topic, partition, offset) or (topic, partition, timestamp).

    by="offset": adds segment, base_offset, last_offset, position and size of the batch holding
    the offset (resolve_offset). by="timestamp" (a timestamp column, or epoch milliseconds):
    adds offset, offset_timestamp, segment and position (offset_for_timestamp: Kafka's ListOffsets,
    the first record at or after the time; -2 earliest, -1 latest) and the base_offset,
    last_offset and size of the batch holding that offset.
    Columns are null where nothing matches. `by` defaults to "offset" if df has an offset column.
    `address` is a `lookupd.address` value (see spark_client.routing); the daemons must be
    reachable from the driver, which routes each partition before any task runs.
    """
    spec = parse_address(address) if isinstance(address, str) else dict(address)
    by = by or ("offset" if "offset" in df.columns else "timestamp")
    _check_columns(df.schema, by)
    added = (TIMESTAMP_FIELDS if by == "timestamp" else ()) + BATCH_FIELDS
    clash = sorted(set(added).intersection(df.columns))
    if clash:
        raise ValueError(f"resolve_positions adds columns {', '.join(added)}; df already has {', '.join(clash)}")
    token = read_token(token_file)
    with Daemons(token) as daemons:
        routes = {tp: info.address for tp, info in discover(spec, daemons).items()}
    default = addresses(spec)[0] if isinstance(spec, str) else None
    out_schema = StructType(df.schema.fields + [StructField(name, LongType()) for name in added])
    resolver = _Resolver(by, routes, default, token)
    return df.mapInArrow(resolver, out_schema)


def _check_columns(schema: StructType, by: str) -> None:
    if by not in ("offset", "timestamp"):
        raise ValueError(f"by must be 'offset' or 'timestamp', got {by!r}")
    fields = {f.name: f.dataType for f in schema.fields}
    for name in ("topic", "partition", by):
        if name not in fields:
            raise ValueError(f"resolve_positions needs columns topic, partition and {by}; "
                             f"df has {', '.join(fields)}")
    if not isinstance(fields["partition"], IntegralType) or not (
            isinstance(fields[by], IntegralType) or (by == "timestamp" and isinstance(fields[by], TimestampType))):
        raise ValueError(f"partition must be an integer column and {by} an integer"
                         f"{' or timestamp' if by == 'timestamp' else ''} column")


class _Resolver:
    """The mapInArrow function (picklable): chunks of rows in, the same rows with positions out."""

    def __init__(self, by: str, routes: dict, default: str | None, token: str | None):
        self.by, self.routes, self.default, self.token = by, routes, default, token

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with Daemons(self.token) as daemons:
            pending, rows = [], 0
            for batch in batches:
                pending.append(batch)
                rows += batch.num_rows
                if rows >= LOOKUPS_PER_CHUNK:
                    yield from self._resolve(daemons, pa.Table.from_batches(pending)).to_batches()
                    pending, rows = [], 0
            if pending:
                yield from self._resolve(daemons, pa.Table.from_batches(pending)).to_batches()

    def _resolve(self, daemons: Daemons, table: pa.Table) -> pa.Table:
        n = table.num_rows
        column = table[self.by]
        if pa.types.is_timestamp(column.type):
            micros = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
            targets = np.floor_divide(micros.fill_null(0).to_numpy(), 1000)  # epoch milliseconds
        else:
            targets = column.cast(pa.int64()).fill_null(0).to_numpy()
        valid = pc.and_(pc.and_(pc.is_valid(table["topic"]), pc.is_valid(table["partition"])), pc.is_valid(column))
        topics = pc.dictionary_encode(table["topic"].combine_chunks())
        codes = topics.indices.fill_null(0).to_numpy().astype(np.int64)
        parts = table["partition"].cast(pa.int64()).fill_null(0).to_numpy()
        group = np.where(valid.to_numpy(zero_copy_only=False), codes << 32 | parts, -1)
        names = ("offset", "timestamp") if self.by == "timestamp" else ()
        out = {name: np.full(n, -1, np.int64) for name in names + BATCH_FIELDS}
        order = np.argsort(group, kind="stable")
        keys, starts = np.unique(group[order], return_index=True)
        ends = np.append(starts[1:], n)
        for k, lo, hi in zip(keys.tolist(), starts, ends):
            if k < 0:
                continue
            rows = order[lo:hi]
            topic, partition = topics.dictionary[k >> 32].as_py(), k & 0xFFFFFFFF
            client = daemons.client(self._address(topic, partition))
            batch_fields = BATCH_FIELDS
            if self.by == "timestamp":
                found = columnar(client, "offsets_for_timestamps", topic, partition, targets[rows].tolist())
                for name in ("offset", "timestamp", "segment", "position"):
                    out[name][rows] = found[name]
                rows = rows[out["offset"][rows] >= 0]
                batch_fields = ("base_offset", "last_offset", "size")  # none for the log end offset
            if len(rows):
                offsets = out["offset"][rows] if self.by == "timestamp" else targets[rows]
                located = columnar(client, "resolve_offsets", topic, partition, offsets.tolist())
                for name in batch_fields:
                    out[name][rows] = located[name]
        for name, values in out.items():
            # -1: nothing matched (ListOffsets also answers timestamp -1 for earliest and latest)
            table = table.append_column("offset_timestamp" if name == "timestamp" else name,
                                        pa.array(values, pa.int64(), mask=values < 0))
        return table

    def _address(self, topic: str, partition: int) -> str:
        address = self.routes.get((topic, partition), self.default)
        if address is None:
            raise LookupError(f"partition {topic}-{partition} is not served by any daemon in lookupd.address")
        return address
