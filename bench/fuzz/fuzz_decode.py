"""Fuzz the native columnar decoder and JSON renderer (lookupd/format/_decode.c), differentially, under ASan.

A mutation fuzzer: inputs are real batches (every batch of the Kafka reference corpus, and
generated ones of every codec) concatenated and damaged at random: bytes flipped, set to
boundary values, cut, duplicated or inserted, length and count fields rewritten, and the CRC
recomputed half the time so the damage reaches the record decoder. Every input is decoded by
the C walker and by the reference decoder through the same columns (lookupd.format.columnar);
they must give the same columns or the same CorruptRecordError. Each batch in it is also
rendered as JSON lines by both paths of lookupd.format.render (all records, and those of one
key), and scanned for a timestamp by both paths of records.find_timestamp (and by
find_timestamp_fast, whose every answer must be find_timestamp's); and the whole input,
written as a .log, is walked for an offset and a timestamp by both paths of
FileRecords.find_batch (lookupd/log/_native.c), walked as `read` walks what it hands out
(`_accel.sound_batches` against the Python walk), and looked up through an offset index of its
batches (damaged at times) by `_native.locate`, whose every answer must be the reference walk's
(it may decline), and by timestamp through a time index of them by `_native.locate_time`, whose
every answer must be its two halves' (`entry`, then `locate`); and taken as columns by arrays()' bitmap and flag helpers.
Beside each input, a column of Avro values in the wire format (serialized by fastavro, then damaged
alike) is decoded by both paths of the Spark source's `lookupd.decodeValues` (_avro.c, and fastavro
in Python), to JSON and into a struct. Each pair must agree, answer or error. The C code must not crash,
hang or (in the ASan + UBSan build) touch memory outside its buffers.

    make -C bench/fuzz asan
    ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD=$(gcc -print-file-name=libasan.so) \\
      LOOKUPD_DECODE_SO=bench/fuzz/build/_decode.so LOOKUPD_NATIVE_SO=bench/fuzz/build/_native.so \\
      python bench/fuzz/fuzz_decode.py --seconds 600

Without LOOKUPD_DECODE_SO it fuzzes the installed extension. Exit status 0: no disagreement in
that many inputs (the count is printed); a failing input is written to ./crash-<n>.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import struct
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import crc32c  # noqa: E402

from lookupd.errors import CorruptRecordError  # noqa: E402
from lookupd.format import _accel as format_accel, columnar, records, render  # noqa: E402
from lookupd.log import _accel as log_accel, filerecords  # noqa: E402
from lookupd.format.batch import Compression, parse_header, sound_v2_last_offset, whole_frames  # noqa: E402
from lookupd.format.builder import build_batch  # noqa: E402

from edits import edit  # noqa: E402 - bench/fuzz, the script's directory
from instrumented import load_instrumented  # noqa: E402


def swapped(native: bool, fn, *args):
    """fn(*args) with lookupd's C paths on (native) or off (a reference path: python_only); errors as strings."""
    with contextlib.nullcontext() if native else format_accel.python_only():
        try:
            return fn(*args)
        except CorruptRecordError as err:
            return str(err)


def scans(data: bytes, log_path: str) -> list:
    """find_timestamp over each batch framed in `data`, and find_batch over `data` as a .log."""
    out, pos = [], 0
    while pos + 61 <= len(data):
        try:
            h = parse_header(data, pos)
        except CorruptRecordError:
            break
        batch = data[pos:pos + h.size]
        for target in (h.base_timestamp, h.max_timestamp, 0):
            fast = records.find_timestamp_fast(batch, target, h.base_offset + 1)  # one C call, or None
            found = records.find_timestamp(h, batch, target, h.base_offset + 1, path="fuzz.log")
            if fast is not None and fast != (*found, h.partition_leader_epoch_or_none):
                out.append(("find_timestamp_fast disagrees", fast))
            out.append(found)
        pos += max(h.size, 1)
    with open(log_path, "wb") as f:
        f.write(data)
    fr = filerecords.FileRecords(log_path)
    for target, by_ts in ((0, False), (5, False), (1 << 40, False), (0, True), (1 << 40, True)):
        for strict in (False, True):
            found = fr.find_batch(target, 0, len(data), by_timestamp=by_ts, strict=strict)
            out.append(None if found is None else found[2:])
    fr.close()
    return out


def walk_check(data: bytes) -> str | None:
    """`_decode.sound_batches` (read's batch walk) against the Python walk of whole frames: where C answers,
    every whole batch must be sound and the bytes and last offset the same. None if so, else what differed."""
    got = format_accel.sound_batches(data)
    if got is None:
        return None
    whole, last = 0, -1
    try:
        for off, size in whole_frames(data):
            found = sound_v2_last_offset(data, off, size)
            if found is None:
                return f"sound_batches took an unsound batch at {off}"
            whole, last = off + size, found
    except CorruptRecordError as err:
        return f"sound_batches took what the walk rejects: {err}"
    return None if (whole, last) == got else f"sound_batches gave {got}, the walk {(whole, last)}"


LOCATED = [0]  # answers of _native.locate and locate_time checked


def locate_checks(rnd: random.Random, data: bytes, log_path: str) -> str | None:
    """`_native.locate` of every kind over `data` as a .log, through an offset index of its batch
    positions (a byte of it damaged at times): each answer it gives must be the reference walk's from
    the index entry `_native.entry` picks. None if so, else what differed."""
    native = log_accel.extension
    if native is None:
        return None
    entries, pos = [], 0
    while pos + 61 <= len(data) and len(entries) < 8:
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if size < 26:
            break
        entries.append(struct.pack(">ii", struct.unpack_from(">q", data, pos)[0] & 0x7FFFFFFF, pos))
        pos += size
    index = bytearray(b"".join(entries) + bytes(16))
    with open(log_path, "wb") as f:
        f.write(data)
    if index and rnd.random() < 0.3:
        index[rnd.randrange(len(index))] ^= 1 << rnd.randrange(8)
    fr = filerecords.FileRecords(log_path)
    fd = fr.handle().fd
    try:
        for target in (0, 5, rnd.randrange(1 << 16), 1 << 40):
            for kind in range(5):
                extra = rnd.choice([0, 1, 100, 1 << 20]) if kind != 3 else rnd.choice([0, 1 << 40, -1])
                live = rnd.random() < 0.3
                got = native.locate(kind, bytes(index), len(entries), 1, live, fd, 0, target, extra, False)
                if got is None:
                    continue
                LOCATED[0] += 1
                entry = native.entry(bytes(index), len(entries), 8, 4, target, 1, kind == 4, len(data), live)
                start = entry[2] if entry[0] >= 0 else 0
                if kind in (0, 4):
                    want = (0, entry[1] if entry[0] >= 0 else 0, start)
                else:
                    found = swapped(False, lambda: fr.find_batch(extra if kind == 3 else target, start, len(data),
                                                                 by_timestamp=kind == 3))
                    if isinstance(found, str) or found is None:
                        return f"locate kind {kind} answered {got!r:.200} where the reference walk gave {found!r:.200}"
                    _, _, at, size = found
                    if kind == 1:
                        res = fr.search_for_offset_with_size(target, start, end=len(data))
                        want = (0, res.base_offset, res.offset, res.position, res.size)
                    else:
                        want = (0, at, fr.read(at, min(len(data) - at, max(extra, size) if kind == 2 else size)))
                if got != want:
                    return f"locate kind {kind} target {target}: {got!r:.200} != reference {want!r:.200}"
        return locate_time_check(rnd, data, bytes(index), len(entries), fd)
    finally:
        fr.close()


def locate_time_check(rnd: random.Random, data: bytes, index: bytes, n: int, fd: int) -> str | None:
    """`_native.locate_time` against its two halves, `entry` on the time index then `locate`, over a time
    index of the batches' max timestamps (a byte of it damaged at times, or random bytes)."""
    native = log_accel.extension
    stamps, pos = [], 0
    while pos + 61 <= len(data) and len(stamps) < 8:
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if size < 26:
            break
        stamps.append(struct.pack(">qi", struct.unpack_from(">q", data, pos + 35)[0],
                                  struct.unpack_from(">q", data, pos)[0] & 0x7FFFFFFF))
        pos += size
    tindex = bytearray(b"".join(stamps) + bytes(24))
    if rnd.random() < 0.2:
        tindex = bytearray(rnd.randbytes(rnd.randrange(60)))
    elif tindex and rnd.random() < 0.3:
        tindex[rnd.randrange(len(tindex))] ^= 1 << rnd.randrange(8)
    tn = len(stamps) if rnd.random() < 0.9 else rnd.randrange(12)
    tindex = bytes(tindex)
    for ts in (0, 1, rnd.randrange(1 << 45), (1 << 63) - 1):
        for kind in (0, 3):
            start = rnd.choice([0, 3, 1 << 20])
            got = native.locate_time(kind, tindex, tn, 1, index, n, 1, fd, 0, ts, start, False)
            try:
                floor = native.entry(tindex, tn, 12, 8, ts, 1, False, (1 << 63) - 1, False)
            except ValueError:  # more entries than the buffer holds: locate_time declines (as locate does)
                floor = None
            if floor is None or floor[2] < 0:
                want = None
            else:
                offset = floor[2] if floor[0] >= 0 else 0
                if kind == 3:
                    want = native.locate(3, index, n, 1, False, fd, 0, max(offset, start), ts, False)
                else:
                    half = native.locate(0, index, n, 1, False, fd, 0, offset, 0, False)
                    want = half if half is None else (0, floor[1] if floor[0] >= 0 else -1, offset, half[2])
            if got != want:
                return f"locate_time kind {kind} timestamp {ts}: {got!r:.200} != its halves' {want!r:.200}"
            LOCATED[0] += got is not None
    return None


def helpers_check(data: bytes) -> str | None:
    """The Arrow bitmap and per-record flag helpers of arrays() on the input taken as their columns (whole
    int32 and six-int64 entries of it; record counts beyond a few thousand refused alike): C against numpy."""
    if columnar.validity_bitmap(data) != columnar.validity_bitmap_reference(data):
        return "validity_bitmap disagrees"
    ends = data[:len(data) // 4 * 4] or bytes(4)
    if columnar.nonempty_bitmap(ends) != columnar.nonempty_bitmap_reference(ends):
        return "nonempty_bitmap disagrees"
    facts = bytearray(data[:len(data) // 48 * 48])
    for i in range(len(facts) // 48):  # keep the counts small: the reference would allocate what they say
        facts[40 + 48 * i:48 + 48 * i] = struct.pack("=q", struct.unpack_from("=q", facts, 40 + 48 * i)[0] % 4096)
    if columnar.spread_flag(facts, columnar.FLAG_LOG_APPEND_TIME) != \
            columnar.spread_flag_reference(facts, columnar.FLAG_LOG_APPEND_TIME):
        return "spread_flag disagrees"
    return None


def scans_outcome(data: bytes, log_path: str, native: bool):
    return swapped(native, scans, data, log_path)


def outcome(data: bytes, native: bool):
    b = columnar.ColumnBuilder(True)
    try:
        with contextlib.nullcontext() if native else format_accel.python_only():
            end = b.add_frames(data, 0, "fuzz.log")
    except CorruptRecordError as err:
        return str(err)
    except OverflowError as err:
        return f"overflow {err}"
    return end, b.count, bytes(b._facts), [bytes(c) for c in b._cols]


def lines(data: bytes, native: bool) -> list:
    """Every batch framed in `data` as JSON lines (all records, then those whose key is the first record's)."""
    fn = render.record_lines if native else render.reference_lines
    out, pos = [], 0
    while pos + 61 <= len(data):
        try:
            h = parse_header(data, pos)
        except CorruptRecordError as err:
            return out + [str(err)]
        batch = data[pos:pos + h.size]
        for key in (None, batch[-40:-30]):
            try:
                got = fn(h, batch, "fuzz.log", key=key)
                out.append((list(got.offsets), list(got.starts), bytes(got.data)))
            except CorruptRecordError as err:
                out.append(str(err))
        pos += max(h.size, 1)
    return out


def seeds() -> list[bytes]:
    out = []
    sys.path.insert(0, os.path.join(REPO, "tests"))
    import reference  # the Kafka-written corpus, unpacked from the repository's copy on import

    logs = str(reference.LOGS)
    for part in sorted(os.listdir(logs)):
        for name in sorted(os.listdir(os.path.join(logs, part))):
            if name.endswith(".log"):
                data = open(os.path.join(logs, part, name), "rb").read()
                pos = 0
                while pos + 61 <= len(data) and len(out) < 3000:
                    h = parse_header(data, pos)
                    out.append(data[pos:pos + h.size])
                    pos += h.size
    rnd = random.Random(1)
    for i in range(200):
        recs = [(rnd.randrange(1 << 40), None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(30)),
                 None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(300)),
                 tuple((str(j), None if rnd.random() < 0.3 else rnd.randbytes(5)) for j in range(rnd.randrange(3))))
                for _ in range(rnd.randint(1, 8))]
        out.append(build_batch(recs, base_offset=rnd.randrange(1 << 40), compression=rnd.choice(list(Compression))))
    return out


def mutate(rnd: random.Random, pool: list[bytes]) -> bytes:
    b = bytearray(b"".join(rnd.choice(pool) for _ in range(rnd.randint(1, 3))))
    for _ in range(rnd.randint(1, 6)):
        if not b:
            break
        i = rnd.randrange(len(b))
        op = rnd.randrange(7)
        if op in (0, 1, 2, 3, 6):
            edit(rnd, b, i, min(op, 4))  # (6: a run of b duplicated)
        elif op == 4 and len(b) >= 12:  # a batch length field
            b[8:12] = struct.pack(">i", rnd.choice([0, 5, 49, len(b) - 12, len(b), 1 << 30, -1, rnd.randrange(1 << 16)]))
        elif op == 5 and len(b) >= 61:  # the record count
            b[57:61] = struct.pack(">i", rnd.choice([0, 1, -1, 1 << 20, rnd.randrange(100)]))
    if len(b) >= 61 and rnd.random() < 0.5:
        size = min(len(b), 12 + max(0, struct.unpack_from(">i", b, 8)[0]))
        if size > 21:
            b[17:21] = struct.pack(">I", crc32c.crc32c(bytes(b[21:size])))
    return bytes(b)


# Avro values in the wire format, for the Spark source's columns (lookupd/format/_avro.c against fastavro).
AVRO_SCHEMAS = [
    {"type": "record", "name": "Click", "fields": [
        {"name": "user", "type": "string"}, {"name": "n", "type": "long"}, {"name": "ms", "type": "double"},
        {"name": "ok", "type": "boolean"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "ref", "type": ["null", "string"]}]},
    {"type": "record", "name": "Mixed", "fields": [
        {"name": "m", "type": {"type": "map", "values": ["null", "int"]}}, {"name": "f", "type": "float"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "x", "type": {"type": "fixed", "name": "X", "size": 3}}, {"name": "b", "type": "bytes"},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "r", "type": {"type": "array", "items": {"type": "record", "name": "In", "fields": [
            {"name": "i", "type": "int"}, {"name": "s", "type": ["null", "string"]}]}}}]},
]


def avro_value(rnd: random.Random, schema, named: dict):
    """A value of the schema, small and varied (fastavro writes it)."""
    import datetime
    import uuid

    if isinstance(schema, list):
        return avro_value(rnd, rnd.choice(schema), named)
    if isinstance(schema, str):
        schema = named.get(schema, {"type": schema})
    t, logical = schema["type"], schema.get("logicalType")
    if logical == "timestamp-millis":
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            milliseconds=rnd.randrange(-10**13, 10**13))
    if logical == "date":
        return datetime.date.fromordinal(rnd.randrange(1, 3652059))
    if logical == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    text = "".join(rnd.choice("ab\"\\\n\x01é😀") for _ in range(rnd.randrange(5)))
    simple = {"null": None, "boolean": rnd.random() < 0.5, "int": rnd.randrange(-2**31, 2**31),
              "long": rnd.randrange(-2**63, 2**63), "float": rnd.choice([0.1, -2.5, float("nan"), float("inf")]),
              "double": rnd.choice([rnd.random() * 10**rnd.randrange(-300, 300), float("-inf"), -0.0]),
              "bytes": rnd.randbytes(rnd.randrange(4)), "string": text}
    if t in simple:
        return simple[t]
    if t == "enum":
        return rnd.choice(schema["symbols"])
    if t == "fixed":
        return rnd.randbytes(schema["size"])
    if t == "array":
        return [avro_value(rnd, schema["items"], named) for _ in range(rnd.randrange(4))]
    if t == "map":
        return {str(rnd.randrange(9)): avro_value(rnd, schema["values"], named) for _ in range(rnd.randrange(4))}
    named[schema["name"]] = schema
    return {f["name"]: avro_value(rnd, f["type"], named) for f in schema["fields"]}


def avro_seeds() -> list:
    """Per schema: its JSON and struct decodings (spark_client.decoded) and serialized values."""
    import io

    import fastavro
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    from lookupd.format.schemas import Registry
    from spark_client.decoded import Decoding

    rnd, out = random.Random(2), []
    for schema in AVRO_SCHEMAS:
        reg = Registry.from_records([(0, json.dumps({"keytype": "SCHEMA", "subject": "t-value", "version": 1}).encode(),
                                      json.dumps({"subject": "t-value", "version": 1, "id": 1,
                                                  "schema": json.dumps(schema)}).encode())]).to_json()
        parsed, payloads = fastavro.parse_schema(schema), []
        for _ in range(50):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, avro_value(rnd, schema, {}))
            payloads.append(buf.getvalue())
        struct_dec = Decoding("struct", reg, "t-value")
        out.append(([(Decoding("json", reg, "t-value"), pa.string()),
                     (struct_dec, to_arrow_type(struct_dec.value_type(), timezone="UTC"))], payloads))
    return out


def avro_check(rnd: random.Random, avro: list) -> str | None:
    """A column of Avro values, some damaged or under another id, decoded by both paths of the Spark source's
    decoding (C, and python_only's fastavro): the same five columns."""
    import pyarrow as pa

    decodings, payloads = rnd.choice(avro)
    column = []
    for _ in range(rnd.randint(1, 8)):
        p = rnd.choice(payloads)
        p = mutate(rnd, [p]) if rnd.random() < 0.7 else p
        column.append(b"\0" + struct.pack(">I", rnd.choice([1, 1, 1, 7])) + p)
    values = pa.array(column, pa.binary())
    for dec, value_type in decodings:
        fast = dec.arrays(values, values, value_type)
        with format_accel.python_only():
            ref = dec.arrays(values, values, value_type)
        if [repr(a.to_pylist()) for a in fast] != [repr(a.to_pylist()) for a in ref]:
            return f"the Avro columns disagree ({dec.mode}): {column!r}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    so, native_so = os.environ.get("LOOKUPD_DECODE_SO"), os.environ.get("LOOKUPD_NATIVE_SO")
    load_instrumented(so, native_so)
    log_path = os.path.join(tempfile.mkdtemp(prefix="fuzz"), "00000000000000000000.log")
    if not columnar.NATIVE:
        print("the native decoder is not built: nothing to fuzz", file=sys.stderr)
        return 2
    pool, avro, rnd = seeds(), avro_seeds(), random.Random(args.seed)
    end, n, errors = time.monotonic() + args.seconds, 0, 0
    while time.monotonic() < end:
        data = mutate(rnd, pool)
        got = outcome(data, True)
        if got != swapped(False, outcome, data, False) or lines(data, True) != swapped(False, lines, data, False) or \
                scans_outcome(data, log_path, True) != scans_outcome(data, log_path, False):
            why = "the decoders, the renderers or the scans disagree"
        else:
            why = walk_check(data) or locate_checks(rnd, data, log_path) or helpers_check(data) or avro_check(rnd, avro)
        if why is not None:
            path = f"crash-{n}"
            open(path, "wb").write(data)
            print(f"disagreement on input {n} (seed {args.seed}), written to {path}: {why}", file=sys.stderr)
            return 1
        n += 1
        errors += isinstance(got, str)
        if n % 50000 == 0:
            print(f"{n} inputs, {errors} rejected as corrupt", flush=True)
    print(f"{n} inputs in {args.seconds:.0f} s (seed {args.seed}, {'ASan builds ' + ', '.join(x for x in (so, native_so) if x) if so or native_so else 'installed builds'}): "
          f"no crash, no disagreement; {errors} rejected as corrupt by both decoders; "
          f"{LOCATED[0]} answers of _native.locate and locate_time checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
