"""Errors raised by lookupd, each carrying the wire error code the daemon answers with.

Data errors name the file, the byte position and what was wrong, so an operator can
go straight to the bytes with `lookupd dump` or a hex editor.
"""

from __future__ import annotations

import os


class LookupdError(Exception):
    """Base of every error lookupd raises on purpose."""

    code = "INTERNAL"


class InvalidArgument(LookupdError, ValueError):
    """A caller passed a value that can never be valid (bad mode, int64 overflow, bad name)."""

    code = "INVALID_ARGUMENT"


class UnknownPartition(LookupdError, LookupError):
    """No partition directory with that topic and partition number is being served."""

    code = "UNKNOWN_PARTITION"


class UnknownGroup(LookupdError, LookupError):
    """No consumer group of that id in its `__consumer_offsets` partition."""

    code = "UNKNOWN_GROUP"


class MissingExtra(LookupdError):
    """A feature whose optional packages (an extra of kafka-lookupd) are not installed: says what to install."""

    code = "INVALID_ARGUMENT"


class OffsetOutOfRange(LookupdError):
    """The offset lies outside [log start offset, log end offset] of the partition."""

    code = "OFFSET_OUT_OF_RANGE"


class TooLarge(LookupdError):
    """A request or frame exceeds a configured limit."""

    code = "TOO_LARGE"


class Unauthorized(LookupdError):
    code = "UNAUTHORIZED"


class Unavailable(LookupdError):
    """The data exists but cannot be read right now (file vanished, daemon shutting down)."""

    code = "UNAVAILABLE"


class CorruptDataError(LookupdError):
    """Bytes on disk that break Kafka's format: names the file, the position and the fault."""

    code = "CORRUPT_DATA"

    def __init__(self, path: str | os.PathLike | None, position: int | None, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.position = position
        self.reason = reason
        where = self.path or "<buffer>"
        if position is not None:
            where += f" at byte {position}"
        super().__init__(f"{where}: {reason}")


class CorruptRecordError(CorruptDataError):
    """A record batch (or legacy message) that cannot be read: bad CRC, bad size, cut off."""


class CorruptIndexError(CorruptDataError):
    """An index file whose entries cannot be trusted: bad size, out of order, past the log."""


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1  # Kafka's offsets, timestamps and positions are Java longs


def check_int64(value: object, what: str) -> int:
    """Return `value` as an int if it fits Kafka's int64, else raise InvalidArgument naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, got {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidArgument(f"{what} {value} is outside the int64 range")
    return value
