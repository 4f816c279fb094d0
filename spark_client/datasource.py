"""The `kafka-segments` Spark data source: Spark's Kafka source, read from the brokers' files.

`spark.read.format("kafka-segments").option("lookupd.address", ...).option("subscribe", ...).load()`
after `spark_client.register(spark)`, or `spark.readStream...` for a stream (spark_client.stream).
Options are checked when the DataFrame is loaded (spark_client.options); the daemons are asked
when the read is planned (spark_client.planner), in the driver; each task reads one split
(spark_client.reader).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .decoded import Decoding, columns, fetch_registry, value_subject
from .errors import OptionError
from .options import ReadOptions, parse_options, parse_stream_options
from .planner import plan
from .reader import ReadSettings, read_split
from .routing import Daemons, read_token
from .schema import arrow_schema, kafka_schema
from .splits import Split
from .stream import KafkaSegmentsStreamReader

FORMAT = "kafka-segments"


class KafkaSegmentsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """Called by `load()` for batch and stream reads alike, which Spark does not tell apart: the
        options are checked as a batch read's, except that a start only a stream may have (`latest`)
        is refused when a batch read is planned instead."""
        try:
            options = parse_options(self.options)
        except OptionError:
            try:
                options = parse_stream_options(self.options)
            except OptionError:
                pass
            else:
                return self._schema(options)
            raise
        return self._schema(options)

    def _schema(self, options: ReadOptions) -> StructType:
        """Kafka's columns, and lookupd.decodeValues' (whose struct type the schemas topic gives)."""
        decoding = self._decoding(options)
        value_type = decoding.value_type() if decoding is not None else None
        return StructType(kafka_schema(options.include_headers).fields + columns(options.decode_values, value_type))

    def _decoding(self, options: ReadOptions) -> Decoding | None:
        """The schemas the read decodes with (fetched from the daemons once per load), None without the option."""
        if options.decode_values is None:
            return None
        held = getattr(self, "_decoding_held", None)
        if held is None:
            with Daemons(read_token(options.token_file), tls=dict(options.tls)) as daemons:
                registry = fetch_registry(options, daemons)
            subject = value_subject(options) if options.decode_values == "struct" else None
            held = self._decoding_held = Decoding(options.decode_values, registry, subject)
        return held

    def reader(self, schema: StructType) -> "KafkaSegmentsReader":
        options = parse_options(self.options)
        self._check_schema(schema, options)
        return KafkaSegmentsReader(options, schema, self._decoding(options))

    def streamReader(self, schema: StructType) -> KafkaSegmentsStreamReader:
        options = parse_stream_options(self.options)
        self._check_schema(schema, options)
        return KafkaSegmentsStreamReader(options, read_settings(options, schema, self._decoding(options)))

    def _check_schema(self, schema: StructType, options: ReadOptions) -> None:
        if schema != self._schema(options):
            raise OptionError("Kafka source has a fixed schema and cannot be set with a custom one")


def read_settings(options: ReadOptions, schema: StructType, decoding: Decoding | None = None) -> ReadSettings:
    """What every split of a batch read or micro-batch shares."""
    return ReadSettings(read_committed=options.read_committed, include_headers=options.include_headers,
                        read_from=options.read_from, fail_on_data_loss=options.fail_on_data_loss,
                        token=read_token(options.token_file), arrow_schema=arrow_schema(schema),
                        tls=dict(options.tls), decoding=decoding)


class KafkaSegmentsReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType, decoding: Decoding | None = None):
        self.options = options
        self.settings = read_settings(options, schema, decoding)

    def partitions(self) -> Sequence[InputPartition]:
        with Daemons(self.settings.token, tls=self.settings.tls) as daemons:
            return plan(self.options, daemons)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Split):
            return iter(())  # with no splits planned, Spark still reads one InputPartition(None)
        return read_split(partition, self.settings)
