"""The virtual tree: every path the mount answers, and what each one is. The layout, described once.

    /                                   one directory per topic
    /<topic>/                           one directory per partition number
    /<topic>/<partition>/
        <base>.log                      the segment's own files, bytes as on disk (true sizes,
        <base>.index                    random access). .index/.timeindex/.txnindex appear
        <base>.timeindex                only where they exist, and only when the log dir is
        <base>.txnindex                 on this host (the daemon serves no index bytes)
        <base>.records.jsonl            every record of the segment, one JSON object a line
        <base>.index.txt                `offset: O position: P`, one entry a line
        <base>.timeindex.txt            `timestamp: T offset: O`
        <base>.txnindex.txt             `version: V producerId: P firstOffset: F lastOffset: L lastStableOffset: S`
        partition.json                  log start/end offsets, segments with offset and time ranges
        at-offset/                      navigation: names are resolved on lookup, never listed
            <offset>.jsonl              records from <offset> to the end of the partition (.jsonl optional
                                        in at-offset/ and at-time/: at-offset/1234 is the same file)
            <from>-<to>.jsonl           records with from <= offset < to
        at-time/
            <time>.jsonl                records from the first one with timestamp >= <time>
            <from>--<to>.jsonl          records from ListOffsets(from) up to ListOffsets(to), excluded
        by-key/
            <key>.jsonl                 every record whose key is <key>, in offset order
    /<topic>/by-key/<key>.jsonl         the same over all the topic's partitions, partition by partition
    /__groups/<group>.json              a consumer group's committed offsets, log end offsets and lag (the
                                        daemon's group_offsets), for each group in __consumer_offsets
                                        (there when the daemon serves a partition of __consumer_offsets)
    /__schemas/                         the Schema Registry's subjects (from its `_schemas` topic)
        <subject>/<version>.avsc        each version's schema text: .avsc (Avro), .proto, .json (JSON
                                        Schema); a soft-deleted version is <version>.deleted.<ext>

`<base>` is the segment's base offset as 20 digits, as in the log dir. Navigation files
start exactly at their offset: records before it in the batch that holds it are skipped
(an offset in a gap starts at the next record); they run across segments to the end of
the partition as it is when the reader gets there. An offset outside [log start, log end]
is ENOENT; the log end itself is an empty file. `at-time` resolves through the daemon's
ListOffsets (the first segment whose largest timestamp >= time, then its first record at
or after it); what follows is in offset order, out-of-order timestamps included, and a
time range is the offset range between the two answers (to the end when `to` finds no
record). Times are those of lookupd.format.times: epoch milliseconds, ISO-8601
(`2026-01-01T10:00:00Z`, `2026-01-01T10:00:00.250+00:00`, `2026-01-01`; no zone means UTC), a
time before now (`-1h`) or `now`, and ListOffsets' `earliest`, `latest`, `max`.

A key (and a subject) is named by its text when it is valid UTF-8 and a legal file name (not "." or "..", no
"/" or NUL, at most 255 bytes with ".jsonl", not starting with "base64:"); any other key is
`base64:` and the key in URL-safe base64 (RFC 4648 section 5; padding optional). Records
without a key have no file. `by-key/` is never listed: names are resolved on lookup.

A group is named as a key is (`<group>.json`, or `base64:` and the group's bytes in URL-safe base64
for a group id that is no legal file name).

Names are strict: a topic that is not a legal Kafka name,
a partition with leading zeros, a base offset that is not 20 digits, an unknown suffix or
a navigation name that does not parse are ENOENT; a well-formed navigation name whose
numbers cannot be valid (beyond int64, a range ending before it starts) is EINVAL.
"""

from __future__ import annotations

import base64
import binascii
import errno
import re
from typing import NamedTuple

from lookupd.errors import INT64_MAX, InvalidArgument
from lookupd.format import times
from lookupd.format.names import validate_topic

from .binding import FuseOSError

RAW = ("log", "index", "timeindex", "txnindex")
# Generated views of a segment, and the on-disk file each is made from (and shown beside).
VIEWS = {"records.jsonl": "log", "index.txt": "index", "timeindex.txt": "timeindex", "txnindex.txt": "txnindex"}
PARTITION_JSON = "partition.json"
AT_OFFSET = "at-offset"
AT_TIME = "at-time"
BY_KEY = "by-key"
NAV_DIRS = (AT_OFFSET, AT_TIME, BY_KEY)
GROUPS = "__groups"  # consumer groups, beside the topics (a topic of that name is hidden by it)
CONSUMER_OFFSETS = "__consumer_offsets"  # where they are: __groups/ is there when a partition of it is
KEY_BASE64 = "base64:"
JSONL = ".jsonl"
JSON = ".json"
NAME_MAX = 255

_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")
_SEGMENT = re.compile(r"([0-9]{20})\.(remote\.)?(" + "|".join(re.escape(s) for s in (*RAW, *VIEWS)) + r")")
_AT_OFFSET = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_URLSAFE = re.compile(r"[A-Za-z0-9_-]*={0,2}")


class Root(NamedTuple):
    pass


class Topic(NamedTuple):
    topic: str


class Partition(NamedTuple):
    topic: str
    partition: int


class SegmentFile(NamedTuple):
    """One of a segment's files: raw (`log`, `index`, ...) or a view (`records.jsonl`, ...)."""

    topic: str
    partition: int
    base_offset: int
    suffix: str
    remote: bool = False  # named <base>.remote.<suffix>: a segment in the bucket (fusefs.tiers)

    @property
    def raw(self) -> bool:
        return self.suffix in RAW

    @property
    def disk_suffix(self) -> str:
        """The on-disk file this shows, or is made from."""
        return VIEWS.get(self.suffix, self.suffix)


class PartitionJson(NamedTuple):
    topic: str
    partition: int


class NavDir(NamedTuple):
    topic: str
    partition: int
    kind: str  # AT_OFFSET or AT_TIME


class AtOffset(NamedTuple):
    """Records with start <= offset < end (end None: to the end of the partition)."""

    topic: str
    partition: int
    start: int
    end: int | None


class AtTime(NamedTuple):
    """Records from ListOffsets(start) up to ListOffsets(end), excluded (end None: to the end)."""

    topic: str
    partition: int
    start: int
    end: int | None


class ByKeyDir(NamedTuple):
    """`by-key/` of a partition, or of a whole topic (partition None)."""

    topic: str
    partition: int | None


class ByKey(NamedTuple):
    """Every record whose key equals `key`, of a partition or of a whole topic (partition None)."""

    topic: str
    partition: int | None
    key: bytes


class GroupsDir(NamedTuple):
    """`/__groups/`: a file per consumer group."""


class GroupFile(NamedTuple):
    group: str


class SchemasDir(NamedTuple):
    """`__schemas/`: one directory per subject."""


class SubjectDir(NamedTuple):
    subject: str


class SchemaFile(NamedTuple):
    """One version of a subject's schema; `deleted`: named as a soft-deleted version."""

    subject: str
    version: int
    ext: str
    deleted: bool = False

    @property
    def name(self) -> str:
        return f"{self.version}{'.deleted' if self.deleted else ''}.{self.ext}"


SCHEMAS = "__schemas"
SCHEMA_EXTENSIONS = {"AVRO": "avsc", "PROTOBUF": "proto", "JSON": "json"}  # by schemaType
_SCHEMA_FILE = re.compile(r"([1-9][0-9]{0,9})(\.deleted)?\.(avsc|proto|json)")

Node = Root | Topic | Partition | SegmentFile | PartitionJson | NavDir | AtOffset | AtTime | ByKeyDir | ByKey | \
    GroupsDir | GroupFile | SchemasDir | SubjectDir | SchemaFile
DIRECTORIES = (Root, Topic, Partition, NavDir, ByKeyDir, GroupsDir, SchemasDir, SubjectDir)


def key_file_name(key: bytes, suffix: str = JSONL) -> str:
    """The file name of a key's by-key file, with suffix `.json` of a group's, with suffix "" of a subject's
    directory (see the module docstring)."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text and text not in (".", "..") and "/" not in text and "\0" not in text \
            and not text.startswith(KEY_BASE64) and len((text + suffix).encode()) <= NAME_MAX:
        return text + suffix
    return KEY_BASE64 + base64.urlsafe_b64encode(key).decode("ascii") + suffix


def group_file_name(group: str) -> str:
    return key_file_name(group.encode("utf-8", "surrogateescape"), JSON)


def schema_file_name(version: int, schema_type: str, deleted: bool) -> str:
    return f"{version}{'.deleted' if deleted else ''}.{SCHEMA_EXTENSIONS[schema_type]}"


def parse_key_name(name: str, suffix: str = JSONL) -> bytes:
    """The key a by-key file name names (a group file name with suffix `.json`, a subject's directory with
    suffix ""); ENOENT for one that names none."""
    if not name.endswith(suffix) or name == suffix:
        raise _missing()
    stem = name[:-len(suffix)] if suffix else name
    if not stem.startswith(KEY_BASE64):
        return stem.encode("utf-8", "surrogateescape")
    text = stem[len(KEY_BASE64):]
    if not _URLSAFE.fullmatch(text):
        raise _missing()
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise _missing() from None


def _missing() -> FuseOSError:
    return FuseOSError(errno.ENOENT)


def _int64(text: str) -> int:
    if len(text) > 19 or int(text) > INT64_MAX:
        raise FuseOSError(errno.EINVAL)
    return int(text)


def parse_time(text: str) -> int:
    """Epoch milliseconds (or ListOffsets' -2, -1, -3) from a name: the grammar of lookupd.format.times."""
    try:
        return times.parse_time(text)
    except times.NotATime:
        raise _missing() from None
    except InvalidArgument:
        raise FuseOSError(errno.EINVAL) from None


def _range(start: int, end: int | None) -> tuple[int, int | None]:
    """A range's bounds; EINVAL when it ends before it starts (ListOffsets' negative sentinels are not times)."""
    if end is not None and 0 <= end < start:
        raise FuseOSError(errno.EINVAL)
    return start, end


def _nav(topic: str, partition: int, kind: str, name: str) -> AtOffset | AtTime:
    """A navigation name, its `.jsonl` optional (`at-offset/1234` is `at-offset/1234.jsonl`)."""
    stem = name[:-len(JSONL)] if name.endswith(JSONL) else name
    if kind == AT_OFFSET:
        m = _AT_OFFSET.fullmatch(stem)
        if m is None:
            raise _missing()
        end = m[2]
        return AtOffset(topic, partition, *_range(_int64(m[1]), None if end is None else _int64(end)))
    parts = stem.split("--")
    if len(parts) > 2 or not all(parts):
        raise _missing()
    bounds = [parse_time(p) for p in parts]
    return AtTime(topic, partition, *_range(bounds[0], bounds[1] if len(bounds) == 2 else None))


def parse(path: str) -> Node:
    """The node a path names; FuseOSError ENOENT (or EINVAL, see above) for anything else."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return Root()
    if parts[0] == SCHEMAS:
        return _schemas(parts)
    if parts[0] == GROUPS:
        if len(parts) == 1:
            return GroupsDir()
        if len(parts) == 2:
            return GroupFile(parse_key_name(parts[1], JSON).decode("utf-8", "surrogateescape"))
        raise _missing()
    try:
        topic = validate_topic(parts[0])
    except InvalidArgument:
        raise _missing() from None
    if len(parts) == 1:
        return Topic(topic)
    if parts[1] == BY_KEY:
        if len(parts) == 2:
            return ByKeyDir(topic, None)
        if len(parts) == 3:
            return ByKey(topic, None, parse_key_name(parts[2]))
        raise _missing()
    if not _PARTITION.fullmatch(parts[1]) or int(parts[1]) > (1 << 31) - 1:
        raise _missing()
    partition = int(parts[1])
    if len(parts) == 2:
        return Partition(topic, partition)
    name = parts[2]
    if len(parts) == 3:
        if name == PARTITION_JSON:
            return PartitionJson(topic, partition)
        if name == BY_KEY:
            return ByKeyDir(topic, partition)
        if name in NAV_DIRS:
            return NavDir(topic, partition, name)
        m = _SEGMENT.fullmatch(name)
        if m is None or int(m[1]) > INT64_MAX:
            raise _missing()
        return SegmentFile(topic, partition, int(m[1]), m[3], m[2] is not None)
    if len(parts) == 4 and name == BY_KEY:
        return ByKey(topic, partition, parse_key_name(parts[3]))
    if len(parts) == 4 and name in NAV_DIRS:
        return _nav(topic, partition, name, parts[3])
    raise _missing()


def _schemas(parts: list[str]) -> SchemasDir | SubjectDir | SchemaFile:
    if len(parts) == 1:
        return SchemasDir()
    try:
        subject = parse_key_name(parts[1], "").decode("utf-8")
    except UnicodeDecodeError:
        raise _missing() from None
    if len(parts) == 2:
        return SubjectDir(subject)
    m = _SCHEMA_FILE.fullmatch(parts[2])
    if len(parts) > 3 or m is None:
        raise _missing()
    return SchemaFile(subject, int(m[1]), m[3], m[2] is not None)


PARTITION_EXTRAS = [PARTITION_JSON, *NAV_DIRS]
