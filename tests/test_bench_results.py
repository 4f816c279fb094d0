"""The benchmark suite's outputs: the results schema, the README's quoted figures, and a smoke run."""

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
    assert all(s["ok"] for s in doc["suites"].values()), doc["suites"]
    names = [f["name"] for f in doc["figures"]]
    assert len(names) == len(set(names)), "figure names must be unique to be quoted"


def test_readme_quotes_exactly_the_newest_results():
    """Every figure and ratio the README's Performance section quotes is in the newest results file,
    with the value it has there (the section is what bench/report.py writes from that file)."""
    with open(report.README) as f:
        text = f.read()
    block = text[text.index(report.BEGIN):text.index(report.END) + len(report.END)]
    assert block == report.section(report.newest()), "README is stale: run `python bench/report.py`"
    for line in block.splitlines():
        if line.startswith("![") and "](" in line:
            assert os.path.exists(os.path.join(REPO, line.split("](")[1].rstrip(")"))), line


def test_the_suite_runs_and_writes_a_valid_results_file(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(BENCH, "run.py"), "--quick", "--only", "index,decode",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    assert len(files) == 1
    with open(tmp_path / files[0]) as f:
        doc = json.load(f)
    jsonschema.validate(doc, schema())
    assert {f["group"] for f in doc["figures"]} >= {"index-latency", "index-many", "index-faults", "decode"}
    names = [f["name"] for f in doc["figures"]]
    assert len(names) == len(set(names)), "figure names must be unique to be quoted"
    assert any(r["name"].startswith("page faults, plain vs warm-section") for r in doc["ratios"])
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".png"))


def test_a_results_file_that_breaks_the_schema_is_refused():
    bad = {"schema": 1, "date": "x", "quick": True, "machine": {}, "suites": {}, "figures": [{"name": "x"}],
           "ratios": []}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())
