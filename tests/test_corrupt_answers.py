"""Corrupt bytes on disk: `read` refuses a damaged batch, and columnar calls fail only the rows that
meet corrupt data, each with its own message, while the other rows are answered."""

from __future__ import annotations

import os
import shutil

import pytest

import reference as R
from lookupd.format.names import segment_file_name
from lookupd.log.logmanager import LogManager


@pytest.fixture
def plain(tmp_path):
    shutil.copytree(R.log_dir("plain-0"), tmp_path / "plain-0")
    return tmp_path



def test_read_checks_every_batch_it_returns(plain):
    """A byte flipped inside a batch's records is CORRUPT_DATA naming the file and the batch's position."""
    from lookupd.errors import CorruptDataError

    lm = LogManager([str(plain)])
    llog = lm.get("plain", 0)
    loc = llog.resolve_offset(250)
    good = llog.read(250, 1 << 16)
    path = os.path.join(str(plain / "plain-0"), segment_file_name(loc.segment, ".log"))
    with open(path, "r+b") as f:
        f.seek(loc.position + loc.size - 3)  # inside the records, after the header
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptDataError) as err:
        llog.read(250, 1 << 16)
    assert path in str(err.value) and f"at byte {loc.position}" in str(err.value) and "crc" in str(err.value)
    assert llog.read(good.next_offset, 1 << 16).records  # the batches after it still read
    lm.close()


def test_columnar_calls_fail_only_the_rows_that_meet_corrupt_data(plain):
    from lookupd.daemon.service import Service, Session

    part = str(plain / "plain-0")
    lm = LogManager([str(plain)])
    llog = lm.get("plain", 0)
    loc = llog.resolve_offset(250)
    seg_231 = [b for b in llog.base_offsets if b == loc.segment][0]
    index_path = os.path.join(part, segment_file_name(seg_231, ".index"))
    with open(index_path, "r+b") as f:  # two entries swapped: out of order, a corrupt rolled index
        raw = f.read()
        f.seek(0)
        f.write(raw[8:16] + raw[0:8] + raw[16:])
    log_path = os.path.join(part, segment_file_name(seg_231, ".log"))
    with open(log_path, "r+b") as f:  # the batch of 250: a length no batch can have
        f.seek(loc.position + 8)
        f.write((3).to_bytes(4, "big"))
    lm.close()
    lm = LogManager([str(plain)])
    svc, trusted = Service(lm), Session(trusted=True)
    targets = [10, 250, 4000]
    got = svc.call("resolve_offsets", ["plain", 0, targets], trusted)
    assert got["error"][0] is None and got["error"][2] is None
    assert got["error"][1].startswith("CORRUPT_DATA: ") and log_path in got["error"][1]
    assert got["position"][1] == -1 and got["position"][0] >= 0 and got["position"][2] >= 0
    got = svc.call("lookup_offsets", ["plain", 0, targets, "floor"], trusted)
    assert got["error"][1].startswith("CORRUPT_DATA: ") and index_path in got["error"][1]
    assert got["error"][0] is None and got["position"][0] >= 0
    good = svc.call("resolve_offsets", ["plain", 0, [10, 4000]], trusted)
    assert "error" not in good  # the column is there only when some row failed
    lm.close()
