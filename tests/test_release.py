"""Releasable: `python -m build` makes an sdist and a wheel with no warning; the wheel built with a compiler runs
the native paths and one built without (CC=false: the extensions are optional) the pure-Python ones, each
installed into a clean virtualenv; and the version is written in one place."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

import reference as R
from daemon_helpers import REPO

with open(os.path.join(REPO, "pyproject.toml"), "rb") as _f:
    VERSION = tomllib.load(_f)["project"]["version"]
EXTENSIONS = ("lookupd/log/_native", "lookupd/format/_decode", "fusefs/_fill")
# Lines a build may print that are not about this project: pip's note on a machine whose pip config names a
# local index directory that is not there.
FOREIGN = re.compile(r"^WARNING: Location '.*' is ignored")
WARNING = re.compile(r"warning\s*:|\bwarn\b", re.I)  # Python's "...Warning: ...", distutils' and gcc's "warning:"


def _source_tree(dest: str) -> str:
    """The repository's files as a clone has them (tracked or new, not ignored), without the test data."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        if name.startswith(("tests/data/", "bench/results/")) or not os.path.isfile(os.path.join(REPO, name)):
            continue
        os.makedirs(os.path.join(dest, os.path.dirname(name)), exist_ok=True)
        shutil.copy2(os.path.join(REPO, name), os.path.join(dest, name))
    return dest


def _build(args: list[str], cwd: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as on a user's machine
    r = subprocess.run([sys.executable, "-m", "build", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=900, env={**environ, **env})
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout + r.stderr


def _clean_venv(path: str, wheel: str) -> str:
    """A virtualenv with only `wheel` installed (its dependencies seen from this one's site-packages, whose
    editable install of lookupd is not), and its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    python = os.path.join(path, "bin", "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "dependencies.pth"), "w") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")  # paths only: their own .pth files are not run
    r = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
                        "--no-index", wheel], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return python


def _run(python: str, *args: str, cwd: str) -> str:
    r = subprocess.run([python, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                       env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOOKUPD_PURE_PYTHON")})
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r.stdout


PROBE = ("import lookupd, lookupd.log._accel as log, lookupd.format._accel as fmt, fusefs.binding; "
         "print(lookupd.__file__.startswith(sys.prefix), log.NATIVE, fmt.extension is not None)")


def test_sdist_and_wheels_with_and_without_a_compiler(tmp_path):
    R.require()
    src = _source_tree(str(tmp_path / "src"))
    out = _build(["--outdir", str(tmp_path / "dist"), src], cwd=str(tmp_path))  # the sdist, then the wheel from it
    warnings = [line for line in out.splitlines() if WARNING.search(line) and not FOREIGN.match(line)]
    assert not warnings, warnings
    sdist = str(tmp_path / "dist" / f"kafka_lookupd-{VERSION}.tar.gz")
    wheel = next(str(tmp_path / "dist" / n) for n in os.listdir(tmp_path / "dist") if n.endswith(".whl"))
    with tarfile.open(sdist) as t:
        names = set(t.getnames())
    root = f"kafka_lookupd-{VERSION}"
    assert {f"{root}/{n}" for n in ("setup.py", "pyproject.toml", "README.md", "CHANGELOG.md",
                                     "lookupd/format/_kafka.h", "lookupd/format/_decode.h")} <= names
    with zipfile.ZipFile(wheel) as z:
        inside = z.namelist()
        meta = z.read(f"kafka_lookupd-{VERSION}.dist-info/METADATA").decode()
    assert all(any(n.startswith(e) and n.endswith(".so") for n in inside) for e in EXTENSIONS), inside
    # `pip install kafka-lookupd` is the local product: the object-store stack and Spark only with their extras
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist: ")]
    for package, extra in (("obstore", "tiered"), ("boto3", "tiered"), ("cryptography", "tiered"),
                           ("pycryptodome", "tiered"), ("pyspark", "spark"), ("pyarrow", "spark")):
        named = [line for line in requires if line.split()[1].startswith(package)]
        assert named and all("extra ==" in line for line in named), (package, named)
        assert any(f'extra == "{extra}"' in line for line in named), (package, named)
    assert not [n for n in inside if n.endswith((".c", ".h"))]

    # The same sdist on a machine with no compiler: the extensions are optional, the wheel is pure Python.
    with tarfile.open(sdist) as t:
        t.extractall(tmp_path / "unpacked", filter="data")
    _build(["--wheel", "--outdir", str(tmp_path / "pure"), str(tmp_path / "unpacked" / root)], cwd=str(tmp_path),
           CC="false", CXX="false")
    pure = next(str(tmp_path / "pure" / n) for n in os.listdir(tmp_path / "pure") if n.endswith(".whl"))
    with zipfile.ZipFile(pure) as z:
        assert not [n for n in z.namelist() if n.endswith(".so")]

    plain0 = str(R.log_dir("plain-0"))
    answers = {}
    for name, built, native in (("native", wheel, "True True"), ("pure", pure, "False False")):
        python = _clean_venv(str(tmp_path / name), built)
        assert _run(python, "-c", "import sys; " + PROBE, cwd=str(tmp_path)).split() == ["True", *native.split()]
        lookupd = os.path.join(tmp_path, name, "bin", "lookupd")
        assert _run(lookupd, "--version", cwd=str(tmp_path)) == f"lookupd {VERSION}\n"
        assert _run(lookupd, "verify", plain0, cwd=str(tmp_path)) == \
            f"{len([n for n in os.listdir(plain0) if n.endswith('.log')])} segments, 0 problems\n"
        answers[name] = _run(lookupd, "dump", "--json", "--print-data", "--offsets", "1000..1200", plain0,
                             cwd=str(tmp_path))
    assert answers["native"] == answers["pure"] and answers["native"].count('"type":"record"') == 201


def test_the_editable_install_make_run_does_prints_no_warning(tmp_path):
    """`make run`'s `pip install --quiet -e .`: setuptools' experimental ext-modules warning came three times."""
    src = _source_tree(str(tmp_path / "src"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(tmp_path / "v" / "bin" / "python"), "install",
                        "--quiet", "--no-deps", "-e", src], capture_output=True, text=True, timeout=900, env=environ)
    assert r.returncode == 0, r.stderr
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip() and not FOREIGN.match(line)]
    assert not lines, lines
    assert any(n.startswith("_native") for n in os.listdir(os.path.join(src, "lookupd", "log")) if n.endswith(".so"))


def test_the_version_is_written_once():
    with open(os.path.join(REPO, "CHANGELOG.md")) as f:
        headings = re.findall(r"^## (\S+)", f.read(), re.M)
    assert headings and headings[0] == VERSION
    r = subprocess.run([sys.executable, "-m", "lookupd", "--version"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"lookupd {VERSION}\n")
    hits = subprocess.run(["git", "grep", "-l", "-F", f'"{VERSION}"', "--", "*.py", "*.toml"], cwd=REPO,
                          capture_output=True, text=True).stdout.split()
    assert hits == ["pyproject.toml"], hits
