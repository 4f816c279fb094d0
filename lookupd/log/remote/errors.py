"""What callers of the bucket catch, importable without the object-store packages (the tiered extra): the
objects the store no longer has or that are too large to read."""

from __future__ import annotations

from ...errors import CorruptDataError, Unavailable


class ObjectNotFound(Unavailable):
    """The object is gone (deleted by retention after it was listed): relist, and the segment drops out."""


class ObjectTooLarge(CorruptDataError):
    """A whole-object GET whose length is above what the caller reads of such an object (its body not read)."""

    def __init__(self, key: str, size: int, limit: int, what: str):
        super().__init__(key, None, f"{what} of {size} bytes exceeds {limit}: not read")
        self.size = size
