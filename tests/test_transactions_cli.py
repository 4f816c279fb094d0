"""`lookupd transactions`: transactional ids as the transaction log holds them, and `--hanging`: transactions
open in a data partition that the transaction log shows as complete, missing, or past their timeout."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import reference as R
from coordinator_writer import CoordinatorLog, Record, txn_key, txn_value
from lookupd.format.builder import build_batch, build_control_batch
from lookupd.tools.writer import LogWriter

EMPTY, ONGOING, COMPLETE_COMMIT = 0, 1, 4


def lookupd(*args):
    return subprocess.run([sys.executable, "-m", "lookupd", *args], capture_output=True, text=True)


def test_transactions_json_has_the_names_and_kafkas_states():
    r = lookupd("transactions", "--log-dir", str(R.COORDINATOR / "logs"), "--json")
    assert r.returncode == 0, r.stderr
    listing = json.loads(r.stdout)
    theirs = R.coordinator_answers("__transaction_state-12")["replayed_state"]["transactions"]
    assert [t["transactional_id"] for t in listing] == sorted(theirs)
    for t in listing:
        assert {"transactional_id", "producer_id", "producer_epoch", "state", "partitions", "timeout_ms"} <= set(t)
        k = theirs[t["transactional_id"]]
        assert (t["producer_id"], t["producer_epoch"], t["state"], sorted(t["partitions"]), t["timeout_ms"]) == \
               (k["producer_id"], k["producer_epoch"], k["state"], sorted(k["topic_partitions"]), k["txn_timeout_ms"])


def test_hanging_transactions_are_those_the_transaction_log_does_not_hold_open(tmp_path):
    now = int(time.time() * 1000)
    old = now - 3_600_000
    log = CoordinatorLog(str(tmp_path / "__transaction_state-0"))
    log.write([Record(txn_key("done"), txn_value(7, 0, COMPLETE_COMMIT, {}, start=old, updated=old))])
    log.write([Record(txn_key("live"), txn_value(8, 0, ONGOING, {"pay": [0]}, start=now, updated=now))])
    log.write([Record(txn_key("slow"), txn_value(10, 0, ONGOING, {"pay": [0]}, timeout_ms=60000, start=old,
                                                 updated=old))])
    log.write([Record(txn_key("idle"), txn_value(11, 0, EMPTY, None))])
    log.close()
    data = LogWriter(str(tmp_path / "pay-0"))
    at = 0
    for pid, ts in ((7, old), (8, now), (9, now), (10, old), (12, old)):
        data.append(build_batch([(ts, b"k", b"v", ())], base_offset=at, producer_id=pid, producer_epoch=0,
                                base_sequence=0, transactional=True))
        at += 1
    data.append(build_control_batch(at, now, producer_id=12, producer_epoch=0, commit=True, coordinator_epoch=1))
    data.close()
    base = ["transactions", "--log-dir", str(tmp_path), "--partitions", "1"]
    hanging = json.loads(lookupd(*base, "--hanging", "--json").stdout)
    assert {(h["producer_id"], h["reason"], h["transactional_id"]) for h in hanging} == \
           {(7, "complete", "done"), (9, "missing", None), (10, "timed_out", "slow")}
    assert {h["first_offset"] for h in hanging} == {0, 2, 3}
    listing = json.loads(lookupd(*base, "--json").stdout)
    assert [(t["transactional_id"], t["state"], t["partitions"]) for t in listing] == [
        ("done", "CompleteCommit", []), ("idle", "Empty", []), ("live", "Ongoing", ["pay-0"]),
        ("slow", "Ongoing", ["pay-0"])]
    text = lookupd(*base, "--hanging").stdout
    assert "timed_out" in text and "missing" in text
