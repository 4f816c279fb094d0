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
                return kafka_schema(options.include_headers)
            raise
        return kafka_schema(options.include_headers)

    def reader(self, schema: StructType) -> "KafkaSegmentsReader":
        options = parse_options(self.options)
        _check_schema(schema, options)
        return KafkaSegmentsReader(options, schema)

    def streamReader(self, schema: StructType) -> KafkaSegmentsStreamReader:
        options = parse_stream_options(self.options)
        _check_schema(schema, options)
        return KafkaSegmentsStreamReader(options, read_settings(options, schema))


def _check_schema(schema: StructType, options: ReadOptions) -> None:
    if schema != kafka_schema(options.include_headers):
        raise OptionError("Kafka source has a fixed schema and cannot be set with a custom one")


def read_settings(options: ReadOptions, schema: StructType) -> ReadSettings:
    """What every split of a batch read or micro-batch shares."""
    return ReadSettings(read_committed=options.read_committed, include_headers=options.include_headers,
                        read_from=options.read_from, fail_on_data_loss=options.fail_on_data_loss,
                        token=read_token(options.token_file), arrow_schema=arrow_schema(schema),
                        tls=dict(options.tls))


class KafkaSegmentsReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType):
        self.options = options
        self.settings = read_settings(options, schema)

    def partitions(self) -> Sequence[InputPartition]:
        with Daemons(self.settings.token, tls=self.settings.tls) as daemons:
            return plan(self.options, daemons)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Split):
            return iter(())  # with no splits planned, Spark still reads one InputPartition(None)
        return read_split(partition, self.settings)
