"""Fuzz the `__consumer_offsets` replay's C path (lookupd/format/_offsets.c), differentially, under ASan.

A mutation fuzzer. Inputs start as real `__consumer_offsets` logs: those tests/coordinator_writer.py
writes here (plain and transactional commits of every key and value version, markers, offset and group
tombstones, DeleteGroups' batches, classic group records, every codec; sparse, negative and huge partition
numbers; long and non-UTF-8 group and topic names) and the Kafka-written ones of the coordinator corpus
(tests/data/kafka-coordinator: consumer, share and streams group records too). A window of a log's batches,
with batches of other logs spliced in, is damaged: records rebuilt into a valid batch with a key or value
field rewritten (record type, version, a string length, the partition, cut or grown), records dropped,
duplicated or moved, another producer id, codec or control flag; then bytes flipped, set to boundary
values, cut, duplicated or inserted, and batch header fields (length, magic, attributes, last offset
delta, producer id, record count, base offset) rewritten, with the damaged batches' CRC recomputed half
the time so that the damage reaches the record and value readers.

Each input is written as the one segment of a partition directory and replayed as the product replays it
(lookupd.log.coordinators: a Coordinators' GroupReplay catching up, in chunks of a size drawn per input)
twice: with the C commit scan and table (a quarter of the time in two catch-ups, the segment cut anywhere
for the first, as the daemon follows a log being written), and on the reference path alone (`python_only`: DictCommits, and
GroupMetadata values read by the schema codec rather than the struct reader). Both must give the same
state: groups as `lookupd groups` describes them, committed offsets with their record offsets, pending
transactional offsets and open transactions, simple groups, share-state partitions, the offset and byte
replayed to, and the same faults (the group each names, its error type and text). An error escaping the
replay (anything but a fault it records) is a failure even where both paths raise it. The C code must not
crash, hang or (in the ASan + UBSan build) touch memory outside its buffers.

    make -C bench/fuzz asan
    ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD=$(gcc -print-file-name=libasan.so) \\
      LOOKUPD_DECODE_SO=bench/fuzz/build/_decode.so LOOKUPD_NATIVE_SO=bench/fuzz/build/_native.so \\
      nice -n 19 python bench/fuzz/fuzz_offsets.py --seconds 600

Without LOOKUPD_DECODE_SO it fuzzes the installed extension. Exit status 0: no disagreement in that many
inputs (the count is printed); a failing input is written to ./crash-<n> (the segment's bytes: replay it
with `lookupd groups` over a log dir holding it as __consumer_offsets-0/00000000000000000000.log). An input
that hangs the replay stops the fuzzer after --hang seconds with a traceback; it is left in the partition
directory named at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import random
import shutil
import struct
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
sys.path.insert(1, os.path.join(REPO, "tests"))  # coordinator_writer, reference (the corpus)

import crc32c  # noqa: E402

from lookupd.errors import CorruptDataError, CorruptRecordError  # noqa: E402
from lookupd.format import _accel  # noqa: E402
from lookupd.format.batch import NO_PRODUCER_ID, Compression, parse_header  # noqa: E402
from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.format.internal import group_state, groups as group_codec  # noqa: E402
from lookupd.format.records import decode_batch  # noqa: E402
from lookupd.log import coordinators  # noqa: E402
from lookupd.log.coordinators import Coordinators  # noqa: E402
from lookupd.log.logmanager import LogManager  # noqa: E402
from lookupd.log.positions import describe_group  # noqa: E402

from edits import BYTE_EDITS, edit  # noqa: E402 - bench/fuzz, the script's directory
from instrumented import load_instrumented  # noqa: E402

PARTITION_DIR = "__consumer_offsets-0"
SEGMENT = f"{0:020d}.log"
# Chunk and map-window sizes a replay is made with, drawn per input: batches across chunks, larger than one.
CHUNKS = (1 << 20, 4096, 200, 97)
HEADER = 61  # a v2 batch header's bytes


# ------------------------------------------------------------------ seeds


def _raw_commit_key(group: bytes, topic: bytes, partition: int, version: int = 1) -> bytes:
    """An OffsetCommit key from raw name bytes (not UTF-8, as a writer might have sent them)."""
    return struct.pack(">hh", version, len(group)) + group + struct.pack(">h", len(topic)) + topic + \
        struct.pack(">i", partition)


def written_logs(rnd: random.Random) -> list[list[bytes]]:
    """Partitions written by tests/coordinator_writer.py, each as its list of batches: one of every kind of
    record and batch the replay meets, and a few random runs of commits, transactions and group records."""
    from coordinator_writer import (CoordinatorLog, Record, commit_key, commit_value, group_key, group_value,
                                    read_batches)

    codecs = list(Compression)
    out = []
    with tempfile.TemporaryDirectory(prefix="fuzz-offsets-seeds") as tmp:
        d = os.path.join(tmp, "every-kind", PARTITION_DIR)
        log = CoordinatorLog(d)
        for version in range(5):  # every value version, both key versions, every codec
            for key_version in (0, 1):
                log.write([Record(commit_key(f"g{version % 3}", "t", p, key_version),
                                  commit_value(100 * version + p, metadata=f"m{p}", timestamp=p, leader_epoch=p % 3,
                                               version=version, expire=p + 1 if version == 1 else -1))
                           for p in range(4)], compression=codecs[(version + key_version) % len(codecs)])
        for p in (1000, -1, -(2 ** 31), 2 ** 31 - 1, 63, 64, 5000, 7):  # sparse, negative, huge partitions
            log.write([Record(commit_key("sparse", "t", p), commit_value(p & 0xFFFF))])
        log.write([Record(commit_key("sparse", "t", p), None) for p in (1000, -1)])
        log.write([Record(commit_key("g" * 300, "t" * 1000, 0), commit_value(1, metadata="x" * 2000)),
                   Record(commit_key("h" * 32767, "t", 1), commit_value(2))], compression=Compression.ZSTD)
        for name in (b"g\xff", b"g\xfe", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", "é😀".encode()):
            log.write([Record(_raw_commit_key(name, b"t\xff", 0), commit_value(3)),
                       Record(_raw_commit_key(b"ok", name, 1), commit_value(4))])
        log.write([Record(group_key("g1"), group_value("consumer", 3, "range", ["m0", "m1"]))])
        log.write([Record(group_key("g2"), group_value("", 0, None, []))], compression=Compression.GZIP)
        pid = 4000
        for commit in (True, False, True):  # transactions, the last one left open
            log.write([Record(commit_key("g0", "u", p), commit_value(50 + p)) for p in range(2)],
                      producer_id=pid, producer_epoch=0)
            log.write([Record(commit_key("g0", "u", 0), None)], producer_id=pid, producer_epoch=0)
            log.write([Record(commit_key("g0", "u", 1), commit_value(70))])  # a plain commit while it is open
            log.write([Record(commit_key("g0", "u", 1), None)])  # a tombstone while it is open
            if pid < 4002:
                log.marker(pid, 0, commit=commit)
            pid += 1
        log.marker(4999, 0, commit=True)  # a marker with nothing pending
        log.write([Record(commit_key("g1", "t", p), None) for p in range(3)] + [Record(group_key("g1"), None)])
        log.write([Record(group_key("g2"), None)])
        log.write([Record(commit_key("g1", "t", 0), commit_value(99))], compression=Compression.LZ4)
        log.close()
        out.append([data for data, _ in read_batches(d)])
        d = os.path.join(tmp, "many-keys", PARTITION_DIR)  # the C table past its first slots, its arena rebuilt
        log = CoordinatorLog(d)
        for b in range(30):
            log.write([Record(commit_key(f"g{i % 700}", f"t{i % 3}", i % 40),
                              commit_value(b * 100 + i, metadata="m" * rnd.randrange(300)))
                       for i in range(b * 100 % 2100, b * 100 % 2100 + 100)], compression=codecs[b % len(codecs)])
        log.close()
        out.append([data for data, _ in read_batches(d)])
        for i in range(4):  # random runs
            d = os.path.join(tmp, f"random-{i}", PARTITION_DIR)
            log = CoordinatorLog(d)
            open_: set[int] = set()
            for _ in range(rnd.randint(10, 40)):
                g, op = f"g{rnd.randrange(3)}", rnd.random()
                codec = rnd.choice(codecs)
                if op < 0.4:
                    log.write([Record(commit_key(g, rnd.choice("tu"), rnd.randrange(4)),
                                      commit_value(rnd.randrange(1 << 40), version=rnd.randrange(5)))
                               for _ in range(rnd.randint(1, 5))], compression=codec)
                elif op < 0.55:
                    pid = rnd.choice((4000, 4001))
                    log.write([Record(commit_key(g, "t", rnd.randrange(4)), commit_value(rnd.randrange(100)))],
                              producer_id=pid, producer_epoch=0, compression=codec)
                    open_.add(pid)
                elif op < 0.65:
                    pid = rnd.choice((4000, 4001, 4002))
                    log.marker(pid, 0, commit=rnd.random() < 0.6)
                    open_.discard(pid)
                elif op < 0.75:
                    log.write([Record(commit_key(g, "t", rnd.randrange(4)), None)])
                elif op < 0.85:
                    log.write([Record(group_key(g), group_value("consumer", rnd.randrange(3), "range",
                                                                [f"m{j}" for j in range(rnd.randrange(3))]))])
                else:
                    log.write([Record(commit_key(g, t, p), None) for t in "tu" for p in range(4)] +
                              [Record(group_key(g), None)], compression=codec)
            log.close()
            out.append([data for data, _ in read_batches(d)])
    return out


def corpus_logs() -> list[list[bytes]]:
    """The Kafka-written `__consumer_offsets` partitions of the coordinator corpus, each as its batches."""
    import reference  # (unpacks the corpus from the repository's copy on import)
    from coordinator_writer import read_batches

    logs = reference.COORDINATOR / "logs"
    return [[data for data, _ in read_batches(str(logs / name))]
            for name in sorted(os.listdir(logs)) if name.startswith("__consumer_offsets-")]


def all_records(logs: list[list[bytes]]) -> list[tuple[bytes | None, bytes | None]]:
    """Every data record's (key, value) of the logs, for splicing into other batches."""
    out = []
    for batches in logs:
        for data in batches:
            h = parse_header(data, 0)
            if not h.is_control:
                out.extend((r.key, r.value) for r in decode_batch(h, data))
    return out


# ------------------------------------------------------------------ damage

BOUNDARY16 = (-1, 0, 1, 2, 3, 4, 5, 0x7FFF, -0x8000)
BOUNDARY32 = (-1, 0, 1, 63, 64, 1000, 2 ** 31 - 1, -(2 ** 31))


def _rewrite(rnd: random.Random, b: bytes | None, spliced: list) -> bytes | None:
    """A key or value with one field rewritten: its record type or version, an int16 string length, an int32
    (a partition, a count), a bad UTF-8 byte in a name, cut, grown, emptied, nulled, or another record's."""
    op = rnd.randrange(9)
    if op == 0:
        return None
    if op == 1:
        return rnd.choice(spliced)[rnd.randrange(2)]
    if b is None:
        return rnd.randbytes(rnd.randrange(12))
    b = bytearray(b)
    if op == 2 and len(b) >= 2:
        b[0:2] = struct.pack(">h", rnd.choice(BOUNDARY16 + tuple(range(6, 25))))
    elif op == 3 and len(b) >= 4:
        at = rnd.choice([2] + [i for i in range(2, len(b) - 1)][:64])
        b[at:at + 2] = struct.pack(">h", rnd.choice(BOUNDARY16 + (len(b) - at - 2, len(b) - at - 1, len(b) - at - 3)))
    elif op == 4 and len(b) >= 4:
        at = rnd.choice([len(b) - 4, rnd.randrange(len(b) - 3)])
        b[at:at + 4] = struct.pack(">i", rnd.choice(BOUNDARY32))
    elif op == 5 and len(b) >= 5:
        b[rnd.randrange(4, len(b))] = rnd.choice((0xFF, 0xC0, 0xED, 0xF4, 0x80))
    elif op == 6:
        del b[rnd.randrange(len(b) + 1):]
    elif op == 7:
        b += rnd.randbytes(rnd.randint(1, 20))
    else:
        b = bytearray()
    return bytes(b)


def rebuilt(rnd: random.Random, data: bytes, spliced: list) -> bytes:
    """The batch rebuilt valid (a right CRC) with its records or attributes changed."""
    try:
        h = parse_header(data, 0)
        recs = [(r.timestamp, r.key, r.value, ()) for r in decode_batch(h, data)]
    except CorruptRecordError:
        return data
    if not recs:
        return data
    for _ in range(rnd.randint(1, 3)):
        op = rnd.randrange(8)
        i = rnd.randrange(len(recs))
        ts, key, value, _ = recs[i]
        if op <= 2:
            recs[i] = (ts, _rewrite(rnd, key, spliced) if op == 0 else key,
                       _rewrite(rnd, value, spliced) if op else value, ())
        elif op == 3 and len(recs) > 1:
            del recs[i]
        elif op == 4:
            recs.insert(rnd.randrange(len(recs) + 1), recs[i])
        elif op == 5:
            k, v = rnd.choice(spliced)
            recs.insert(rnd.randrange(len(recs) + 1), (ts, k, v, ()))
        elif op == 6:
            recs[i], recs[-1] = recs[-1], recs[i]
    producer_id, transactional, control = h.producer_id, h.is_transactional, h.is_control
    change = rnd.random()
    if change < 0.15:
        producer_id, transactional = (4000, True) if producer_id == NO_PRODUCER_ID else (NO_PRODUCER_ID, False)
    elif change < 0.2:
        control, transactional, producer_id = not control, True, 4000 if producer_id == NO_PRODUCER_ID else producer_id
    codec = rnd.choice(list(Compression)) if rnd.random() < 0.3 else h.compression
    try:
        return build_batch(recs, base_offset=h.base_offset, compression=codec, producer_id=producer_id,
                           producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                           transactional=transactional, control=control)
    except (ValueError, OverflowError):
        return data


# A v2 batch header's fields: (where, struct format, values to write).
HEADER_FIELDS = (
    (0, ">q", (0, -1, 1 << 40, 2 ** 63 - 1, 2 ** 63 - 2)),          # base offset (not under the CRC)
    (8, ">i", (0, 5, 48, 49, 1 << 30, -1)),                          # length
    (16, ">b", (0, 1, 3, -1)),                                       # magic
    (21, ">h", (0, 1, 2, 3, 4, 5, 7, 0x10, 0x20, 0x30, 0x31, -1)),   # attributes: codec, transactional, control
    (23, ">i", (-1, 0, 1, 2 ** 31 - 1, -(2 ** 31))),                 # last offset delta
    (43, ">q", (-1, 0, 4000, 4001, -2)),                             # producer id
    (57, ">i", (0, 1, 2, -1, 1 << 20, 2 ** 31 - 1)),                 # record count
)


def _starts(b: bytes) -> list[int]:
    """Where the batches framed in b start (as far as the framing reads)."""
    out, pos = [], 0
    while pos + 12 <= len(b):
        out.append(pos)
        length = struct.unpack_from(">i", b, pos + 8)[0]
        if length < 49:
            break
        pos += 12 + length
    return out


def mutate(rnd: random.Random, logs: list[list[bytes]], spliced: list) -> bytes:
    """A window of one log's batches, other logs' batches spliced in, some rebuilt, then bytes damaged."""
    batches = rnd.choice(logs)
    i = rnd.randrange(len(batches))
    window = list(batches[i:i + rnd.choice((1, 3, 10, 30, 1000))])
    for _ in range(rnd.choice((0, 0, 1, 2))):
        window.insert(rnd.randrange(len(window) + 1), rnd.choice(rnd.choice(logs)))
    for _ in range(rnd.choice((0, 1, 1, 2, 4))):
        j = rnd.randrange(len(window))
        window[j] = rebuilt(rnd, window[j], spliced)
    b = bytearray(b"".join(window))
    touched = set()
    for _ in range(rnd.choice((0, 1, 1, 2, 3, 6))):
        if not b:
            break
        op = rnd.randrange(BYTE_EDITS + 3)
        at = rnd.randrange(len(b))
        if op < BYTE_EDITS:
            edit(rnd, b, at, op)
        elif op == BYTE_EDITS:
            del b[at:]
        else:
            starts = [s for s in _starts(b) if s + HEADER <= len(b)]
            if not starts:
                continue
            start = rnd.choice(starts)
            where, fmt, values = rnd.choice(HEADER_FIELDS)
            at = start + where
            b[at:at + struct.calcsize(fmt)] = struct.pack(fmt, rnd.choice(values))
        touched.add(at)
    if touched and rnd.random() < 0.5:  # the CRC of each batch damaged made right: the damage reaches its records
        for start in _starts(b):
            size = 12 + struct.unpack_from(">i", b, start + 8)[0]
            if start + HEADER <= len(b) and start + size <= len(b) and any(start <= t < start + size for t in touched):
                b[start + 17:start + 21] = struct.pack(">I", crc32c.crc32c(bytes(b[start + 21:start + size])))
    return bytes(b)


# ------------------------------------------------------------------ replay and compare


def _try(fn, *args):
    try:
        return fn(*args)
    except CorruptDataError as err:  # (an answer that names a fault: the same on both paths)
        return ("error", type(err).__name__, str(err))


def replay(root: str, python: bool, chunk: int, rest: bytes = b""):
    """The partition in `root` replayed as the product replays it, on the C path or the reference path alone,
    and caught up again after `rest` is appended to its segment (as the daemon follows a growing log): its
    GroupReplay, or the text of an error that escaped."""
    saved = coordinators.CHUNK_BYTES, coordinators.MAP_WINDOW_BYTES, group_state.decode_value
    coordinators.CHUNK_BYTES = coordinators.MAP_WINDOW_BYTES = chunk
    if python:  # GroupMetadata values by the schema codec: the struct reader is checked too
        group_state.decode_value = group_codec.decode_value_reference
    try:
        manager = LogManager([root])
        r = Coordinators(manager, 1).replay(PARTITION_DIR.rsplit("-", 1)[0], 0)
        with r.lock, _accel.python_only() if python else contextlib.nullcontext():
            r.catch_up()
            if rest:
                with open(os.path.join(root, PARTITION_DIR, SEGMENT), "ab") as f:
                    f.write(rest)
                manager.refresh()
                r.catch_up()
        if python != (type(r.state.commits) is group_state.DictCommits):
            raise AssertionError(f"the {'reference' if python else 'C'} replay kept its offsets in "
                                 f"{type(r.state.commits).__name__}")
        return r
    except Exception as err:  # noqa: BLE001 - escaped the replay: reported whatever it is
        return f"{type(err).__name__}: {err}"
    finally:
        coordinators.CHUNK_BYTES, coordinators.MAP_WINDOW_BYTES, group_state.decode_value = saved


def names(r) -> set[str]:
    """The groups a replay knows of: its groups, those with open transactions, and (DictCommits: the reference
    lists them; the C table does not, and its len() answers for them) those with committed offsets."""
    s = r.state
    out = set(s.group_ids()) | set(s.open_transactions)
    if type(s.commits) is group_state.DictCommits:
        out |= {name.decode() for name in s.commits._groups}
    return out


def answers(r, python: bool, groups: set[str]) -> dict:
    """Everything the replay's state answers about `groups` and the partition, its position and its faults."""
    s = r.state
    with _accel.python_only() if python else contextlib.nullcontext():
        try:
            return {
                "groups": s.group_ids(),
                "described": {g: _try(describe_group, s.groups[g], 0) for g in s.group_ids()},
                "offsets": {g: _try(lambda g: [tuple(p) for p in s.partition_offsets(g)], g) for g in sorted(groups)},
                "has": {g: s.has(g) for g in sorted(groups)},
                "commits": len(s.commits),
                # (a commit marks its group simple in C even where a group record made it: that record's group
                # is the group while it lasts, and its removal clears the mark too)
                "simple": sorted(n for n in s.commits.simple_groups() if n.decode() not in s.groups.recorded),
                "pending": {pid: {g: dict(parts) for g, parts in by_group.items()} for pid, by_group in s.pending.items()},
                "open": {g: sorted(pids) for g, pids in s.open_transactions.items()},
                "share": s.share_state_partitions,
                "next_offset": r.next_offset,
                "position": None if r._position is None else (r._position.byte, r._position.stuck),
                "faults": [(f.group, type(f.error).__name__, str(f.error)) for f in r.faults],
                "fault_count": r.fault_count,
            }
        except Exception as err:  # noqa: BLE001 - escaped an answer: reported whatever it is
            return {"escaped": f"{type(err).__name__}: {err}"}


def difference(a: dict, b: dict) -> str:
    """What differs between the C and the reference outcome, briefly."""
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return f"{k}: C {a.get(k)!r:.400} != reference {b.get(k)!r:.400}"
    return "nothing"


def check(root: str, data: bytes, chunk: int, cut: int | None) -> tuple[str | None, dict | None]:
    """(None if both paths replay `data` to the same answers and nothing escaped, else what went wrong; the
    reference's answers). With `cut`, the C path replays data[:cut] first, then catches up with the rest."""
    with open(os.path.join(root, PARTITION_DIR, SEGMENT), "wb") as f:
        f.write(data if cut is None else data[:cut])
    c = replay(root, False, chunk, b"" if cut is None else data[cut:])
    ref = replay(root, True, chunk)
    if isinstance(c, str) or isinstance(ref, str):
        return f"an error escaped the replay: C {c if isinstance(c, str) else None}, " \
               f"reference {ref if isinstance(ref, str) else None}", None
    groups = names(c) | names(ref)
    c, ref = answers(c, False, groups), answers(ref, True, groups)
    if "escaped" in c or "escaped" in ref:
        return f"an error escaped an answer: C {c.get('escaped')}, reference {ref.get('escaped')}", None
    if c != ref:
        return f"the C and reference replays disagree ({difference(c, ref)})", None
    return None, ref


TAKEN = [0]  # calls of the C scan that took a batch or more (applied, or answered as a transaction or a marker)


def counted(scan):
    """`_accel.commit_runs` counting the calls that take batches: how much of the fuzzing reached the C scan."""
    def commit_runs(buf, start, end, table, note_tombstones):
        got = scan(buf, start, end, table, note_tombstones)
        if got[0] > start:
            TAKEN[0] += 1
        return got
    return commit_runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--hang", type=float, default=60, help="seconds one input may take before it counts as a hang")
    args = ap.parse_args()
    so, native_so = os.environ.get("LOOKUPD_DECODE_SO"), os.environ.get("LOOKUPD_NATIVE_SO")
    load_instrumented(so, native_so)
    if _accel.CommitTable is None:
        print("the native commit scan is not built: nothing to fuzz", file=sys.stderr)
        return 2
    _accel.commit_runs = counted(_accel.commit_runs)
    rnd = random.Random(args.seed)
    logs = written_logs(random.Random(3)) + corpus_logs()
    spliced = all_records(logs)
    root = tempfile.mkdtemp(prefix="fuzz-offsets")
    os.mkdir(os.path.join(root, PARTITION_DIR))
    print(f"seed {args.seed}; the input being replayed is {os.path.join(root, PARTITION_DIR, SEGMENT)} "
          f"(left there if a hang stops the fuzzer)", flush=True)
    try:
        return campaign(args, rnd, logs, spliced, root, so, native_so)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def campaign(args, rnd: random.Random, logs: list[list[bytes]], spliced: list, root: str, so: str | None,
             native_so: str | None) -> int:
    """Inputs made, replayed and compared until --seconds are up or one fails: the exit status."""
    end, n, faulted = time.monotonic() + args.seconds, 0, 0
    while time.monotonic() < end:
        data = mutate(rnd, logs, spliced)
        faulthandler.dump_traceback_later(args.hang, exit=True)
        cut = rnd.randrange(len(data)) if data and rnd.random() < 0.25 else None
        why, got = check(root, data, rnd.choice(CHUNKS), cut)
        faulthandler.cancel_dump_traceback_later()
        if why is not None:
            path = f"crash-{n}"
            with open(path, "wb") as f:
                f.write(data)
            caught_up = "" if cut is None else f" (the C path replayed its first {cut} bytes, then the rest)"
            print(f"disagreement on input {n} (seed {args.seed}), written to {path}{caught_up}: {why}", file=sys.stderr)
            return 1
        n += 1
        faulted += bool(got["faults"])
        if n % 5000 == 0:
            print(f"{n} inputs", flush=True)
    print(f"{n} inputs in {args.seconds:.0f} s (seed {args.seed}, "
          f"{'ASan builds ' + ', '.join(x for x in (so, native_so) if x) if so or native_so else 'installed builds'}): "
          f"no crash, no disagreement; {faulted} with faults named alike by both; {TAKEN[0]} calls of the C scan "
          f"took batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
