"""A broker's log dirs, read-only: file handles, file records, indexes and the partitions over them.

Kafka's storage classes under their own names (FileRecords, OffsetIndex, TimeIndex, TransactionIndex,
LogSegment, LocalLog, LogManager) plus the lazily mapped index cache and the native search. Imports
`lookupd.format` and `lookupd.errors` only, and nothing here opens a file for writing.
"""
