"""What the Makefile's targets install and refuse, read from `make -n` and from refusals that stop before any work."""

from __future__ import annotations

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make(*args: str, dry: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *(["-n"] if dry else []), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_make_run_installs_the_runtime_dependencies_only(tmp_path):
    r = make("run", f"VENV={tmp_path}/venv", f"LOG_DIR={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert "pip install --quiet -e .\n" in r.stdout, r.stdout
    assert "optional-dependencies" not in r.stdout and "[test" not in r.stdout, r.stdout


def test_targets_install_the_extras_they_need(tmp_path):
    import tomllib

    venv = f"VENV={tmp_path}/venv"
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert {"tiered", "spark", "schemas"} <= extras.keys()
    assert all(f"installed-extra-{x}" in make("test", venv).stdout for x in extras)  # CI has everything
    tiered = make("demo-tiered", venv).stdout
    assert "installed-extra-tiered" in tiered and "installed-extra-demo" in tiered, tiered
    assert "tests/reference.py" in make("test", venv).stdout  # the corpus is unpacked before the tests run
    assert "installed-extra-bench" in make("bench", venv).stdout
    spark = make("spark-hourly", venv, f"LOG_DIR={tmp_path}").stdout
    assert "installed-extra-spark" in spark and "installed-extra-test" not in spark, spark


def test_a_log_dir_that_does_not_exist_is_refused_in_one_line(tmp_path):
    typo = tmp_path / "kafka" / "dataa"
    for target in ("run", "spark-replay"):
        r = make(target, f"VENV={tmp_path}/venv", f"LOG_DIR={typo}", dry=False)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"LOG_DIR={typo} is not a directory" in lines[0], r.stderr
        assert not os.path.exists(tmp_path / "kafka") and not os.path.exists(tmp_path / "venv")


def test_sample_data_is_generated_only_into_the_default(tmp_path):
    assert "demo-data" not in make("run", f"VENV={tmp_path}/venv", f"LOG_DIR={tmp_path}").stdout
    default = make("run", f"VENV={tmp_path}/venv", "SAMPLE_DATA=" + str(tmp_path / "sample"),
                   "LOG_DIR=" + str(tmp_path / "sample")).stdout
    assert f"demo-data {tmp_path}/sample" in default, default
