"""The FUSE view over both tiers (`fusefs mount --config`): a real mount and the real daemon with the same
[remote] table, against the real S3 server. Remote segments show as `<base>.remote.<suffix>`, their bytes
are the original segment's, and every view reads as the same partition fully local."""

from __future__ import annotations

import errno
import json
import mmap
import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

import reference as R
from faultproxy import FaultProxy
from s3server import s3_server  # noqa: F401 - fixture
from test_fusefs_helpers import Daemon, Mount, mounted, require_fuse, workdir
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, WrappingKey, upload_partition

from fusefs.tiers import BucketLogFile
from lookupd.errors import Unavailable
from lookupd.log.remote.bucket import Bucket
from lookupd.log.remote.config import RemoteConfig
from lookupd.log.remote.diskcache import DiskCache
from lookupd.log.remote.keyring import Keyring
from lookupd.log.remote.store import ObjectStore


def _remote_table(t, endpoint: str, key: WrappingKey | None) -> str:
    text = (f'[remote]\nbucket = "{t.config.bucket}"\nendpoint_url = "{endpoint}"\n'
            f'cache_dir = "{t.config.cache_dir}"\n')
    if key is not None:
        text += f'[remote.encryption.keys]\n"{key.key_id}" = "{key.pem_path}"\n'
    return text


class TieredMount:
    """A daemon and a mount of `t.tiered_dir`, both reading the bucket through `endpoint`."""

    def __init__(self, t, d: str, endpoint: str, key: WrappingKey | None):
        self.daemon = Daemon([t.tiered_dir], d)
        conf = os.path.join(d, "lookupd.toml")
        with open(conf, "a") as f:
            f.write(_remote_table(t, endpoint, key))
        self.mount = Mount(self.daemon.sock, d, "--log-dir", str(t.tiered_dir), "--config", conf)

    def __enter__(self) -> Mount:
        self.daemon.start()
        try:
            self.mount.start()
        except BaseException:
            self.mount.stop()
            self.daemon.stop()  # nothing left running when the mount does not come up
            raise
        return self.mount

    def __exit__(self, *exc) -> None:
        self.mount.stop()
        self.daemon.stop()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_a_mount_shows_remote_segments_and_reads_them_as_local(s3_server, tmp_path):  # noqa: F811
    R.require()
    require_fuse()
    key = WrappingKey.create(tmp_path)
    t = tier_partition(tmp_path, R.log_dir("txn-0"), s3_server, cut=2, opts=Options(compression=True, encryption=key))
    original = t.local_dir / "txn-0"
    bases = [up.facts.base_offset for up in t.uploaded]
    with workdir() as d, TieredMount(t, d, s3_server.endpoint_url, key) as mount, \
            mounted([t.local_dir]) as (local, _daemon):
        names = set(os.listdir(mount.path("txn", "0")))
        for base in bases:
            stem = f"{base:020d}"
            assert {f"{stem}.remote.log", f"{stem}.remote.index", f"{stem}.remote.records.jsonl"} <= names
            assert f"{stem}.log" not in names
            for suffix in ("log", "index", "timeindex", "txnindex"):
                if (original / f"{stem}.{suffix}").exists():
                    path = mount.path("txn", "0", f"{stem}.remote.{suffix}")
                    assert os.stat(path).st_size == (original / f"{stem}.{suffix}").stat().st_size
                    assert _read(path) == (original / f"{stem}.{suffix}").read_bytes(), suffix
            for view in ("records.jsonl", "index.txt", "timeindex.txt"):
                got = _read(mount.path("txn", "0", f"{stem}.remote.{view}"))
                want = _read(local.path("txn", "0", f"{stem}.{view}"))
                assert got.replace(b".remote.", b".") == want and want, view
            with pytest.raises(FileNotFoundError):
                os.stat(mount.path("txn", "0", f"{stem}.log"))  # a remote segment has only its remote name
        first_local = min(int(n[:20]) for n in names if n.endswith(".log") and ".remote." not in n)
        assert first_local > bases[-1]
        with pytest.raises(FileNotFoundError):
            os.stat(mount.path("txn", "0", f"{first_local:020d}.remote.log"))
        assert _read(mount.path("txn", "0", f"{first_local:020d}.log")) == \
            (original / f"{first_local:020d}.log").read_bytes()
        # Navigation crosses the tiers: the daemon resolves, the mount reads remote then local segments.
        navs = [f"at-offset/{bases[0] + 3}-{first_local + 20}.jsonl", "at-offset/0.jsonl", "at-time/earliest.jsonl",
                "at-time/max.jsonl"]
        keyed = [json.loads(line)["key"] for line in _read(local.path("txn", "0", "at-offset/0.jsonl")).splitlines()]
        navs.append(f"by-key/{next(k for k in keyed if isinstance(k, str) and '/' not in k)}.jsonl")
        for nav in navs:
            want = _read(local.path("txn", "0", nav))
            assert want and _read(mount.path("txn", "0", nav)).replace(b".remote.", b".") == want, nav


def test_a_store_fault_is_eio_while_local_files_read(s3_server, tmp_path):  # noqa: F811
    R.require()
    require_fuse()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=2)
    original = t.local_dir / "plain-0"
    stem = f"{t.uploaded[1].facts.base_offset:020d}"
    with FaultProxy(s3_server.endpoint_url) as proxy, workdir() as d, workdir() as d2:
        tiered = TieredMount(t, d, proxy.url, None)
        with tiered as mount:
            names = os.listdir(mount.path("plain", "0"))
            assert f"{stem}.remote.log" in names
            proxy.inject("GET", r"\.log$", "503")  # the store down past its retries, for chunk GETs
            with pytest.raises(OSError) as err:
                _read(mount.path("plain", "0", f"{stem}.remote.log"))
            assert err.value.errno == errno.EIO
            local_log = next(n for n in names if n.endswith(".log") and ".remote." not in n)
            assert _read(mount.path("plain", "0", local_log)) == (original / local_log).read_bytes()
            assert _read(mount.path("plain", "0", f"{stem}.remote.index")) == (original / f"{stem}.index").read_bytes()
            proxy.inject("GET", r"\.rsm-manifest$", "503")  # and manifests: a second mount knows none of them
            second = Mount(tiered.daemon.sock, d2, *tiered.mount.cmd[tiered.mount.cmd.index("--log-dir"):])
            try:
                second.start()
                names = os.listdir(second.path("plain", "0"))  # still listed: the .log with the daemon's size
                assert f"{stem}.remote.log" in names and local_log in names
                with pytest.raises(OSError) as err:
                    _read(second.path("plain", "0", f"{stem}.remote.log"))
                assert err.value.errno == errno.EIO
            finally:
                second.stop()
            proxy.clear()  # the store back: the same file reads
            assert _read(mount.path("plain", "0", f"{stem}.remote.log")) == (original / f"{stem}.log").read_bytes()
            assert "s3://" in mount.log and "did not answer" in mount.log


def _mount_option(root: str, name: str) -> str | None:
    """A mount option of the file system mounted at `root`, as /proc/self/mountinfo shows it."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == root:
                options = dict(o.partition("=")[::2] for o in fields[-1].split(","))
                return options.get(name)
    return None


def test_a_remote_log_is_read_in_pieces_as_big_as_the_readers(s3_server, tmp_path):  # noqa: F811
    """A remote `.log` is opened with direct I/O and the mount takes 1 MiB reads: a reader's read(2) of up to
    1 MiB is one call into the mount, not eight 128 KiB page-cache fills; st_blksize says so, reads of any
    size at any position (across chunk boundaries, past the end) give the original bytes, and so does a
    private mmap (a shared one is refused with ENODEV, as the kernel does for direct I/O)."""
    R.require()
    require_fuse()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=2, opts=Options(chunk_size=5000))
    original = t.local_dir / "plain-0"
    stem = f"{t.uploaded[1].facts.base_offset:020d}"
    want = (original / f"{stem}.log").read_bytes()
    with workdir() as d, TieredMount(t, d, s3_server.endpoint_url, None) as mount:
        assert _mount_option(mount.root, "max_read") == str(1 << 20)
        path = mount.path("plain", "0", f"{stem}.remote.log")
        local_log = next(n for n in os.listdir(mount.path("plain", "0")) if n.endswith(".log") and ".remote." not in n)
        assert os.stat(path).st_blksize == 1 << 20
        assert os.stat(mount.path("plain", "0", local_log)).st_blksize == 128 << 10  # local files: as before
        listed = {e.name: e.stat().st_blksize for e in os.scandir(mount.path("plain", "0"))}
        assert listed[f"{stem}.remote.log"] == 1 << 20 and listed[f"{stem}.remote.index"] == 128 << 10
        fd = os.open(path, os.O_RDONLY)
        try:
            for size, position in ((1 << 20, 0), (1, 4999), (4096, 4998), (12_345, 777), (3, len(want) - 2),
                                   (10, len(want)), ((1 << 20) + 7, 1)):
                assert os.pread(fd, size, position) == want[position:position + size], (size, position)
            got = bytearray()
            while piece := os.read(fd, 3000):  # small sequential reads from where the last pread left the offset
                got += piece
            assert bytes(got) == want
            with mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m:  # a private map reads it
                assert m[:] == want
            with pytest.raises(OSError) as err:  # a shared one is refused: direct I/O keeps no page cache to share
                mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            assert err.value.errno == errno.ENODEV
        finally:
            os.close(fd)


@pytest.mark.parametrize("encoded", [False, True], ids=["plain", "zstd-encrypted"])
def test_a_remote_log_file_reads_what_the_reference_path_reads(s3_server, tmp_path, encoded):  # noqa: F811
    """BucketLogFile (the mount's reads: copied once from the decoded chunks into the reply buffer, with
    read-ahead when sequential) gives the bytes and the errors of BucketSegment.read (the reference path):
    reads of any size at any position, across chunk boundaries and past the end, one after the other and
    from 8 threads at once on one open file."""
    R.require()
    key = WrappingKey.create(tmp_path) if encoded else None
    bucket = s3_server.bucket()
    ups = upload_partition(s3_server.client(), bucket, R.log_dir("plain-0"),
                           opts=Options(chunk_size=5000, compression=encoded, encryption=key))
    up = max(ups, key=lambda u: u.segment.stat().st_size)
    want = up.segment.read_bytes()
    keyring = Keyring({key.key_id: key.pem_path} if key else {})

    def open_data(endpoint: str, name: str):
        store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=endpoint))
        return Bucket(store, keyring, DiskCache(str(tmp_path / name), 10 ** 9)).segment(up.log_key)

    def read(f: BucketLogFile, position: int, size: int) -> bytes:
        buf = bytearray(b"\xee" * (size + 3))
        n = f.read_into(memoryview(buf)[:size], position)
        assert buf[n:] == b"\xee" * (size + 3 - n)  # nothing written past what it says
        return bytes(buf[:n])

    ref, f = open_data(s3_server.endpoint_url, "ref"), BucketLogFile(open_data(s3_server.endpoint_url, "mount"))
    rng = random.Random(7)
    ranges = [(0, 1 << 20), (4999, 2), (4998, 4096), (777, 12_345), (len(want) - 2, 3), (len(want), 10),
              (len(want) + 5, 1), (10, 0)] + [(rng.randrange(len(want) + 10), rng.randrange(3 * 5000)) for _ in range(60)]
    for position, size in ranges:
        assert read(f, position, size) == ref.read(position, size) == want[position:position + size], (position, size)
    position, got = 0, []
    while piece := read(f, position, 3000):  # sequential, as `cat`
        got.append(piece)
        position += len(piece)
    assert b"".join(got) == want
    shared = BucketLogFile(open_data(s3_server.endpoint_url, "threads"))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda r: read(shared, *r), ranges * 3))
    assert got == [want[p:p + n] for p, n in ranges * 3]
    with FaultProxy(s3_server.endpoint_url) as proxy:
        ref, f = open_data(proxy.url, "ref-down"), BucketLogFile(open_data(proxy.url, "mount-down"))
        proxy.inject("GET", r"\.log$", "503")  # the store down past its retries
        errors = []
        for reader in (lambda: ref.read(6000, 100), lambda: read(f, 6000, 100)):
            with pytest.raises(Unavailable) as err:
                reader()
            errors.append(str(err.value))
        assert errors[0] == errors[1] and up.log_key in errors[0] and "did not answer" in errors[0]
        proxy.clear()
        assert read(f, 6000, 100) == ref.read(6000, 100) == want[6000:6100]  # the store back: both read again
