"""Times as people write them, turned into Kafka's timestamps: one grammar for `lookupd query` and
the FUSE view's `at-time/` names.

    1767261600000                      epoch milliseconds
    2026-01-01T10:00:00Z               ISO 8601: also 2026-01-01T10:00:00.250+02:00, 2026-01-01 10:00,
                                       2026-01-01; no zone means UTC
    now, -1h, -30m, -90s, -2d, -1w     now, or that long before now (units ms, s, m, h, d, w);
                                       now-1h is -1h
    earliest, latest, max              ListOffsets' -2, -1 and -3: the log start, the log end, the
                                       record with the largest timestamp
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

from ..errors import INT64_MAX, InvalidArgument

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3  # Kafka's ListOffsets sentinels
WORDS = {"earliest": EARLIEST, "latest": LATEST, "max": MAX_TIMESTAMP}
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
GRAMMAR = ("epoch milliseconds, ISO 8601 (2026-01-01T10:00:00Z, 2026-01-01 10:00), a time before now "
           "(-1h, -30m, -2d) or now, or earliest, latest, max")

_DIGITS = re.compile(r"[0-9]+")
BEFORE_NOW = re.compile(r"(?:now)?-([0-9]{1,12})(" + "|".join(UNIT_MS) + r")")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class NotATime(InvalidArgument):
    """Text outside the grammar (the FUSE view answers ENOENT: no such name)."""


def parse_time(text: str, now_ms: int | None = None) -> int:
    """Epoch milliseconds (or a ListOffsets sentinel) for `text`; NotATime outside the grammar,
    InvalidArgument for a time the grammar reads but no timestamp can be (before 1970, past int64)."""
    if _DIGITS.fullmatch(text):
        if len(text) > 19 or int(text) > INT64_MAX:
            raise InvalidArgument(f"time {text} is beyond int64")
        return int(text)
    if text in WORDS:
        return WORDS[text]
    if text == "now" or BEFORE_NOW.fullmatch(text):
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if text == "now":
            return now
        m = BEFORE_NOW.fullmatch(text)
        ms = now - int(m[1]) * UNIT_MS[m[2]]
    else:
        if not text.isascii():  # fromisoformat takes other scripts' digits too
            raise NotATime(f"{text!r} is not a time: give {GRAMMAR}")
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise NotATime(f"{text!r} is not a time: give {GRAMMAR}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        ms = (when - _EPOCH) // timedelta(milliseconds=1)
    if ms < 0:
        raise InvalidArgument(f"time {text} is before 1970 (timestamps are epoch milliseconds >= 0)")
    return ms


def iso(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC with milliseconds (2026-01-01T10:00:00.250Z)."""
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def outside_records(partition: str, start: int, end: int | None, first: dict | None, last: dict | None) -> str | None:
    """Why a time query from `start` (to `end`, not included) finds no record of `partition`, or None when it
    falls within its records. `first` and `last` are offset_for_timestamp's answers for 0 and max (maps with
    offset and timestamp): the first record in offset order and the one with the largest timestamp."""
    if first is None or last is None:
        return f"{partition} holds no records"
    span = f"its timestamps run from {iso(first['timestamp'])} (offset {first['offset']}) to " \
           f"{iso(last['timestamp'])} (offset {last['offset']})"
    if start >= 0 and start > last["timestamp"]:
        return f"every record of {partition} is older than {iso(start)}: {span}"
    if end is not None and 0 <= end <= first["timestamp"]:
        return f"no record of {partition} is older than {iso(end)}: {span}"
    return None
