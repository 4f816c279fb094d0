"""`lookupd dump s3://bucket/key` prints what it prints for the same local segment (real S3 server)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import reference as R
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options, WrappingKey

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dump(*args) -> tuple[int, list[str], str]:
    proc = subprocess.run([sys.executable, "-m", "lookupd", "dump", *args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


@pytest.fixture(scope="module")
def tiered(s3_server, tmp_path_factory):  # noqa: F811
    R.require()
    tmp = tmp_path_factory.mktemp("dump")
    key = WrappingKey.create(tmp)
    t = tier_partition(tmp, R.log_dir("txn-0"), s3_server, cut=2, opts=Options(compression=True, encryption=key))
    conf = tmp / "c.toml"
    conf.write_text(f'[remote]\nbucket = "{t.config.bucket}"\nendpoint_url = "{t.config.endpoint_url}"\n'
                    f'cache_dir = "{tmp / "dumpcache"}"\n[remote.encryption.keys]\n"{key.key_id}" = "{key.pem_path}"\n')
    return t, str(conf)


@pytest.mark.parametrize("flags", [[], ["--print-data"], ["--json", "--print-data"]])
def test_a_remote_log_dumps_as_the_local_one(tiered, flags):
    t, conf = tiered
    up = t.uploaded[1]
    url = f"s3://{t.config.bucket}/{up.log_key}"
    local = str(t.local_dir / "txn-0" / f"{up.facts.base_offset:020d}.log")
    rc_l, out_l, _ = _dump(*flags, local)
    rc_r, out_r, err = _dump(*flags, "--config", conf, url)
    assert rc_r == rc_l == 0, err
    assert out_r[0] == f"Dumping {url}" or "--json" in flags
    assert [line.replace(url, local) for line in out_r[1:]] == out_l[1:]
    assert len(out_l) > 10


def test_remote_indexes_dump_and_verify_as_the_local_ones(tiered):
    t, conf = tiered
    up = t.uploaded[0]
    url = f"s3://{t.config.bucket}/{up.indexes_key}"
    stem = t.local_dir / "txn-0" / f"{up.facts.base_offset:020d}"
    rc, out, err = _dump("--config", conf, url)
    assert rc == 0, err
    want = []
    for suffix in ("index", "timeindex", "txnindex"):
        if (stem.parent / f"{stem.name}.{suffix}").exists():
            want += _dump(str(stem) + "." + suffix)[1][1:]
    assert [line for line in out if not line.startswith("Dumping ")] == want
    rc, out, err = _dump("--verify-index-only", "--config", conf, url)
    assert rc == 0 and any("entries verified against the log" in line for line in out), (out, err)


def test_a_bad_remote_url_is_a_clear_error(tiered):
    t, conf = tiered
    rc, out, err = _dump("--config", conf, f"s3://{t.config.bucket}/not/a/segment")
    assert rc != 0 and "is not a tiered segment" in err and "Traceback" not in err
    missing = t.uploaded[0].log_key.replace(t.uploaded[0].log_key[-26:-4], "A" * 22)
    rc, out, err = _dump("--config", conf, f"s3://{t.config.bucket}/{missing}")
    assert rc != 0 and "no such object" in err and "Traceback" not in err


def test_verify_checks_tiered_segments_as_local_ones(tiered):
    """Issue 44: `lookupd verify s3://...` with --config: batches, offsets and indexes of each segment named."""
    t, conf = tiered
    urls = [f"s3://{t.config.bucket}/{u.log_key}" for u in t.uploaded] + \
        [f"s3://{t.config.bucket}/{t.uploaded[0].indexes_key}"]  # the same segment as its .log: counted once
    r = subprocess.run([sys.executable, "-m", "lookupd", "verify", "--config", conf, *urls], capture_output=True,
                       text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert (r.returncode, r.stdout) == (0, f"{len(t.uploaded)} segments, 0 problems\n"), r.stderr
    missing = t.uploaded[0].log_key.replace(t.uploaded[0].log_key[-26:-4], "A" * 22)
    r = subprocess.run([sys.executable, "-m", "lookupd", "verify", "--config", conf, f"s3://{t.config.bucket}/{missing}"],
                       capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert r.returncode == 1 and "no such object" in r.stdout and r.stdout.endswith("0 segments, 1 problem\n"), r
