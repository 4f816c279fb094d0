"""kafka-lookupd: read-only offset and timestamp lookups over Kafka log directories.

Layers, each importing only the ones before it:
  format/  Kafka's on-disk format, no I/O
  log/     read-only files: indexes, segments, partitions (LogManager)
  rpc/     the msgpack-rpc protocol and clients
  daemon/  the trio lookup daemon
  tools/   the `lookupd` command, the writer, recovery

The public API is re-exported here and imported on first use, so `import lookupd.rpc.client`
does not pull in numpy or the log layer.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LogManager": "lookupd.log.logmanager",
    "Client": "lookupd.rpc.client",
    "TrioClient": "lookupd.rpc.client",
    "RemoteError": "lookupd.rpc.client",
}
_ERRORS = ("LookupdError", "CorruptDataError", "CorruptIndexError", "CorruptRecordError", "InvalidArgument",
           "OffsetOutOfRange", "TooLarge", "Unauthorized", "Unavailable", "UnknownPartition")
_EXPORTS.update({name: "lookupd.errors" for name in _ERRORS})

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lookupd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
