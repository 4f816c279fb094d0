"""`fusefs mount` and `fusefs umount`: a broker's log dirs as a read-only file tree (layout: fusefs.tree).

Bad arguments end in one line saying what is wrong and what to do, exit status 1. Without
`--foreground` the command returns once the mount is in place and the file system keeps
running in the background (logging to `--log-file`, else to syslog when there is one).
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import shutil
import subprocess
import sys

from lookupd.rpc.address import default_address, tcp_address
from lookupd.rpc.client import Client
from lookupd.errors import LookupdError, Unauthorized, Unavailable

FS_TYPE = "fusefs"  # shows as fuse.fusefs in /proc/mounts
# libfuse 3's own limit on the threads serving requests, said again as the most kept idle: libfuse
# 3.14 takes an unset idle limit for an invalid value and prints "Ignoring invalid max threads
# value" at every mount. With at most this many threads, no idle one is ever stopped: as unset.
MAX_THREADS = 10


class UsageError(Exception):
    pass


def _verbose_after(command: argparse.ArgumentParser) -> None:
    """-v after the subcommand too (not set unless given, so a -v before it counts when none follows)."""
    command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="as fusefs -v")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fusefs", description="Kafka log dirs as a read-only file tree, via lookupd.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="debug logging (-vv: fusepy's too)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    m = sub.add_parser("mount", help="mount the tree (topics / partitions / segments) on an empty directory")
    _verbose_after(m)
    m.add_argument("mountpoint", metavar="MOUNTPOINT")
    m.add_argument("--socket", metavar="ADDRESS", default=None,
                   help="lookupd's Unix socket, HOST:PORT or tls://HOST:PORT (default $LOOKUPD_SOCKET or "
                        "run/lookupd.sock)")
    m.add_argument("--log-dir", action="append", dest="log_dirs", default=[], metavar="DIR",
                   help="read partitions found under DIR from local files (repeatable); without it the daemon's "
                        "own log dirs are read locally when --socket is a Unix socket, else everything "
                        "comes through the daemon")
    m.add_argument("--foreground", action="store_true", help="stay in the foreground until unmounted (systemd)")
    m.add_argument("--allow-other", action="store_true", help="let other users read the mount (FUSE allow_other)")
    m.add_argument("--ttl", type=float, default=1.0, metavar="SECONDS",
                   help="how long listings from the daemon are reused (default 1)")
    m.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long one daemon call may take before the file operation fails with EIO (default 10)")
    m.add_argument("--token-file", metavar="FILE", help="shared-secret token for a TCP daemon")
    m.add_argument("--tls-ca", metavar="FILE", help="CA certificate(s) to verify a tls:// daemon with (default: "
                                                    "the system's)")
    m.add_argument("--tls-cert", metavar="FILE", help="client certificate for mutual TLS")
    m.add_argument("--tls-key", metavar="FILE", help="its private key (if not in --tls-cert)")
    m.add_argument("--log-file", metavar="FILE", help="log here instead of stderr (foreground) or syslog")
    m.add_argument("--config", metavar="FILE", default=None,
                   help="the daemon's TOML config: its [remote] table shows the segments in the bucket too, "
                        "named <base>.remote.<suffix> (see docs/fusefs.md)")

    m.add_argument("--no-decode-values", dest="decode_values", action="store_false",
                   help="show keys and values in Confluent's wire format as bytes (by default they are decoded "
                        "with the schemas of the daemon's _schemas topic, when it has one)")

    u = sub.add_parser("umount", help="unmount a fusefs mount")
    _verbose_after(u)
    u.add_argument("mountpoint", metavar="MOUNTPOINT")
    u.add_argument("--lazy", action="store_true", help="detach now even if files are open (umount -l)")
    return p


def check_mountpoint(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"mountpoint {path} does not exist; create it with mkdir -p {path}")
    if not os.path.isdir(path):
        raise UsageError(f"mountpoint {path} is not a directory")
    if os.path.ismount(path):
        raise UsageError(f"{path} is already a mount point; unmount it first (fusefs umount {path})")
    if os.listdir(path):
        raise UsageError(f"mountpoint {path} is not empty; mount on an empty directory")


def _logging(args) -> None:
    """INFO from fusefs and lookupd by default; -v: their DEBUG; -vv: everything, fusepy's too."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if args.log_file:
        handler: logging.Handler = logging.FileHandler(os.path.abspath(args.log_file))
    elif args.foreground:
        handler = logging.StreamHandler()
    elif os.path.exists("/dev/log"):
        handler = logging.handlers.SysLogHandler("/dev/log")
        fmt = "fusefs[%(process)d]: %(levelname)s %(name)s: %(message)s"
    else:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(level=logging.WARNING if args.verbose < 2 else logging.DEBUG, handlers=[handler])
    for name in ("fusefs", "lookupd"):
        logging.getLogger(name).setLevel(logging.INFO if args.verbose == 0 else logging.DEBUG)


def mount(args) -> int:
    from .binding import KafkaFUSE
    from .catalog import Catalog
    from .daemon import DaemonLink
    from .ops import MAX_READ, KafkaFS

    mountpoint = os.path.abspath(args.mountpoint)
    check_mountpoint(mountpoint)
    for d in args.log_dirs:
        if not os.path.isdir(d):
            raise UsageError(f"--log-dir {d} does not exist or is not a directory")
    if args.ttl <= 0 or args.timeout <= 0:
        raise UsageError("--ttl and --timeout must be positive")
    address = args.socket or default_address()
    same_host = tcp_address(address) is None
    if same_host:
        address = os.path.abspath(address)  # the background process runs from /
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    # paths made absolute: the background process runs from /
    tls = {f"tls_{k}": os.path.abspath(v) for k in ("ca", "cert", "key") if (v := getattr(args, f"tls_{k}"))}
    with Client(address, token=token, timeout=5.0, **tls) as client:  # closed before FUSE forks into the background
        client.call("ping")
    remote = None
    if args.config:
        from lookupd.errors import LookupdError

        from .tiers import BucketSegments
        try:
            remote = BucketSegments(args.config)
        except LookupdError as err:
            raise UsageError(f"--config {args.config}: {err}") from None
    _logging(args)
    catalog = Catalog(DaemonLink(address, token=token, timeout=args.timeout, tls=tls), log_dirs=args.log_dirs,
                      same_host=same_host, ttl=args.ttl)
    try:
        KafkaFUSE(KafkaFS(catalog, remote=remote, decode_values=args.decode_values), mountpoint, raw_fi=True, foreground=args.foreground, ro=True,
                  default_permissions=True, allow_other=args.allow_other, auto_unmount=True, max_read=MAX_READ,
                  max_idle_threads=MAX_THREADS, fsname="kafka-lookupd", subtype=FS_TYPE)
    except RuntimeError:
        raise UsageError(f"mounting on {mountpoint} failed (libfuse said why just above)") from None
    return 0


def is_mounted(path: str) -> bool:
    """Whether something is mounted at `path`, without touching it (a stuck mount would hang a stat)."""
    escaped = path.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    with open("/proc/self/mounts") as f:
        return any(line.split(" ")[1] == escaped for line in f)


def umount(args) -> int:
    mountpoint = os.path.abspath(args.mountpoint)
    if not is_mounted(mountpoint):
        raise UsageError(f"{mountpoint} is not a mount point")
    tool = shutil.which("fusermount") or shutil.which("fusermount3")
    if tool is not None:
        cmd = [tool, "-u", *(["-z"] if args.lazy else []), mountpoint]
    else:
        cmd = ["umount", *(["-l"] if args.lazy else []), mountpoint]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"{cmd[0]} exited with {done.returncode}"])[-1]
        hint = "; close what is open under it, or use --lazy" if "busy" in why else ""
        raise UsageError(f"cannot unmount {mountpoint}: {why}{hint}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return mount(args) if args.command == "mount" else umount(args)
    except UsageError as err:
        print(f"fusefs {args.command}: {err}", file=sys.stderr)
    except Unavailable as err:
        hint = "" if "lookupd serve" in str(err) else "; is `lookupd serve` running there? (--socket ADDRESS)"
        print(f"fusefs {args.command}: {err}{hint}", file=sys.stderr)
    except LookupdError as err:
        hint = "; pass the daemon's token with --token-file" if err.code == Unauthorized.code else ""
        print(f"fusefs {args.command}: lookupd refused: {err}{hint}", file=sys.stderr)
    except OSError as err:
        where = f": {err.filename}" if err.filename else ""
        print(f"fusefs {args.command}: {err.strerror or err}{where}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1
