"""Run a command while a lookupd daemon serves some log dirs: start, wait until it answers, run, stop.

    python -m spark_client.examples.with_daemon --log-dir DIR [--socket PATH] -- COMMAND [ARG...]

For the Makefile's Spark targets and the Spark tests; in production the daemon runs under
systemd (see systemd/).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

from lookupd.rpc.client import Client
from lookupd.errors import Unavailable

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


@contextmanager
def running_daemon(log_dirs: list[str], socket_path: str, *, config: str | None = None) -> Iterator[subprocess.Popen]:
    """`lookupd serve` in a subprocess of this Python, answering on `socket_path` until the block ends
    (`config`: a TOML config file, for settings the command line does not have)."""
    cmd = [sys.executable, "-m", "lookupd", "serve", "--socket", socket_path]
    if config:
        cmd += ["--config", config]
    for d in log_dirs:
        cmd += ["--log-dir", d]
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=stderr)
        try:
            _wait_ready(proc, socket_path, stderr)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(proc: subprocess.Popen, socket_path: str, stderr) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            stderr.seek(0)
            raise RuntimeError(f"lookupd serve exited with status {proc.returncode}: "
                               f"{stderr.read().decode(errors='replace').strip()}")
        try:
            with Client(socket_path, timeout=5) as client:
                client.ping()
            return
        except Unavailable:
            if time.monotonic() > deadline:
                raise RuntimeError(f"lookupd serve did not answer on {socket_path} within {START_TIMEOUT_S} s")
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-dir", action="append", required=True, dest="log_dirs", metavar="DIR")
    ap.add_argument("--socket", default=os.path.join("run", "spark-lookupd.sock"), metavar="PATH")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    with running_daemon(args.log_dirs, args.socket):
        return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
