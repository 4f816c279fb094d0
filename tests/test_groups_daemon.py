"""The daemon's `groups` and `group_offsets`: the real daemon as a subprocess, kept current as
`__consumer_offsets` grows, rolls and is cleaned, answering what a full replay of the files answers,
and [[acl]] rules with groups."""

from __future__ import annotations

import os
import signal
import time

import pytest

from coordinator_writer import Cleaner, CoordinatorLog, Record, commit_key, commit_value, group_key, group_value
from daemon_helpers import blocking_call, short_dir, start_daemon, stop_daemon  # noqa: F401 - a fixture
from lookupd.format.builder import build_batch
from lookupd.log.coordinators import Coordinators
from lookupd.log.logmanager import LogManager
from lookupd.log.positions import group_offset_columns
from lookupd.rpc.client import Client
from lookupd.tools.writer import LogWriter


def full_replay(log_dir, group):
    answer = group_offset_columns(Coordinators(LogManager([log_dir]), 1), group)
    return {k: v for k, v in answer.items() if k != "warnings"}


def call(sock, method, *params):
    error, result = blocking_call(sock, method, *params)
    assert error is None, error
    return result


def settle(proc, sock, log_dir, group):
    """SIGHUP (a rescan at once), then the daemon's answer, once it is the full replay's."""
    proc.send_signal(signal.SIGHUP)
    want = full_replay(log_dir, group)
    deadline = time.monotonic() + 10
    while True:
        got = call(sock, "group_offsets", group, "read_uncommitted")
        got.pop("warnings")
        if got == want or time.monotonic() > deadline:
            return got, want
        time.sleep(0.05)


def test_group_offsets_follow_the_log_as_it_grows_rolls_and_is_cleaned(short_dir):
    logs = os.path.join(short_dir, "logs")
    d = os.path.join(logs, "__consumer_offsets-0")
    log = CoordinatorLog(d, segment_bytes=600)
    data = LogWriter(os.path.join(logs, "orders-0"))
    data.append(build_batch([(1, b"k", b"v", ())] * 40, base_offset=0))
    data.close()
    log.write([Record(group_key("app"), group_value("consumer", 1, "range", ["m1", "m2"]))])
    log.write([Record(commit_key("app", "orders", 0), commit_value(5))])
    log.writer.segment.flush()
    cfg = os.path.join(short_dir, "lookupd.toml")
    with open(cfg, "w") as f:
        f.write("offsets_topic_partitions = 1\nrescan_interval_s = 60\n")
    sock = os.path.join(short_dir, "s")
    proc = start_daemon(["--log-dir", logs, "--socket", sock, "--config", cfg], short_dir, sock)
    try:
        first = call(sock, "group_offsets", "app", "read_uncommitted")
        assert (first["type"], first["state"]) == ("classic", "Stable")
        o = first["offsets"]
        assert (o["committed_offset"], o["log_end_offset"], o["lag"]) == ([5], [40], [35])
        for step in range(6):  # grows, rolls (600-byte segments)
            log.write([Record(commit_key("app", "orders", p), commit_value(10 * step + p)) for p in range(3)])
            log.write([Record(commit_key("app", "orders", 1), commit_value(100 + step))], producer_id=77,
                      producer_epoch=0)
            if step % 2:
                log.marker(77, 0, commit=step % 4 == 1)
            log.writer.segment.flush()
            got, want = settle(proc, sock, logs, "app")
            assert got == want, step
        assert len([n for n in os.listdir(d) if n.endswith(".log")]) > 2
        # the cleaner rewrites the rolled segments and swaps them in under their names
        log.marker(77, 0, commit=True)
        log.writer.close()
        Cleaner(d).clean(log.offset)
        log.writer.__init__(d, segment_bytes=600, index_interval_bytes=1024, max_index_size=1 << 16)
        log.writer.next_offset = log.offset
        log.writer.roll(log.offset)
        log.write([Record(commit_key("app", "orders", 2), commit_value(999))])
        log.writer.segment.flush()
        got, want = settle(proc, sock, logs, "app")
        assert got == want
        assert dict(zip(got["offsets"]["partition"], got["offsets"]["committed_offset"])) == {0: 50, 1: 105, 2: 999}
        listing = call(sock, "groups")
        assert [g["group"] for g in listing["groups"]] == ["app"] and listing["warnings"] == []
        with Client(sock) as c:
            assert c.group_offsets("app")["offsets"] == got["offsets"]
            assert c.groups()["groups"][0]["members"][1]["member_id"] == "m2"
        error, _ = blocking_call(sock, "group_offsets", "nobody", "read_uncommitted")
        assert error["code"] == "UNKNOWN_GROUP"
        error, _ = blocking_call(sock, "group_offsets", "app", "dirty")
        assert error["code"] == "INVALID_ARGUMENT"
    finally:
        log.close()
        code, err = stop_daemon(proc)
    assert code == 0, err


def test_acl_rules_name_groups(short_dir):
    logs = os.path.join(short_dir, "logs")
    log = CoordinatorLog(os.path.join(logs, "__consumer_offsets-0"))
    log.write([Record(commit_key(g, t, 0), commit_value(1)) for g in ("app-1", "other") for t in ("orders", "secret")])
    log.close()
    cfg = os.path.join(short_dir, "lookupd.toml")
    with open(cfg, "w") as f:
        f.write(f'offsets_topic_partitions = 1\n[[acl]]\nprincipal = "unix:{os.getuid()}"\ntopics = ["orders"]\n'
                f'groups = ["app-*"]\noperations = ["describe"]\n')
    sock = os.path.join(short_dir, "s")
    proc = start_daemon(["--log-dir", logs, "--socket", sock, "--config", cfg], short_dir, sock)
    try:
        assert [g["group"] for g in call(sock, "groups")["groups"]] == ["app-1"]
        assert call(sock, "group_offsets", "app-1", "read_uncommitted")["offsets"]["topic"] == ["orders"]
        error, _ = blocking_call(sock, "group_offsets", "other", "read_uncommitted")
        assert error["code"] == "UNAUTHORIZED" and "group 'other'" in error["message"]
    finally:
        code, err = stop_daemon(proc)
    assert code == 0, err


def test_group_rules_are_checked():
    from lookupd.daemon.acl import Acl
    from lookupd.errors import InvalidArgument

    acl = Acl.from_config([{"principal": "token:*", "groups": ["app-*"], "operations": ["describe"]}])
    assert acl.allowed_group("token:a", "app-x", "describe") and not acl.allowed_group("token:a", "ops", "describe")
    assert not acl.allowed("token:a", "app-x", "describe")  # a group rule names no topic
    for bad, why in (({"principal": "x", "operations": ["describe"]}, "topics = .*groups = "),
                     ({"principal": "x", "groups": [], "operations": ["describe"]}, "groups must be a non-empty"),
                     ({"principal": "x", "groups": ["g"], "operations": ["read"]}, "only described")):
        with pytest.raises(InvalidArgument, match=why):
            Acl.from_config([bad])
