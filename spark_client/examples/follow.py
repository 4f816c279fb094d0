"""Follow topics as they are written: records per minute (UTC) and topic, updated every trigger.

    python -m spark_client.examples.follow --topic orders,payments,clicks [--seconds 60]
        [--append-to LOG_DIR --rate 200] [--trigger 2] [--starting-offsets latest] [--address ...]

A Structured Streaming query over `kafka-segments`. With --append-to, a writer thread appends
records stamped with the current time to the topics' partitions in LOG_DIR (the log dir the
daemon serves) while the query runs, as a broker would; without it, the query follows whatever
writes the log. It stops after --seconds (or Ctrl-C): the writer stops first, the query reads
what was written, then prints the final counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import datetime, timezone

from lookupd.format.builder import build_batch
from lookupd.rpc.client import Client
from lookupd.tools.writer import LogWriter

from .common import address, failed, session

MINUTE_MS = 60_000
APPEND_INTERVAL_S = 0.25  # the writer appends one batch per partition this often
SEGMENT_BYTES = 64 * 1024  # as `lookupd demo-data` rolls, so appends roll segments too
VISIBLE_TIMEOUT_S = 30.0
SHUFFLE_PARTITIONS = 4  # the daemon shows new segments within its rescan interval


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", default="orders,payments,clicks", help="comma-separated topics")
    ap.add_argument("--address", default=None,
                    help="lookupd socket path, HOST:PORT or JSON map (default $LOOKUPD_SOCKET or run/lookupd.sock)")
    ap.add_argument("--seconds", type=float, default=60.0, help="stop after this long (default 60)")
    ap.add_argument("--trigger", type=float, default=2.0, help="seconds between micro-batches (default 2)")
    ap.add_argument("--starting-offsets", default="latest", choices=["latest", "earliest"])
    ap.add_argument("--append-to", default=None, metavar="LOG_DIR",
                    help="append records to the topics' partitions in this log dir while the query runs")
    ap.add_argument("--rate", type=float, default=200.0, help="records per second --append-to writes (default 200)")
    return ap.parse_args(argv)


class Appender(threading.Thread):
    """Appends records stamped with the current time to every partition of `topics`, from their log end."""

    def __init__(self, log_dir: str, daemon: str, topics: list[str], rate: float):
        super().__init__(name="appender", daemon=True)
        with Client(daemon) as c:
            self.partitions = sorted((p["topic"], p["partition"]) for p in c.partitions() if p["topic"] in topics)
            ends = {(p["topic"], p["partition"]): p["log_end_offset"] for p in c.partitions() if p["topic"] in topics}
        if not self.partitions:
            raise ValueError(f"no partition of {', '.join(topics)} is served by lookupd at {daemon}: "
                             f"nothing to append to")
        self.daemon_address = daemon
        self.writers = {tp: LogWriter(os.path.join(log_dir, f"{tp[0]}-{tp[1]}"), segment_bytes=SEGMENT_BYTES)
                        for tp in self.partitions}
        self.next = dict(ends)
        self.per_batch = max(1, round(rate * APPEND_INTERVAL_S / max(len(self.partitions), 1)))
        self.appended = 0
        self.failure: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.wait(APPEND_INTERVAL_S):
                now = int(time.time() * 1000)
                for tp, w in self.writers.items():
                    base = self.next[tp]
                    recs = [(now, f"{tp[0]}-{base + i}".encode(), b'{"live": true}', ())
                            for i in range(self.per_batch)]
                    w.append(build_batch(recs, base_offset=base))
                    self.next[tp] = base + len(recs)
                    self.appended += len(recs)
        except BaseException as err:  # noqa: BLE001 - reported by finish()
            self.failure = err

    def halt(self) -> None:
        """Stop appending (after the current round)."""
        self._halt.set()

    def finish(self) -> None:
        """Stop appending, close the writers, and wait until the daemon shows every record written."""
        self.halt()
        self.join()
        for w in self.writers.values():
            w.close()
        if self.failure is not None:
            raise RuntimeError(f"appending failed: {self.failure}") from self.failure
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        with Client(self.daemon_address) as c:
            while {(p["topic"], p["partition"]): p["log_end_offset"] for p in c.partitions()
                   if (p["topic"], p["partition"]) in self.next} != self.next:
                if time.monotonic() > deadline:
                    raise TimeoutError("the daemon does not show the appended records")
                time.sleep(0.05)


def run(args: argparse.Namespace, spark, *, report=print) -> dict[tuple[int, str], int]:
    """Run the query for args.seconds; the final {(minute start, epoch ms; topic): records}.
    `report` gets a line per micro-batch."""
    from pyspark.sql import functions as F

    daemon = address(args.address)
    topics = [t.strip() for t in args.topic.split(",") if t.strip()]
    appender = Appender(args.append_to, daemon, topics, args.rate) if args.append_to else None
    starting = args.starting_offsets
    if appender is not None and starting == "latest":  # from where the writer starts, however soon it does
        starting = json.dumps({t: {str(p): o for (t2, p), o in appender.next.items() if t2 == t}
                               for t in sorted({t for t, _ in appender.next})})
    df = (spark.readStream.format("kafka-segments").option("lookupd.address", daemon)
          .option("subscribe", ",".join(topics)).option("startingOffsets", starting).load())
    minute = (F.floor(F.unix_millis("timestamp") / MINUTE_MS) * MINUTE_MS).alias("minute")
    counts: dict[tuple[int, str], int] = {}

    def show(batch, batch_id: int) -> None:  # the aggregate's updated rows
        changed = sorted((r["minute"], r["topic"], r["count"]) for r in batch.collect())
        for m, topic, n in changed:
            counts[(m, topic)] = n
        if changed:
            report(f"micro-batch {batch_id} ({len(changed)} minute-topic counts changed): "
                   + ", ".join(f"{_minute(m)} {t} {n}" for m, t, n in changed))

    query = (df.groupBy(minute, "topic").count().writeStream.outputMode("update").foreachBatch(show)
             .trigger(processingTime=f"{args.trigger} seconds").start())
    try:
        if appender is not None:
            appender.start()
        try:
            query.awaitTermination(args.seconds)
        except KeyboardInterrupt:
            pass
        if appender is not None:
            appender.finish()
        query.processAllAvailable()
    finally:
        if appender is not None and appender.is_alive():
            appender.halt()
        query.stop()
    return counts


def _minute(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A few shuffle partitions: the aggregate is small, and 200 tasks per micro-batch would take seconds.
    spark = session("kafka-segments follow", **{"spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
                                                 "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        counts = run(args, spark, report=lambda line: print(line, flush=True))
    except Exception as err:
        return failed(err)
    finally:
        spark.stop()
    print(f"{'minute (UTC)':<17} {'topic':<20} {'records':>9}")
    for (m, topic), n in sorted(counts.items()):
        print(f"{_minute(m):<17} {topic:<20} {n:>9}")
    print(f"{'total':<38} {sum(counts.values()):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
