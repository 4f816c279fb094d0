"""The example jobs (replay to Parquet, hourly counts) on data written by lookupd's writer."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from spark_fixtures import core_rows, spark, written_daemon, written_dir  # noqa: F401

from spark_client.examples import hourly, replay  # noqa: E402
from spark_client.examples.common import epoch_millis  # noqa: E402

FROM, TO = "2026-01-01T04:30:00Z", "2026-01-01T10:00:00+00:00"


def window(rows: list[tuple], start: int, end: int) -> list[tuple]:
    """Rows from the first record at or after `start` up to the first at or after `end` (ListOffsets)."""
    first = next(r[0] for r in rows if r[1] >= start)
    stop = next((r[0] for r in rows if r[1] >= end), rows[-1][0] + 1)
    return [r for r in rows if first <= r[0] < stop]


def test_replay_writes_the_window_to_parquet(spark, written_daemon, written_dir, tmp_path):
    out = str(tmp_path / "replay")
    args = replay.parse_args(["--topic", "orders", "--from", FROM, "--to", TO, "--out", out,
                              "--address", written_daemon])
    n = replay.run(args, spark)
    expected = [r for p in range(3) for r in window(core_rows(written_dir, "orders", p), epoch_millis(FROM),
                                                     epoch_millis(TO))]
    assert n == len(expected) > 500
    written = spark.read.parquet(out)
    assert "headers" in written.columns
    assert sorted(r["offset"] for r in written.where("partition = 1").select("offset").collect()) == \
        [r[0] for r in window(core_rows(written_dir, "orders", 1), epoch_millis(FROM), epoch_millis(TO))]


def test_hourly_counts(spark, written_daemon, written_dir):
    args = hourly.parse_args(["--topic", "clicks,payments", "--address", written_daemon,
                              "--isolation-level", "read_committed"])
    got = hourly.run(args, spark)
    clicks = Counter(datetime.fromtimestamp(r[1] / 1000, timezone.utc).strftime("%Y-%m-%d %H:00")
                     for r in core_rows(written_dir, "clicks", 0))
    assert [(h, n) for h, t, n in got if t == "clicks"] == sorted(clicks.items())
    payments = sum(n for _, t, n in got if t == "payments")
    assert 0 < payments < len(core_rows(written_dir, "payments", 0))  # aborted transactions left out
