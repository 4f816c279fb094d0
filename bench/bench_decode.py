"""Record decoding, same batches, same run: lookupd's columnar decoder (native C, into Arrow columns, CRCs
checked) and its reference decoder (lookupd.format.records, Python), against aiokafka's Cython
DefaultRecordBatch (the well-kept library a user would pick) and kafka-python's.

kafka-python finds no snappy/lz4/zstd library here, so it is given the same cramjam-backed
decompressors lookupd uses. The libraries read every record's key, value and headers; the
columnar decoder produces pyarrow arrays of all of them. Runs are interleaved and the median
of each is reported. One run decodes the partition's batches as many times over as takes
MIN_RUN_S, the same rule for every decoder: one pass over plain-0 (5,000 records) takes about
a millisecond, which mostly times the caches the decoder before it left behind.

Run: python bench/bench_decode.py [--quick] [--json OUT]
"""

from __future__ import annotations

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

import reference as R  # noqa: E402
from lookupd.format.batch import COMPRESSION_MASK, Compression, parse_header  # noqa: E402
from lookupd.format.compression import decompress  # noqa: E402
from lookupd.format.records import _v2_records, decode_batch  # noqa: E402

MIN_RUN_S = 0.05  # the least one timed run lasts: whole passes over the batches until then


def kafka_python():
    """kafka-python's batch class, with cramjam-backed codecs where it has none of its own."""
    import kafka.record.default_records as kd

    kd.DefaultRecordBatch._assert_has_codec = lambda self, codec: None
    kd.snappy_decode = lambda d: decompress(Compression.SNAPPY, d)
    kd.lz4_decode = lambda d: decompress(Compression.LZ4, d)
    kd.zstd_decode = lambda d: decompress(Compression.ZSTD, d)
    return kd.DefaultRecordBatch


def load(p: str) -> list[tuple[int, bytes]]:
    files, out = {}, []
    for b in R.batches(p):
        path = R.log_dir(p) / f"{b['segment']:020d}.log"
        if path not in files:
            files[path] = path.read_bytes()
        out.append((b["position"], files[path][b["position"]:b["position"] + b["size_in_bytes"]]))
    return out


def ours(batches) -> int:
    n = 0
    for pos, data in batches:
        n += len(decode_batch(parse_header(data, 0, pos), data))
    return n


def decompression_only(batches) -> int:
    """The decompression every decoder of these batches must do, and nothing else: `_v2_records` (the codecs in
    C where the libraries are found, as the columnar decoder calls them) over each compressed batch, from a
    Python loop; the batches' record count."""
    n = 0
    for pos, data in batches:
        header = parse_header(data, 0, pos)
        if header.attributes & COMPRESSION_MASK:
            _v2_records(header, data, None)
        n += header.record_count
    return n


def columnar(buffers) -> int:
    """The columnar decoder over whole-batch buffers, pyarrow arrays made at the end."""
    from lookupd.format.columnar import ColumnBuilder

    b = ColumnBuilder(True)
    for pos, data in buffers:
        b.add_frames(data, pos)
    n = b.count
    b.arrays(HEADERS)
    return n


def aiokafka():
    from aiokafka.record._crecords import DefaultRecordBatch

    return DefaultRecordBatch


def buffers_of(batches) -> list[tuple[int, bytes]]:
    """The same batches as runs of consecutive batches (as a segment holds them), about 1 MiB each."""
    out, run, start = [], [], None
    for pos, data in batches:
        if run and (pos != start + sum(map(len, run)) or sum(map(len, run)) > 1 << 20):
            out.append((start, b"".join(run)))
            run = []
        if not run:
            start = pos
        run.append(data)
    if run:
        out.append((start, b"".join(run)))
    return out


def theirs_with(cls):
    def theirs(batches) -> int:
        n = 0
        for _, data in batches:
            for r in cls(data):
                r.key, r.value, r.headers
                n += 1
        return n
    return theirs


def timed_passes(fn, arg) -> tuple[int, float]:
    """(records of one pass, seconds per pass) over whole passes of `fn(arg)` lasting at least MIN_RUN_S."""
    gc.collect()
    passes = 0
    t0 = time.perf_counter()
    while True:
        got = fn(arg)
        passes += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= MIN_RUN_S:
            return got, elapsed / passes


def run(quick: bool = False) -> list[Figure]:
    import pyarrow as pa

    global HEADERS
    HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
    theirs = theirs_with(kafka_python())
    cython = theirs_with(aiokafka())
    reps = 5 if quick else 15
    figures = []
    for p in ("plain-0", "compressed-0", "large-0") if not quick else ("plain-0", "compressed-0"):
        batches = load(p)
        if p == "large-0":
            batches = batches[:50_000]
        size = sum(len(d) for _, d in batches)
        runs = buffers_of(batches)
        impls = (("lookupd", ours, batches), ("lookupd columnar", columnar, runs), ("aiokafka", cython, batches),
                 ("kafka-python", theirs, batches))
        if p == "compressed-0":  # the floor under any decoder using these libraries: decompressing alone
            impls += (("decompression alone", decompression_only, batches),)
        times: dict[str, list[float]] = {name: [] for name, _, _ in impls}
        count = 0
        for _, fn, arg in impls:  # one untimed pass each: first calls set up (imports, tables) outside the figures
            fn(arg)
        for _ in range(reps):
            for name, fn, arg in impls:
                got, seconds = timed_passes(fn, arg)
                times[name].append(seconds)
                if count and got != count:
                    raise RuntimeError(f"{name} decoded {got} records of {p}, the others {count}")
                count = got
        for name, ts in times.items():
            figures.append(Figure(f"decode {p}, {name}", "MB/s", [size / t / 1e6 for t in ts], group="decode",
                                  params={"partition": p, "impl": name, "records": count, "bytes": size},
                                  higher_is_better=True))
            figures.append(Figure(f"decode {p}, {name}, records", "records/s", [count / t for t in ts], group="decode-records",
                                  params={"partition": p, "impl": name, "records": count, "bytes": size},
                                  higher_is_better=True))
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    parts = sorted({f.params["partition"] for f in figures if f.group == "decode"})
    out = [ratio(f"decode speed vs kafka-python, {p}", [f for f in figures if f.group == "decode"],
                 f"decode {p}, lookupd", f"decode {p}, kafka-python",
                 "MB/s decoded by lookupd's reference decoder over kafka-python's on the same batches") for p in parts]
    out += [ratio(f"columnar decode vs aiokafka, {p}", [f for f in figures if f.group == "decode-records"],
                  f"decode {p}, lookupd columnar, records", f"decode {p}, aiokafka, records",
                  "records/s decoded by lookupd's native columnar decoder over aiokafka's Cython decoder (target 3x)")
            for p in parts]
    out.append(ratio("decompression alone vs aiokafka, compressed-0", [f for f in figures if f.group == "decode-records"],
                     "decode compressed-0, decompression alone, records", "decode compressed-0, aiokafka, records",
                     "records/s of decompressing the batches alone (each batch's codec call, in C where the "
                     "libraries are found, from a Python loop; no decoding, no CRC) over aiokafka's full decode"))
    return out


if __name__ == "__main__":
    common.main(run, __doc__)
