"""`lookupd query` as a user types it: params read by what they are (topics as text, times in one grammar),
the methods in --help, and usage mistakes in one line. Against a real daemon over the reference corpus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

import pytest

import reference as R
from daemon_helpers import start_daemon, stop_daemon
from lookupd.daemon.service import METHODS
from lookupd.rpc.methods import PARAMS

ORIGIN = datetime(1970, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def daemon():
    """A daemon over plain-0 and the same files as topic `2024` (a topic name that is a JSON number)."""
    d = tempfile.mkdtemp(prefix="lkq", dir="/tmp")
    logs = os.path.join(d, "logs")
    for name in ("plain-0", "2024-0"):
        shutil.copytree(R.log_dir("plain-0"), os.path.join(logs, name))
    sock = os.path.join(d, "s")
    proc = start_daemon(["--log-dir", logs, "--socket", sock], d, sock)
    yield sock
    stop_daemon(proc)
    shutil.rmtree(d, ignore_errors=True)


def query(sock: str | None, *args: str) -> subprocess.CompletedProcess:
    where = ["--socket", sock] if sock else []
    r = subprocess.run([sys.executable, "-m", "lookupd", "query", *where, *args], capture_output=True, text=True,
                       timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def answer(sock: str, *args: str):
    r = query(sock, *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_timestamps_in_iso_8601_and_listoffsets_words(daemon):
    stamps = sorted(b["max_timestamp"] for b in R.batches("plain-0"))
    t = stamps[len(stamps) // 2]
    by_ms = answer(daemon, "offset_for_timestamp", "plain", "0", str(t))
    assert by_ms is not None and by_ms["timestamp"] >= t
    assert answer(daemon, "offset_for_timestamp", "plain", "0", iso(t)) == by_ms
    minute = datetime.fromtimestamp(t // 60_000 * 60, timezone.utc)
    assert answer(daemon, "offset_for_timestamp", "plain", "0", minute.strftime("%Y-%m-%d %H:%M")) == \
        answer(daemon, "offset_for_timestamp", "plain", "0", str(t // 60_000 * 60_000))
    for word, sentinel in (("latest", "-1"), ("earliest", "-2"), ("max", "-3")):
        assert answer(daemon, "offset_for_timestamp", "plain", "0", word) == \
            answer(daemon, "offset_for_timestamp", "plain", "0", sentinel), word
    assert answer(daemon, "lookup_timestamp", "plain", "0", iso(t), "floor") == \
        answer(daemon, "lookup_timestamp", "plain", "0", str(t), "floor")
    many = answer(daemon, "offsets_for_timestamps", "plain", "0", json.dumps([iso(t), t, "latest"]))
    assert many == answer(daemon, "offsets_for_timestamps", "plain", "0", json.dumps([t, t, -1]))
    # Times relative to now: the corpus was written long ago, so nothing is that late.
    assert answer(daemon, "offset_for_timestamp", "plain", "0", "-1h") is None
    assert answer(daemon, "offset_for_timestamp", "plain", "0", "now") is None


def test_a_time_outside_the_grammar_is_one_line_naming_it(daemon):
    r = query(daemon, "offset_for_timestamp", "plain", "0", "yesterday")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "'yesterday' is not a time" in r.stderr and "2026-01-01T10:00:00Z" in r.stderr and "-1h" in r.stderr


def test_epoch_seconds_get_a_hint(daemon):
    seconds = sorted(b["max_timestamp"] for b in R.batches("plain-0"))[-1] // 1000
    r = query(daemon, "offset_for_timestamp", "plain", "0", str(seconds))
    assert r.returncode == 0, r.stderr  # still asked as written: epoch milliseconds
    assert f"{seconds} looks like epoch seconds" in r.stderr and f"{seconds * 1000}" in r.stderr, r.stderr
    assert "looks like" not in query(daemon, "offset_for_timestamp", "plain", "0", str(seconds * 1000)).stderr


def test_a_numeric_topic_name_stays_a_topic(daemon):
    assert answer(daemon, "resolve_offset", "2024", "0", "10") == answer(daemon, "resolve_offset", "plain", "0", "10")
    assert answer(daemon, "segments", "2024", "0") == answer(daemon, "segments", "plain", "0")


def test_verbose_after_the_subcommand(daemon):
    assert answer(daemon, "ping", "-v") == "pong"
    r = subprocess.run([sys.executable, "-m", "lookupd", "dump", "-vv", str(R.log_dir("plain-0"))],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("Dumping"), r.stderr


def test_help_lists_the_methods_and_no_method_is_one_line():
    r = query(None, "--help")
    assert r.returncode == 0
    for name, params in PARAMS.items():
        assert f"  {name} {' '.join(p.upper() for p in params)}".rstrip() + "\n" in r.stdout, name
    r = query(None)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "give a METHOD: ping" in r.stderr, r.stderr


def test_the_clients_method_table_is_the_daemons():
    assert PARAMS == {name: m.params for name, m in METHODS.items()}


def test_a_time_past_every_record_says_so_with_the_partitions_span(daemon):
    """Issue 44: `offset_for_timestamp ... -1h` on older data was a bare null."""
    first = answer(daemon, "offset_for_timestamp", "plain", "0", "0")
    last = answer(daemon, "offset_for_timestamp", "plain", "0", "max")
    assert (first["offset"], last["timestamp"]) == (0, max(b["max_timestamp"] for b in R.batches("plain-0")))
    later = last["timestamp"] + 1
    r = query(daemon, "offset_for_timestamp", "plain", "0", str(later))
    assert (r.returncode, r.stdout) == (0, "null\n")  # the answer itself is Kafka's
    assert r.stderr == (f"lookupd query: every record of plain-0 is older than {iso(later)}: its timestamps run "
                        f"from {iso(first['timestamp'])} (offset 0) to {iso(last['timestamp'])} (offset "
                        f"{last['offset']})\n")
    assert "every record of plain-0 is older than" in query(daemon, "offset_for_timestamp", "plain", "0", "-1h").stderr
    assert query(daemon, "offset_for_timestamp", "plain", "0", str(last["timestamp"])).stderr == ""  # within: no word


def test_unknown_partition_names_the_nearest_topics(daemon):
    r = query(daemon, "resolve_offset", "plian", "0", "10")
    assert r.returncode == 1 and r.stderr.startswith("lookupd query: UNKNOWN_PARTITION: partition plian-0 is not in "
                                                     "the log dirs (")
    assert r.stderr.endswith("); nearest topics: plain\n"), r.stderr
    assert query(daemon, "resolve_offset", "plain", "7", "10").stderr.endswith("); topic plain has partitions 0\n")
    assert query(daemon, "segments", "zzzzzz", "0").stderr.endswith(
        "); no topic served has a name near it (the partitions method lists them)\n")


def test_a_numeric_group_id_stays_a_group():
    from lookupd.tools.query import parse_params

    assert parse_params("group_offsets", ["2024", "read_committed"], print) == ["2024", "read_committed"]
