"""Kafka's internal topics: the records of `__consumer_offsets`, `__transaction_state`,
`__cluster_metadata` and `__remote_log_metadata`, and the state a coordinator replays from them. No I/O.

`schema` reads Kafka's generated-message wire format from compact field tables; `groups`,
`transactions`, `metadata` and `remote` hold the tables of each topic and decode its keys and
values; `consumer_protocol` decodes the subscriptions and assignments inside classic group
records; `group_state` and `txn_state` replay decoded records the way Kafka's coordinators load
them; `topics` picks a topic's decoder by its name.
"""
