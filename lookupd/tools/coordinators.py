"""`lookupd groups` and `lookupd transactions`: consumer groups, their positions and lag, and
transactional ids, replayed from `__consumer_offsets` and `__transaction_state` in the log dirs."""

from __future__ import annotations

import json
import sys
import time

from ..format.internal.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from ..log.logmanager import LogManager
from ..log.positions import coordinators_of, group_offsets, groups, hanging_transactions, transactions
from .progress import Progress


def _coordinators(args, topic: str):
    manager = LogManager(args.log_dirs)
    c = coordinators_of(manager, args.partitions)
    total = sum(seg.size() for llog in manager.logs() if llog.topic == topic for seg in llog.segments())
    return manager, c, Progress(total, f"replaying {topic}", enabled=sys.stderr.isatty())


def _warn(progress: Progress, warnings: list[str], command: str) -> None:
    for w in warnings:
        progress.write(f"lookupd {command}: {w}", sys.stderr)


def _table(rows: list[list], head: list[str]) -> str:
    cells = [head] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)


def run_groups(args) -> int:
    manager, c, progress = _coordinators(args, CONSUMER_OFFSETS)
    with progress:
        c.progress = progress.advance
        if args.group is not None:
            answer = group_offsets(c, args.group, args.isolation)
            progress.finish()
            _warn(progress, answer["warnings"], "groups")
            print(json.dumps(answer) if args.json else _describe(answer))
            return 1 if answer["warnings"] else 0
        listing, warnings = groups(c)
        progress.finish()
    _warn(progress, warnings, "groups")
    if args.json:
        print(json.dumps(listing))
    else:
        print(_table([[g["group"], g.get("type"), g.get("state"), g.get("protocol_type") or None,
                       g.get("protocol", g.get("group_epoch")), len(g.get("members", ())), g["coordinator_partition"]]
                      if "error" not in g else [g["group"], "-", "ERROR: " + g["error"], "", "", "", g["coordinator_partition"]]
                      for g in listing],
                     ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE", "PROTOCOL/EPOCH", "MEMBERS", "PARTITION"]))
    return 1 if warnings or any("error" in g for g in listing) else 0


def _describe(answer: dict) -> str:
    """A group's offsets as kafka-consumer-groups --describe lays them out, plus where lookupd found them."""
    rows = []
    for o in answer["offsets"]:
        lag = o["lag"]
        if o["out_of_range"] == "below_log_start":
            lag = f"{lag} (below log start {o['log_start_offset']})"
        elif o["out_of_range"] == "above_log_end":
            lag = f"- (past log end {o['log_end_offset']})"
        committed = o["committed_offset"]
        if o["pending_transaction"]:
            committed = f"{'-' if committed is None else committed} (+pending)"
        end = o["last_stable_offset"] if answer["isolation"] == "read_committed" else o["log_end_offset"]
        rows.append([o["topic"], o["partition"], committed, end, lag,
                     o["leader_epoch"] if o["leader_epoch"] != -1 else None, o["commit_timestamp"], o["metadata"]])
    head = (f"group {answer['group']} ({answer['type'] or 'no group record'}, {answer['state']}) in "
            f"{CONSUMER_OFFSETS}-{answer['coordinator_partition']}")
    end_name = "LAST-STABLE-OFFSET" if answer["isolation"] == "read_committed" else "LOG-END-OFFSET"
    return head + "\n" + _table(rows, ["TOPIC", "PARTITION", "CURRENT-OFFSET", end_name, "LAG", "LEADER-EPOCH",
                                       "COMMIT-TIMESTAMP", "METADATA"])


def run_transactions(args) -> int:
    manager, c, progress = _coordinators(args, TRANSACTION_STATE)
    with progress:
        c.progress = progress.advance
        if args.hanging:
            listing, warnings = hanging_transactions(c, int(time.time() * 1000), args.max_transaction_timeout_ms)
        else:
            listing, warnings = transactions(c)
    _warn(progress, warnings, "transactions")
    if args.json:
        print(json.dumps(listing))
    elif args.hanging:
        print(_table([[t["topic"], t["partition"], t["producer_id"], t["producer_epoch"], t["first_offset"],
                       t["start_timestamp"], t["transactional_id"], t["state"], t["reason"]] for t in listing],
                     ["TOPIC", "PARTITION", "PRODUCER-ID", "EPOCH", "FIRST-OFFSET", "START-TIMESTAMP",
                      "TRANSACTIONAL-ID", "STATE", "REASON"]))
    else:
        print(_table([[t["transactional_id"], t["producer_id"], t["producer_epoch"], t["state"], t["timeout_ms"],
                       ",".join(t["partitions"]) or None] for t in listing],
                     ["TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "PARTITIONS"]))
    return 1 if warnings else 0
