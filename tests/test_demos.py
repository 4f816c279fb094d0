"""The demos a newcomer runs (`make demo-tiered`, `make demo-tls`, i.e. `lookupd demo-data DIR --tiered/--tls`),
end to end: the demo started as a user starts it, every command it prints run as printed, and each answer
checked against the same sample generated fully local (same records, same seed) and read in process."""

from __future__ import annotations

import json
import os
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from daemon_helpers import REPO
from spark_fixtures import spark  # noqa: F401 - the shared Spark session
from test_fusefs_helpers import require_fuse, unmount

from lookupd.log.logmanager import LogManager
from lookupd.tools import s3local
from lookupd.tools.demo import generate
from lookupd.tools.tlsdemo import DENIED, EXTENSIONS, RECIPE

RECORDS = 6000  # three segments per orders partition: two uploaded by the tiered demo, one deleted locally
# The shared Spark session's executors read the demo's bucket: the S3 server's fixed credentials must be in
# this process's environment before that session starts (as in test_spark_tiered.py).
for _k, _v in (("AWS_ACCESS_KEY_ID", s3local.ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", s3local.SECRET_KEY),
               ("AWS_REGION", s3local.REGION)):
    os.environ.setdefault(_k, _v)


class Demo:
    """`lookupd demo-data DIR FLAG` as a subprocess: the lines it prints before serving, its log after."""

    def __init__(self, flag: str):
        self.dir = tempfile.mkdtemp(prefix="lkdemo", dir="/tmp")  # short: the Unix socket's path is in it
        self.root = os.path.join(self.dir, "demo")
        self.err = os.path.join(self.dir, "stderr")
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "lookupd", "demo-data", self.root, flag, "--records",
                                          str(RECORDS)], stdout=subprocess.PIPE, stderr=err, text=True,
                                         env=dict(os.environ, PYTHONPATH=REPO))
        self.lines = []
        while not self.lines or "(Ctrl-C stops" not in self.lines[-1]:
            line = self.proc.stdout.readline()
            assert line, (self.lines, self.log())
            self.lines.append(line.rstrip("\n"))
        deadline = time.monotonic() + 60
        while "serving" not in self.log():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log()
            time.sleep(0.1)

    def log(self) -> str:
        with open(self.err) as f:
            return f.read()

    def commands(self) -> list[str]:
        """The commands printed to try next, as printed (two-space indented lines)."""
        return [line.strip().split("   (")[0] for line in self.lines if line.startswith("  ")]

    def stop(self) -> None:
        """Ctrl-C, as a user stops it; it must end cleanly, its S3 server with it."""
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(60) == 0, self.log()[-3000:]
        s3 = os.path.join(self.root, "s3")
        left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).find(f"-dir={s3}") >= 0]
        assert not left, left
        shutil.rmtree(self.dir, ignore_errors=True)


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def sh(command: str) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.fixture(scope="module")
def full_sample(tmp_path_factory):
    """The demo's sample, generated again and left whole: the answers of record."""
    root = str(tmp_path_factory.mktemp("full") / "logs")
    generate(root, RECORDS, 1)
    lm = LogManager([root])
    yield lm
    lm.close()


def _answer(llog, method: str, *params):
    r = getattr(llog, method)(*params)
    return None if r is None else {k: getattr(r, k) for k in r._fields}


def test_demo_tiered_end_to_end(full_sample, spark):  # noqa: F811
    require_fuse()
    demo = Demo("--tiered")
    try:
        commands = demo.commands()
        assert len(commands) == 6, demo.lines
        partitions, by_time, by_offset, verify, mount, spark_read = commands
        got = {(p["topic"], p["partition"]): (p["log_start_offset"], p["log_end_offset"])
               for p in json.loads(sh(partitions).stdout)}
        assert got == {(l.topic, l.partition): (l.info()["log_start_offset"], l.info()["log_end_offset"])
                       for l in full_sample.logs()}
        for command in (by_time, by_offset):  # answered from the bucket: the segments are deleted locally
            words = shlex.split(command)
            method, topic, partition, arg = words[-4:]
            assert not os.path.exists(os.path.join(demo.root, "logs", f"{topic}-{partition}",
                                                   f"{0:020d}.log"))
            from lookupd.format.times import parse_time
            value = parse_time(arg) if method == "offset_for_timestamp" else int(arg)
            got, want = json.loads(sh(command).stdout), _answer(full_sample.get(topic, int(partition)), method, value)
            assert got == {k: want[k] for k in got} and len(got) >= 4, (got, want)
        r = sh(verify)
        assert (r.returncode, r.stdout) == (0, "1 segment, 0 problems\n"), r.stderr
        mnt = mount.split(" --config ")[1].split()[1]
        try:
            r = sh(mount)
            assert r.returncode == 0, r.stderr
            listed = r.stdout.split()
        finally:
            unmount(mnt)
        assert f"{0:020d}.remote.log" in listed and "partition.json" in listed, listed
        script = spark_read.split()[-1]
        rows = runpy.run_path(script, run_name="demo")["read"](spark).collect()
        assert [(r.partition, r.records, r.first_offset, r.last_offset) for r in rows] == \
            [(l.partition, l.info()["log_end_offset"], 0, l.info()["log_end_offset"] - 1)
             for l in full_sample.logs() if l.topic == "orders"]
    finally:
        demo.stop()


def test_demo_tls_end_to_end(full_sample):
    demo = Demo("--tls")
    try:
        allowed, denied = demo.commands()
        assert "--tls-cert" in allowed and shlex.split(allowed)[-4:] == shlex.split(denied)[-4:]
        method, topic, partition, when = shlex.split(allowed)[-4:]
        from lookupd.format.times import parse_time
        r = sh(allowed)
        assert r.returncode == 0, r.stderr
        got, want = json.loads(r.stdout), _answer(full_sample.get(topic, int(partition)), method, parse_time(when))
        assert got == {k: want[k] for k in got} and len(got) == 4, (got, want)
        r = sh(denied)
        assert r.returncode == 1 and r.stdout == "" and "UNAUTHORIZED" in r.stderr and "CN=someone-else" in r.stderr
    finally:
        demo.stop()


def test_the_openssl_recipe_is_the_one_the_docs_show():
    with open(os.path.join(REPO, "docs", "configuration.md")) as f:
        docs = f.read()
    shown = [shlex.join(argv) for argv in RECIPE if DENIED not in " ".join(argv)]  # the docs make one client
    assert len(shown) == 5 and all(command in docs for command in shown), [c for c in shown if c not in docs]
    for name, text in EXTENSIONS.items():
        assert f"printf '{text.replace(chr(10), chr(92) + 'n')}' > {name}" in docs, name
