"""`lookupd dump`: batches, records and index entries of segment files, like kafka-dump-log.

Paths may be segment files, partition directories or whole log dirs. A corrupt batch is
reported with its file and position and ends that file's dump; the other files are still
dumped and the exit status says something was wrong.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable, Iterator

from ..format.batch import BatchHeader, compute_crc, parse_header
from ..errors import CorruptDataError, LookupdError
from ..log.locallog import list_segments
from ..log.logdirs import log_dirs_below, names
from ..format.names import INDEX_SUFFIX, LOG_SUFFIX, SEGMENT_SUFFIXES, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, \
    parse_partition_dir, parse_segment_file, segment_file_name
from .progress import Progress
from ..format.records import decode_batch
from ..format.internal.metadata import decode_control
from ..message import MessageError
from ..format.internal.topics import decode_record, decode_text, dumps, internal_topic, jsonable
from ..format.records import control_record
from ..format.render import batch_json, batch_line, record_json, record_line, record_lines
from ..format.wire import ValueDecoder
from ..log.segment import TIER_LOCAL, LogSegment
from .remotedump import BucketUrls, bucket_urls, is_remote, split_url
from .dumpfilter import DumpFilter
from .verify import SegmentCheck, check_partition, check_segment


def partition_dirs_in(path: str) -> list[str]:
    """The partition directories a directory argument names: itself, or those in the log dir it is."""
    name = os.path.basename(os.path.normpath(path))
    dirs = [path] if parse_partition_dir(name) else sorted(
        e.path for e in os.scandir(path) if e.is_dir() and parse_partition_dir(e.name))
    if not dirs:
        below = log_dirs_below(path)
        hint = f"; the log dir{'s' if len(below) > 1 else ''} in it: {names(below)}" if below else ""
        raise LookupdError(f"{path} is neither a partition directory nor a log dir holding partition "
                           f"directories (named <topic>-<partition>){hint}")
    return dirs


def expand(paths: list[str]) -> list[str]:
    """Segment files named by `paths`, directories expanded in offset order."""
    out = []
    for path in paths:
        if is_remote(path):
            split_url(path)  # InvalidArgument now, before anything is dumped
            out.append(path)
        elif os.path.isdir(path):
            for d in partition_dirs_in(path):
                for base in list_segments(d):
                    for suffix in SEGMENT_SUFFIXES:
                        f = os.path.join(d, segment_file_name(base, suffix))
                        if os.path.exists(f):
                            out.append(f)
        elif not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        elif parse_segment_file(os.path.basename(path)) is None:
            raise LookupdError(f"{path} is not a segment file: expected a 20-digit base offset and "
                               f".log, .index, .timeindex or .txnindex")
        else:
            out.append(path)
    return out


class Dumper:
    """Writes one file's dump as text or JSON lines; remembers whether anything was wrong."""

    def __init__(self, args, out=None, progress: Progress | None = None, remote: BucketUrls | None = None,
                 only: DumpFilter | None = None, decoder: ValueDecoder | None = None):
        self.args = args
        self.filter = only  # --offsets/--times (None: everything)
        self.decoder = decoder  # --decode-values: keys and values in the wire format decoded
        self.remote = remote  # opens s3:// segments
        self.out = out if out is not None else sys.stdout
        self.progress = progress
        self.failed = False
        # --verify-index-only: each segment's problems, by `.log` path, then by file they belong to; the
        # partitions named as directories are judged whole (as recover judges them, transactions replayed),
        # a segment file named alone with its own segment.
        self._problems: dict[str, dict[str, list[str]]] = {}
        self._replayed: dict[str, Iterator[SegmentCheck]] = {}  # partition dir -> its checks, in offset order

    def emit(self, text: str | None, obj: dict | None) -> None:
        if self.args.json:
            if obj is not None:
                self.out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        elif text is not None:
            self.out.write(text + "\n")

    def error(self, path: str, message: str) -> None:
        self.failed = True
        if self.args.json:
            self.emit(None, {"type": "error", "file": path, "message": message})
        else:
            self.out.flush()
            print(f"error: {message}", file=sys.stderr)

    def segment(self, path: str) -> LogSegment:
        d, name = os.path.split(os.path.abspath(path))
        base = parse_segment_file(name)[0]
        bases = list_segments(d)
        return LogSegment.open(d, base, live=bool(bases) and base == bases[-1])

    def dump(self, path: str) -> None:
        if is_remote(path):
            return self.dump_remote(path)
        base, suffix = parse_segment_file(os.path.basename(path))
        if self.filter is not None and self.filter.past(base):
            return  # the whole segment is past --offsets
        self.emit(f"Dumping {path}", None)
        seg = self.segment(path)
        try:
            {LOG_SUFFIX: self.log, INDEX_SUFFIX: self.offset_index, TIME_INDEX_SUFFIX: self.time_index,
             TXN_INDEX_SUFFIX: self.txn_index}[suffix](path, seg)
        except CorruptDataError as err:
            self.error(path, str(err))
        finally:
            seg.close()

    def dump_remote(self, url: str) -> None:
        """A tiered segment's `.log` (its batches), or its `.indexes` (offset, time and transaction index in
        turn, each as its local file would be dumped)."""
        try:
            seg, suffix = self.remote.open(url)
        except LookupdError as err:
            self.error(url, str(err))
            return
        try:
            if suffix == "log":
                self.emit(f"Dumping {url}", None)
                self.log(url, seg)
                return
            for label, dump in (("offset index", self.offset_index), ("time index", self.time_index),
                                ("transaction index", self.txn_index)):
                self.emit(f"Dumping {url} ({label})", None)
                dump(url, seg)
        except LookupdError as err:
            self.error(url, str(err))
        finally:
            seg.close()

    def replay(self, directory: str) -> None:
        """Judge partition `directory` as recover does (--verify-index-only), as its files come."""
        directory = os.path.abspath(directory)
        self._replayed[directory] = check_partition(directory)

    def _problems_of(self, seg: LogSegment) -> dict[str, list[str]]:
        """The segment's problems by file (the `.log`'s: its batches and its missing index files)."""
        found = self._problems.get(seg.log.path)
        if found is not None:
            return found
        checks = self._replayed.get(os.path.dirname(seg.log.path)) if seg.tier == TIER_LOCAL else None
        check = None
        if checks is not None:
            for c in checks:  # the partition's segments before this one are judged (and dropped) on the way
                if c.base_offset == seg.base_offset:
                    check = c
                    break
                self._problems[c.log_path] = c.problems_by_file()
        if check is None:
            check = check_segment(seg)
        self._problems[seg.log.path] = found = check.problems_by_file()
        return found

    def log(self, path: str, seg: LogSegment) -> None:
        if self.args.verify_index_only:
            for p in self._problems_of(seg).get(seg.log.path, []):
                self.error(path, p)
            return
        if self.args.index_sanity_check:
            return
        self.emit(f"Log starting offset: {seg.base_offset}", None)
        size = seg.size()
        end = size if self.args.max_bytes is None else min(size, self.args.max_bytes)
        done = 0
        # Each record's line in --json output starts with its type and file, then the record's fields.
        head = json.dumps({"type": "record", "file": path}, separators=(",", ":"))[:-1].encode("ascii") + b","
        # Kafka's internal topics, known by their directory's name, are decoded as kafka-dump-log's decoders do.
        topic = internal_topic(os.path.basename(os.path.dirname(os.path.abspath(path))))
        for buf, off, pos, batch_size in seg.log.frames(0, end, strict=not seg.live and end == size):
            data = buf[off:off + batch_size] if off + batch_size <= len(buf) else seg.log.read(pos, batch_size)
            h = parse_header(data, 0, pos, path)
            if self.filter is not None:
                if self.filter.past_batch(h):
                    return  # the batches after it are past --offsets too (and unread: no trailing bytes to tell)
                self._filtered(path, h, data)
            elif not self._batch(path, h, data):
                pass  # a corrupt batch: its records are not read
            elif self.args.print_data and topic is not None:
                self.internal_records(path, topic, h, data)
            elif self.args.print_data and self.args.json:
                try:
                    lines = record_lines(h, data, path, head, decoder=self.decoder)
                except CorruptDataError as err:
                    self.error(path, str(err))
                else:
                    self.out.write(lines.data.decode("ascii"))
            elif self.args.print_data:
                try:
                    records = decode_batch(h, data, path=path)
                except CorruptDataError as err:
                    self.error(path, str(err))
                    records = []
                for r in records:
                    self.emit(record_line(r, h, print_data=True, decoder=self.decoder), None)
            done = pos + batch_size
            if self.progress is not None:
                self.progress.advance(batch_size)
        # As kafka-dump-log, for the active segment too: there the bytes may be a batch the broker is
        # still writing, or not a segment at all, so they are reported but are not an error.
        if self.args.max_bytes is None and done < size:
            self.emit(f"Found {size - done} invalid bytes at the end of {os.path.basename(path)}",
                      {"type": "trailing_bytes", "file": path, "bytes": size - done})

    def internal_records(self, path: str, topic: str, h, data) -> None:
        """The records of a batch of an internal topic, each with its key and value decoded (`decoded`, or
        `decode_error` naming the record when it does not decode: the dump goes on)."""
        try:
            records = decode_batch(h, data, path=path)
        except CorruptDataError as err:
            self.error(path, str(err))
            return
        for r in records:
            decoded, text, problem = None, "", None
            try:
                if h.is_control:
                    kind = control_record(r, path=path, position=h.position).type
                    decoded = decode_control(kind, r.value)
                    text = "" if decoded is None else f" payload: {dumps(decoded)}"
                else:
                    decoded = decode_record(topic, r.key, r.value)
                    text = " " + decode_text(topic, decoded)
            except (MessageError, CorruptDataError) as err:
                problem = f"{path} at byte {h.position}: record at offset {r.offset}: {err}"
                self.error(path, problem)
            if self.args.json:
                obj = {"type": "record", "file": path, **record_json(r, h)}
                obj["decoded" if problem is None else "decode_error"] = jsonable(decoded) if problem is None else problem
                self.emit(None, obj)
            else:
                self.emit(record_line(r, h, print_data=False) + text, None)

    def _batch(self, path: str, h: BatchHeader, data) -> bool:
        """The batch's line, and an error when its CRC is wrong; whether it is valid."""
        crc = compute_crc(data, h.magic)
        valid = crc == h.crc
        self.emit(batch_line(h, valid), {"type": "batch", "file": path, **batch_json(h), "valid": valid})
        if not valid:
            self.error(path, f"{path} at byte {h.position}: record batch is corrupt (stored crc = {h.crc}, "
                             f"computed crc = {crc})")
        return valid

    def _filtered(self, path: str, h: BatchHeader, data) -> None:
        """A batch under --offsets/--times (lookupd.tools.dumpfilter): its line, and with --print-data only the
        records within the ranges, the line only where one is."""
        f = self.filter
        if not self.args.print_data:
            if f.batch(h):
                self._batch(path, h, data)
            return
        if not f.may_hold(h):
            return
        if compute_crc(data, h.magic) != h.crc:
            self._batch(path, h, data)
            return
        try:
            records = [r for r in decode_batch(h, data, path=path) if f.record(r)]
        except CorruptDataError as err:
            self._batch(path, h, data)
            self.error(path, str(err))
            return
        if records:
            self._batch(path, h, data)
        for r in records:
            self.emit(record_line(r, h, print_data=True, decoder=self.decoder),
                      {"type": "record", "file": path, **record_json(r, h, self.decoder)})

    def _index(self, path: str, seg: LogSegment, index, limit, entry: Callable[[int, int], tuple[str, dict]]) -> None:
        if self.args.index_sanity_check:
            try:
                index.sanity_check(limit=limit)
            except CorruptDataError as err:
                self.error(path, str(err))
                return
            self.emit(f"{path} passed sanity check.", {"type": "sanity_check", "file": path, "ok": True})
            return
        if self.args.verify_index_only:
            mine = self._problems_of(seg).get(index.path, [])
            for p in mine:
                self.error(path, p)
            if not mine:
                self.emit(f"{path}: {index.valid_entries(limit=limit)} entries verified against the log.",
                          {"type": "verify", "file": path, "ok": True})
            return
        keys, values = index.entries_array(limit=limit)
        if index.fault is not None:
            self.error(path, str(index.fault))
        if len(keys) == 0:
            self.emit(f"{path} is empty.", None)
        elif self.filter is not None:
            keep = self.filter.index_entries(keys, values, time_index=index is seg.time_index)
            keys, values = keys[keep], values[keep]
        for k, v in zip(keys.tolist(), values.tolist()):
            self.emit(*entry(k, v))

    def offset_index(self, path: str, seg: LogSegment) -> None:
        self._index(path, seg, seg.offset_index, seg.size(),
                    lambda o, p: (f"offset: {o} position: {p}", {"type": "offset_index_entry", "file": path,
                                                                  "offset": o, "position": p}))

    def time_index(self, path: str, seg: LogSegment) -> None:
        self._index(path, seg, seg.time_index, seg.time_index_limit(seg.size()),
                    lambda t, o: (f"timestamp: {t} offset: {o}", {"type": "time_index_entry", "file": path,
                                                                   "timestamp": t, "offset": o}))

    def txn_index(self, path: str, seg: LogSegment) -> None:
        if self.args.index_sanity_check:
            seg.txn_index.sanity_check()
            self.emit(f"{path} passed sanity check.", {"type": "sanity_check", "file": path, "ok": True})
            return
        if self.args.verify_index_only:  # against the ABORT markers, where the partition was replayed
            for p in self._problems_of(seg).get(seg.txn_index.path, []):
                self.error(path, p)
            return
        for e in seg.txn_index.entries():
            if self.filter is not None and not self.filter.offsets.meets(int(e["first_offset"]), int(e["last_offset"])):
                continue
            fields = {"version": int(e["version"]), "producer_id": int(e["producer_id"]),
                      "first_offset": int(e["first_offset"]), "last_offset": int(e["last_offset"]),
                      "last_stable_offset": int(e["last_stable_offset"])}
            self.emit(f"version: {fields['version']} producerId: {fields['producer_id']} "
                      f"firstOffset: {fields['first_offset']} lastOffset: {fields['last_offset']} "
                      f"lastStableOffset: {fields['last_stable_offset']}",
                      {"type": "aborted_transaction", "file": path, **fields})


def _log_bytes(files: list[str]) -> Iterator[int]:
    for f in files:
        if f.endswith(LOG_SUFFIX) and not is_remote(f):
            yield os.path.getsize(f)


def run(args) -> int:
    only = DumpFilter.from_args(args.offsets, args.times)  # InvalidArgument before anything is read
    files = expand(args.paths)
    decoder = None
    if getattr(args, "decode_values", False):
        from .schemas import decoder_for

        args.print_data = True
        decoder = decoder_for(args.paths[0], args.schemas)
    show = sys.stderr.isatty() and not sys.stdout.isatty()
    with Progress(sum(_log_bytes(files)), "dump", enabled=show) as progress, \
            bucket_urls(getattr(args, "config", None)) as remote:
        dumper = Dumper(args, progress=progress, remote=remote, only=only, decoder=decoder)
        if args.verify_index_only:
            for path in args.paths:
                if not is_remote(path) and os.path.isdir(path):
                    for d in partition_dirs_in(path):
                        dumper.replay(d)
        for f in files:
            dumper.dump(f)
    return 1 if dumper.failed else 0
