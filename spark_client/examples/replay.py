"""Replay a time window of topics into Parquet, with Spark's Kafka source columns.

    python -m spark_client.examples.replay --topic orders --from 2026-01-01T06:00Z --to 2026-01-01T12:00Z \
        --out run/replay-orders [--address run/lookupd.sock] [--overwrite]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from .common import add_source_arguments, failed, session, source_options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(ap)
    ap.add_argument("--out", required=True, metavar="DIR", help="Parquet output directory")
    ap.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    return ap.parse_args(argv)


def run(args: argparse.Namespace, spark) -> int:
    """Write the window; returns the number of records written."""
    df = spark.read.format("kafka-segments").options(**source_options(args)).option("includeHeaders", "true").load()
    df.write.mode("overwrite" if args.overwrite else "errorifexists").parquet(args.out)
    return spark.read.parquet(args.out).count()


def main(argv: list[str] | None = None, spark=None) -> int:
    """The command; `spark`: a session of the caller's to use (and leave running), else one made and stopped here."""
    args = parse_args(argv)
    local = "://" not in args.out  # a path on this host, not hdfs:// or s3a://
    if local and os.path.exists(args.out) and not args.overwrite:
        print(f"replay: {args.out} already exists: pass --overwrite to replace it", file=sys.stderr)
        return 1
    own = spark is None
    spark = session("kafka-segments replay") if own else spark
    try:
        n = run(args, spark)
    except Exception as err:
        if local and not args.overwrite:  # Spark made it, then the job failed: leave nothing half-written
            shutil.rmtree(args.out, ignore_errors=True)
        return failed(err)
    finally:
        if own:
            spark.stop()
    print(f"wrote {n} records of {args.topic} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
