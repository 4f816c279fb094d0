"""The FUSE view over data written while it is mounted, with the daemon going away and coming
back, read through the daemon only (another host), and the commands and unit around it."""

from __future__ import annotations

import base64
import errno
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

import reference as R
from lookupd.format.batch import Compression
from lookupd.format.builder import build_batch, build_control_batch
from lookupd.tools.writer import LogWriter
from test_fusefs import expected_records, lines, read, stem
from test_fusefs_helpers import Daemon, Mount, free_port, mounted, require_fuse, unmount, workdir

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def wait_for(what: str, check, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def fails_with(code: int, call, *args) -> bool:
    try:
        call(*args)
    except OSError as err:
        assert err.errno == code, err
        return True
    return False


def gone(path: str) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    return False


def shown(data: bytes | None):
    """A key, value or header value as the view shows it: UTF-8 text, else {"base64": ...}."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


class Producer:
    """Appends batches with a LogWriter and remembers what each record should look like."""

    def __init__(self, directory: str, **settings):
        self.writer = LogWriter(directory, **settings)
        self.records: list[dict] = []
        self.rng = random.Random(directory)

    def batches(self, n: int, per_batch: int = 5) -> None:
        for _ in range(n):
            base = self.writer.next_offset
            recs = []
            for i in range(per_batch):
                offset, ts = base + i, T0 + 10 * (base + i)
                key = f"key-{offset}".encode() if offset % 3 else bytes([0xFF, offset % 256])
                value = None if offset % 11 == 0 else json.dumps({"n": offset, "pad": "x" * self.rng.randrange(50)}).encode()
                headers = (("h", b"\x00\x01"), ("trace", str(offset).encode())) if offset % 2 else ()
                recs.append((ts, key, value, headers))
                self.records.append({"offset": offset, "timestamp": ts, "key": shown(key), "value": shown(value),
                                     "headers": [{"key": k, "value": shown(v)} for k, v in headers]})
            codec = (Compression.NONE, Compression.GZIP, Compression.ZSTD)[base % 3]
            self.writer.append(build_batch(recs, base_offset=base, compression=codec))

    def aborted_transaction(self) -> None:
        base = self.writer.next_offset
        self.writer.append(build_batch([(T0 + 10 * base, b"k", b"v", ())], base_offset=base, producer_id=7,
                                       producer_epoch=0, base_sequence=0, transactional=True))
        self.writer.append(build_control_batch(base + 1, T0 + 10 * base + 1, producer_id=7, producer_epoch=0,
                                               commit=False, coordinator_epoch=3))
        abort_key, abort_value = struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3)  # EndTransactionMarker
        for offset, ts, key, value, marker in ((base, T0 + 10 * base, b"k", b"v", None),
                                               (base + 1, T0 + 10 * base + 1, abort_key, abort_value,
                                                {"type": "ABORT", "coordinator_epoch": 3})):
            rec = {"offset": offset, "timestamp": ts, "key": shown(key), "value": shown(value), "headers": []}
            if marker:
                rec["control"] = marker
            self.records.append(rec)


def record_fields(rec: dict) -> dict:
    return {k: rec[k] for k in ("offset", "timestamp", "key", "value", "headers", "control") if k in rec}


def segment_bases(path: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".log"))


# ------------------------------------------------------------------ data written by lookupd's writer


def test_written_data_live(tmp_path):
    logs = tmp_path / "logs"
    part = logs / "events-0"
    prod = Producer(str(part), segment_bytes=4096, index_interval_bytes=256)
    prod.batches(40)
    prod.aborted_transaction()
    prod.batches(5)
    with mounted([logs], "--ttl", "0.2") as (mnt, _):
        view = mnt.path("events", "0")
        assert segment_bases(view) == segment_bases(str(part))
        got = []
        for base in segment_bases(view):
            got += lines(os.path.join(view, stem(base) + ".records.jsonl"))
        assert [record_fields(r) for r in got] == prod.records
        rng = random.Random(1)
        for name in os.listdir(part):  # every file on disk, as it is
            real = read(str(part / name))
            assert os.stat(os.path.join(view, name)).st_size == len(real), name
            assert read(os.path.join(view, name)) == real, name
            with open(os.path.join(view, name), "rb") as f:
                for _ in range(5):
                    pos = rng.randrange(len(real) + 1)
                    assert os.pread(f.fileno(), 3000, pos) == real[pos:pos + 3000], (name, pos)
        assert any(r["batch"]["transactional"] for r in got)
        offsets = [r["offset"] for r in prod.records]
        for k in (0, 1, 17, 133, offsets[-1]):  # timestamps rise with offsets here: T0 + 10 * offset
            for ts, want in ((T0 + 10 * k, k), (T0 + 10 * k + 2, k + 1)):
                got = lines(os.path.join(view, "at-time", f"{ts}.jsonl"))
                assert [r["offset"] for r in got] == [o for o in offsets if o >= want], ts
        assert lines(os.path.join(view, "at-time", "2026-01-01T00:00:00.170Z--2026-01-01T00:00:00.250Z.jsonl")) \
            == lines(os.path.join(view, "at-offset", "17-25.jsonl"))
        txn = [n for n in os.listdir(view) if n.endswith(".txnindex.txt")]
        assert len(txn) == 1 and "producerId: 7" in read(os.path.join(view, txn[0])).decode()

        # A new segment appears while mounted.
        before = segment_bases(view)
        prod.batches(30)
        wait_for("the new segments are listed", lambda: segment_bases(view) == segment_bases(str(part)))
        assert segment_bases(view) != before
        newest = segment_bases(view)[-1]
        got = lines(os.path.join(view, stem(newest) + ".records.jsonl"))
        assert [record_fields(r) for r in got] == [r for r in prod.records if r["offset"] >= newest]
        last = prod.records[-1]["offset"]
        assert json.loads(read(os.path.join(view, "at-offset", f"{last}.jsonl")))["offset"] == last

        # Retention deletes the oldest segment, while one of its files is open.
        oldest = before[0]
        held = open(os.path.join(view, stem(oldest) + ".log"), "rb")
        first_bytes = read(str(part / (stem(oldest) + ".log")))
        for name in os.listdir(part):
            if name.startswith(stem(oldest)):
                os.remove(part / name)
        wait_for("the deleted segment goes away", lambda: stem(oldest) + ".log" not in os.listdir(view))
        wait_for("the log start moves past it", lambda: gone(os.path.join(view, f"at-offset/{oldest}.jsonl")))
        try:
            assert held.read() == first_bytes  # the old bytes (EIO would be allowed too)
        except OSError as err:
            assert err.errno == errno.EIO
        held.close()

        # A partition that appears and goes away.
        fresh = Producer(str(logs / "fresh-3"))
        fresh.batches(2)
        fresh.writer.close()
        wait_for("the new partition is listed", lambda: os.listdir(mnt.path("fresh")) == ["3", "by-key"])
        shutil.rmtree(logs / "fresh-3")
        wait_for("the removed topic goes away", lambda: "fresh" not in os.listdir(mnt.root))
        assert "Traceback" not in mnt.log
    prod.writer.close()


def read_until_error(path: str) -> tuple[bytes, int | None]:
    """What read(2) gives before it fails, and the errno it fails with (None: it did not)."""
    fd = os.open(path, os.O_RDONLY)
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    except OSError as err:
        return data, err.errno
    finally:
        os.close(fd)
    return data, None


def test_corrupt_data_reads_as_far_as_it_is_sound_then_eio(tmp_path):
    logs = tmp_path / "logs"
    part = logs / "events-0"
    prod = Producer(str(part), segment_bytes=8192, index_interval_bytes=256)
    prod.batches(40)
    prod.writer.close()
    base = stem(0)
    log = bytearray(read(str(part / f"{base}.log")))
    second = int.from_bytes(log[8:12], "big") + 12  # where the second batch starts
    log[second + 70] ^= 0xFF  # inside its records: the CRC no longer matches
    (part / f"{base}.log").write_bytes(bytes(log))
    index = read(str(part / f"{base}.index"))
    (part / f"{base}.index").write_bytes(index[:8] + index[16:24] + index[8:16] + index[24:])  # out of order
    with mounted([logs], "--ttl", "0.2") as (mnt, _):
        view = mnt.path("events", "0")
        data, code = read_until_error(os.path.join(view, f"{base}.records.jsonl"))
        first_batch = [r for r in prod.records if r["offset"] < 5]
        assert code == errno.EIO and [record_fields(json.loads(x)) for x in data.splitlines()] == first_batch
        data, code = read_until_error(os.path.join(view, f"{base}.index.txt"))
        in_order = [index[0:8], index[16:24]]  # then an entry below the one before it
        assert code == errno.EIO and data.decode().splitlines() == \
            [f"offset: {int.from_bytes(e[:4], 'big')} position: {int.from_bytes(e[4:], 'big')}" for e in in_order]
        assert read(os.path.join(view, f"{base}.log")) == bytes(log)  # the raw bytes are what they are
        assert f"{part}/{base}.log at byte {second}: record batch is corrupt" in mnt.log
        assert f"{part}/{base}.index" in mnt.log and "Traceback" not in mnt.log


def test_daemon_restart_is_ridden_out(tmp_path):
    logs = tmp_path / "logs"
    prod = Producer(str(logs / "events-0"), segment_bytes=4096)
    prod.batches(20)
    with mounted([logs], "--ttl", "0.2") as (mnt, daemon):
        view = mnt.path("events", "0")
        assert json.loads(read(os.path.join(view, "at-offset", "7.jsonl")).splitlines()[0])["offset"] == 7
        daemon.stop()
        time.sleep(0.5)
        with pytest.raises(OSError) as e:
            os.stat(os.path.join(view, "at-offset", "8.jsonl"))
        assert e.value.errno == errno.EIO
        wait_for("listings fail too, once the cached one is dropped", lambda: fails_with(errno.EIO, os.listdir, view))
        assert f"cannot reach lookupd at {daemon.sock}" in mnt.log
        daemon.start()
        wait_for("lookups work again", lambda: os.stat(os.path.join(view, "at-offset", "9.jsonl")))
        assert json.loads(read(os.path.join(view, "at-offset", "9.jsonl")).splitlines()[0])["offset"] == 9
        assert "reconnected to lookupd" in mnt.log
        assert "Traceback" not in mnt.log
    prod.writer.close()


# ------------------------------------------------------------------ another host: everything through the daemon


def test_through_the_daemon_only():
    R.require()
    with mounted([R.LOGS], via_tcp=True) as (mnt, _):
        view = mnt.path("plain", "0")
        names = os.listdir(view)
        assert names and all(n.endswith((".log", ".records.jsonl")) for n in names if n[0].isdigit())
        assert json.loads(read(os.path.join(view, "partition.json")))["read_from"] == "lookupd"
        got = []
        for seg in R.answers("plain-0")["segments"]:
            base = stem(seg["base_offset"])
            assert os.stat(os.path.join(view, base + ".log")).st_size == seg["log_size"]
            assert read(os.path.join(view, base + ".log")) == read(os.path.join(R.log_dir("plain-0"), base + ".log"))
            got += lines(os.path.join(view, base + ".records.jsonl"))
        assert got == expected_records("plain-0")
        assert lines(os.path.join(view, "at-offset", "1000-1010.jsonl")) == expected_records("plain-0")[1000:1010]

        # Random access into a 200,000-batch segment: positions found by bisecting offsets.
        name = stem(0) + ".log"
        real = read(os.path.join(R.log_dir("large-0"), name))
        rng = random.Random(5)
        fd = os.open(mnt.path("large", "0", name), os.O_RDONLY)
        try:
            for _ in range(15):
                pos, size = rng.randrange(len(real)), rng.choice((1, 100, 5000, 200000))
                assert os.pread(fd, size, pos) == real[pos:pos + size], (pos, size)
        finally:
            os.close(fd)
        assert subprocess.run(["tail", "-c", "777", mnt.path("large", "0", name)], capture_output=True,
                              check=True).stdout == real[-777:]


def test_tcp_with_a_token_reading_local_log_dirs():
    """--log-dir makes a partition local even when the daemon is reached over TCP."""
    R.require()
    require_fuse()
    with workdir() as d:
        daemon = Daemon([R.LOGS], d, tcp_port=free_port(), token="s3cret").start()
        mount = Mount(daemon.tcp, d, "--token-file", daemon.token_file, "--log-dir", str(R.LOGS), "--allow-other")
        try:
            refused = fusefs("mount", mount.root, "--socket", daemon.tcp)
            assert refused.returncode == 1 and "UNAUTHORIZED" in refused.stderr and "--token-file" in refused.stderr
            mount.start()
            view = mount.path("txn", "0")
            assert json.loads(read(os.path.join(view, "partition.json")))["read_from"] == "local files"
            assert any(n.endswith(".txnindex.txt") for n in os.listdir(view))
            with open("/proc/self/mounts") as f:
                assert "allow_other" in next(line for line in f if line.split()[1] == mount.root)
        finally:
            mount.stop()
            daemon.stop()


# ------------------------------------------------------------------ the command and the unit


def fusefs(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusefs", *args], capture_output=True, text=True, timeout=timeout)


def test_bad_arguments_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    missing_sock = str(tmp_path / "nobody.sock")
    cases = {
        ("mount", str(tmp_path / "nope"), "--socket", missing_sock): "does not exist",
        ("mount", str(full / "x"), "--socket", missing_sock): "not a directory",
        ("mount", str(full), "--socket", missing_sock): "not empty",
        ("mount", str(empty), "--socket", missing_sock): f"cannot reach lookupd at {missing_sock}",
        ("mount", str(empty), "--socket", "127.0.0.1:1"): "cannot reach lookupd at 127.0.0.1:1",
        ("mount", str(empty), "--socket", missing_sock, "--log-dir", str(tmp_path / "nope")): "--log-dir",
        ("umount", str(empty)): "not a mount point",
    }
    for args, message in cases.items():
        done = fusefs(*args)
        assert done.returncode == 1, args
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
        assert done.stderr.startswith(f"fusefs {args[0]}: ")
    assert "lookupd serve" in fusefs("mount", str(empty), "--socket", "127.0.0.1:1").stderr
    assert not os.listdir(empty)


def test_background_mount_and_umount():
    R.require()
    require_fuse()
    with workdir() as d:
        daemon = Daemon([R.LOGS], d).start()
        root = os.path.join(d, "mnt")
        os.makedirs(root)
        try:
            done = fusefs("mount", root, "--socket", daemon.sock, "--log-file", os.path.join(d, "bg.log"))
            assert done.returncode == 0, done.stderr
            assert os.path.ismount(root)
            assert "plain" in os.listdir(root)
            busy = open(os.path.join(root, "plain", "0", "partition.json"), "rb")
            done = fusefs("umount", root)
            assert done.returncode == 1 and "busy" in done.stderr and "--lazy" in done.stderr
            busy.close()
            daemon.stop()  # unmounting needs no daemon
            assert fusefs("umount", root).returncode == 0
            assert not os.path.ismount(root)
            assert "mounted; lookups go to lookupd" in open(os.path.join(d, "bg.log")).read()
        finally:
            unmount(root)
            daemon.stop()


def test_sigterm_unmounts():
    """What `systemctl stop` does: SIGTERM, and the mount is gone when the process exits."""
    R.require()
    require_fuse()
    with workdir() as d:
        daemon = Daemon([R.LOGS], d).start()
        mount = Mount(daemon.sock, d).start()
        try:
            mount.proc.send_signal(signal.SIGTERM)
            assert mount.proc.wait(15) == 0
            assert not os.path.ismount(mount.root)
        finally:
            mount.stop()
            daemon.stop()


def test_systemd_unit_verifies(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    here = os.path.join(os.path.dirname(__file__), "..", "systemd")
    bindir = os.path.dirname(sys.executable)
    for unit in ("fusefs.service", "lookupd.service", "lookupd.socket"):
        if not os.path.exists(os.path.join(here, unit)):
            pytest.skip(f"systemd/{unit} is missing")
        text = open(os.path.join(here, unit)).read().replace("/usr/local/bin/", bindir + "/")
        (tmp_path / unit).write_text(text)
    unit = (tmp_path / "fusefs.service").read_text()
    assert "Requires=lookupd.service" in unit and "After=lookupd.service" in unit
    assert f"ExecStart={bindir}/fusefs mount" in unit and "--foreground" in unit
    done = subprocess.run([tool, "verify", "--man=no", str(tmp_path / "fusefs.service")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
