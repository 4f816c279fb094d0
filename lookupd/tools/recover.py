"""`lookupd recover`: rebuild rolled segments' indexes from their `.log`, as LogSegment.recover does.

The batches of the whole partition are replayed in order (the `.txnindex` needs every
transaction still open when a segment starts), and each segment that `dump --verify-index-only`
rejects gets new `.index`/`.timeindex`/`.txnindex` files, byte-identical to what Kafka writes
after recovery and trimming: both judge a segment with verify.check_segment, so after a recover
verify finds nothing wrong with an index, and a second recover nothing to do. New files are
created as `*.tmp` (O_EXCL|O_NOFOLLOW, in the partition directory opened once), synced, then
renamed into place, so a crash leaves either the old index or the new one, never half of one.

The active (last) segment is never touched: the broker owns it. Nor is any `.log`: a batch that
cannot be framed ends the indexed prefix, as it ends Kafka's recovery, and a batch whose CRC does
not match is reported with its file and byte; neither is truncated (see verify.py for why a
corrupt batch never empties an index).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import LookupdError
from ..format.names import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, parse_partition_dir, segment_file_name
from .durable import Directory, write_atomically
from .progress import Progress
from .verify import check_partition
from .writer import DEFAULT_INDEX_INTERVAL_BYTES, encode_aborted_txn

@dataclass
class SegmentReport:
    """What recover found and did for one segment."""

    base_offset: int
    action: str  # "rebuilt", "ok", "active" (skipped), "would rebuild" (dry run)
    reason: str = ""
    offset_index_entries: int = 0
    time_index_entries: int = 0
    aborted_transactions: int = 0
    invalid_bytes: int = 0  # bytes after the last batch that could be framed (a corrupt or cut-off tail)
    problems: list[str] = field(default_factory=list)  # the `.log`'s, reported and left as they are


def recover_partition(directory: str, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                      rebuild_all: bool = False, dry_run: bool = False,
                      progress: Progress | None = None) -> list[SegmentReport]:
    """Rebuild the indexes of the rolled segments in one partition directory that need it: those that
    `dump --verify-index-only` rejects (both judge with verify.check_segment), or all with `rebuild_all`."""
    reports = []
    with Directory(directory) as files:
        for check in check_partition(directory, index_interval_bytes=index_interval_bytes, progress=progress):
            base = check.base_offset
            if check.live:
                reports.append(SegmentReport(base, "active", "the broker's active segment is left alone"))
                continue
            reason = "rebuilding every rolled segment (--all)" if rebuild_all else \
                "; ".join(message for _, message in check.index_problems)
            report = SegmentReport(base, "ok", reason, invalid_bytes=check.invalid_bytes,
                                   problems=check.scan.problems)
            reports.append(report)
            if not reason:
                continue
            builder, aborted = check.builder, check.aborted
            report.action = "would rebuild" if dry_run else "rebuilt"
            report.offset_index_entries = len(builder.offset_entries)
            report.time_index_entries = len(builder.time_entries)
            report.aborted_transactions = len(aborted)
            if dry_run:
                continue
            new = {segment_file_name(base, INDEX_SUFFIX): builder.offset_index_bytes(),
                   segment_file_name(base, TIME_INDEX_SUFFIX): builder.time_index_bytes()}
            txn_name = segment_file_name(base, TXN_INDEX_SUFFIX)
            if aborted or files.lstat(txn_name) is not None:
                new[txn_name] = b"".join(encode_aborted_txn(t) for t in aborted)
            write_atomically(files, new)
            files.sync()
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
    total = sum(os.path.getsize(os.path.join(d, f)) for d in dirs for f in os.listdir(d) if f.endswith(LOG_SUFFIX))
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
    print(_summary(actions, len(dirs), failed))
    return 1 if failed else 0


def _summary(actions: dict[str, int], partitions: int, log_problems: int = 0) -> str:
    """The last line: what was done, or that nothing needed doing (and how many `.log` problems were
    reported above: recover leaves every `.log` as it is)."""
    rolled = actions.get("ok", 0) + actions.get("rebuilt", 0) + actions.get("would rebuild", 0)
    where = f"{rolled} rolled segments in {partitions} partition{'s' if partitions != 1 else ''}"
    logs = f"; {log_problems} problem{'s' if log_problems != 1 else ''} in .log files reported above, the " \
           "files left as they are" if log_problems else ""
    if actions.get("rebuilt"):
        return f"rebuilt the indexes of {actions['rebuilt']} of {where}; active segments are left to the broker{logs}"
    if actions.get("would rebuild"):
        return f"would rebuild the indexes of {actions['would rebuild']} of {where} (--dry-run: nothing written){logs}"
    return f"nothing to do: the indexes of all {where} are sound; active segments are left to the broker{logs}"
