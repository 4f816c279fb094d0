"""A segment's indexes as Kafka wrote them, from its `.indexes` object: IndexFetcher by ranged GETs with no cache
(restore takes each once), IndexFiles through the DiskCache as files to be mapped like a local segment's.

Kinds: offset, timestamp, producer_snapshot, leader_epoch, transaction (the plugin's IndexType names), in the
`.indexes` object's order; adjacent ones asked for together come in one GET (offset + timestamp: one GET).
"""

from __future__ import annotations

from ...errors import CorruptDataError
from .diskcache import DiskCache, cache_name
from .manifest import INDEX_KINDS, Manifest
from .store import ObjectStore
from .transform import IV_BYTES, TAG_BYTES, Decryption


def index_size(manifest: Manifest, kind: str) -> int | None:
    """The size of the segment's index `kind` as Kafka wrote it; None when the segment has none."""
    span = manifest.indexes[kind]
    if span is None:
        return None
    if span[1] and manifest.encryption is not None:
        return span[1] - IV_BYTES - TAG_BYTES  # stored with its IV in front and GCM tag behind
    return span[1]


def _check_kinds(kinds: list[str]) -> None:
    for kind in kinds:
        if kind not in INDEX_KINDS:
            raise ValueError(f"unknown index kind {kind!r}: one of {', '.join(INDEX_KINDS)}")


class IndexFetcher:
    """One upload's indexes by ranged GETs of its `.indexes` object, decrypted, not cached."""

    def __init__(self, store: ObjectStore, key: str, manifest: Manifest, decryption: Decryption | None):
        self.store = store
        self.key = key                  # the `.indexes` object
        self.manifest = manifest
        self.decryption = decryption    # None: not encrypted

    def size(self, kind: str) -> int | None:
        """The size of index `kind` as Kafka wrote it (without fetching it); None when the segment has none."""
        return index_size(self.manifest, kind)

    def fetch(self, kinds: list[str], whole: memoryview | None = None) -> dict[str, bytes | None]:
        """Indexes `kinds` as Kafka wrote them (None: the segment has none), from one ranged GET spanning
        them (the small ones between come along). `whole`: the whole `.indexes` object, when the caller
        fetched it already (no GET then)."""
        _check_kinds(kinds)
        out: dict[str, bytes | None] = dict.fromkeys(kinds)
        out.update(self.fetch_present([k for k in INDEX_KINDS if k in kinds and self.manifest.indexes[k]], whole))
        return out

    def fetch_present(self, kinds: list[str], whole: memoryview | None = None) -> dict[str, bytes]:
        """Indexes `kinds` (present ones, in the `.indexes` object's order) from one ranged GET (or from
        `whole`, the whole object), decrypted."""
        if not kinds:
            return {}
        start = self.manifest.indexes[kinds[0]][0]
        end = sum(self.manifest.indexes[kinds[-1]])
        blob = self.store.get_range_buffer(self.key, start, end) if whole is None else whole[start:end]
        if len(blob) != end - start:
            raise CorruptDataError(self.key, start + len(blob), f"the .indexes object ends before "
                                   f"the {kinds[-1]} index does (at {end})")
        out = {}
        for kind in kinds:
            pos, size = self.manifest.indexes[kind]
            data = bytes(blob[pos - start:pos - start + size])
            if self.decryption is not None and size:
                data = self.decryption.decrypt(data, self.key, pos, f"{kind} index")
            out[kind] = data
        return out


class IndexFiles:
    """One upload's indexes as files in the cache dir, fetched once (again only after eviction)."""

    def __init__(self, fetcher: IndexFetcher, disk: DiskCache, log_key: str):
        self.fetcher = fetcher
        self.disk = disk
        self._log_key = log_key  # the cache names its entries after the `.log` object

    def path(self, kind: str) -> str | bytes | None:
        """The file in cache_dir holding index `kind` as Kafka wrote it; None when the segment has none.

        The first call fetches it with one ranged GET of its part of the `.indexes` object; later calls return
        the cached file. Map the file right away: an evicted file stays readable while mapped or open. When
        the cache cannot write the file (cache_dir's filesystem is full), the index's bytes themselves: the
        caller keeps them in memory, and the answers go on.
        """
        return self.paths([kind])[kind]

    def paths(self, kinds: list[str]) -> dict[str, str | bytes | None]:
        """`path` for several kinds, adjacent missing ones in one GET (offset + timestamp: one GET)."""
        _check_kinds(kinds)
        manifest = self.fetcher.manifest
        out: dict[str, str | bytes | None] = {}
        missing = []
        for kind in INDEX_KINDS:  # the `.indexes` object's order
            if kind not in kinds:
                continue
            span = manifest.indexes[kind]
            name = cache_name(self._log_key, kind)
            if span is None:
                out[kind] = None
            elif (path := self.disk.file(name)) is not None:
                out[kind] = path
            elif span[1] == 0:
                out[kind] = self._cached_file(name, b"")
            else:
                missing.append(kind)
        groups: list[list[str]] = []
        for kind in missing:
            pos, size = manifest.indexes[kind]
            if groups and sum(manifest.indexes[groups[-1][-1]]) == pos:
                groups[-1].append(kind)
            else:
                groups.append([kind])
        for group in groups:
            for kind, data in self.fetcher.fetch_present(group).items():
                out[kind] = self._cached_file(cache_name(self._log_key, kind), data)
        return out

    def _cached_file(self, name: str, data: bytes) -> str | bytes:
        """The index written into the cache (its path), or `data` itself when the cache cannot write it."""
        try:
            return self.disk.put_file(name, data)
        except OSError:  # cache_dir's filesystem full or failing (the cache logged it): kept in memory
            return data
