"""Spark jobs over Kafka's files through the lookup daemon (issue #5).

* `register(spark)` adds the `kafka-segments` batch data source: Spark's Kafka source, same
  options and schema, reading the brokers' segment files (spark_client.datasource).
* `resolve_positions(df, address)` adds segment, position and batch offsets to rows of
  (topic, partition, offset) or (topic, partition, timestamp) (spark_client.positions).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from .datasource import FORMAT, KafkaSegmentsDataSource
from .errors import DataLossError, OptionError
from .positions import resolve_positions

__all__ = ["FORMAT", "DataLossError", "KafkaSegmentsDataSource", "OptionError", "register", "resolve_positions"]


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("kafka-segments")` available in this session."""
    spark.dataSource.register(KafkaSegmentsDataSource)
