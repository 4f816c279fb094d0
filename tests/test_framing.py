"""The one batch-framing loop: `whole_frames` over bytes and `read_frames` over a `.log`
give the same batches whatever the chunk size, read a batch larger than a chunk on its
own, and name the file and byte of a corrupt frame."""

from __future__ import annotations

import random

import pytest

from lookupd.errors import CorruptRecordError
from lookupd.format.batch import whole_frames
from lookupd.format.builder import build_batch
from lookupd.log.fileio import FileHandle
from lookupd.log.filerecords import read_frames


def batches(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    out, offset = [], 0
    for _ in range(n):
        count = rng.randrange(1, 6)
        recs = [(1000 + offset + i, b"k", rng.randbytes(rng.choice((10, 300, 5000))), ()) for i in range(count)]
        out.append(build_batch(recs, base_offset=offset))
        offset += count
    return out


@pytest.fixture
def log(tmp_path):
    parts = batches(40)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(parts))
    return str(path), parts


@pytest.mark.parametrize("chunk", [20, 64, 1000, 16 * 1024, 1 << 20])
def test_every_chunk_size_gives_the_same_batches(log, chunk):
    path, parts = log
    data = b"".join(parts)
    want = [(off, size) for off, size in whole_frames(data, 0, path)]
    assert [size for _, size in want] == [len(p) for p in parts]
    got = [(pos, size, bytes(buf[off:off + size])) for buf, off, pos, size in
           read_frames(FileHandle(path), 0, len(data), path=path, chunk=chunk, whole=True)]
    assert [(pos, size) for pos, size, _ in got] == want
    assert [b for _, _, b in got] == parts
    headers = [(pos, size) for _, _, pos, size in read_frames(FileHandle(path), 0, len(data), path=path, chunk=chunk)]
    assert headers == want


def test_a_batch_cut_off_by_the_end_stops_or_is_reported(log):
    path, parts = log
    data = b"".join(parts)
    end = len(data) - 7
    got = [pos for _, _, pos, _ in read_frames(FileHandle(path), 0, end, path=path, whole=True)]
    assert len(got) == len(parts) - 1
    with pytest.raises(CorruptRecordError) as err:
        list(read_frames(FileHandle(path), 0, end, path=path, whole=True, strict=True))
    last = len(data) - len(parts[-1])
    assert str(err.value) == (f"{path} at byte {last}: batch is cut off: it declares {len(parts[-1])} bytes "
                              f"but only {len(parts[-1]) - 7} remain in the log")
    off, size = list(whole_frames(data[:end]))[-1]
    assert off + size == last


def test_a_corrupt_size_names_file_and_byte(log, tmp_path):
    path, parts = log
    data = bytearray(b"".join(parts))
    at = len(parts[0]) + len(parts[1])
    data[at + 8:at + 12] = (3).to_bytes(4, "big")
    bad = tmp_path / "bad.log"
    bad.write_bytes(bytes(data))
    message = f"{bad} at byte {at}: batch size 3 is smaller than the minimum record overhead 14"
    for chunk in (64, 1 << 20):
        frames = read_frames(FileHandle(str(bad)), 0, len(data), path=str(bad), chunk=chunk, whole=True)
        with pytest.raises(CorruptRecordError) as err:
            list(frames)
        assert str(err.value) == message
    with pytest.raises(CorruptRecordError) as err:
        list(whole_frames(bytes(data), 0, str(bad)))
    assert str(err.value) == message
