"""`lookupd verify PATH...`: what Kafka's recovery checks, over segments, partition dirs, log dirs or tiered
segments (`s3://BUCKET/KEY`, as `dump` takes them), read-only.

For each segment: every batch's CRC and framing (a cut-off tail of the active segment is the broker's
append in progress, not a problem), its offsets (in order, within the segment's 32-bit range, after the
segment before), each index against the log (lookupd.tools.verify.index_problems: every entry, and a
rolled segment's time index ending with its max timestamp at the offset Kafka gives it), the index files
a rolled segment must have, and the `.txnindex` against the ABORT markers, replayed from the start of the
partition (a local partition only; a tiered segment's transactions began in segments not read here).

One line per problem, then `N segments, M problems`; `--json` gives the same as objects. Exit status 1
when there is a problem. What `lookupd recover` leaves, this accepts.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass

from ..errors import CorruptDataError, LookupdError
from ..format.names import parse_segment_file
from ..log.locallog import list_segments
from ..log.segment import LogSegment
from .dump import expand
from .producerstate import TransactionTracker
from .progress import Progress
from .remotedump import RemoteSegments, is_remote, remote_segments, split_url
from ..log.remotesegment import RemoteSegment
from .verify import SegmentScan, index_problems, offset_problems, rebuild_reasons, scan_segment, \
    time_index_last_entry, txn_index_problems


@dataclass(frozen=True)
class Problem:
    """One thing wrong, in the file it is in; `check` says which check found it."""

    file: str
    check: str  # batches, offsets, missing, offset_index, time_index, txn_index, read
    message: str


class Verifier:
    """Checks segments and counts them; the problems found so far are in `problems`."""

    def __init__(self, remote: RemoteSegments | None = None, progress: Progress | None = None):
        self.remote = remote
        self.progress = progress
        self.segments = 0
        self.problems: list[Problem] = []

    def partition(self, directory: str, wanted: set[int] | None = None) -> list[Problem]:
        """The segments of one partition dir (those in `wanted`, else all), replayed from its first segment
        on: the transactions open when a segment starts began in the ones before it."""
        bases = list_segments(directory)
        tracker = TransactionTracker()
        previous_last: int | None = None
        replayed = True  # whether every batch before this segment was read (the .txnindex check needs it)
        found: list[Problem] = []
        for i, base in enumerate(bases):
            if wanted is not None and base > max(wanted):
                break
            checked = wanted is None or base in wanted
            seg = LogSegment(directory, base, live=i == len(bases) - 1)
            try:
                aborted = []

                def on_batch(header, data):
                    txn = tracker.observe_batch(header, data, seg.log.path)
                    if txn is not None:
                        aborted.append(txn)
                    if checked and self.progress is not None:
                        self.progress.advance(header.size)

                scan = scan_segment(seg, check_crc=checked, on_batch=on_batch)
                if checked:
                    self.segments += 1
                    found += segment_problems(seg, scan, previous_last, aborted if replayed else None)
                replayed = replayed and not scan.problems
                previous_last = int(scan.last_offsets[-1]) if len(scan.last_offsets) else previous_last
            except (CorruptDataError, OSError) as err:  # a control record that cannot be read, a vanished file
                if checked:
                    found.append(Problem(seg.log.path, "read", _reason(err, seg.log.path)))
                replayed = False
            finally:
                seg.close()
        self.problems += found
        return found

    def tiered(self, url: str) -> list[Problem]:
        """One tiered segment (its `.log` or `.indexes` URL): batches, offsets, indexes."""
        found: list[Problem] = []
        try:
            seg, _ = self.remote.open(url)
        except (LookupdError, OSError) as err:  # the store's faults, an object gone
            found.append(Problem(url, "read", _reason(err)))
        else:
            try:
                scan = scan_segment(seg, check_crc=True)
                self.segments += 1
                found += segment_problems(seg, scan, None, None)
            except (LookupdError, OSError) as err:
                found.append(Problem(url, "read", _reason(err)))
            finally:
                seg.close()
        self.problems += found
        return found


def segment_problems(seg: LogSegment, scan: SegmentScan, previous_last: int | None,
                     aborted: list | None) -> list[Problem]:
    """Everything wrong with one segment (`aborted`: the ABORT markers' entries, None when unknown)."""
    log_path = seg.log.path
    out = [Problem(log_path, "batches", p) for p in scan.problems]
    out += [Problem(log_path, "offsets", p) for p in offset_problems(seg, scan, previous_last)]
    if seg.live:  # the broker's: its index files come and go with it, and it has no final time-index entry yet
        messages = index_problems(seg, scan) + (txn_index_problems(seg, aborted) if aborted is not None else [])
    elif isinstance(seg, RemoteSegment):  # its indexes are parts of one .indexes object, read as it is
        messages = index_problems(seg, scan) + time_index_last_entry(seg, scan)
    else:
        messages = rebuild_reasons(seg, scan, aborted)
    directory = os.path.dirname(log_path)
    checks = {seg.offset_index.path: "offset_index", seg.time_index.path: "time_index",
              seg.txn_index.path: "txn_index"}
    for message in messages:
        path = next((p for p in checks if message.startswith(p)), None)
        if path is not None:
            out.append(Problem(path, checks[path], message))
        elif message.endswith(" is missing") or " is missing (" in message:  # named by its file name alone
            name = message.split(" ", 1)[0]
            out.append(Problem(os.path.join(directory, name), "missing", os.path.join(directory, message)))
        else:
            out.append(Problem(log_path, "batches", message))
    return out


def _targets(paths: list[str]) -> tuple[dict[str, set[int] | None], list[str]]:
    """Partition dirs with the segments wanted in each (None: all), and tiered segment URLs (one per segment)."""
    dirs: dict[str, set[int] | None] = {}
    urls: dict[str, str] = {}
    for path in paths:
        files = expand([path])
        whole = os.path.isdir(path)
        for f in files:
            if is_remote(f):
                split_url(f)
                urls.setdefault(f.rsplit(".", 1)[0], f)  # a segment's .log and .indexes are one segment
                continue
            directory = os.path.dirname(os.path.abspath(f))
            if whole:
                dirs[directory] = None
            elif dirs.get(directory, set()) is not None:
                dirs.setdefault(directory, set()).add(parse_segment_file(os.path.basename(f))[0])
    return dirs, list(urls.values())


def _reason(err: BaseException, path: str = "") -> str:
    """An error as one line naming its file."""
    if isinstance(err, OSError) and err.strerror:
        return f"{err.filename or path}: {err.strerror}"
    return str(err)


def _say(problem: Problem, as_json: bool, progress: Progress) -> None:
    progress.write(json.dumps({"type": "problem", **asdict(problem)}, separators=(",", ":")) if as_json
                   else problem.message)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def run(args) -> int:
    dirs, urls = _targets(args.paths)
    total = sum(os.path.getsize(os.path.join(d, f)) for d in dirs for f in os.listdir(d) if f.endswith(".log"))
    show = sys.stderr.isatty() and not sys.stdout.isatty()
    with Progress(total, "verify", enabled=show) as progress, \
            remote_segments(getattr(args, "config", None)) as remote:
        verifier = Verifier(remote, progress)
        for directory, wanted in dirs.items():
            for p in verifier.partition(directory, wanted):
                _say(p, args.json, progress)
        for url in urls:
            for p in verifier.tiered(url):
                _say(p, args.json, progress)
        n, m = verifier.segments, len(verifier.problems)
        progress.write(json.dumps({"type": "summary", "segments": n, "problems": m}, separators=(",", ":"))
                       if args.json else f"{_plural(n, 'segment')}, {_plural(m, 'problem')}")
    return 1 if verifier.problems else 0
