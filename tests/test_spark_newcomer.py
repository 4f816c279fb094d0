"""Spark as a newcomer meets it: a script of their own with PYSPARK_PYTHON unset, a mistake in a read told in
one line (not Spark's 170 lines of Java and Python), and the examples leaving no half-written output."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

from spark_fixtures import spark, written_daemon, written_dir  # noqa: F401

from spark_client.examples import replay

SCRIPT = textwrap.dedent("""
    import os, sys
    from pyspark.sql import SparkSession
    import spark_client

    def session():
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("FATAL")
        return spark

    spark = session()  # PYSPARK_PYTHON unset: the workers would run `python3`
    spark_client.register(spark)
    read = spark.read.format("kafka-segments").option("lookupd.address", sys.argv[1])
    print("records:", read.option("subscribe", "clicks").load().count(), flush=True)
    try:
        read.option("subscribe", "no-such-topic").load().count()
    except Exception as err:
        print("one line:", spark_client.one_line(err), flush=True)
    spark.stop()
    os.environ["PYSPARK_PYTHON"] = "python3"  # now chosen, and it cannot import spark_client
    spark_client.register(session())  # uncaught: its one line, then exit 1
""")


def user_script(tmp_path, daemon: str) -> subprocess.CompletedProcess:
    """SCRIPT run as a user runs it, where `python3` is an interpreter without this package or pyspark."""
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    python3 = bare / "python3"
    python3.write_text(f"#!/bin/sh\nexec {os.path.join(sys.base_prefix, 'bin', 'python3')} -S \"$@\"\n")
    python3.chmod(python3.stat().st_mode | stat.S_IEXEC)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    clean["PATH"] = f"{bare}:{clean.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run([sys.executable, str(script), daemon], env=clean, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)


def test_a_users_own_script(tmp_path, written_daemon):
    """register(spark) gives the workers this interpreter when PYSPARK_PYTHON is unset, a read's mistake is
    one line, and workers that cannot import the package fail at register, in one line."""
    r = user_script(tmp_path, written_daemon)
    out = r.stdout.splitlines()
    assert out[0].startswith("records: ") and int(out[0].split()[1]) > 0, r.stderr[-3000:]
    assert out[1] == (f"one line: OptionError: topic(s) no-such-topic not found: no partition of them is served by "
                      f"lookupd at {written_daemon}"), r.stdout
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"WorkerPythonError: Spark's workers run python3, which cannot import spark_client and pyarrow: set "
        f"PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python) before the SparkSession is created, or install "
        f"kafka-lookupd[spark] for python3"), r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]


def test_replay_prints_the_one_line_and_leaves_no_output(spark, written_daemon, tmp_path, capsys):
    out = tmp_path / "replay"
    argv = ["--topic", "no-such-topic", "--address", written_daemon, "--out", str(out)]
    assert replay.main(argv, spark=spark) == 1
    err = capsys.readouterr().err
    assert err == f"OptionError: topic(s) no-such-topic not found: no partition of them is served by lookupd at " \
                  f"{written_daemon}\n"
    assert not out.exists()
    argv = ["--topic", "orders", "--address", str(tmp_path / "nowhere.sock"), "--out", str(out)]
    assert replay.main(argv, spark=spark) == 1
    assert capsys.readouterr().err.startswith(f"Unavailable: cannot reach lookupd at {tmp_path / 'nowhere.sock'}: ")
    assert not out.exists()


def test_replay_into_an_existing_dir_names_overwrite(tmp_path, capsys):
    (tmp_path / "replay").mkdir()
    assert replay.main(["--topic", "orders", "--out", str(tmp_path / "replay")]) == 1
    assert capsys.readouterr().err == f"replay: {tmp_path / 'replay'} already exists: pass --overwrite to replace it\n"
