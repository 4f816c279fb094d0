"""ChunkFetcher: the chunks of one uploaded `.log` by ranged GETs, decoded, with no cache (Aiven's
DefaultChunkManager). Adjacent chunks go in one GET; each call fetches again.

The chunk cache (chunkcache.ChunkCache) reads through it for the daemon, the mount and Spark; `lookupd restore`,
which takes each byte once, calls it straight, from its own threads, with the runs `plan` gives.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

from ...errors import CorruptDataError
from .manifest import ChunkIndex
from .store import ObjectStore
from .transform import ChunkTransform

MAX_GET_BYTES = 32 * 1024 * 1024    # one GET fetches and decodes at most this many bytes (memory bound)


class ChunkRun(NamedTuple):
    """Chunks first..last, fetched by one GET: their place in the original segment and in the `.log` object."""

    first: int
    last: int
    position: int      # where chunk `first` starts in the original segment
    start: int         # [start, end) of the run in the `.log` object
    end: int
    fetched: bool      # wholly within bytes the caller fetched already (`plan`'s `fetched`)


class ChunkFetcher:
    """One uploaded `.log` object's chunks: `get` their transformed bytes, `decode` one of them."""

    def __init__(self, store: ObjectStore, key: str, index: ChunkIndex, transform: ChunkTransform):
        self.store = store
        self.key = key          # the `.log` object
        self.index = index
        self.transform = transform

    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.index.file_size

    def runs(self, chunks: Iterable[int], max_bytes: int, max_decoded: int | None = None) -> list[tuple[int, int]]:
        """Consecutive chunk numbers grouped into GETs (first, last) of at most `max_bytes` fetched and
        `max_decoded` (default: max_bytes) decoded; a bigger chunk alone."""
        index = self.index
        max_decoded = max_bytes if max_decoded is None else max_decoded
        runs: list[tuple[int, int]] = []
        for i in chunks:
            if runs and runs[-1][1] == i - 1:
                start, end = index.transformed_span(runs[-1][0], i)
                decoded = index.original_span(i)[1] - index.original_span(runs[-1][0])[0]
                if end - start <= max_bytes and decoded <= max_decoded:
                    runs[-1] = (runs[-1][0], i)
                    continue
            runs.append((i, i))
        return runs

    def plan(self, max_bytes: int, max_decoded: int | None = None, fetched: int = 0) -> list[ChunkRun]:
        """Every chunk in order, as GETs of at most `max_bytes` (and `max_decoded` decoded, but for the chunks
        wholly within the first `fetched` bytes of the object: those the caller has, cut into runs of
        `max_bytes` ending where they end)."""
        index = self.index
        first = 0  # the first chunk not wholly in the first `fetched` bytes
        while first < index.chunk_count and index.transformed_start(first + 1) <= fetched:
            first += 1
        out = []
        for a, b in self.runs(range(first), max_bytes):
            out.append(self._run(a, b, True))
        for a, b in self.runs(range(first, index.chunk_count), max_bytes, max_decoded):
            out.append(self._run(a, b, False))
        return out

    def _run(self, first: int, last: int, fetched: bool) -> ChunkRun:
        start, end = self.index.transformed_span(first, last)
        return ChunkRun(first, last, self.index.original_span(first)[0], start, end, fetched)

    def get(self, first: int, last: int, blob: memoryview | bytes | None = None) -> memoryview:
        """The transformed bytes of chunks first..last, by one ranged GET (`blob`: fetched already), whole."""
        start, end = self.index.transformed_span(first, last)
        if blob is None:
            blob = self.store.get_range_buffer(self.key, start, end)
        if len(blob) != end - start:
            raise CorruptDataError(self.key, start + len(blob), f"the .log object ends before chunk "
                                   f"{self.index.chunk_at_transformed(start + len(blob))} does (at {end})")
        return memoryview(blob)

    def decode(self, i: int, blob: memoryview, first: int) -> bytes | memoryview:
        """Chunk i decoded from `blob` (the transformed bytes from chunk `first` on)."""
        base = self.index.transformed_start(first)
        a, b = self.index.transformed_span(i, i)
        return self.transform.decode(i, blob[a - base:b - base])

    def fetch(self, first: int, last: int, blob: memoryview | bytes | None = None) -> Iterator[bytes | memoryview]:
        """Chunks first..last by one ranged GET, each decoded in this thread as the caller asks for it: for a
        reader that takes each byte once (restore) and holds one decoded chunk at a time. `blob`: their bytes,
        when the caller has them."""
        blob = self.get(first, last, blob)
        return (self.decode(i, blob, first) for i in range(first, last + 1))
