"""Never a SIGBUS: a daemon process keeps serving while a rolled segment's offset index is cut to nothing
and written back again, over and over, under a steady stream of lookups of it.

The native daemon reads its maps under the C SIGBUS guard; the pure-Python one (LOOKUPD_PURE_PYTHON=1,
a machine without a compiler) reads private copies taken with pread, so no read of it can fault. A daemon
killed by a signal fails here: the index is large, so each remap reads it for long enough that
truncations land inside that read.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import pytest

from daemon_helpers import blocking_call, short_dir, start_daemon  # noqa: F401 - fixture
from lookupd.format.builder import build_batch

TOPIC = "shrink"
ENTRIES = 100_000  # index entries of segment 0: 800 KB, long enough a read for truncations to hit it
CYCLES = 400  # truncations a run makes (each followed by the file written back whole)
BATCH = build_batch([(1_700_000_000_000, None, b"v", [])], base_offset=0)  # CRC covers neither offset nor length


def write_partition(part_dir: str) -> bytes:
    """Segment 0: ENTRIES one-record batches, an index entry for each; segment ENTRIES: one batch, the active
    one. Returns segment 0's index bytes."""
    os.makedirs(part_dir)
    size = len(BATCH)
    log = np.frombuffer(BATCH * ENTRIES, np.uint8).reshape(ENTRIES, size).copy()
    log[:, :8] = np.arange(ENTRIES, dtype=">i8").view(np.uint8).reshape(ENTRIES, 8)  # each batch's base offset
    index = np.empty(ENTRIES, [("key", ">i4"), ("value", ">i4")])
    index["key"] = np.arange(ENTRIES)
    index["value"] = np.arange(ENTRIES) * size
    stem = os.path.join(part_dir, "%020d")
    with open(stem % 0 + ".log", "wb") as f:
        f.write(log.tobytes())
    with open(stem % 0 + ".index", "wb") as f:
        f.write(index.tobytes())
    open(stem % 0 + ".timeindex", "wb").close()
    with open(stem % ENTRIES + ".log", "wb") as f:
        f.write(ENTRIES.to_bytes(8, "big") + BATCH[8:])
    for suffix in (".index", ".timeindex"):
        open(stem % ENTRIES + suffix, "wb").close()
    return index.tobytes()


def cut_and_restore(path: str, content: bytes, stop: threading.Event) -> None:
    """What no broker does to a rolled index, but a truncating tool or a full disk might: cut it to nothing
    and write it back, CYCLES times, at random short intervals."""
    rng = random.Random(7)
    fd = os.open(path, os.O_WRONLY)
    try:
        for _ in range(CYCLES):
            if stop.is_set():
                return
            os.ftruncate(fd, 0)
            time.sleep(rng.uniform(0, 0.002))
            os.pwrite(fd, content, 0)
            time.sleep(rng.uniform(0, 0.004))
    finally:
        os.close(fd)


@pytest.mark.parametrize("pure", [pytest.param(False, marks=pytest.mark.native), True], ids=["native", "pure"])
def test_index_cut_under_lookups_never_kills_the_daemon(short_dir, pure, monkeypatch):
    monkeypatch.setenv("LOOKUPD_PURE_PYTHON", "1" if pure else "0")
    logs = os.path.join(short_dir, "logs")
    index = write_partition(os.path.join(logs, f"{TOPIC}-0"))
    sock = os.path.join(short_dir, "s.sock")
    proc = start_daemon(["--log-dir", logs, "--socket", sock], short_dir, sock)
    stop = threading.Event()
    cutter = threading.Thread(target=cut_and_restore, args=(os.path.join(logs, f"{TOPIC}-0", "%020d.index" % 0),
                                                            index, stop))
    exact = errors = 0
    cutter.start()
    try:
        rng = random.Random(11)
        while cutter.is_alive() and proc.poll() is None:
            target = rng.randrange(ENTRIES)
            try:
                err, res = blocking_call(sock, "lookup_offset", TOPIC, 0, target, "floor")
            except (OSError, AssertionError):  # the daemon died under us: its exit status says how
                break
            if err is not None:
                assert err["code"] in {"CORRUPT_DATA", "UNAVAILABLE"} and err["message"], err
                errors += 1
            else:  # the floor entry among those the file held at that moment (all of them, when whole)
                assert res["segment"] == 0 and 0 <= res["offset"] <= target, (target, res)
                assert res["position"] == res["offset"] * len(BATCH), (target, res)
                exact += res["offset"] == target
        stop.set()
        cutter.join()
        assert proc.poll() is None, f"the daemon died: exit status {proc.returncode} " \
                                    f"({'SIGBUS' if proc.returncode == -signal.SIGBUS else 'not SIGBUS'})"
        err, res = blocking_call(sock, "lookup_offset", TOPIC, 0, ENTRIES - 1, "floor")  # whole again: exact
        assert err is None and res == {"segment": 0, "offset": ENTRIES - 1, "position": (ENTRIES - 1) * len(BATCH)}
        assert exact > 0, (exact, errors)
    finally:
        stop.set()
        cutter.join()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    assert proc.returncode == 0, "".join(proc.stderr_lines[-20:])
