"""The errors spark_client raises on purpose, with Spark's Kafka source wording."""

from __future__ import annotations


class OptionError(ValueError):
    """An option value or combination the source rejects (Spark's IllegalArgumentException)."""


class DataLossError(RuntimeError):
    """Records the read needs are gone (Spark's KAFKA_DATA_LOSS) and failOnDataLoss is true."""

    def __init__(self, reason: str):
        super().__init__(
            "Some data may have been lost because they are not available in Kafka any more; either the data was "
            "aged out by Kafka or the topic may have been deleted before all the data in the topic was processed. "
            "If you don't want your query to fail on such cases, set the source option failOnDataLoss to false. "
            f"Reason: {reason}")
        self.reason = reason


class SegmentsChanged(OptionError):
    """Segments were rolled or deleted while a read was planned: planning again gives a consistent plan."""


class PartitionUnreadable(RuntimeError):
    """A partition being read that its daemon cannot read (its `partitions` entry carries an `error`)."""
