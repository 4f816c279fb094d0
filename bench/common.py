"""Shared pieces of the benchmark suite: timing with repeats, figures, the machine description.

Every figure is measured several times in the same run and reported as a median with its
spread (min, max); comparisons are made between figures of the same run only.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable


@dataclass
class Figure:
    """One measured quantity: name, unit, every repeat, and what it is compared with."""

    name: str
    unit: str
    values: list[float]
    group: str = ""
    params: dict = field(default_factory=dict)
    higher_is_better: bool = False

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["median"] = self.median
        d["min"] = min(self.values)
        d["max"] = max(self.values)
        return d


def repeat(fn: Callable[[], float], times: int) -> list[float]:
    """Call a measurement `times` times (one warm-up call first) and return its results."""
    fn()
    return [fn() for _ in range(times)]


def per_call_ns(fn: Callable[[], object], calls: int) -> Callable[[], float]:
    """A measurement: average nanoseconds per call over `calls` calls."""
    def measure() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        return (time.perf_counter_ns() - t0) / calls
    return measure


def machine() -> dict:
    """The machine a results file came from."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    versions = {}
    for mod in ("numpy", "msgpack", "trio", "cramjam", "crc32c", "pyspark", "pyarrow", "kafka", "redis", "matplotlib"):
        try:
            m = __import__(mod)
            versions[mod] = getattr(m, "__version__", "?")
        except Exception:
            pass
    return {
        "host": socket.gethostname(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "java": _java_version(),
        "libraries": versions,
    }


def _java_version() -> str:
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
        return (r.stderr or r.stdout).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "not found"


def print_table(figures: list[Figure]) -> None:
    width = max((len(f.name) for f in figures), default=10)
    for f in figures:
        print(f"{f.name:<{width}}  {f.median:>14,.1f} {f.unit:<12} (min {min(f.values):,.1f}, max {max(f.values):,.1f})")


def dump(figures: list[Figure], path: str) -> None:
    with open(path, "w") as fh:
        json.dump({"machine": machine(), "figures": [f.as_dict() for f in figures]}, fh, indent=1)


def main(run: Callable[[bool], list[Figure]], doc: str) -> None:
    """A suite run on its own: `python bench/bench_X.py [--quick] [--json OUT]` prints its figures."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    figures = run(args.quick)
    print_table(figures)
    if args.json:
        dump(figures, args.json)


def ratio(name: str, figures: list[Figure], numerator: str, denominator: str, meaning: str) -> dict | None:
    """median(numerator) / median(denominator), when both figures were measured in this run."""
    by_name = {f.name: f for f in figures}
    a, b = by_name.get(numerator), by_name.get(denominator)
    if a is None or b is None or b.median == 0:
        return None
    return {"name": name, "value": a.median / b.median, "numerator": numerator, "denominator": denominator,
            "meaning": meaning}
