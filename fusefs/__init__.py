"""The FUSE view: a broker's log dirs as a read-only tree of topics, partitions and segments.

`fusefs mount` (fusefs.cli) serves fusefs.ops.KafkaFS; the layout is described in fusefs.tree.
"""
