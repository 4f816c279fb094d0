"""The benchmark suite's outputs: the results schema, the figures the README and docs/performance.md quote, a smoke run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
sys.path.insert(0, BENCH)

import report  # noqa: E402


def schema() -> dict:
    with open(os.path.join(BENCH, "results.schema.json")) as f:
        return json.load(f)


def test_newest_committed_results_validate():
    path = report.newest()
    with open(path) as f:
        doc = json.load(f)
    jsonschema.validate(doc, schema())
    assert not doc["quick"], "the README quotes a full run"
    committed = sorted(os.listdir(os.path.dirname(path)))
    stem = os.path.basename(path)[:-len(".json")]
    assert all(name.startswith(stem) for name in committed), f"bench/results/ holds one run only (history is in git): {committed}"
    assert all(s["ok"] for s in doc["suites"].values()), doc["suites"]
    names = [f["name"] for f in doc["figures"]]
    assert len(names) == len(set(names)), "figure names must be unique to be quoted"


@pytest.mark.parametrize("page, block", [(report.README, report.summary), (report.PERFORMANCE, report.section)],
                         ids=["README summary", "docs/performance.md"])
def test_pages_quote_exactly_the_newest_results(page, block):
    """Every figure and ratio the README's Performance summary and docs/performance.md quote is in the newest
    results file, with the value it has there (each block is what bench/report.py writes from that file), and
    every plot they show exists."""
    with open(page) as f:
        text = f.read()
    shown = text[text.index(report.BEGIN):text.index(report.END) + len(report.END)]
    assert shown == block(report.newest()), f"{os.path.relpath(page, REPO)} is stale: run `python bench/report.py`"
    for line in shown.splitlines():
        if line.startswith("![") and "](" in line:
            assert os.path.exists(os.path.join(os.path.dirname(page), line.split("](")[1].rstrip(")"))), line


def test_the_readme_summary_is_short():
    """The README carries a summary (a few ratios and plots); the full tables live in docs/performance.md."""
    summary = report.summary(report.newest())
    assert summary.count("![") <= len(report.SUMMARY_PLOTS) and summary.count("\n| ") <= len(report.HEADLINE_RATIOS) + 1
    assert "| figure | median |" not in summary and "| figure | median |" in report.section(report.newest())


def test_the_suite_runs_and_writes_a_valid_results_file(tmp_path):
    """A run writes one results file and its plots, replacing an earlier run's files (and nothing else) in its dir."""
    for stale in ("2000-01-01-oldhost.json", "2000-01-01-oldhost-decode.png"):
        (tmp_path / stale).write_text("an earlier run")
    (tmp_path / "notes.txt").write_text("not a run's file")
    r = subprocess.run([sys.executable, os.path.join(BENCH, "run.py"), "--quick", "--only", "index,decode",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    assert len(files) == 1 and not any(f.startswith("2000-01-01") for f in os.listdir(tmp_path)), os.listdir(tmp_path)
    assert (tmp_path / "notes.txt").exists()
    with open(tmp_path / files[0]) as f:
        doc = json.load(f)
    jsonschema.validate(doc, schema())
    assert {f["group"] for f in doc["figures"]} >= {"index-latency", "index-many", "index-faults", "decode"}
    names = [f["name"] for f in doc["figures"]]
    assert len(names) == len(set(names)), "figure names must be unique to be quoted"
    assert any(r["name"].startswith("page faults, plain vs warm-section") for r in doc["ratios"])
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".png"))


def test_bar_labels_sit_past_their_whiskers():
    """Each median written beside a bar starts at or after the end of that bar's whisker, inside the axes."""
    import matplotlib.pyplot as plt
    import plots

    figs = [{"name": f"figure {i}", "unit": "ns", "median": m, "min": lo, "max": hi}
            for i, (m, lo, hi) in enumerate([(134, 88, 189), (31.4, 24, 152), (183, 182, 184), (0.5, 0.1, 0.9)])]
    fig, ax = plt.subplots()
    try:
        plots._bars(ax, figs)
        labels = sorted(ax.texts, key=lambda t: t.get_position()[1])
        assert [t.get_text().strip() for t in labels] == ["134", "31.4", "183", "0.5"]
        right = ax.get_xlim()[1]
        for text, f in zip(labels, figs):
            x = text.get_position()[0]
            assert f["max"] <= x < right, (text.get_text(), x, f["max"], right)
    finally:
        plt.close(fig)


def test_a_results_file_that_breaks_the_schema_is_refused():
    bad = {"schema": 1, "date": "x", "quick": True, "machine": {}, "suites": {}, "figures": [{"name": "x"}],
           "ratios": []}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())
