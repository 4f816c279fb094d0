"""`lookupd verify PATH...`: what Kafka's recovery checks, over segments, partition dirs, log dirs or tiered
segments (`s3://BUCKET/KEY`, as `dump` takes them), read-only.

Each segment is judged by lookupd.tools.verify.check_segment, as `recover` and `dump --verify-index-only`
judge it: every batch framed and its CRC checked (a cut-off tail of the active segment is the broker's append
in progress, not a problem), its offsets within the segment and increasing, each index against the log, a
rolled segment's last time-index entry, and its index files there. A directory's partitions are replayed
from their first segment, so each `.txnindex` is also checked against the ABORT markers; a segment named
alone, or one in the bucket, is judged by itself.

One line per problem, then `N segments, M problems`; `--json` gives the same as objects. Exit status 1
when there is a problem. What `lookupd recover` leaves, this accepts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Iterator

from ..errors import LookupdError
from ..format.names import LOG_SUFFIX, parse_segment_file
from ..log.locallog import list_segments
from ..log.segment import LogSegment
from .dump import expand, partition_dirs_in
from .progress import Progress
from .remotedump import BucketUrls, bucket_urls, is_remote, split_url
from .verify import SegmentCheck, check_partition, check_segment


class Verifier:
    """Judges segments and counts them and their problems; yields (file, message) for each problem."""

    def __init__(self, remote: BucketUrls | None = None, progress: Progress | None = None):
        self.remote = remote
        self.progress = progress
        self.segments = 0
        self.problems = 0

    def _found(self, check: SegmentCheck) -> Iterator[tuple[str, str]]:
        self.segments += 1
        for path, messages in check.problems_by_file().items():
            for message in messages:
                self.problems += 1
                yield path, message

    def partition(self, directory: str) -> Iterator[tuple[str, str]]:
        """Every segment of a partition dir, its transactions replayed from the first."""
        for check in check_partition(directory, progress=self.progress):
            yield from self._found(check)

    def segment(self, directory: str, base: int) -> Iterator[tuple[str, str]]:
        """One local segment, by itself."""
        bases = list_segments(directory)
        seg = LogSegment.open(directory, base, live=bool(bases) and base == bases[-1])
        try:
            check = check_segment(seg, progress=self.progress)
        finally:
            seg.close()
        yield from self._found(check)

    def tiered(self, url: str) -> Iterator[tuple[str, str]]:
        """One tiered segment, from its `.log` or `.indexes` URL; the store's faults are its problems."""
        try:
            seg, _ = self.remote.open(url)
        except (LookupdError, OSError) as err:  # OSError: an object gone
            self.problems += 1
            yield url, f"{url}: {err}" if url not in str(err) else str(err)
            return
        try:
            check = check_segment(seg, progress=self.progress)
        except (LookupdError, OSError) as err:
            self.problems += 1
            yield url, str(err)
            return
        finally:
            seg.close()
        yield from self._found(check)


def _targets(paths: list[str]) -> tuple[list[str], list[tuple[str, int]], list[str]]:
    """Partition dirs to judge whole, segments named alone (directory, base offset), and tiered segment URLs
    (a segment's `.log` and `.indexes` being one segment), each once, in the order given."""
    dirs: dict[str, None] = {}
    segments: dict[tuple[str, int], None] = {}
    urls: dict[str, str] = {}
    for path in paths:
        if is_remote(path):
            split_url(path)  # InvalidArgument before anything is read
            urls.setdefault(path.rsplit(".", 1)[0], path)
        elif os.path.isdir(path):
            dirs.update((os.path.abspath(d), None) for d in partition_dirs_in(path))
        else:
            for f in expand([path]):  # the one-line errors of dump for a missing or misnamed file
                segments[(os.path.dirname(os.path.abspath(f)), parse_segment_file(os.path.basename(f))[0])] = None
    alone = [s for s in segments if s[0] not in dirs]
    return list(dirs), alone, list(urls.values())


def run(args) -> int:
    dirs, alone, urls = _targets(args.paths)
    total = sum(os.path.getsize(os.path.join(d, f)) for d in dirs for f in os.listdir(d) if f.endswith(LOG_SUFFIX))
    show = sys.stderr.isatty() and not sys.stdout.isatty()
    with Progress(total, "verify", enabled=show) as progress, \
            bucket_urls(getattr(args, "config", None)) as remote:
        verifier = Verifier(remote, progress)
        found = [verifier.partition(d) for d in dirs] + [verifier.segment(d, b) for d, b in alone] + \
            [verifier.tiered(u) for u in urls]
        for problems in found:
            for path, message in problems:
                progress.write(json.dumps({"type": "problem", "file": path, "message": message},
                                          separators=(",", ":")) if args.json else message)
        n, m = verifier.segments, verifier.problems
        progress.write(json.dumps({"type": "summary", "segments": n, "problems": m}, separators=(",", ":"))
                       if args.json else f"{_plural(n, 'segment')}, {_plural(m, 'problem')}")
    return 1 if m else 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
