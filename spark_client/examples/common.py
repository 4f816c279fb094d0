"""What the example jobs share: the Spark session, the daemon address, times on the command line, and errors
printed as the one line that says what is wrong."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from lookupd.rpc.address import default_address, tcp_address


def session(app_name: str, **config: str):
    """The job's SparkSession with kafka-segments registered (local[*] unless spark-submit says otherwise);
    `config`: Spark settings, for a new session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # local workers: this interpreter, with lookupd
    from pyspark.sql import SparkSession

    import spark_client

    builder = SparkSession.builder.appName(app_name)
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Spark logs a failed job's Java stack trace at ERROR; the error itself reaches main() (see failed).
    spark.sparkContext.setLogLevel("FATAL")
    spark_client.register(spark)
    return spark


def failed(err: BaseException) -> int:
    """Exit status 1 for a job that failed with an error of ours (an unknown topic, an unreachable daemon, a bad
    option), printed as its one line (spark_client.one_line); anything else is raised on, traceback and all."""
    from spark_client import one_line

    line = one_line(err)
    if line is None:
        raise err
    print(line, file=sys.stderr)
    return 1


def add_source_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--topic", required=True, help="topic, or comma-separated topics")
    ap.add_argument("--from", dest="start", type=epoch_millis, default=None, metavar="TIME",
                    help="first record time: ISO 8601 (UTC unless it has an offset) or epoch milliseconds")
    ap.add_argument("--to", dest="end", type=epoch_millis, default=None, metavar="TIME",
                    help="stop before the first record at or after this time (default: the log end)")
    ap.add_argument("--address", default=None,
                    help="lookupd socket path, HOST:PORT or JSON map (default $LOOKUPD_SOCKET or run/lookupd.sock)")
    ap.add_argument("--isolation-level", default="read_uncommitted", choices=["read_uncommitted", "read_committed"])


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """kafka-segments options for --topic/--from/--to/--address/--isolation-level."""
    opts = {"subscribe": args.topic, "lookupd.address": address(args.address), "isolationLevel": args.isolation_level}
    if args.start is not None:
        # A window after the last record is empty, not an error.
        opts.update(startingTimestamp=str(args.start), startingOffsetsByTimestampStrategy="latest")
    if args.end is not None:
        opts["endingTimestamp"] = str(args.end)
    return opts


def address(given: str | None) -> str:
    """The daemon address, a relative socket path made absolute (tasks may run elsewhere)."""
    value = given or default_address()
    if value.lstrip().startswith("{") or tcp_address(value):
        return value
    return os.path.abspath(value)


def epoch_millis(text: str) -> int:
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time or epoch milliseconds: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)
