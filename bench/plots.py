"""PNG plots of one results file: one chart per figure group, medians with min-max whiskers."""

from __future__ import annotations

from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Groups drawn as lines over a numeric parameter (x) with one line per series parameter;
# every other group is a horizontal bar chart of its figures.
LINES = {
    "index-faults": ("entries", "search", "index entries", "log"),
    "daemon-latency": ("percentile", "server", "percentile", "linear"),
}
TITLES = {
    "index-latency": "Single floor lookup, in process",
    "index-many": "Many-lookups per call, in process",
    "index-faults": "Major page faults per 10,000 tail lookups on a growing, evicted index",
    "decode": "Record decoding throughput",
    "decode-records": "Record decoding, records per second",
    "coldstart": "Cold start",
    "daemon-latency": "Round-trip latency over a Unix socket, one client",
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
    for i, v in enumerate(med):
        ax.text(v, i, f" {v:,.3g}", va="center", fontsize=7)


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


def plot_all(doc: dict, stem: str) -> list[str]:
    """Draw every group of `doc`'s figures; returns the PNG paths (`<stem>-<group>.png`)."""
    groups = defaultdict(list)
    for f in doc["figures"]:
        groups[f["group"] or "other"].append(f)
    m = doc["machine"]
    where = f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, {doc['date'][:10]}"
    out = []
    for group, figs in groups.items():
        height = 1.2 + 0.35 * len(figs) if group not in LINES else 4.0
        fig, ax = plt.subplots(figsize=(9, max(height, 2.5)))
        if group in LINES:
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
