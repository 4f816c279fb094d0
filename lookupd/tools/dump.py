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

from ..format.batch import compute_crc, parse_header
from ..errors import CorruptDataError, LookupdError
from ..log.locallog import list_segments
from ..format.names import INDEX_SUFFIX, LOG_SUFFIX, SEGMENT_SUFFIXES, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, \
    parse_partition_dir, parse_segment_file, segment_file_name
from .progress import Progress
from ..format.records import decode_batch
from ..format.render import batch_json, batch_line, record_line, record_lines
from ..format.wire import ValueDecoder
from ..log.segment import LogSegment
from .remotedump import RemoteSegments, is_remote, remote_segments, split_url
from .verify import SegmentScan, index_problems, scan_segment


def expand(paths: list[str]) -> list[str]:
    """Segment files named by `paths`, directories expanded in offset order."""
    out = []
    for path in paths:
        if is_remote(path):
            split_url(path)  # InvalidArgument now, before anything is dumped
            out.append(path)
        elif os.path.isdir(path):
            name = os.path.basename(os.path.normpath(path))
            dirs = [path] if parse_partition_dir(name) else sorted(
                e.path for e in os.scandir(path) if e.is_dir() and parse_partition_dir(e.name))
            if not dirs:
                raise LookupdError(f"{path} is neither a partition directory nor a log dir holding partition "
                                   f"directories (named <topic>-<partition>)")
            for d in dirs:
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

    def __init__(self, args, out=None, progress: Progress | None = None, remote: RemoteSegments | None = None,
                 decoder: ValueDecoder | None = None):
        self.args = args
        self.decoder = decoder  # --decode-values: keys and values in the wire format decoded
        self.remote = remote  # opens s3:// segments
        self.out = out if out is not None else sys.stdout
        self.progress = progress
        self.failed = False
        self._scans: dict[str, SegmentScan] = {}

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
        return LogSegment(d, base, live=bool(bases) and base == bases[-1])

    def dump(self, path: str) -> None:
        if is_remote(path):
            return self.dump_remote(path)
        suffix = parse_segment_file(os.path.basename(path))[1]
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

    def log(self, path: str, seg: LogSegment) -> None:
        if self.args.index_sanity_check or self.args.verify_index_only:
            return
        self.emit(f"Log starting offset: {seg.base_offset}", None)
        size = seg.size()
        end = size if self.args.max_bytes is None else min(size, self.args.max_bytes)
        done = 0
        # Each record's line in --json output starts with its type and file, then the record's fields.
        head = json.dumps({"type": "record", "file": path}, separators=(",", ":"))[:-1].encode("ascii") + b","
        for buf, off, pos, batch_size in seg.log.frames(0, end, strict=not seg.live and end == size):
            data = buf[off:off + batch_size] if off + batch_size <= len(buf) else seg.log.read(pos, batch_size)
            h = parse_header(data, 0, pos, path)
            valid = compute_crc(data, h.magic) == h.crc
            self.emit(batch_line(h, valid), {"type": "batch", "file": path, **batch_json(h), "valid": valid})
            if not valid:
                self.error(path, f"{path} at byte {pos}: record batch is corrupt (stored crc = {h.crc}, "
                                 f"computed crc = {compute_crc(data, h.magic)})")
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

    def _scan(self, seg: LogSegment) -> SegmentScan:
        scan = self._scans.get(seg.log.path)
        if scan is None:
            scan = self._scans[seg.log.path] = scan_segment(seg)
        return scan

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
            problems = index_problems(seg, self._scan(seg))
            mine = [p for p in problems if p.startswith(path) or p.startswith(index.path)]
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
        if self.args.verify_index_only:
            return
        for e in seg.txn_index.entries():
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
    files = expand(args.paths)
    decoder = None
    if getattr(args, "decode_values", False):
        from .schemas import decoder_for

        args.print_data = True
        decoder = decoder_for(args.paths[0], args.schemas)
    show = sys.stderr.isatty() and not sys.stdout.isatty()
    with Progress(sum(_log_bytes(files)), "dump", enabled=show) as progress, \
            remote_segments(getattr(args, "config", None)) as remote:
        dumper = Dumper(args, progress=progress, remote=remote, decoder=decoder)
        for f in files:
            dumper.dump(f)
    return 1 if dumper.failed else 0
