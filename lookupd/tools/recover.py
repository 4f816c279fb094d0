"""`lookupd recover`: rebuild rolled segments' indexes from their `.log`, as LogSegment.recover does.

The batches of the whole partition are replayed in order (the `.txnindex` needs every
transaction still open when a segment starts), and each segment that needs it gets new
`.index`/`.timeindex`/`.txnindex` files, byte-identical to what Kafka writes after recovery
and trimming. New files are written beside the old ones as `*.tmp`, synced, then renamed
into place, so a crash leaves either the old index or the new one, never half of one.

The active (last) segment is never touched: the broker owns it. Nor is any `.log`: a
corrupt tail is reported, not truncated.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from ..errors import LookupdError
from ..log.locallog import list_segments
from ..format.names import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, parse_partition_dir, segment_file_name
from .producerstate import TransactionTracker
from .progress import Progress
from ..log.segment import LogSegment
from .durable import sync_dir, write_atomically
from .verify import offset_problems, rebuild_reasons, scan_segment
from .writer import DEFAULT_INDEX_INTERVAL_BYTES, IndexBuilder, encode_aborted_txn

log = logging.getLogger(__name__)


@dataclass
class SegmentReport:
    """What recover found and did for one segment."""

    base_offset: int
    action: str  # "rebuilt", "ok", "active" (skipped), "would rebuild" (dry run)
    reason: str = ""
    offset_index_entries: int = 0
    time_index_entries: int = 0
    aborted_transactions: int = 0
    invalid_bytes: int = 0  # bytes after the last valid batch (a corrupt or cut-off tail)
    problems: list[str] = field(default_factory=list)


def recover_partition(directory: str, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                      rebuild_all: bool = False, dry_run: bool = False,
                      progress: Progress | None = None) -> list[SegmentReport]:
    """Rebuild the indexes of the rolled segments in one partition directory that need it."""
    bases = list_segments(directory)
    tracker = TransactionTracker()
    reports = []
    previous_last = None  # the last offset of the segment before (its batches must come after it)
    for i, base in enumerate(bases):
        seg = LogSegment(directory, base, live=i == len(bases) - 1)
        try:
            builder = IndexBuilder(base, index_interval_bytes)
            aborted = []

            def on_batch(header, data):
                txn = tracker.observe_batch(header, data, seg.log.path)
                if txn is not None:
                    aborted.append(txn)
                builder.append(header.last_offset, header.max_timestamp, header.last_offset, header.position, header.size)
                if progress is not None:
                    progress.advance(header.size)

            scan = scan_segment(seg, check_crc=not seg.live, on_batch=on_batch)
            unfixable = scan.problems + offset_problems(seg, scan, previous_last)  # the .log's own: reported, not mended
            previous_last = int(scan.last_offsets[-1]) if len(scan.last_offsets) else previous_last
            if seg.live:
                reports.append(SegmentReport(base, "active", "the broker's active segment is left alone"))
                continue
            problems = rebuild_reasons(seg, scan, aborted)
            reason = "rebuilding every rolled segment (--all)" if rebuild_all else "; ".join(problems)
            report = SegmentReport(base, "ok", reason, invalid_bytes=seg.size() - scan.valid_bytes,
                                   problems=unfixable)
            reports.append(report)
            for p in scan.problems:
                log.warning("%s; recovery stops there (%d bytes after it are not indexed)", p, report.invalid_bytes)
            if not reason:
                continue
            builder.roll()
            report.action = "would rebuild" if dry_run else "rebuilt"
            report.offset_index_entries = len(builder.offset_entries)
            report.time_index_entries = len(builder.time_entries)
            report.aborted_transactions = len(aborted)
            if dry_run:
                continue
            seg.close()
            files = {os.path.join(directory, segment_file_name(base, INDEX_SUFFIX)): builder.offset_index_bytes(),
                     os.path.join(directory, segment_file_name(base, TIME_INDEX_SUFFIX)): builder.time_index_bytes()}
            txn_path = os.path.join(directory, segment_file_name(base, TXN_INDEX_SUFFIX))
            if aborted or os.path.exists(txn_path):
                files[txn_path] = b"".join(encode_aborted_txn(t) for t in aborted)
            write_atomically(files)
            sync_dir(directory)
        finally:
            seg.close()
    return reports


def partition_dirs(path: str) -> list[str]:
    """`path` itself if it is a partition directory, else the partition directories in it."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(2, "no such directory", path)
    if parse_partition_dir(os.path.basename(path)) is not None:
        return [path]
    found = sorted(e.path for e in os.scandir(path) if e.is_dir() and parse_partition_dir(e.name) is not None)
    if not found:
        raise LookupdError(f"{path} is neither a partition directory nor a log dir holding partition "
                           f"directories (named <topic>-<partition>)")
    return found


def run(args) -> int:
    dirs = partition_dirs(args.dir)
    total = sum(os.path.getsize(os.path.join(d, f)) for d in dirs for f in os.listdir(d) if f.endswith(".log"))
    failed = 0
    actions: dict[str, int] = {}
    with Progress(total, "recover") as progress:
        for d in dirs:
            for r in recover_partition(d, index_interval_bytes=args.index_interval_bytes, rebuild_all=args.all,
                                       dry_run=args.dry_run, progress=progress):
                actions[r.action] = actions.get(r.action, 0) + 1
                if r.action in ("rebuilt", "would rebuild"):
                    progress.write(f"{d}/{segment_file_name(r.base_offset, '')}: {r.action} ({r.reason}): "
                                   f"{r.offset_index_entries} offset entries, {r.time_index_entries} time entries, "
                                   f"{r.aborted_transactions} aborted transactions")
                for p in r.problems:
                    failed += 1
                    progress.write(f"{d}/{segment_file_name(r.base_offset, '')}: {p}")
    print(_summary(actions, len(dirs)))
    return 1 if failed else 0


def _summary(actions: dict[str, int], partitions: int) -> str:
    """The last line: what was done, or that nothing needed doing."""
    rolled = actions.get("ok", 0) + actions.get("rebuilt", 0) + actions.get("would rebuild", 0)
    where = f"{rolled} rolled segments in {partitions} partition{'s' if partitions != 1 else ''}"
    if actions.get("rebuilt"):
        return f"rebuilt the indexes of {actions['rebuilt']} of {where}; active segments are left to the broker"
    if actions.get("would rebuild"):
        return f"would rebuild the indexes of {actions['would rebuild']} of {where} (--dry-run: nothing written)"
    return f"nothing to do: the indexes of all {where} are sound; active segments are left to the broker"
