"""Tiered storage, the object-store half: S3 clients on ranged GETs, a sequential read through the Bucket,
what a cold index fetch costs, `lookupd restore`, and a remote `.log` read through the FUSE mount.

Each is measured against plain ranged GETs of the same objects and against the fair anchor of issue 43,
what a user would write by hand (ByHand): the same ranged GETs, one a chunk, decrypted and decompressed
with the same libraries (cryptography's AESGCM, zstandard) in the simplest loop at the same concurrency;
for restore, that loop plus writing the same bytes and fdatasync (restore_by_hand). Targets: the zstd +
encrypted sequential read at least 0.9x its anchor, restore and the cold FUSE read at least 0.8x.

Against a real S3 server on this machine (SeaweedFS `weed mini`, started here), so the network is the
loopback: the figures show client and decoding overhead, not a WAN. The segment is Kafka-written
(the reference corpus's large-0, 14.8 MB), uploaded in the tiered-storage plugin's layout in 4 MiB chunks;
restore is also measured on a partition of RESTORE_COPIES copies of it.

Run: python bench/bench_remote.py [--quick] [--json OUT] [--sequential-only | --restore-only | --fuse-only]
(--sequential-only, --restore-only, --fuse-only: just the sequential-read, the restore or the FUSE figures,
for iterating on that path.)
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import zstandard
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

CHUNK = 4 * 1024 * 1024   # the plugin's usual chunk.size
STEP = 1024 * 1024        # how much each read asks for (a Kafka fetch's max.partition.fetch.bytes)
RESTORE_COPIES = 4        # segments in the partition of the second restore figure (copies of large-0's)
VARIANTS = {"plain": {}, "zstd+encrypted": {"compression": True, "encryption": True}}


def _segment():
    import reference as R

    d = R.log_dir("large-0")
    return d, 0


def _clients(server, bucket: str, key: str):
    """name -> get(start, end) for each candidate client, all with the test credentials from the env."""
    import boto3
    import botocore.config
    import pyarrow.fs as pafs

    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    b3 = boto3.client("s3", endpoint_url=server.endpoint_url,
                      config=botocore.config.Config(s3={"addressing_style": "path"}, max_pool_connections=16))
    fs = pafs.S3FileSystem(endpoint_override=server.endpoint_url, scheme="http", region="us-east-1")
    f = fs.open_input_file(f"{bucket}/{key}")
    return {
        "obstore": lambda a, b: store.get_range_buffer(key, a, b),
        "boto3": lambda a, b: b3.get_object(Bucket=bucket, Key=key, Range=f"bytes={a}-{b - 1}")["Body"].read(),
        "pyarrow": lambda a, b: f.read_at(b - a, a),
    }


def client_figures(server, bucket: str, key: str, size: int, times: int) -> list[Figure]:
    """MB/s of sequential ranged GETs of `size`-byte ranges per client, interleaved to share the noise."""
    clients = _clients(server, bucket, key)
    out = []
    for rng in (64 * 1024, CHUNK):
        n = min(size // rng, 64)
        values = {name: [] for name in clients}
        for _ in range(times + 1):
            for name, get in clients.items():
                t0 = time.perf_counter()
                for i in range(n):
                    get(i * rng, (i + 1) * rng)
                values[name].append(n * rng / (time.perf_counter() - t0) / 1e6)
        for name, v in values.items():
            out.append(Figure(f"S3 client {name}, sequential ranged GETs of {rng // 1024} KiB", "MB/s", v[1:],
                              group="remote-clients", params={"client": name, "range": rng},
                              higher_is_better=True))
    return out


def _cpu_ms(pid: int) -> float:
    """CPU time of process `pid` so far, in ms. This process: its clock, which keeps the time of threads
    that have ended (a restore's pool ends with it); another: the sum over its threads now (the scheduler's
    own count: exact, where /proc/PID/stat counts in 10 ms ticks)."""
    if pid == os.getpid():
        return time.process_time() * 1000
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e6


class CpuTimes:
    """Each timed run's wall time, and the CPU time it took in each named process (`reader`: also this
    process's user and system time apart, from getrusage: the kernel's copies out of FUSE replies)."""

    def __init__(self, processes: dict[str, int], reader: bool = False):
        self.processes = processes            # name -> pid, measured in every run
        self.reader = reader
        self.ms: dict[tuple[str, str], list[float]] = {}  # (path, process) -> ms per run

    def timed(self, path: str, fn, more: dict[str, int] | None = None) -> float:
        """Run fn(); the seconds it took. `more`: processes measured in this run only."""
        pids = {**(more or {}), **self.processes}
        before = {who: _cpu_ms(pid) for who, pid in pids.items()}
        r0 = resource.getrusage(resource.RUSAGE_SELF)  # finer than os.times()' 10 ms ticks
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        for who, pid in pids.items():
            self.ms.setdefault((path, who), []).append(_cpu_ms(pid) - before[who])
        if self.reader:
            self.ms.setdefault((path, "the reader, user"), []).append((r1.ru_utime - r0.ru_utime) * 1e3)
            self.ms.setdefault((path, "the reader, system"), []).append((r1.ru_stime - r0.ru_stime) * 1e3)
        return elapsed

    def add(self, path: str, who: str, ms: float) -> None:
        """A run's CPU time measured elsewhere (by the process itself)."""
        self.ms.setdefault((path, who), []).append(ms)

    def figures(self, what: str, group: str, params: dict) -> list[Figure]:
        """One figure a (path, process), the first run (a warm-up) left out."""
        return [Figure(f"{what}, {path}: CPU time of {who}", "ms", values[1:], group=group,
                       params={**params, "path": path, "process": who}) for (path, who), values in self.ms.items()]


def _minor_faults(pid: int) -> int:
    """Minor page faults of process `pid` so far (memory it touched for the first time, mostly)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def plain_gets(store, key: str, size: int) -> None:
    """The anchor of a sequential read: ranged GETs of the whole object (`size` bytes), CHUNK bytes each,
    two in flight (the read path's reader and its read-ahead)."""
    with ThreadPoolExecutor(2) as pool:
        for _ in pool.map(lambda r: store.get_range_buffer(key, *r),
                          [(a, min(a + CHUNK, size)) for a in range(0, size, CHUNK)]):
            pass


class ByHand:
    """The fair anchor (issue 43): what a user would write by hand to read a tiered segment. One ranged GET a
    chunk (the manifest's spans), AES-GCM decrypted with `cryptography` and zstd-decompressed with `zstandard`,
    the libraries lookupd uses, `in_flight` at once through the same client, in the simplest loop: no cache,
    no checks, no read-ahead logic. The manifest and the data key are read before, as lookupd's reader has
    them before its timed read."""

    def __init__(self, store, log_key: str, manifest_key: str, keyring):
        from lookupd.log.remote.bucket import Bucket

        manifest = Bucket(store, keyring, None).manifest(manifest_key)
        index = manifest.chunk_index
        self.store, self.key = store, log_key
        self.spans = [(index.transformed_span(i, i), index.original_span(i)[0]) for i in range(index.chunk_count)]
        self.aad = manifest.encryption.aad if manifest.encryption else b""
        self.aes = AESGCM(keyring.unwrap(manifest.encryption, manifest_key)) if manifest.encryption else None
        self.zstd = manifest.compression

    def chunk(self, i: int):
        """Chunk i's original bytes: GET, decrypt, decompress."""
        blob = memoryview(self.store.get_range_buffer(self.key, *self.spans[i][0]))
        if self.aes is not None:
            blob = self.aes.decrypt(blob[:12], blob[12:], self.aad)
        if self.zstd:
            blob = zstandard.ZstdDecompressor().decompress(blob)
        return blob

    def read(self, in_flight: int = 2) -> None:
        """The whole segment, two in flight by default (lookupd's reader and its read-ahead)."""
        with ThreadPoolExecutor(in_flight) as pool:
            for _ in pool.map(self.chunk, range(len(self.spans))):
                pass


def by_hand_in_a_new_process(endpoint_url: str, bucket: str, log_key: str, manifest_key: str) -> tuple[float, float]:
    """ByHand's read timed in a Python process of its own, started for it as each cold mount is: its memory
    allocator, its S3 client and connections as new as the mount's (a read in this process reuses the memory
    of the reads before it). (seconds, CPU ms) of the read alone; its start and the manifest are not timed."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--by-hand-once", endpoint_url, bucket, log_key,
                          manifest_key], capture_output=True, text=True, check=True)
    seconds, cpu_ms = map(float, out.stdout.split())
    return seconds, cpu_ms


def _by_hand_once(endpoint_url: str, bucket: str, log_key: str, manifest_key: str) -> None:
    """by_hand_in_a_new_process's child: the same steps as the in-process anchor (a HEAD, the manifest), then
    one timed read; prints its seconds and CPU ms."""
    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=endpoint_url))
    store.size(log_key)
    anchor = ByHand(store, log_key, manifest_key, Keyring({}))
    c0, t0 = time.process_time(), time.perf_counter()
    anchor.read()
    print(time.perf_counter() - t0, (time.process_time() - c0) * 1000)


def restore_by_hand(store, ups: list, keyring, dest: str, in_flight: int) -> None:
    """The restore anchor: for each uploaded segment (`ups`: its objects' keys), its manifest read and its data
    key unwrapped (ByHand), then ByHand's loop over every segment at restore's concurrency, each chunk written
    at its place in the segment's file as it comes, the `.indexes` objects fetched and written as they are,
    then every file fdatasync'd. Given the keys: no listing."""
    segments = [ByHand(store, up.log_key, up.manifest_key, keyring) for up in ups]
    os.makedirs(dest, exist_ok=True)
    fds = [os.open(os.path.join(dest, f"{n}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
           for n in range(len(segments))]
    other = os.open(os.path.join(dest, "other"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def one(job) -> None:
        if job[0] == "indexes":
            os.write(other, store.get(job[1]))
        else:
            _, n, i = job
            os.pwrite(fds[n], segments[n].chunk(i), segments[n].spans[i][1])

    jobs = [("indexes", up.indexes_key) for up in ups]
    jobs += [("chunk", n, i) for n, seg in enumerate(segments) for i in range(len(seg.spans))]
    try:
        with ThreadPoolExecutor(in_flight) as pool:
            for _ in pool.map(one, jobs):
                pass
        for fd in fds + [other]:
            os.fdatasync(fd)
    finally:
        for fd in fds + [other]:
            os.close(fd)


def sequential_figures(server, bucket: str, up, key, times: int, variant: str) -> list[Figure]:
    """A whole-segment sequential read through the Bucket (BucketSegment.read: the chunk cache and its read-ahead,
    cold) against plain ranged GETs of the same `.log` object, chunk by chunk with one GET ahead (the read path's
    reader + read-ahead); with the CPU time each took in this process and in the S3 server (they share the
    machine's cores)."""
    from lookupd.log.remote.bucket import Bucket
    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.diskcache import DiskCache
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    keyring = Keyring({key.key_id: key.pem_path} if key else {})  # one per daemon: its PEM is loaded once
    original = up.segment.stat().st_size
    obj_size = store.size(up.log_key)
    ours, plain, by_hand = [], [], []
    cpu = CpuTimes({"lookupd's process": os.getpid(), "the S3 server": server.process.pid})
    anchor = ByHand(store, up.log_key, up.manifest_key, keyring)

    def read_through(seg) -> None:
        position = 0
        while position < seg.size:
            position += len(seg.read(position, STEP, sequential=True))

    for rep in range(times + 1):
        cache_dir = tempfile.mkdtemp(prefix="lookupd-bench-cache-")
        try:
            cache = DiskCache(cache_dir, 10 ** 9)
            seg = Bucket(store, keyring, cache).segment(up.log_key)
            ours.append(original / cpu.timed("lookupd", lambda: read_through(seg)) / 1e6)
            cache.flush()
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        plain.append(original / cpu.timed("plain GETs", lambda: plain_gets(store, up.log_key, obj_size)) / 1e6)
        by_hand.append(original / cpu.timed("by hand", anchor.read) / 1e6)
    params = {"variant": variant, "segment_bytes": original, "object_bytes": obj_size, "chunk": CHUNK}
    decode = []
    if seg.manifest.compression or seg.manifest.encryption:
        blobs = [bytes(store.get_range_buffer(up.log_key, *seg.manifest.chunk_index.transformed_span(i, i)))
                 for i in range(seg.manifest.chunk_index.chunk_count)]
        for _ in range(times + 1):
            t0 = time.perf_counter()
            for i, blob in enumerate(blobs):
                seg.chunks.fetcher.transform.decode(i, memoryview(blob))
            decode.append(original / (time.perf_counter() - t0) / 1e6)
        decode = [Figure(f"remote sequential read, {variant}, decoding only (one thread, in memory)", "MB/s",
                         decode[1:], group="remote-read", params={**params, "path": "decode only"},
                         higher_is_better=True)]
    spent = cpu.figures(f"remote sequential read, {variant}", "remote-read-cpu", params)
    return decode + [Figure(f"remote sequential read, {variant}, through the Bucket", "MB/s", ours[1:],
                   group="remote-read", params={**params, "path": "lookupd"}, higher_is_better=True),
            Figure(f"remote sequential read, {variant}, plain ranged GETs", "MB/s", plain[1:],
                   group="remote-read", params={**params, "path": "plain GETs"}, higher_is_better=True),
            Figure(f"remote sequential read, {variant}, by hand (GET, decrypt, decompress)", "MB/s", by_hand[1:],
                   group="remote-read", params={**params, "path": "by hand"}, higher_is_better=True)] + spent


def cold_index_figures(server, bucket: str, up, key, variant: str) -> list[Figure]:
    """Cold: the manifest, the offset and time indexes, then the chunk a lookup lands in: GETs and bytes."""
    from lookupd.log.remote.bucket import Bucket
    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.diskcache import DiskCache
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore

    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    cache_dir = tempfile.mkdtemp(prefix="lookupd-bench-cache-")
    try:
        seg = Bucket(store, Keyring({key.key_id: key.pem_path} if key else {}),
                     DiskCache(cache_dir, 10 ** 9)).segment(up.log_key)
        seg.index_paths(["offset", "timestamp"])
        seg.read(seg.size // 2, 16 * 1024)  # the batch the index entry points at
        return [Figure(f"cold index fetch + one batch read, {variant}: GETs", "GETs", [store.requests],
                       group="remote-cold", params={"variant": variant}),
                Figure(f"cold index fetch + one batch read, {variant}: bytes fetched", "bytes",
                       [store.bytes_fetched], group="remote-cold", params={"variant": variant})]
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def restore_figures(server, bucket: str, ups: list, key, times: int, variant: str, what: str = "") -> list[Figure]:
    """`lookupd restore` of the uploaded partition (`ups`: its segments; files synced, listing included)
    against plain GETs of the same objects (each segment's manifest, `.indexes`, and `.log` in restore's
    PIECE_BYTES ranges) with as many in flight as restore keeps (GETS_IN_FLIGHT), through the same client:
    one ObjectStore, its connections already open for both (a restore process opens them once). On one
    14.8 MB segment the restore's fixed costs (two listings, a manifest GET before the chunks are known,
    syncs) weigh more than on a partition of several segments, whose GETs run on across segments."""
    import io

    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore
    from lookupd.log.tiered.listing import RemoteTier
    from lookupd.tools.restore import restore_partition
    from lookupd.tools.restorefetch import GETS_IN_FLIGHT, PIECE_BYTES

    original = sum(up.segment.stat().st_size for up in ups)
    keys = {key.key_id: key.pem_path} if key else {}
    store = ObjectStore(RemoteConfig(bucket=bucket, cache_dir="unused", endpoint_url=server.endpoint_url))
    gets = []
    for up in ups:
        gets += [(k, 0, store.size(k)) for k in (up.manifest_key, up.indexes_key)]
        log_size = store.size(up.log_key)
        gets += [(up.log_key, a, min(a + PIECE_BYTES, log_size)) for a in range(0, log_size, PIECE_BYTES)]
    speed = {path: [] for path in ("lookupd restore", "plain GETs", "by hand")}
    keyring = Keyring(keys)  # one per restore: its PEM is loaded once
    cpu = CpuTimes({"lookupd's process": os.getpid(), "the S3 server": server.process.pid})

    def timed(path: str, fn) -> None:
        speed[path].append(original / cpu.timed(path, fn) / 1e6)

    def restore_gets() -> None:
        with ThreadPoolExecutor(GETS_IN_FLIGHT) as pool:
            for _ in pool.map(lambda g: store.get_range_buffer(*g), gets):
                pass

    for rep in range(times + 1):
        work = tempfile.mkdtemp(prefix="lookupd-bench-restore-")
        try:
            cfg = RemoteConfig(bucket=bucket, cache_dir=os.path.join(work, "cache"), endpoint_url=server.endpoint_url,
                               encryption_keys=keys)
            tier = RemoteTier(cfg, store=store)
            timed("lookupd restore", lambda: restore_partition(tier, os.path.join(work, "dest"), "large", 0,
                                                               out=io.StringIO()))
            timed("by hand", lambda: restore_by_hand(store, ups, keyring, os.path.join(work, "by-hand"),
                                                     GETS_IN_FLIGHT))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        timed("plain GETs", restore_gets)
    params = {"variant": variant, "segments": len(ups), "partition_bytes": original, "in_flight": GETS_IN_FLIGHT}
    out = [Figure(f"restore{what}, {variant}, {path}", "MB/s", values[1:], group="remote-restore",
                  params={**params, "path": path}, higher_is_better=True) for path, values in speed.items()]
    return out + cpu.figures(f"restore{what}, {variant}", "remote-restore-cpu", params)


def upload_copies(client, bucket: str, partition_dir: str, base: int, copies: int, opts) -> list:
    """`copies` uploads of one segment's files as consecutive segments of partition large-0 (bases
    base, base + 1,000,000, ...: links to the same files). Their manifests carry no offsets
    (with_metadata off), so the listing keeps them all, as it keeps a pre-2023 plugin's uploads."""
    import dataclasses
    from pathlib import Path

    import lookupd.tools.tieredwriter as W

    root = Path(tempfile.mkdtemp(prefix="lookupd-bench-copies-"))
    try:
        topic_id = W.kafka_uuid()
        ups = []
        for i in range(copies):
            b = base + i * 1_000_000
            for p in Path(partition_dir).glob(f"{base:020d}.*"):
                os.symlink(p, root / (f"{b:020d}" + p.suffix))
            up = W.upload_segment(client, bucket, root, b, topic="large", partition=0, topic_id=topic_id,
                                  opts=dataclasses.replace(opts, with_metadata=False))
            ups.append(dataclasses.replace(up, segment=Path(partition_dir) / f"{base:020d}.log"))
        return ups
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fuse_figures(server, times: int) -> list[Figure]:
    """A sequential read of a remote segment's `.log` through the mount (`fusefs mount --config`, a new
    mount and cache each time: cold) against plain ranged GETs of the same object, CHUNK bytes each with
    two in flight, measured right after it, and against the fair anchor (ByHand) twice: in this process, and
    in a process started for it as the mount is (by_hand_in_a_new_process). The daemon and the mount run as
    subprocesses. The same read again, warm (no GET), is what the FUSE path alone costs. Beside each, the CPU
    time it took in each process: the S3 server, the mount, the daemon, and the reader (this process: the
    kernel's copies out of the FUSE replies are its system time)."""
    from pathlib import Path

    import reference as R
    import lookupd.tools.tieredwriter as W
    from test_fusefs_helpers import Daemon, Mount
    from tiered_helpers import tier_partition

    from lookupd.log.remote.config import RemoteConfig
    from lookupd.log.remote.keyring import Keyring
    from lookupd.log.remote.store import ObjectStore

    ours, warm, plain, by_hand, by_hand_new = [], [], [], [], []
    faults: dict[str, list[int]] = {"cold": [], "warm": []}  # the mount's, per read: a diagnostic
    cpu = CpuTimes({"the S3 server": server.process.pid}, reader=True)
    original = 0

    def timed(path: str, fn, into: list, pids: dict[str, int]) -> None:
        into.append(original / cpu.timed(path, fn, pids) / 1e6)

    for rep in range(times + 1):
        root = tempfile.mkdtemp(prefix="fz", dir="/tmp")  # short: the daemon's socket path is bounded
        try:
            t = tier_partition(Path(root) / "t", Path(R.log_dir("large-0")), server, cut=1,
                               opts=W.Options(chunk_size=CHUNK))
            work = os.path.join(root, "w")
            os.makedirs(work)
            daemon = Daemon([t.tiered_dir], work)
            conf = os.path.join(work, "lookupd.toml")
            with open(conf, "a") as f:
                f.write(f'[remote]\nbucket = "{t.config.bucket}"\nendpoint_url = "{server.endpoint_url}"\n'
                        f'cache_dir = "{t.config.cache_dir}"\n')
            mount = Mount(daemon.sock, work, "--log-dir", str(t.tiered_dir), "--config", conf)
            daemon.start()
            try:
                mount.start()
                path = mount.path("large", "0", "00000000000000000000.remote.log")
                original = os.stat(path).st_size  # the listing and the manifest: not timed

                def read_through() -> None:
                    with open(path, "rb", buffering=0) as f:
                        while f.read(STEP):
                            pass
                pids = {"the mount": mount.proc.pid, "the daemon": daemon.proc.pid}
                for kind, path_name, into in (("cold", "fusefs", ours), ("warm", "fusefs warm", warm)):
                    before = _minor_faults(mount.proc.pid)
                    timed(path_name, read_through, into, pids)  # warm: from the chunks the mount holds decoded
                    faults[kind].append(_minor_faults(mount.proc.pid) - before)
            finally:
                mount.stop()
                daemon.stop()
            key = t.uploaded[0].log_key
            store = ObjectStore(RemoteConfig(bucket=t.config.bucket, cache_dir="unused",
                                             endpoint_url=server.endpoint_url))
            obj_size = store.size(key)
            timed("plain GETs", lambda: plain_gets(store, key, obj_size), plain, {})
            anchor = ByHand(store, key, t.uploaded[0].manifest_key, Keyring({}))
            timed("by hand", anchor.read, by_hand, {})
            seconds, cpu_ms = by_hand_in_a_new_process(server.endpoint_url, t.config.bucket, key,
                                                       t.uploaded[0].manifest_key)
            by_hand_new.append(original / seconds / 1e6)
            cpu.add("by hand in a new process", "the reader", cpu_ms)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    params = {"segment_bytes": original, "chunk": CHUNK, "read": STEP}
    spent = cpu.figures("FUSE sequential read of a remote .log", "remote-fuse-cpu", params)
    return [Figure("FUSE sequential read of a remote .log, cold", "MB/s", ours[1:], group="remote-fuse",
                   params={**params, "path": "fusefs"}, higher_is_better=True),
            Figure("FUSE sequential read of a remote .log, warm (its chunks decoded in the mount's memory)", "MB/s",
                   warm[1:], group="remote-fuse", params={**params, "path": "fusefs warm"}, higher_is_better=True),
            Figure("FUSE sequential read of a remote .log: plain ranged GETs", "MB/s", plain[1:],
                   group="remote-fuse", params={**params, "path": "plain GETs"}, higher_is_better=True),
            Figure("FUSE sequential read of a remote .log: by hand (GET, decrypt, decompress)", "MB/s", by_hand[1:],
                   group="remote-fuse", params={**params, "path": "by hand"}, higher_is_better=True),
            Figure("FUSE sequential read of a remote .log: by hand in a new process (as new as the mount)", "MB/s",
                   by_hand_new[1:], group="remote-fuse", params={**params, "path": "by hand, new process"},
                   higher_is_better=True)] + spent + [
            Figure(f"FUSE sequential read of a remote .log, {kind}: minor page faults in the mount (diagnostic)",
                   "faults", counts[1:], group="remote-fuse-faults", params={**params, "path": f"fusefs {kind}"})
            for kind, counts in faults.items()]


# flag -> the figures it keeps
ONLY = {"--sequential-only": "sequential", "--restore-only": "restore", "--fuse-only": "fuse"}


def run(quick: bool, only: str | None = None) -> list[Figure]:
    """Every figure, or only the "sequential", "restore" or "fuse" ones."""
    from lookupd.tools import s3local
    import lookupd.tools.tieredwriter as W

    times = 3 if quick else 7
    keydir = tempfile.mkdtemp(prefix="lookupd-bench-keys-")
    figures: list[Figure] = []
    try:
        with s3local.running_server() as server:
            key = W.WrappingKey.create(keydir)
            partition_dir, base = _segment()
            client = server.client()
            for variant, kw in ({} if only == "fuse" else VARIANTS).items():
                bucket = server.bucket()
                opts = W.Options(chunk_size=CHUNK, compression=kw.get("compression", False),
                                 encryption=key if kw.get("encryption") else None)
                up = W.upload_segment(client, bucket, partition_dir, base, topic="large", partition=0,
                                      topic_id=W.kafka_uuid(), opts=opts)
                variant_key = key if opts.encryption else None
                if only is None and variant == "plain":
                    figures += client_figures(server, bucket, up.log_key, up.segment.stat().st_size, times)
                if only in (None, "sequential"):
                    figures += sequential_figures(server, bucket, up, variant_key, times, variant)
                if only is None:
                    figures += cold_index_figures(server, bucket, up, variant_key, variant)
                if only in (None, "restore"):
                    figures += restore_figures(server, bucket, [up], variant_key, times, variant)
                    bucket = server.bucket()
                    ups = upload_copies(client, bucket, partition_dir, base, RESTORE_COPIES, opts)
                    figures += restore_figures(server, bucket, ups, variant_key, times, variant,
                                               f" of {RESTORE_COPIES} segments")
            if only in (None, "fuse"):
                figures += fuse_figures(server, times)
    finally:
        shutil.rmtree(keydir, ignore_errors=True)
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    out = []
    for variant in VARIANTS:
        out.append(ratio(f"remote sequential read vs plain ranged GETs, {variant}", figures,
                         f"remote sequential read, {variant}, through the Bucket",
                         f"remote sequential read, {variant}, plain ranged GETs",
                         "MB/s of a whole-segment read through the Bucket over plain ranged GETs of the "
                         "same object with the same client, two in flight (target: at least 0.8)"))
        out.append(ratio(f"remote sequential read vs by hand, {variant}", figures,
                         f"remote sequential read, {variant}, through the Bucket",
                         f"remote sequential read, {variant}, by hand (GET, decrypt, decompress)",
                         "MB/s of a whole-segment read through the Bucket over the fair anchor: the same ranged GETs, "
                         "decrypted and decompressed with the same libraries in the simplest loop, two in flight "
                         "(target for zstd + encrypted: at least 0.9)"))
        for what in ("", f" of {RESTORE_COPIES} segments"):
            out.append(ratio(f"restore{what} vs by hand, {variant}", figures,
                             f"restore{what}, {variant}, lookupd restore", f"restore{what}, {variant}, by hand",
                             "MB/s of `lookupd restore` over the fair anchor: the by-hand loop of GETs, decryption "
                             "and decompression at restore's concurrency, each chunk written at its place, then "
                             "fdatasync (target: at least 0.8)"))
            out.append(ratio(f"restore{what} vs plain GETs, {variant}", figures,
                             f"restore{what}, {variant}, lookupd restore", f"restore{what}, {variant}, plain GETs",
                             "MB/s of `lookupd restore` (files written and synced) over plain GETs of the same "
                             "objects with the same client, as many in flight (target: at least 0.8)"))
    out.append(ratio("FUSE sequential read of a remote .log vs plain ranged GETs", figures,
                     "FUSE sequential read of a remote .log, cold", "FUSE sequential read of a remote .log: plain ranged GETs",
                     "MB/s of a whole remote segment read through the mount over plain ranged GETs of the same object "
                     "(target: at least 0.8)"))
    out.append(ratio("FUSE cold read of a remote .log vs by hand", figures,
                     "FUSE sequential read of a remote .log, cold",
                     "FUSE sequential read of a remote .log: by hand (GET, decrypt, decompress)",
                     "MB/s of a whole remote segment read through the mount, cold, over the fair anchor: the by-hand "
                     "decoded-GET loop, two in flight (target: at least 0.8)"))
    out.append(ratio("FUSE cold read of a remote .log vs by hand in a new process", figures,
                     "FUSE sequential read of a remote .log, cold",
                     "FUSE sequential read of a remote .log: by hand in a new process (as new as the mount)",
                     "MB/s of the cold mount's read over the same by-hand loop run in a process started for it, as "
                     "the mount is: both pay for new memory and connections (for comparison: the target is "
                     "against the loop in the benchmark's own process)"))
    for size in (64, CHUNK // 1024):
        out.append(ratio(f"S3 client obstore vs boto3, {size} KiB ranged GETs", figures,
                         f"S3 client obstore, sequential ranged GETs of {size} KiB",
                         f"S3 client boto3, sequential ranged GETs of {size} KiB",
                         "MB/s of obstore (lookupd's client) over boto3 (above 1: faster)"))
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--by-hand-once"]:
        _by_hand_once(*sys.argv[2:6])
        sys.exit(0)
    only = next((ONLY[flag] for flag in ONLY if flag in sys.argv), None)
    if only is None:
        common.main(run, __doc__)
    else:
        sys.argv = [a for a in sys.argv if a not in ONLY]

        def some(quick: bool) -> list[Figure]:
            figures = run(quick, only)
            for r in ratios(figures):
                if r is not None:
                    print(f"{r['name']}: {r['value']:.2f}x")
            return figures
        common.main(some, __doc__)
