"""One switch per layer between C and Python (lookupd.format._accel, lookupd.log._accel).

LOOKUPD_PURE_PYTHON=1 makes the whole process pure Python: none of lookupd's extensions is loaded,
and the daemon's service answers the same lookups with the same answers and errors as with them.
`python_only()` runs a reference path in Python alone on this thread, while other threads keep C.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import reference as R
from lookupd.format import _accel as format_accel
from lookupd.log import _accel as log_accel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSIONS = ("lookupd.format._decode", "lookupd.log._native", "fusefs._fill")

# Lookups over the reference corpus, each answered as a map or as an error's type and message.
PROBE = """
import json, sys
from lookupd.daemon.service import Service, Session
from lookupd.log.logmanager import LogManager
import fusefs.binding, lookupd.format.columnar, lookupd.format.render
manager = LogManager([sys.argv[1]])
service = Service(manager)
answers = []
for method, params in json.loads(sys.argv[2]):
    try:
        answers.append(["ok", service.call(method, params, Session(trusted=True))])
    except Exception as err:
        answers.append([type(err).__name__, str(err)])
manager.close()
loaded = sorted(m for m in sys.modules if m in {extensions})
print(json.dumps({{"loaded": loaded, "answers": answers}}, default=str))
""".format(extensions=EXTENSIONS)

CALLS = [["resolve_offset", ["plain", 0, 100]], ["resolve_offset", ["plain", 0, 10**9]],
         ["lookup_offset", ["large", 0, 123456, "floor"]], ["lookup_offset", ["large", 0, 123456, "ceiling"]],
         ["offset_for_timestamp", ["compressed", 0, 1]], ["lookup_timestamp", ["ooo-time", 0, 1, "floor"]],
         ["read", ["txn", 0, 5, 1000]], ["read", ["plain", 0, -1, 10]], ["lookup_offset", ["plain", 0, 5, "sideways"]]]


def probe(pure: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("LOOKUPD_PURE_PYTHON", None)
    if pure:
        env["LOOKUPD_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE, str(R.LOGS), json.dumps(CALLS)], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_pure_python_loads_no_extension_and_answers_alike():
    R.require()
    pure = probe(True)
    assert pure["loaded"] == []
    if log_accel.NATIVE and format_accel.NATIVE and not format_accel.PURE_PYTHON:
        native = probe(False)
        assert native["loaded"] == sorted(EXTENSIONS)
        assert pure["answers"] == native["answers"]
    assert pure["answers"][0][0] == "ok" and pure["answers"][1][0] == "OffsetOutOfRange"


def test_python_only_is_this_threads_alone():
    seen = {}

    def other():
        seen["other"] = format_accel.mode.python

    with format_accel.python_only():
        assert format_accel.mode.python and log_accel.mode.python
        t = threading.Thread(target=other)
        t.start()
        t.join()
        with log_accel.python_only():
            pass
        assert format_accel.mode.python  # a nested reference path leaves it set
    assert not format_accel.mode.python and seen == {"other": False}


# The SIGBUS guard's calls compute no answer: they make reading a map safe, for whichever path reads it.
GUARD = {"install", "register", "unregister", "faults", "resident"}


def c_calls_into_our_extensions(fn) -> list[str]:
    """The names of lookupd's C functions but the guard's that `fn()` calls on this thread (sys.setprofile)."""
    called = []

    def profile(frame, event, arg):
        if event == "c_call" and getattr(arg, "__module__", None) in EXTENSIONS and arg.__name__ not in GUARD:
            called.append(f"{arg.__module__}.{arg.__name__}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return called


def test_within_python_only_no_c_function_of_ours_runs():
    """The answers of record are Python's alone: every lookup and its reference path, the columnar decoder
    (Arrow bitmaps included) and the JSON lines, within `python_only()`, over batches of every codec."""
    import pyarrow as pa

    from lookupd.format.batch import parse_header
    from lookupd.format.columnar import ColumnBuilder
    from lookupd.format.render import record_lines
    from lookupd.log.logmanager import LogManager

    R.require()
    manager = LogManager([str(R.LOGS)])
    headers = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

    def everything():
        for topic in ("plain", "compressed", "large", "txn", "logappend", "ooo-time"):
            llog = manager.get(topic, 0)
            start, end = llog.log_start_offset, llog.log_end_offset
            for fast, reference in (("lookup_offset", "lookup_offset_reference"),
                                    ("lookup_timestamp", "lookup_timestamp_reference")):
                for name in (fast, reference):
                    for mode in ("floor", "ceiling"):
                        getattr(llog, name)(start if fast == "lookup_offset" else 1, mode)
            for o in (start, (start + end) // 2, end - 1):
                for name in ("lookup_offset", "lookup_offset_reference"):
                    getattr(llog, name)(o, "floor")
                for name in ("resolve_offset", "resolve_offset_reference"):
                    getattr(llog, name)(o)
                for name in ("offset_for_timestamp", "offset_for_timestamp_reference"):
                    getattr(llog, name)(1)
                for name in ("read", "read_reference"):
                    records = getattr(llog, name)(o, 1 << 16).records
                builder = ColumnBuilder(True)
                builder.add_frames(records, 0)
                builder.arrays(headers)
                header = parse_header(records, 0)
                record_lines(header, memoryview(records)[:header.size])

    with format_accel.python_only():
        called = c_calls_into_our_extensions(everything)
    manager.close()
    assert called == [], " ".join(sorted(set(called)))
