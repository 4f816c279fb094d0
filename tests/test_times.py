"""One time grammar for `lookupd query` and the FUSE view's at-time/ names (lookupd.format.times)."""

from __future__ import annotations

import errno

import pytest

from fusefs import tree
from fusefs.binding import FuseOSError
from lookupd.errors import InvalidArgument
from lookupd.format.times import EARLIEST, LATEST, MAX_TIMESTAMP, NotATime, parse_time

NOW = 1767261600000  # 2026-01-01T10:00:00Z


@pytest.mark.parametrize("text, ms", [
    ("1767261600000", NOW), ("0", 0), ("2026-01-01T10:00:00Z", NOW), ("2026-01-01T10:00:00.250Z", NOW + 250),
    ("2026-01-01T12:00:00+02:00", NOW), ("2026-01-01 10:00", NOW), ("2026-01-01T10:00", NOW),
    ("2026-01-01", NOW - 10 * 3_600_000), ("now", NOW), ("-1h", NOW - 3_600_000), ("now-1h", NOW - 3_600_000),
    ("-30m", NOW - 1_800_000), ("-90s", NOW - 90_000), ("-500ms", NOW - 500), ("-2d", NOW - 2 * 86_400_000),
    ("-1w", NOW - 7 * 86_400_000), ("earliest", EARLIEST), ("latest", LATEST), ("max", MAX_TIMESTAMP),
])
def test_the_grammar(text, ms):
    assert parse_time(text, now_ms=NOW) == ms


@pytest.mark.parametrize("text", ["", "yesterday", "-1", "-1y", "1h", "now+1h", "2026-02-30", "\u0661\u0662",
                                  "Latest", "-h"])
def test_text_outside_the_grammar_says_what_would_do(text):
    with pytest.raises(NotATime, match="is not a time: give epoch milliseconds, ISO 8601"):
        parse_time(text, now_ms=NOW)


@pytest.mark.parametrize("text", ["1969-12-31", "9223372036854775808", "-57w"])
def test_times_no_timestamp_can_be(text):
    with pytest.raises(InvalidArgument) as err:
        parse_time(text, now_ms=1000)
    assert not isinstance(err.value, NotATime)


def test_the_fuse_view_names_take_the_same_grammar():
    assert tree.parse("/orders/0/at-time/latest.jsonl") == tree.AtTime("orders", 0, LATEST, None)
    assert tree.parse("/orders/0/at-time/2026-01-01T10:00:00Z--max.jsonl") == tree.AtTime("orders", 0, NOW, MAX_TIMESTAMP)
    assert tree.parse("/orders/0/at-time/earliest--2026-01-01T10:00:00Z.jsonl") == tree.AtTime("orders", 0, EARLIEST, NOW)
    start, end = tree.parse("/orders/0/at-time/-1h--now.jsonl")[2:]
    assert 3_600_000 <= end - start < 3_601_000  # two reads of the clock
    for name, code in (("yesterday.jsonl", errno.ENOENT), ("1969-12-31.jsonl", errno.EINVAL), ("2--1.jsonl", errno.EINVAL)):
        with pytest.raises(FuseOSError) as err:
            tree.parse(f"/orders/0/at-time/{name}")
        assert err.value.errno == code, name
