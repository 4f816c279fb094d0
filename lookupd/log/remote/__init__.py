"""Remote segments in Aiven's tiered-storage layout (KIP-405), read straight from the object store.

Read-only: nothing here writes to the bucket. Every call does blocking network I/O, so callers run it
on worker threads, never on the event loop.

- config: RemoteConfig, the `[remote]` settings, and RemoteSettings, that table of the daemon's TOML parsed
  and checked once for every reader of the file.
- store: ObjectStore, ranged GETs and listings with retries, mapped onto lookupd's errors.
- layout: the plugin's object keys (`<prefix><topic>-<topicId>/<partition>/<20-digit offset>-<uuid>.<suffix>`).
- manifest: the `.rsm-manifest` JSON (version "1").
- oaep, keyring: unwrapping the per-segment AES data key (RSA-OAEP with SHA3-512: pycryptodome, and a
  Python reference path).
- segmentdata: RemoteSegmentData, the original segment bytes and its indexes through the cache.
- diskcache: DiskCache, decoded chunks in memory over files in cache_dir, both bounded (the one writer).
"""
