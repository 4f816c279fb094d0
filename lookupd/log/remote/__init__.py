"""The tiered-storage plugin's bytes in Aiven's layout (KIP-405), read straight from the object store: a leaf
under the log layer that imports only lookupd.errors (tests/test_layers.py). Kafka's side of the tiers (which
segments exist, how they join the local ones) is lookupd.log.tiered.

Read-only: nothing here writes to the bucket. Every call does blocking network I/O, so callers run it on
worker threads, never on the event loop. The pieces, as Aiven's plugin splits them:

- config: RemoteConfig, the `[remote]` settings, and RemoteSettings, that table of the daemon's TOML parsed
  and checked once for every reader of the file.
- extra: whether the `tiered` extra is installed (a leaf every module here may import).
- opener: `open_bucket`, the one way to a Bucket, importable without the extra.
- errors: what callers catch or set without the extra (ObjectNotFound, StoreWouldWait and local-only mode).
- store: ObjectStore, ranged GETs and listings with retries, mapped onto lookupd's errors.
- objects: an upload's three objects (`.log`, `.indexes`, `.rsm-manifest`).
- manifest: the `.rsm-manifest` JSON (version "1").
- oaep, keyring: unwrapping the per-segment AES data key (RSA-OAEP with SHA3-512: pycryptodome, and a
  Python reference path).
- transform: the transforms undone, one class each (decryption, decompression), pure.
- chunks: ChunkFetcher, chunks by ranged GETs, decoded, no cache (restore reads through it).
- chunkcache: ChunkCache, decoded chunks through the disk cache, with in-flight tracking and read-ahead.
- indexes: IndexFetcher (no cache) and IndexFiles (the indexes as files in the cache).
- diskcache: DiskCache, decoded chunks in memory over files in cache_dir, both bounded (the one writer).
- bucket: Bucket, the store, disk cache, keyring and manifest cache of one bucket, opening uploads.
"""
