"""Kafka's generated-message format, no I/O: the wire form of every message Kafka declares in its JSON
schemas (protocol requests and responses, and the records of its internal topics).

`wire` holds the primitive types and the one bounded reader; `codec` the declarations' form (field
tables) and the codec that reads and writes a message at any version (flexible versions, tagged fields,
compact types). The Kafka listener (lookupd.kafka) and the internal-topic decoders
(lookupd.format.internal) both declare their messages here and read them with it. Imports nothing
from lookupd.
"""

from .codec import Field, Message, Struct, common, message, read_prefixed
from .wire import MessageError, UnknownRecordType, UnsupportedVersion

__all__ = ["Field", "Message", "MessageError", "Struct", "UnknownRecordType", "UnsupportedVersion", "common",
           "message", "read_prefixed"]
