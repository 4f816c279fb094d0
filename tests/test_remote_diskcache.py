"""The remote cache: memory over cache_dir, both bounded, LRU, atomic files, adopted after a restart; and what
it trusts (issue 40): only a directory of its own, of lookupd's user, private; entries checked, so a swapped
file is a miss; one bound for every process sharing the directory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from lookupd.errors import InvalidArgument
from lookupd.log.remote import diskcache
from lookupd.log.remote.diskcache import MARKER, DiskCache


def _on_disk(d) -> int:
    return sum(e.stat().st_size for e in os.scandir(d) if e.name != MARKER)


def test_memory_evictions_spill_to_disk_within_the_bound(tmp_path):
    cache = DiskCache(str(tmp_path), 10_000)
    assert cache.memory_limit == 10_000
    for i in range(30):
        cache.put(f"c{i}", bytes([i]) * 1000)
    cache.flush()
    assert _on_disk(tmp_path) == cache.disk_bytes <= 10_000
    assert cache.get("c29") == bytes([29]) * 1000      # still in memory
    assert cache.get("c0") is None                      # spilled, then evicted from disk as the oldest
    spilled = [i for i in range(30) if cache.path(f"c{i}") is not None]
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
    first = DiskCache(str(tmp_path), 10_000)
    for i, name in enumerate(("old", "mid", "new")):
        path = first.put_file(name, (name.encode() * 400)[:1000])
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    half = tmp_path / ("new.0123abcd" + diskcache.TMP_SUFFIX)  # a writer that died long ago
    half.write_bytes(b"partial")
    os.utime(half, (1_000_000, 1_000_000))
    first.close()
    cache = DiskCache(str(tmp_path), 2000)
    assert sorted(n.rsplit(".", 1)[0] for n in os.listdir(tmp_path) if n != MARKER) == ["mid", "new"]
    assert cache.disk_bytes == 2000 and cache.get("new") == (b"new" * 400)[:1000]


def test_the_cache_dir_is_private(tmp_path):
    DiskCache(str(tmp_path / "c"), 100)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700  # it holds decrypted segment bytes


def test_names_are_flat_and_distinct():
    a = diskcache.cache_name("p/t-x/0/00000000000000000000-a.log", "3")
    b = diskcache.cache_name("p/t-x/0/00000000000000000000-b.log", "3")
    assert a != b and "/" not in a and a.endswith(".3")


def test_a_directory_holding_other_files_is_refused_and_left_alone(tmp_path):
    """A typo in cache_dir: the daemon used to adopt a user's files as entries, then evict them."""
    home = tmp_path / "home"
    home.mkdir()
    files = {"thesis.pdf": b"%PDF" * 5000, "photos.tar": b"\0" * 30_000, "session.tmp": b"state"}
    for name, data in files.items():
        (home / name).write_bytes(data)
    with pytest.raises(InvalidArgument) as err:
        DiskCache(str(home), 1000)
    message = str(err.value)
    assert "\n" not in message and "holds files lookupd did not make" in message
    assert all(name in message for name in files)
    assert {n: (home / n).read_bytes() for n in os.listdir(home)} == files  # nothing deleted, nothing added


def test_a_directory_left_by_a_version_before_the_marker_is_taken_over(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / ("ab" * 20 + ".offset")).write_bytes(b"x" * 80)
    (old / "tmpk2j4_x9a.tmp").write_bytes(b"half")
    cache = DiskCache(str(old), 1000)
    assert os.listdir(old) == [MARKER] and cache.disk_bytes == 0  # unchecked entries of old: dropped


def test_a_directory_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    with pytest.raises(InvalidArgument, match="owned by uid 12345"):
        DiskCache(str(d), 1000)


def test_a_directory_open_to_others_is_made_private_and_its_entries_dropped(tmp_path):
    d = tmp_path / "c"
    DiskCache(str(d), 10_000).put_file("a", b"a" * 100)
    os.chmod(d, 0o777)  # anyone could have planted entries meanwhile
    cache = DiskCache(str(d), 10_000)
    assert (d.stat().st_mode & 0o777) == 0o700
    assert os.listdir(d) == [MARKER] and cache.file("a") is None and cache.disk_bytes == 0


def _swap_in(path: str, forged: bytes, tmp_path, how: str) -> None:
    if how == "link":
        target = tmp_path / "forged"
        target.write_bytes(forged)
        os.remove(path)
        os.symlink(target, path)
    else:
        with open(path, "r+b") as f:
            f.write(forged)


@pytest.mark.parametrize("how", ["link", "bytes"])
def test_a_swapped_entry_is_a_miss_never_an_answer(tmp_path, how):
    """A chunk (read whole) and an index (mapped by its path), each swapped for a link to forged bytes of
    the same size, or overwritten in place: the cache answers neither, and the forged file stays."""
    d = tmp_path / "c"
    cache = DiskCache(str(d), 1 << 20)
    chunk, index = b"decrypted chunk " * 64, b"index entries!" * 8
    cache.put("chunk", chunk)
    cache.put("filler", b"f" * (1 << 20))  # memory evicts the chunk: it goes to disk
    cache.flush()
    index_path = cache.put_file("index", index)
    cache = DiskCache(str(d), 1 << 20)  # a restart: the chunk is read from disk
    chunk_path = cache.path("chunk")
    _swap_in(chunk_path, b"F" * len(chunk), tmp_path, how)
    assert cache.get("chunk") is None
    _swap_in(index_path, b"G" * len(index), tmp_path, how)
    assert cache.file("index") is None
    assert not os.path.lexists(chunk_path) and not os.path.lexists(index_path)  # dropped, not followed
    if how == "link":
        assert (tmp_path / "forged").read_bytes() == b"G" * len(index)
    cache.put_file("index", index)
    assert open(cache.file("index"), "rb").read() == index


SHARER = """
import os, sys, time
from lookupd.log.remote.diskcache import DiskCache
cache = DiskCache(sys.argv[1], int(sys.argv[2]))
me = sys.argv[3]
for i in range(int(sys.argv[4])):
    cache.put_file(f"{me}-{i}", os.urandom(16 * 1024))
    time.sleep(0.002)
"""


def test_processes_sharing_a_directory_keep_its_bound_together(tmp_path):
    """Three processes (three daemons, or a daemon's workers and the mount) writing into one cache_dir of
    256 KiB: the entries never hold more than the bound and one entry in flight (it used to reach twice the
    bound), and each process still finds its own recent entries."""
    d, bound, entry = tmp_path / "shared", 256 * 1024, 16 * 1024
    DiskCache(str(d), bound)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total = 0
            for e in os.scandir(d):
                if e.name != MARKER and not e.name.endswith(".tmp"):
                    try:
                        total += e.stat().st_size
                    except FileNotFoundError:
                        pass
            peak[0] = max(peak[0], total)
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        procs = [subprocess.Popen([sys.executable, "-c", SHARER, str(d), str(bound), name, "120"], env=env)
                 for name in ("a", "b", "c")]
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    finally:
        stop.set()
        sampler.join()
    print(f"peak {peak[0]} bytes of entries, bound {bound}")
    assert 0 < peak[0] <= bound + 3 * entry, peak[0]  # at most one entry in flight per process
    final = _on_disk(d)
    assert final <= bound and DiskCache(str(d), bound).disk_bytes == final


def test_the_daemon_refuses_such_a_cache_dir_in_one_line(tmp_path):
    """`lookupd serve` with cache_dir set to a user's directory: one line, exit status 1, nothing touched."""
    home, logs = tmp_path / "home", tmp_path / "logs"
    home.mkdir()
    logs.mkdir()
    (home / "thesis.pdf").write_bytes(b"%PDF-1.7 years of work")
    conf = tmp_path / "lookupd.toml"
    conf.write_text(f'log_dirs = ["{logs}"]\nsocket = "{tmp_path}/s.sock"\n[remote]\nbucket = "b"\n'
                    f'endpoint_url = "http://127.0.0.1:9"\ncache_dir = "{home}"\n')
    r = subprocess.run([sys.executable, "-m", "lookupd", "serve", "--config", str(conf)], capture_output=True,
                       text=True, timeout=30, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                           os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "holds files lookupd did not make (thesis.pdf)" in r.stderr
    assert os.listdir(home) == ["thesis.pdf"] and (home / "thesis.pdf").read_bytes() == b"%PDF-1.7 years of work"
