"""`__transaction_state`: the transaction coordinator's records (TransactionLog), and their replay. No I/O.

A key is an int16 version (0), then the transactional id; a value is an int16 version (0, or 1 once
`transaction.version` 1 is finalized: flexible, with tagged previous/next producer ids and the
client's transaction version), then the transaction's metadata, or null when the id expired.
The tables are transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json.

`TransactionLog` replays the records in offset order as TransactionStateManager loads them: each
value replaces its id's metadata and a tombstone removes the id.
"""

from __future__ import annotations

from typing import NamedTuple

from ...message import MessageError, read_prefixed
from . import record

TRANSACTION_LOG_KEY = record("TransactionLogKey", "0", "none", """
    transactionalId  string  0
""")

TRANSACTION_LOG_VALUE = record("TransactionLogValue", "0-1", "1+", """
    producerId                        int64  0+
    previousProducerId                int64  1+  tag=0@1+ default=-1
    nextProducerId                    int64  1+  tag=1@1+ default=-1
    producerEpoch                     int16  0+
    nextProducerEpoch                 int16  1+  tag=3@1+ default=-1
    transactionTimeoutMs              int32  0+
    transactionStatus                 int8   0+
    transactionPartitions             []PartitionsSchema 0+ null=0+
      topic         string   0+
      partitionIds  []int32  0+
    transactionLastUpdateTimestampMs  int64  0+
    transactionStartTimestampMs       int64  0+
    clientTransactionVersion          int16  1+  tag=2@1+ default=0
""")

# TransactionState ids (kafka.coordinator.transaction.TransactionState.fromId), Kafka's names.
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")
OPEN_STATES = frozenset(("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"))


class TransactionMetadata(NamedTuple):
    """What TransactionLog.readTxnRecordValue makes of a value (lastProducerEpoch is never stored: -1)."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: str
    partitions: tuple[str, ...]  # "topic-partition", sorted (Kafka keeps a set)
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int

    def as_json(self) -> dict:
        """The fields `lookupd transactions --json` prints for one id."""
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "state": self.state, "partitions": list(self.partitions),
                "timeout_ms": self.txn_timeout_ms, "start_timestamp": self.txn_start_timestamp,
                "last_update_timestamp": self.txn_last_update_timestamp,
                "previous_producer_id": self.previous_producer_id, "next_producer_id": self.next_producer_id,
                "client_transaction_version": self.client_transaction_version}


def decode_key(key: bytes | None) -> tuple[int, dict]:
    """(key version, {transactionalId})."""
    if key is None:
        raise MessageError("the record has no key (every __transaction_state record has one)")
    return read_prefixed(TRANSACTION_LOG_KEY, key, "key")


def decode_value(value: bytes | None) -> tuple[int | None, dict | None]:
    """(value version, fields), (None, None) for a tombstone."""
    if value is None:
        return None, None
    return read_prefixed(TRANSACTION_LOG_VALUE, value, "value")


def metadata(transactional_id: str, value: dict) -> TransactionMetadata:
    """TransactionLog.readTxnRecordValue: the state by id, partitions flattened (none for Empty)."""
    status = value["transactionStatus"]
    if not 0 <= status < len(STATES):
        raise MessageError(f"unknown transaction state id {status} (known: 0-{len(STATES) - 1})")
    state = STATES[status]
    partitions: tuple[str, ...] = ()
    if state != "Empty":
        if value["transactionPartitions"] is None:
            raise MessageError(f"transactionPartitions is null in state {state} (only Empty may have none)")
        partitions = tuple(sorted({f"{p['topic']}-{i}" for p in value["transactionPartitions"]
                                   for i in p["partitionIds"]}, key=_partition_order))
    return TransactionMetadata(transactional_id, value["producerId"], value.get("previousProducerId", -1),
                               value.get("nextProducerId", -1), value["producerEpoch"], value["transactionTimeoutMs"],
                               state, partitions, value["transactionStartTimestampMs"],
                               value["transactionLastUpdateTimestampMs"], value.get("clientTransactionVersion", 0))


def _partition_order(tp: str) -> tuple[str, int]:
    topic, _, p = tp.rpartition("-")
    return topic, int(p)


def format_record(transactional_id: str, meta: TransactionMetadata | None) -> str:
    """TransactionLog.formatRecordKeyAndValue, as kafka-dump-log's --transaction-log-decoder prints it."""
    key = f"transaction_metadata::transactionalId={transactional_id}"
    if meta is None:
        return f"{key} => <DELETE>"
    return (f"{key} => producerId:{meta.producer_id},producerEpoch:{meta.producer_epoch},state={meta.state},"
            f"partitions=[{','.join(meta.partitions)}],txnLastUpdateTimestamp={meta.txn_last_update_timestamp},"
            f"txnTimeoutMs={meta.txn_timeout_ms}")


class TransactionLog:
    """The transactional ids of one `__transaction_state` partition, replayed record by record."""

    def __init__(self) -> None:
        self.transactions: dict[str, TransactionMetadata] = {}

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        """One record, in offset order. Raises MessageError (the caller names file and byte) for a record
        that does not decode; an unknown key version is one too (Kafka skips it: never silently here)."""
        _, k = decode_key(key)
        tid = k["transactionalId"]
        _, v = decode_value(value)
        if v is None:
            self.transactions.pop(tid, None)
        else:
            self.transactions[tid] = metadata(tid, v)

    def listing(self) -> list[TransactionMetadata]:
        """Every transactional id, sorted."""
        return [self.transactions[t] for t in sorted(self.transactions)]

