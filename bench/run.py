"""The benchmark suite: every benchmark in bench/, our numbers and the alternatives' in one run.

    python bench/run.py [--quick] [--only index,decode,...] [--out DIR]

Writes `<out>/<date>-<host>.json` (validated against bench/results.schema.json) and PNG plots
beside it, `<date>-<host>-<plot>.png`, after removing the files of earlier runs from `<out>`: a
results dir holds one run, and history lives in git. A full run of every suite goes to
bench/results/ (what the README quotes), a quick or partial one to run/bench/. These machines are
noisy: only ratios taken in the same run mean anything, so every comparison is measured side by
side and reported as one. `--quick` finishes in under 3 minutes, the full run in under 20.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import re
import socket
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Figure, machine, print_table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SUITES = ["index", "decode", "coldstart", "daemon", "fuse", "spark", "remote", "tiered", "spark_tiered", "kafka", "groups",
          "schemas", "hostile"]
SCHEMA = os.path.join(HERE, "results.schema.json")
FULL_RUN_OUT = os.path.join(HERE, "results")
OTHER_RUN_OUT = os.path.join(os.path.dirname(HERE), "run", "bench")
# What this script writes: `<date>-<host>[-quick].json` and `<date>-<host>[-quick]-<plot>.png`.
RUN_FILE = re.compile(r"\d{4}-\d{2}-\d{2}-.+\.(json|png)")


def run_suites(names: list[str], quick: bool) -> tuple[list[Figure], list[dict], dict]:
    figures: list[Figure] = []
    ratios: list[dict] = []
    status: dict[str, dict] = {}
    for name in names:
        t0 = time.monotonic()
        mod = importlib.import_module(f"bench_{name}")
        try:
            got = mod.run(quick)
        except Exception as err:  # a suite that cannot run here is recorded, not fatal
            status[name] = {"ok": False, "error": f"{type(err).__name__}: {err}", "seconds": time.monotonic() - t0}
            traceback.print_exc()
            continue
        figures += got
        if hasattr(mod, "ratios"):
            ratios += [r for r in mod.ratios(got) if r is not None]
        status[name] = {"ok": True, "figures": len(got), "seconds": round(time.monotonic() - t0, 1)}
        print(f"-- {name}: {len(got)} figures in {status[name]['seconds']} s", flush=True)
    return figures, ratios, status


def remove_earlier_runs(out: str) -> list[str]:
    """Delete the results and plots of earlier runs in `out` (only files named as this script names them)."""
    gone = []
    for name in sorted(os.listdir(out)):
        if RUN_FILE.fullmatch(name):
            os.remove(os.path.join(out, name))
            gone.append(name)
    return gone


def validate(doc: dict) -> None:
    import jsonschema

    with open(SCHEMA) as f:
        jsonschema.validate(doc, json.load(f))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs: the whole suite in under 3 minutes")
    ap.add_argument("--only", default=",".join(SUITES), help=f"comma-separated subset of {','.join(SUITES)}")
    ap.add_argument("--out", default=None,
                    help="where results and plots go (default: bench/results for a full run, else run/bench); "
                         "earlier runs' files there are removed")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(SUITES)
    if unknown:
        ap.error(f"unknown suites: {', '.join(sorted(unknown))}")
    started = dt.datetime.now(dt.timezone.utc)
    figures, ratios, status = run_suites(names, args.quick)
    doc = {
        "schema": 1,
        "date": started.isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": machine(),
        "suites": status,
        "figures": [f.as_dict() for f in figures],
        "ratios": ratios,
    }
    validate(doc)
    out = args.out or (FULL_RUN_OUT if not args.quick and names == SUITES else OTHER_RUN_OUT)
    os.makedirs(out, exist_ok=True)
    for name in remove_earlier_runs(out):
        print("removed the earlier run's", name)
    stem = f"{started:%Y-%m-%d}-{socket.gethostname()}" + ("-quick" if args.quick else "")
    path = os.path.join(out, stem + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print_table(figures)
    for r in ratios:
        print(f"{r['name']}: {r['value']:.2f}x  ({r['meaning']})")
    if not args.no_plots:
        from plots import plot_all

        for png in plot_all(doc, os.path.join(out, stem)):
            print("plot:", os.path.relpath(png))
    print("results:", os.path.relpath(path))
    return 0 if all(s["ok"] for s in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
