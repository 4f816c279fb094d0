"""Which internal topic a partition directory is, where a group or transactional id lives, and each
topic's records decoded for `lookupd dump` (as kafka-dump-log's decoders show them). No I/O."""

from __future__ import annotations

import base64
import json
from typing import Any

from ...message import MessageError
from . import groups, metadata, remote, transactions

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
CLUSTER_METADATA = "__cluster_metadata"
REMOTE_LOG_METADATA = "__remote_log_metadata"
INTERNAL_TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE, CLUSTER_METADATA, REMOTE_LOG_METADATA)
# offsets.topic.num.partitions and transaction.state.log.num.partitions: Kafka's defaults
DEFAULT_PARTITIONS = 50


def java_hash(s: str) -> int:
    """Java's String.hashCode: 31-based over the UTF-16 code units, as an int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The coordinator partition of a group or transactional id: Utils.abs(key.hashCode()) % partitions
    (Kafka's Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def decode_record(topic: str, key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """A record of an internal topic as plain values (bytes stay bytes): for `lookupd dump`. Raises
    MessageError for one that does not decode."""
    if topic == CONSUMER_OFFSETS:
        r = groups.decode(key, value)
        shown = groups.with_assignments(r.value) if r.type == groups.GROUP_METADATA and r.value else r.value
        return {"record_type": r.type, "record_type_name": r.type_name, "key": r.key,
                "value_version": r.value_version, "value": shown}
    if topic == TRANSACTION_STATE:
        key_version, k = transactions.decode_key(key)
        value_version, v = transactions.decode_value(value)
        out = {"key_version": key_version, "key": k, "value_version": value_version, "value": v}
        if v is not None:
            out["state"] = transactions.metadata(k["transactionalId"], v).state
        return out
    if topic in (CLUSTER_METADATA, REMOTE_LOG_METADATA):
        r = (metadata if topic == CLUSTER_METADATA else remote).decode(value)
        return {"record_type": r.type_name, "api_key": r.api_key, "version": r.version, "data": r.data}
    raise MessageError(f"{topic} is not an internal topic this decoder knows")


def decode_text(topic: str, decoded: dict[str, Any]) -> str:
    """The `key: ... payload: ...` part of kafka-dump-log's line for a decoded record."""
    if topic == CONSUMER_OFFSETS:
        key = dumps({"type": str(decoded["record_type"]), "data": decoded["key"]})
        if decoded["value"] is None:
            return f"key: {key} payload: <DELETE>"
        return f"key: {key} payload: {dumps({'version': str(decoded['value_version']), 'data': decoded['value']})}"
    if topic == TRANSACTION_STATE:
        tid = decoded["key"]["transactionalId"]
        v = decoded["value"]
        meta = None if v is None else transactions.metadata(tid, v)
        text = transactions.format_record(tid, meta)
        key, _, payload = text.partition(" => ")
        return f"key: {key} payload: {payload}"
    return "payload: " + dumps({"type": decoded["record_type"], "version": decoded["version"], "data": decoded["data"]})


def _bytes_as_base64(o: Any) -> str:
    if isinstance(o, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(o)).decode("ascii")
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def dumps(obj: Any) -> str:
    """Compact JSON of decoded fields, bytes as base64 (as Kafka's JsonConverters write them)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_bytes_as_base64)


def jsonable(obj: Any) -> Any:
    """Decoded fields with bytes made base64 strings (for a JSON encoder that knows no bytes)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return _bytes_as_base64(obj)
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [jsonable(v) for v in obj]
    return obj


def internal_topic(partition_dir: str) -> str | None:
    """The internal topic a partition directory's name is (`__consumer_offsets-7` -> `__consumer_offsets`)."""
    topic, _, partition = partition_dir.rpartition("-")
    return topic if topic in INTERNAL_TOPICS and partition.isdigit() else None
