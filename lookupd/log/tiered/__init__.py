"""Kafka's side of tiered storage (read side): which remote segments exist and how they join the local ones.

- layout: the plugin's object keys, and the partitions and uploads a bucket listing holds.
- brokerfiles: what the broker's own files say about tiers (`partition.metadata`, `leader-epoch-checkpoint`,
  the `__remote_log_metadata` topic).
- listing: RemoteTier, the bucket's chosen segments per partition (RemoteLogManager's listing side).
- segment: a remote segment, answering what a local LogSegment answers.
- log: TieredLog, a partition whose older segments are in the bucket (UnifiedLog over both tiers).

The bytes themselves (chunks, transforms, indexes, caches) are lookupd.log.remote's.
"""
