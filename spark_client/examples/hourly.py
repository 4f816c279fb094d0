"""Count records per hour (UTC) and topic, straight from the brokers' files.

    python -m spark_client.examples.hourly --topic orders,clicks [--from TIME] [--to TIME] [--address ...]
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from .common import add_source_arguments, failed, session, source_options

HOUR_MS = 3_600_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(ap)
    return ap.parse_args(argv)


def run(args: argparse.Namespace, spark) -> list[tuple[str, str, int]]:
    """(hour as "YYYY-MM-DD HH:00" UTC, topic, records), in hour and topic order."""
    from pyspark.sql import functions as F

    df = spark.read.format("kafka-segments").options(**source_options(args)).load()
    hour = F.floor(F.unix_millis("timestamp") / HOUR_MS)  # epoch hours: independent of the session time zone
    counts = df.groupBy(hour.alias("hour"), "topic").count().orderBy("hour", "topic")
    return [(datetime.fromtimestamp(r["hour"] * HOUR_MS / 1000, timezone.utc).strftime("%Y-%m-%d %H:00"),
             r["topic"], r["count"]) for r in counts.collect()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = session("kafka-segments hourly counts")
    try:
        rows = run(args, spark)
    except Exception as err:
        return failed(err)
    finally:
        spark.stop()
    print(f"{'hour (UTC)':<17} {'topic':<20} {'records':>9}")
    for hour, topic, count in rows:
        print(f"{hour:<17} {topic:<20} {count:>9}")
    print(f"{'total':<38} {sum(r[2] for r in rows):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
