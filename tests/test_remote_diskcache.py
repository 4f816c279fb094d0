"""The remote cache: memory over cache_dir, both bounded, LRU, atomic files, adopted after a restart."""

from __future__ import annotations

import os

from lookupd.log.remote import diskcache
from lookupd.log.remote.diskcache import DiskCache


def _on_disk(d) -> int:
    return sum(e.stat().st_size for e in os.scandir(d))


def test_memory_evictions_spill_to_disk_within_the_bound(tmp_path):
    cache = DiskCache(str(tmp_path), 10_000)
    assert cache.memory_limit == 10_000
    for i in range(30):
        cache.put(f"c{i}", bytes([i]) * 1000)
    cache.flush()
    assert _on_disk(tmp_path) == cache.disk_bytes <= 10_000
    assert cache.get("c29") == bytes([29]) * 1000      # still in memory
    assert cache.get("c0") is None                      # spilled, then evicted from disk as the oldest
    spilled = [i for i in range(30) if os.path.exists(cache.path(f"c{i}"))]
    # Read the files themselves: a get() from disk moves the entry back to memory, whose evictions spill
    # and may evict another file meanwhile (the write-behind thread), so the gets would race each other.
    assert spilled and all(open(cache.path(f"c{i}"), "rb").read() == bytes([i]) * 1000 for i in spilled)
    assert cache.get(f"c{spilled[-1]}") == bytes([spilled[-1]]) * 1000  # and a get finds one there


def test_least_recently_used_goes_first(tmp_path):
    cache = DiskCache(str(tmp_path), 3000)
    for name in ("a", "b", "c"):
        cache.put_file(name, b"x" * 1000)
    assert cache.file("a")                               # a is now the most recently used
    cache.put_file("d", b"y" * 1000)
    assert cache.file("b") is None and cache.file("a") and cache.file("c") and cache.file("d")


def test_a_restart_adopts_files_oldest_first_and_drops_half_written_ones(tmp_path):
    for i, name in enumerate(("old", "mid", "new")):
        p = tmp_path / name
        p.write_bytes(b"z" * 1000)
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / ("half" + diskcache.TMP_SUFFIX)).write_bytes(b"partial")
    cache = DiskCache(str(tmp_path), 2000)
    assert sorted(os.listdir(tmp_path)) == ["mid", "new"]
    assert cache.disk_bytes == 2000 and cache.get("new") == b"z" * 1000


def test_the_cache_dir_is_private(tmp_path):
    DiskCache(str(tmp_path / "c"), 100)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700  # it holds decrypted segment bytes


def test_names_are_flat_and_distinct():
    a = diskcache.cache_name("p/t-x/0/00000000000000000000-a.log", "3")
    b = diskcache.cache_name("p/t-x/0/00000000000000000000-b.log", "3")
    assert a != b and "/" not in a and a.endswith(".3")
