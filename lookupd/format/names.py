"""Names on disk: partition directories, segment files and legal topic names (LogFileUtils, Topic).

A broker's log dir holds `<topic>-<partition>` directories; each holds segment files named by
their base offset as 20 digits plus a suffix. Directories and files a broker is deleting or
rewriting carry extra suffixes; readers skip them.
"""

from __future__ import annotations

import logging
import re

from ..errors import InvalidArgument

log = logging.getLogger(__name__)

OFFSET_DIGITS = 20  # a segment file's base offset, zero-padded (LogFileUtils.filenamePrefixFromOffset)
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SNAPSHOT_SUFFIX = ".snapshot"  # the producer state at a segment's base offset (not a segment file: rebuilt on load)

# The broker's other files about a partition: its topic id, and its leader epochs' start offsets.
PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

# Files mid-deletion or mid-rewrite: `.deleted` (async delete), `.cleaned`/`.swap` (log cleaner,
# segment replacement), `.tmp` (in-progress writes, including our own `recover`).
TRANSIENT_FILE_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
# Directories a broker is deleting or moving between log dirs.
TRANSIENT_DIR_SUFFIXES = ("-delete", "-future", "-stray")
# Other files a broker keeps in a partition directory, which carry no segment data.
KNOWN_OTHER_FILES = re.compile(rf"[0-9]{{{OFFSET_DIGITS}}}{re.escape(SNAPSHOT_SUFFIX)}|{re.escape(LEADER_EPOCH_CHECKPOINT)}|"
                               rf"{re.escape(PARTITION_METADATA)}")

MAX_TOPIC_LENGTH = 249
# Names are checked with fullmatch (a `$` would accept a trailing newline), digits as [0-9] (`\d` and
# str.isdigit take other scripts' digits too).
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>0|[1-9][0-9]{0,9})")
_SEGMENT_FILE = re.compile(rf"(?P<base>[0-9]{{{OFFSET_DIGITS}}})(?P<suffix>\.log|\.index|\.timeindex|\.txnindex)")
_MAX_PARTITION = (1 << 31) - 1


def validate_topic(topic: object) -> str:
    """Return `topic` if it is a legal Kafka topic name, else raise InvalidArgument saying why."""
    if not isinstance(topic, str):
        raise InvalidArgument(f"topic must be a string, got {type(topic).__name__}")
    if not topic:
        raise InvalidArgument("topic name is empty")
    if topic in (".", ".."):
        raise InvalidArgument(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidArgument(f"topic name is {len(topic)} characters, the limit is {MAX_TOPIC_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidArgument(
            f"topic name {topic!r} is illegal: only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return topic


def validate_partition(partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidArgument(f"partition must be an integer, got {type(partition).__name__}")
    if not 0 <= partition <= _MAX_PARTITION:
        raise InvalidArgument(f"partition {partition} is out of range (0..{_MAX_PARTITION})")
    return partition


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) for a `<topic>-<partition>` directory name, None for anything else."""
    if name.endswith(TRANSIENT_DIR_SUFFIXES):
        log.debug("skipping %s: directory is being deleted or moved by the broker", name)
        return None
    m = _PARTITION_DIR.fullmatch(name)
    if m is None:
        return None
    topic, partition = m["topic"], int(m["partition"])
    if topic in (".", "..") or len(topic) > MAX_TOPIC_LENGTH or partition > _MAX_PARTITION:
        return None
    return topic, partition


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{validate_topic(topic)}-{validate_partition(partition)}"


def filename_prefix(offset: int) -> str:
    """The offset zero-padded to OFFSET_DIGITS, as LogFileUtils.filenamePrefixFromOffset: what every segment
    file's name (and a remote segment's object key) starts with."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`%020d` base offset plus suffix, as LogFileUtils.filenamePrefixFromOffset."""
    return filename_prefix(base_offset) + suffix


def parse_segment_file(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) for a segment file name; None (with a debug log) for anything else."""
    m = _SEGMENT_FILE.fullmatch(name)
    if m is not None:
        return int(m["base"]), m["suffix"]
    if name.endswith(TRANSIENT_FILE_SUFFIXES):
        log.debug("skipping %s: file is being deleted or rewritten by the broker", name)
    elif not KNOWN_OTHER_FILES.fullmatch(name):
        log.debug("skipping %s: not a segment file (expected a 20-digit base offset and a known suffix)", name)
    return None
