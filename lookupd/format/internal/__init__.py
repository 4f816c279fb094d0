"""Kafka's internal topics: the records of `__consumer_offsets`, `__transaction_state`,
`__cluster_metadata` and `__remote_log_metadata`, and the state a coordinator replays from them. No I/O.

`record` declares a record in lookupd.message's tables (read as Kafka's JsonConverters show it);
`groups`, `transactions`, `metadata` and `remote` hold the tables of each topic and decode its keys and
values; `consumer_protocol` decodes the subscriptions and assignments inside classic group
records; `group_state` and `txn_state` replay decoded records the way Kafka's coordinators load
them; `topics` picks a topic's decoder by its name.
"""

from __future__ import annotations

from ...message import Message, Struct, message

# The elements (array items and structs) one record may decode into. A record is at most a batch of
# its topic's max.message.bytes (1 MiB by default) and takes a byte or more per element, while a large
# group's partition metadata legitimately lists a hundred thousand partitions and more.
MAX_RECORD_ITEMS = 1_000_000



def record(name: str, valid: str, flexible: str, table: str, structs: dict[str, Struct] | None = None, *,
           api_key: int | None = None) -> Message:
    """A record's declaration (lookupd.message's table), read in the JSON view: only the version's fields,
    uuids as text, as Kafka's JsonConverters show them."""
    return message(name, valid, flexible, table, structs, api_key=api_key, json=True, max_items=MAX_RECORD_ITEMS,
                   max_items_name="MAX_RECORD_ITEMS")
