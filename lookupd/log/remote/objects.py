"""The three objects of one upload (the plugin's ObjectKeyFactory): `<stem>.log`, `<stem>.indexes` and
`<stem>.rsm-manifest`, the manifest written last. lookupd.log.tiered.layout parses and formats the stems."""

from __future__ import annotations

from dataclasses import dataclass

LOG, INDEXES, MANIFEST = "log", "indexes", "rsm-manifest"


def sibling_key(log_key: str, suffix: str) -> str:
    """The `.indexes` or `.rsm-manifest` key of the same upload as a `.log` key."""
    if not log_key.endswith("." + LOG):
        raise ValueError(f"{log_key!r} is not a segment's .log key")
    return log_key[:-len(LOG)] + suffix


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """An object as a listing gives it."""

    key: str
    size: int
    etag: str | None = None  # what the store says of its content: a rewritten object has another
