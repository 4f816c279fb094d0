"""`recover` and `dump --verify-index-only` agree on every kind of damage (issue 40): verify rejects the
damaged partition; recover rebuilds exactly the indexes verify rejects (byte-identical to Kafka's where
only an index was damaged), reports each `.log` problem with its file and byte and leaves every `.log` as it
is; afterwards verify reports nothing but those `.log` problems, and a second recover has nothing to do."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout

import pytest

import reference as R
from lookupd.tools.cli import main

ROLLED = 1  # the damaged segment: the second of the partition (rolled; a segment before it and after it)


def _lookupd(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def _verify(part) -> tuple[int, list[str]]:
    rc, out, _ = _lookupd("dump", part, "--verify-index-only", "--json")
    return rc, sorted(o["message"] for o in map(json.loads, out.splitlines()) if o["type"] == "error")


def _recover(part) -> tuple[int, list[str], str]:
    """rc, the `.log` problems recover reported, its last line."""
    rc, out, _ = _lookupd("recover", part)
    lines = out.splitlines()
    logs = sorted(line.split(": ", 1)[1] for line in lines if ".log" in line and "rebuilt" not in line
                  and line != lines[-1])
    return rc, logs, lines[-1]


def _copy(tmp_path, name: str):
    part = tmp_path / name
    shutil.copytree(R.log_dir(name), part)
    for n in os.listdir(part):
        os.chmod(part / n, 0o644)
    return part


def _stem(part, k: int = ROLLED) -> str:
    return str(part / sorted(n for n in os.listdir(part) if n.endswith(".log"))[k][:20])


def _batch(part, i: int, k: int = ROLLED) -> dict:
    """Batch i of segment k, as the reference corpus describes it (position, offsets, size)."""
    base = int(os.path.basename(_stem(part, k)))
    return [b for b in R.batches(part.name) if b["segment"] == base][i]


def _patch(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def _swap_first_entries(path: str) -> None:
    """Swap the first two entries (8 bytes each): out of order."""
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[8:16] + raw[0:8] + raw[16:])


def _symlinked(path: str) -> None:
    os.rename(path, path + ".real")
    os.symlink(os.path.basename(path) + ".real", path)


def _first_nonempty_txnindex(part) -> str:
    stems = sorted(n[:20] for n in os.listdir(part) if n.endswith(".txnindex"))[:-1]
    return next(str(part / f"{s}.txnindex") for s in stems if os.path.getsize(part / f"{s}.txnindex") > 0)


def _txn_entry_changed(part) -> None:
    """Entry 0 of a .txnindex with its last stable offset one higher: no longer what its ABORT marker makes."""
    path = _first_nonempty_txnindex(part)
    lso = int.from_bytes(open(path, "rb").read()[26:34], "big")  # version 2, producer id, first, last: 26 bytes
    _patch(path, 26, (lso + 1).to_bytes(8, "big"))


def _last_time_entry_moved(part) -> None:
    """The last time-index entry keeps the max timestamp but names the entry before's offset."""
    path = _stem(part) + ".timeindex"
    raw = open(path, "rb").read()
    _patch(path, len(raw) - 4, raw[-16:-12])


INDEX, CRC = "index", "crc"  # only indexes damaged; a batch whose CRC fails (framed: the index keeps it)
# name -> (partition, damage(part), INDEX, CRC, or where in segment ROLLED the framed prefix ends: fn(part))
DAMAGE = {
    "index removed": ("plain-0", lambda p: os.remove(_stem(p) + ".index"), INDEX),
    "timeindex removed": ("plain-0", lambda p: os.remove(_stem(p) + ".timeindex"), INDEX),
    "txnindex removed": ("txn-0", lambda p: os.remove(_first_nonempty_txnindex(p)), INDEX),
    "index not whole entries": ("plain-0", lambda p: open(_stem(p) + ".index", "ab").write(b"\0\0\0"), INDEX),
    "index out of order": ("plain-0", lambda p: _swap_first_entries(_stem(p) + ".index"), INDEX),
    "index entry inside a batch": ("plain-0", lambda p: _patch(_stem(p) + ".index", 4, (
        _batch(p, 5)["position"] + 1).to_bytes(4, "big")), INDEX),
    "index entry past the log": ("plain-0", lambda p: open(_stem(p) + ".index", "ab").write(
        (10_000).to_bytes(4, "big") + (10 ** 7).to_bytes(4, "big")), INDEX),
    "timeindex emptied": ("plain-0", lambda p: os.truncate(_stem(p) + ".timeindex", 0), INDEX),
    "timeindex entry of no batch": ("plain-0", lambda p: _patch(_stem(p) + ".timeindex", 8,
                                                                (3).to_bytes(4, "big")), INDEX),
    "index a symbolic link": ("plain-0", lambda p: _symlinked(_stem(p) + ".index"), INDEX),
    "txnindex entry not the marker's": ("txn-0", _txn_entry_changed, INDEX),
    "last timeindex entry at another offset": ("plain-0", _last_time_entry_moved, INDEX),
    "corrupt first batch": ("plain-0", lambda p: _flip(_stem(p) + ".log", _batch(p, 0)["position"] + 100), CRC),
    "corrupt batch mid-segment": ("plain-0", lambda p: _flip(_stem(p) + ".log", _batch(p, -3)["position"] + 100),
                                  CRC),
    "log cut off in a batch": ("plain-0", lambda p: os.truncate(_stem(p) + ".log", _batch(p, 6)["position"] + 50),
                               lambda p: _batch(p, 6)["position"]),
    "impossible batch size": ("plain-0", lambda p: _patch(_stem(p) + ".log", _batch(p, 5)["position"] + 8,
                                                          (3).to_bytes(4, "big")), lambda p: _batch(p, 5)["position"]),
    "unknown magic": ("plain-0", lambda p: _patch(_stem(p) + ".log", _batch(p, 5)["position"] + 16, b"\x07"),
                      lambda p: _batch(p, 5)["position"]),
    "offset outside the segment": ("plain-0", lambda p: _flip(_stem(p) + ".log", _batch(p, 5)["position"]),
                                   lambda p: _batch(p, 5)["position"]),
    "offsets not increasing": ("plain-0", lambda p: _patch(_stem(p) + ".log", _batch(p, 5)["position"],
                                                           _batch(p, 4)["base_offset"].to_bytes(8, "big")),
                               lambda p: _batch(p, 5)["position"]),
    "zero tail on a rolled log": ("plain-0", lambda p: open(_stem(p) + ".log", "ab").write(bytes(4096)),
                                  lambda p: os.path.getsize(_stem(p) + ".log") - 4096),
    "rolled log emptied": ("plain-0", lambda p: os.truncate(_stem(p) + ".log", 0), lambda p: None),
}


def _digests(part) -> dict[str, str]:
    return {n: hashlib.sha256(open(part / n, "rb").read()).hexdigest() for n in sorted(os.listdir(part))
            if n.endswith(".log")}


def _index_files(part) -> dict[str, bytes]:
    return {n: open(part / n, "rb").read() for n in sorted(os.listdir(part))
            if n.endswith((".index", ".timeindex", ".txnindex"))}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_recover_and_verify_agree(tmp_path, kind):
    R.require()
    name, damage, what = DAMAGE[kind]
    part = _copy(tmp_path, name)
    kafka = _index_files(part)
    damage(part)
    logs = _digests(part)
    rc, before = _verify(part)
    assert rc == 1 and before, f"verify found nothing wrong after: {kind}"
    rc_recover, log_problems, last = _recover(part)
    assert _digests(part) == logs  # no .log written
    rc_after, after = _verify(part)
    assert after == log_problems, (before, after, log_problems)  # what is left is what recover reported
    assert rc_after == rc_recover == (1 if log_problems else 0)
    rc_again, again, last_again = _recover(part)
    assert last_again.startswith("nothing to do"), last_again
    assert (rc_again, again) == (rc_recover, log_problems)
    assert not [n for n in os.listdir(part) if n.endswith(".tmp")]
    stem = os.path.basename(_stem(part))
    if what == INDEX:  # rebuilt as Kafka wrote them, a symbolic link replaced by the file (never written through)
        assert _index_files(part) == kafka and not log_problems
        assert all(not os.path.islink(part / n) for n in os.listdir(part) if not n.endswith(".real"))
    elif what == CRC:  # the corrupt batch named with its file and byte; the sound index left whole
        bad = _batch(part, 0 if "first" in kind else -3)
        assert log_problems == [f"{_stem(part)}.log at byte {bad['position']}: record batch is corrupt"
                                + log_problems[0].split("record batch is corrupt", 1)[1]]
        assert _index_files(part) == kafka
    else:  # the framed prefix ends at byte what(part), named; the offset index is Kafka's for that prefix
        end = what(part)
        if end is None:  # no bytes left: nothing wrong with the log, nothing to index
            assert not log_problems and _index_files(part)[f"{stem}.index"] == b""
            return
        assert len(log_problems) == 1 and f"{stem}.log at byte {end}: " in log_problems[0], log_problems
        original = kafka[f"{stem}.index"]
        prefix = b"".join(original[i:i + 8] for i in range(0, len(original), 8)
                          if int.from_bytes(original[i + 4:i + 8], "big") < end)
        assert _index_files(part)[f"{stem}.index"] == prefix
