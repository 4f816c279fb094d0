"""Kafka's on-disk format: bytes in, records out, no I/O.

Record batches and legacy messages, their codecs, a batch builder, segment file names and the
JSON/text rendering of records. Imports nothing from lookupd but `lookupd.errors`.
"""
