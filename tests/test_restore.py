"""`lookupd restore`: a partition rebuilt from the bucket (real S3 server) is the original partition's files,
byte for byte; an interrupted restore resumes; store faults and foreign files are clear one-line errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reference as R
from faultproxy import FaultProxy
from lookupd.errors import CorruptDataError
from lookupd.log.remote.config import RemoteConfig
from lookupd.log.tiered.layout import RemotePartition
from lookupd.log.tiered.listing import RemoteTier
from lookupd.tools.restorefetch import PIECE_BYTES
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, WrappingKey

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESTORED = (".log", ".index", ".timeindex", ".txnindex")


def _lookupd(*args, wait: bool = True):
    cmd = [sys.executable, "-m", "lookupd", *args]
    env = dict(os.environ, PYTHONPATH=REPO)
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _config(path: Path, t, endpoint: str, key: WrappingKey | None) -> str:
    text = (f'[remote]\nbucket = "{t.config.bucket}"\nendpoint_url = "{endpoint}"\n'
            f'cache_dir = "{path.parent / (path.stem + "-cache")}"\n')
    if key is not None:
        text += f'[remote.encryption.keys]\n"{key.key_id}" = "{key.pem_path}"\n'
    path.write_text(text)
    return str(path)


def _tiered(tmp: Path, server, name: str, **opts):
    """`name` fully tiered (every rolled segment uploaded, the partition dir gone), its config."""
    key = WrappingKey.create(tmp) if opts.pop("encrypted", False) else None
    t = tier_partition(tmp, R.log_dir(name), server, cut=0, drop_local_dir=True,
                       opts=Options(encryption=key, **opts))
    return t, key, _config(tmp / "c.toml", t, server.endpoint_url, key)


def _assert_identical(original: Path, restored: Path, topic_id: str) -> None:
    want = sorted(p.name for p in original.iterdir() if p.suffix in RESTORED)
    got = sorted(p.name for p in restored.iterdir())
    assert got == sorted(want + ["partition.metadata"])
    for name in want:
        assert (restored / name).read_bytes() == (original / name).read_bytes(), name
    assert (restored / "partition.metadata").read_bytes() == f"version: 0\ntopic_id: {topic_id}".encode()


def _topic_id(t) -> str:
    return t.uploaded[0].log_key.split("/")[0][-22:]  # <topic>-<22-character id>; ids may hold "-"


@pytest.mark.parametrize("name,opts", [
    ("txn-0", {"compression": True, "encrypted": True}),
    ("compressed-0", {"compression": True, "encrypted": True}),
    ("plain-0", {"chunk_size": 1100}),  # chunks of an odd size, just above MIN_CHUNK_BYTES
    ("txn-0", {"variable_index": True, "with_metadata": False}),
    # 14.8 MB in chunks that do not divide restore's 4 MiB GETs: runs cross the first GETs' boundaries
    ("large-0", {"compression": True, "chunk_size": 1_000_003}),
])
def test_a_restored_partition_is_the_original(s3_server, tmp_path, name, opts):  # noqa: F811
    R.require()
    t, _key, conf = _tiered(tmp_path, s3_server, name, **opts)
    dest = tmp_path / "restored" / name
    daemon_cache = tmp_path / "c-cache"  # the config's cache_dir, as a running daemon leaves it
    daemon_cache.mkdir()
    (daemon_cache / "chunk-being-written.tmp").write_bytes(b"daemon's")
    rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", "--verify", str(dest))
    assert rc == 0, err
    assert os.listdir(daemon_cache) == ["chunk-being-written.tmp"]  # restore caches nothing, touches nothing
    assert f"{len(t.uploaded)} segments" in out and f"{len(t.uploaded)} verified" in out
    _assert_identical(t.local_dir / name, dest, _topic_id(t))
    rc, out, err = _lookupd("dump", "--index-sanity-check", str(dest))
    assert rc == 0 and "Traceback" not in err, err
    assert out.count("passed sanity check") >= 2 * len(t.uploaded)


def test_an_interrupted_restore_resumes(s3_server, tmp_path):  # noqa: F811
    R.require()
    t, key, conf = _tiered(tmp_path, s3_server, "compressed-0", compression=True, encrypted=True)
    assert len(t.uploaded) >= 4
    dest = tmp_path / "restored"
    stall = t.uploaded[2]  # its .log GETs hang: the restore is killed while writing it
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", stall.log_key.replace(".", r"\.") + "$", "slow", delay=60)
        slow_conf = _config(tmp_path / "slow.toml", t, proxy.url, key)
        proc = _lookupd("restore", "--config", slow_conf, "--topic", t.topic, "--partition", "0", str(dest),
                        wait=False)
        second_log = dest / f"{t.uploaded[1].facts.base_offset:020d}.log"
        deadline = time.monotonic() + 120
        while not second_log.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        methods = {method for method, _path, _range in proxy.requests}
    assert methods <= {"GET", "HEAD"}, f"restore sent {methods}: it must only list and read the bucket"
    assert second_log.exists(), "the restore never got to its second segment"
    third = f"{stall.facts.base_offset:020d}.log"
    assert not (dest / third).exists()
    (dest / (third + ".tmp")).write_bytes(b"half a segment")  # as a crash mid-write leaves it
    first_log = dest / f"{t.uploaded[0].facts.base_offset:020d}.log"
    inode = first_log.stat().st_ino
    rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", "--verify", str(dest))
    assert rc == 0, err
    assert f"{len(t.uploaded) - 2} segments" in out and "2 already complete" in out, out
    assert first_log.stat().st_ino == inode  # skipped, not rewritten
    _assert_identical(t.local_dir / "compressed-0", dest, _topic_id(t))
    rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", str(dest))
    assert rc == 0 and f"0 segments" in out and f"{len(t.uploaded)} already complete" in out, (out, err)


@pytest.mark.parametrize("fault,says", [("503", "did not answer after"), ("403", "refused"),
                                        ("reset", "did not answer after")])
def test_a_store_fault_is_a_clear_one_line_error(s3_server, tmp_path, fault, says):  # noqa: F811
    R.require()
    t, key, _ = _tiered(tmp_path, s3_server, "plain-0")
    dest = tmp_path / "restored"
    with FaultProxy(s3_server.endpoint_url) as proxy:
        conf = _config(tmp_path / "proxy.toml", t, proxy.url, key)
        proxy.inject("GET", r"\.log$", fault)
        rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", str(dest))
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lookupd restore: "), err
    assert says in err and f"s3://{t.config.bucket}/" in err and ".log" in err
    assert "Traceback" not in err


def test_verify_reports_an_index_that_disagrees_with_its_log(s3_server, tmp_path):  # noqa: F811
    R.require()
    t, _key, conf = _tiered(tmp_path, s3_server, "plain-0")
    dest = tmp_path / "restored"
    args = ("restore", "--config", conf, "--topic", t.topic, "--partition", "0", "--verify", str(dest))
    assert _lookupd(*args)[0] == 0
    index = dest / f"{t.uploaded[0].facts.base_offset:020d}.index"
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 8
    entries[4:8] = (int.from_bytes(entries[4:8], "big") + 1).to_bytes(4, "big")  # entry 0's position, off by one
    index.write_bytes(bytes(entries))  # same size: the rerun skips the segment, --verify still reads it
    rc, out, err = _lookupd(*args)
    assert rc == 1 and "is not the start of a batch" in err and "Traceback" not in err, (out, err)


def test_foreign_files_and_a_missing_partition_are_refused(s3_server, tmp_path):  # noqa: F811
    R.require()
    t, key, conf = _tiered(tmp_path, s3_server, "plain-0")
    dest = tmp_path / "restored"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", str(dest))
    assert rc == 1 and "notes.txt" in err and "empty directory" in err and "Traceback" not in err
    assert sorted(os.listdir(dest)) == ["notes.txt"]
    rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "7",
                            str(tmp_path / "other"))
    assert rc == 1 and f"no partition {t.topic}-7" in err and "Traceback" not in err


@pytest.mark.parametrize("suffix", [".log", ".indexes"])
def test_corrupt_bytes_fail_a_restore_as_they_fail_a_cached_read(s3_server, tmp_path, suffix):  # noqa: F811
    """Restore reads through the uncached pieces (ChunkFetcher, the indexes object); the cached read
    path (read, index_paths) is the reference: the same corrupt object gives the same error."""
    R.require()
    t, key, _ = _tiered(tmp_path, s3_server, "compressed-0", compression=True, encrypted=True)
    first = t.uploaded[0]
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", suffix.replace(".", r"\.") + "$", "corrupt", at=20)
        conf = _config(tmp_path / "proxy.toml", t, proxy.url, key)
        rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0",
                                str(tmp_path / "restored"))
        tier = RemoteTier(RemoteConfig(bucket=t.config.bucket, cache_dir=str(tmp_path / "reference-cache"),
                                       endpoint_url=proxy.url, encryption_keys={key.key_id: key.pem_path}))
        infos = tier.list_partition(RemotePartition(t.topic, 0, _topic_id(t)), None, [])
        data = tier.data(next(info.keys for info in infos if info.keys.log == first.log_key))
        with pytest.raises(CorruptDataError) as e:
            if suffix == ".log":
                data.read(0, data.size)
            else:
                data.index_paths(["offset", "timestamp"])
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip() == f"lookupd restore: {e.value}"
    assert (suffix == ".log") == ("chunk 0: AES-GCM tag mismatch" in err), err


def test_a_slow_piece_does_not_hold_back_the_pieces_after_it(s3_server, tmp_path):  # noqa: F811
    """Each fetched piece of a `.log` is written at its place as soon as it arrives: while the GET of a
    segment's first piece hangs, the pieces after it are already in its `.log.tmp`; the restored files are
    the original all the same."""
    R.require()
    t, key, _ = _tiered(tmp_path, s3_server, "large-0", chunk_size=PIECE_BYTES)
    first = t.uploaded[0]
    tmp = tmp_path / "restored" / f"{first.facts.base_offset:020d}.log.tmp"
    delay = 8.0
    with FaultProxy(s3_server.endpoint_url) as proxy:
        rule = proxy.inject("GET", first.log_key.replace(".", r"\.") + "$", "slow", delay=delay, times=1,
                            range_regex=f"bytes=0-{PIECE_BYTES - 1}")
        conf = _config(tmp_path / "proxy.toml", t, proxy.url, key)
        proc = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0",
                        str(tmp_path / "restored"), wait=False)
        try:
            deadline = time.monotonic() + 120
            while not rule.hits and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            held = time.monotonic() + delay - 2  # the first piece is surely still held back until then
            written = 0
            while not written > PIECE_BYTES and time.monotonic() < held:
                written = tmp.stat().st_size if tmp.exists() else 0
                time.sleep(0.01)
            assert written > PIECE_BYTES, "the pieces after a slow one waited for it"
            with open(tmp, "rb") as f:
                assert f.read(PIECE_BYTES) == bytes(PIECE_BYTES)  # the slow piece's place: not written yet
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    _assert_identical(t.local_dir / "large-0", tmp_path / "restored", _topic_id(t))


def _resident_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache (mincore(2) on a mapping that touches none)."""
    import ctypes
    import mmap

    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def test_a_restored_log_is_not_left_in_the_page_cache(s3_server, tmp_path):  # noqa: F811
    """Each byte is written once and read by no one here: a partition's worth of restored segments would
    evict the machine's useful cache, so a `.log` drops its pages once synced."""
    R.require()
    t, _key, conf = _tiered(tmp_path, s3_server, "large-0", chunk_size=PIECE_BYTES)
    dest = tmp_path / "restored"
    rc, out, err = _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", str(dest))
    assert rc == 0, err
    log = dest / f"{t.uploaded[0].facts.base_offset:020d}.log"
    pages = (log.stat().st_size + 4095) // 4096
    assert pages > 1000 and _resident_pages(log) < pages // 10
    with open(log, "rb") as f:  # the check itself sees pages that are there
        while f.read(1 << 20):
            pass
    assert _resident_pages(log) > pages // 2
