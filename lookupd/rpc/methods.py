"""The daemon's methods and their positional params, as clients see them (`lookupd query` reads its
arguments by them); tests/test_query.py checks they are the ones lookupd.daemon.service.METHODS serves."""

from __future__ import annotations

_TP = ("topic", "partition")
PARAMS: dict[str, tuple[str, ...]] = {
    "ping": (),
    "auth": ("token",),
    "stats": (),
    "partitions": (),
    "segments": _TP,
    "lookup_offset": _TP + ("offset", "mode"),
    "lookup_timestamp": _TP + ("timestamp", "mode"),
    "resolve_offset": _TP + ("offset",),
    "offset_for_timestamp": _TP + ("timestamp",),
    "aborted_transactions": _TP + ("start_offset", "end_offset"),
    "read": _TP + ("offset", "max_bytes"),
    "lookup_offsets": _TP + ("offsets", "mode"),
    "resolve_offsets": _TP + ("offsets",),
    "offsets_for_timestamps": _TP + ("timestamps",),
    "groups": (),
    "group_offsets": ("group", "isolation"),
    "schemas": (),
    "read_decoded": _TP + ("offset", "max_bytes"),
}


def signatures() -> str:
    """One line per method with its params (`lookupd query --help`)."""
    return "\n".join(f"  {name} {' '.join(p.upper() for p in params)}".rstrip() for name, params in PARAMS.items())
