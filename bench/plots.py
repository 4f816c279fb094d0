"""PNG plots of one results file: one chart per figure group, medians with min-max whiskers.

    python bench/plots.py RESULTS.json      # draw a results file's plots again, beside it

(bench/run.py draws them after a run; drawing them again is for a change to how they are drawn.)
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Groups drawn as lines over a numeric parameter (x) with one line per series parameter;
# every other group is a horizontal bar chart of its figures.
LINES = {
    "index-faults": ("entries", "search", "index entries", "log"),
}
# Groups drawn as grouped bars: one cluster per server and method, one bar per load (clients,
# pipelining, percentile), on a log scale since the values span decades.
GROUPED = {"daemon-latency", "daemon-placement", "daemon-throughput", "daemon-cpu", "daemon-tls"}
LABEL_ROOM = 1.18  # a bar chart's x axis runs this far past the longest whisker, for the median written after it
TITLES = {
    "index-latency": "Single floor lookup, in process",
    "index-many": "Many-lookups per call, in process",
    "index-faults": "Major page faults per 10,000 tail lookups on a growing, evicted index",
    "decode": "Record decoding throughput",
    "decode-records": "Record decoding, records per second",
    "coldstart": "Cold start",
    "groups-replay": "__consumer_offsets replay against the columnar decoder, records per second",
    "groups-daemon": "group_offsets (100 partitions) and resolve_offset round trips through the daemon",
    "daemon-latency": "Round-trip latency over a Unix socket, one client",
    "daemon-placement": "Round-trip p50, one client, client and server pinned to one core or two",
    "daemon-throughput": "Requests per second over a Unix socket (closed-loop clients, pipelining, columnar)",
    "daemon-cpu": "Server CPU microseconds per request (from /proc/PID/stat)",
    "remote-clients": "S3 clients, sequential ranged GETs from a local SeaweedFS",
    "remote-read": "Sequential read of a tiered segment against plain ranged GETs",
    "remote-read-cpu": "CPU time of one sequential read of a tiered segment, lookupd and the S3 server",
    "remote-restore-cpu": "CPU time of one restore against plain GETs of the same objects, lookupd and the S3 server",
    "remote-fuse-cpu": "CPU time of one read of a remote .log through the mount, per process, against plain GETs",
    "remote-fuse-faults": "Minor page faults in the mount per read of a remote .log (a new mount: fresh memory)",
    "remote-cold": "Cold index fetch plus one batch read of a tiered segment",
    "hostile-scale": "Daemon start until `partitions` answers, remote segments in one partition",
    "hostile-scale-rss": "Daemon RSS after start and `partitions`, remote segments in one partition",
    "hostile-planted": "Daemon peak RSS added by reads of one planted object (target: at most 64 MiB)",
    "hostile-stalled": "Local lookups through the daemon, the store answering and stalled (every GET held 20 s)",
    "daemon-tls": "Over TLS on loopback TCP, lookupd and redis-server with the same certificate: p50/p99 and lookups/s",
    "kafka": "The Kafka listener: Fetch MB/s against file reads, ListOffsets against msgpack, consumer CPU per MB",
}


def _bars(ax, figs) -> None:
    names = [f["name"] for f in figs]
    med = [f["median"] for f in figs]
    lo = [f["median"] - f["min"] for f in figs]
    hi = [f["max"] - f["median"] for f in figs]
    y = range(len(figs))
    ax.barh(list(y), med, xerr=[lo, hi], color="#4c72b0", ecolor="#333333", capsize=3)
    ax.set_yticks(list(y))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    units = sorted({f["unit"] for f in figs})
    ax.set_xlabel(", ".join(units))
    # Each median is written past its bar's whisker, not over it, with room kept for the text.
    ends = [f["max"] for f in figs]
    for i, (v, end) in enumerate(zip(med, ends)):
        ax.text(end, i, f"  {v:,.3g}", va="center", fontsize=7)
    ax.set_xlim(0, max(ends, default=1) * LABEL_ROOM or 1)


def _lines(ax, figs, x_param, series_param, x_label, scale) -> None:
    series = defaultdict(list)
    for f in figs:
        series[f["params"].get(series_param, "?")].append(f)
    for label, fs in sorted(series.items()):
        fs.sort(key=lambda f: f["params"][x_param])
        xs = [f["params"][x_param] for f in fs]
        ax.errorbar(xs, [f["median"] for f in fs],
                    yerr=[[f["median"] - f["min"] for f in fs], [f["max"] - f["median"] for f in fs]],
                    marker="o", capsize=3, label=str(label))
    ax.set_xscale(scale)
    ax.set_xlabel(x_label)
    ax.set_ylabel(", ".join(sorted({f["unit"] for f in figs})))
    ax.legend()


def _cluster(f: dict) -> str:
    p = f["params"]
    if "targets_per_call" in p:
        return f"{p['server']} lookup_offsets ({p['targets_per_call']:,} per call)"
    return f"{p.get('server', '?')} {p.get('method', 'lookup_offset floor')}"


def _load(f: dict) -> str:
    p = f["params"]
    if "placement" in p:
        return p["placement"]
    if "percentile" in p:
        return f"p{p['percentile']}"
    if "depth" in p:
        return f"pipelining {p['depth']}"
    if "clients" in p:
        return f"{p['clients']} clients"
    return "columnar"


def _grouped(ax, figs) -> None:
    clusters = sorted(dict.fromkeys(_cluster(f) for f in figs), key=lambda c: not c.startswith("redis"))
    loads = list(dict.fromkeys(_load(f) for f in figs))
    width = 0.8 / len(loads)
    for j, load in enumerate(loads):
        xs, med, lo, hi = [], [], [], []
        for f in figs:
            if _load(f) == load:
                xs.append(clusters.index(_cluster(f)) + j * width)
                med.append(f["median"])
                lo.append(f["median"] - f["min"])
                hi.append(f["max"] - f["median"])
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=load)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(clusters))])
    ax.set_xticklabels(clusters, rotation=30, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel(", ".join(sorted({f["unit"] for f in figs})))
    ax.legend(fontsize=7)


def plot_all(doc: dict, stem: str) -> list[str]:
    """Draw every group of `doc`'s figures; returns the PNG paths (`<stem>-<group>.png`)."""
    groups = defaultdict(list)
    for f in doc["figures"]:
        groups[f["group"] or "other"].append(f)
    m = doc["machine"]
    where = f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, {doc['date'][:10]}"
    out = []
    for group, figs in groups.items():
        height = 1.2 + 0.35 * len(figs) if group not in LINES and group not in GROUPED else 4.5
        fig, ax = plt.subplots(figsize=(9, max(height, 2.5)))
        if group in GROUPED:
            _grouped(ax, figs)
        elif group in LINES:
            _lines(ax, figs, *LINES[group])
        else:
            _bars(ax, figs)
        ax.set_title(f"{TITLES.get(group, group)}\n{where}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        path = f"{stem}-{group}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out


if __name__ == "__main__":
    for results in sys.argv[1:]:
        with open(results) as f:
            for png in plot_all(json.load(f), results[:-len(".json")]):
                print("plot:", png)
