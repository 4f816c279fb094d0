"""`lookupd schemas`: the subjects, versions and ids a `_schemas` topic holds, read from its log.

Also where `dump --decode-values` finds the topic: `<log dir>/_schemas-0` beside the paths dumped.
"""

from __future__ import annotations

import json
import os
import sys

from ..errors import LookupdError
from ..format.names import parse_partition_dir
from ..format.schemas import DEFAULT_TOPIC, Registry
from ..format.wire import ValueDecoder, require
from ..log.locallog import LocalLog
from ..log.schemastore import read_registry


def partition_dir(path: str, topic: str | None = None) -> str:
    """The schemas topic's partition directory for `path`: itself when it is one, else `<path>/<topic>-0`
    (for a log dir), else `<its parent>/<topic>-0` (for a partition dir or a segment file)."""
    topic = topic or DEFAULT_TOPIC
    path = os.path.abspath(path)
    name = os.path.basename(path)
    if os.path.isdir(path) and name == f"{topic}-0":
        return path
    for root in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        candidate = os.path.join(root, f"{topic}-0")
        if os.path.isdir(candidate):
            return candidate
    raise LookupdError(f"no {topic}-0 directory in or beside {path}: name the schemas topic's partition "
                       f"directory (--schemas DIR), or its topic if not {DEFAULT_TOPIC}")


def load(directory: str) -> Registry:
    """The registry state after every record of the schemas topic in `directory`."""
    name = parse_partition_dir(os.path.basename(directory))
    llog = LocalLog(directory, name[0] if name else DEFAULT_TOPIC, 0)
    try:
        return read_registry(llog)
    finally:
        llog.close()


def decoder_for(path: str, schemas: str | None = None) -> ValueDecoder:
    """A decoder with the schemas of the topic beside `path` (or in directory `schemas`)."""
    require()
    return ValueDecoder(load(schemas or partition_dir(path)))


def run(args) -> int:
    reg = load(partition_dir(args.path, args.topic))
    out = sys.stdout
    for subject, versions in reg.subjects(include_deleted=args.deleted).items():
        for sv in versions:
            if args.json:
                out.write(json.dumps(sv.to_json(), separators=(",", ":")) + "\n")
                continue
            refs = "" if not sv.references else " references: " + ", ".join(
                f"{r.name}={r.subject}/{r.version}" for r in sv.references)
            out.write(f"subject: {subject} version: {sv.version} id: {sv.id} type: {sv.schema_type}"
                      f"{' deleted' if sv.deleted else ''}{refs}\n")
    if reg.skipped_count:
        print(f"lookupd schemas: {reg.skipped_count} records of the topic were passed over; the first: "
              f"{reg.skipped[0]}", file=sys.stderr)
    return 0
