"""Dependencies a user chooses: `pip install kafka-lookupd` is the local product, and the `tiered` extra adds
the object-store stack. Each check runs lookupd in a subprocess where the extra's packages cannot be found
(a meta path finder in front of every other: what Python sees when they are not installed). The AWS
credential chain the extra keeps boto3 for is read through a real S3 server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import reference as R
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIERED_PACKAGES = ("obstore", "boto3", "botocore", "cryptography", "Crypto")  # Crypto: pycryptodome
HINT = "pip install 'kafka-lookupd[tiered]' (obstore, boto3, cryptography, pycryptodome)"

# argv[1]: the packages to hide; the rest, `lookupd`'s arguments (none: only the imports in argv[2]).
WITHOUT = """
import sys

HIDDEN = set(sys.argv.pop(1).split(","))
TRIED = []


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            TRIED.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
import importlib
for module in sys.argv.pop(1).split(","):
    importlib.import_module(module)
from lookupd.tools.cli import main
code = main(sys.argv[1:]) if sys.argv[1:] else 0
print("tried to import:", sorted(TRIED), file=sys.stderr)
sys.exit(code)
"""


def without(hidden: tuple[str, ...], *args: str, imports: str = "lookupd") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, ",".join(hidden), imports, *args], capture_output=True,
                          text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=120)


def test_the_local_product_imports_nothing_of_the_tiered_extra():
    R.require()
    segment = str(R.log_dir("plain-0") / "00000000000000000000.log")
    r = without(TIERED_PACKAGES, "dump", "--print-data", segment, imports="lookupd.daemon.main,fusefs.ops,spark_client.datasource")
    assert r.returncode == 0 and r.stdout.startswith(f"Dumping {segment}\n"), r.stderr
    assert r.stderr.endswith("tried to import: []\n"), r.stderr
    r = without(TIERED_PACKAGES, "verify", str(R.log_dir("plain-0")))
    assert r.returncode == 0 and r.stderr.endswith("tried to import: []\n"), r.stderr


def _one_line(r: subprocess.CompletedProcess) -> None:
    lines = r.stderr.splitlines()
    assert r.returncode == 1 and len(lines) == 2, r.stderr  # the line, and the blocker's own
    assert lines[0].endswith(f": tiered storage ([remote]) needs obstore: {HINT}"), r.stderr
    assert lines[1].startswith("tried to import: ['obstore"), r.stderr


def test_tiered_storage_without_the_extra_says_which_to_install(tmp_path):
    url = "s3://bucket/orders-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log"
    _one_line(without(("obstore",), "dump", url))
    r = without(("obstore",), "verify", url)  # verify's problems are its output: one line each, then the count
    assert r.returncode == 1 and r.stdout == f"{url}: tiered storage ([remote]) needs obstore: {HINT}\n" \
        "0 segments, 1 problem\n", r.stdout
    config = tmp_path / "lookupd.toml"
    config.write_text(f'log_dirs = ["{tmp_path}"]\nsocket = "{tmp_path / "s"}"\n'
                      f'[remote]\nbucket = "b"\ncache_dir = "{tmp_path / "cache"}"\n')
    _one_line(without(("obstore",), "serve", "--config", str(config)))
    _one_line(without(("obstore",), "restore", "--config", str(config), "--topic", "t", "--partition", "0",
                      str(tmp_path / "dest")))
    _one_line(without(("obstore",), "demo-data", "--tiered", str(tmp_path / "demo")))
    assert sorted(os.listdir(tmp_path)) == ["lookupd.toml"]  # nothing begun


@pytest.mark.parametrize("endpoint_in", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
def test_no_endpoint_url_and_a_profile_s_credentials(s3_server, tmp_path, endpoint_in):  # noqa: F811
    """No endpoint_url anywhere in lookupd's config, and credentials only in a named profile (AWS_PROFILE, what
    boto3 is kept for: obstore reads no profile): both clients, boto3 (the manifest) and obstore (the chunks),
    reach the store the environment names, signed with the profile's keys."""
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=2)
    up = t.uploaded[1]
    (tmp_path / "credentials").write_text(f"[lookupd-test]\naws_access_key_id = {os.environ['AWS_ACCESS_KEY_ID']}\n"
                                          f"aws_secret_access_key = {os.environ['AWS_SECRET_ACCESS_KEY']}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=REPO, AWS_PROFILE="lookupd-test", AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
               AWS_CONFIG_FILE=str(tmp_path / "no-config"), AWS_REGION=os.environ["AWS_REGION"],
               **{endpoint_in: t.config.endpoint_url})
    local = str(t.local_dir / "plain-0" / f"{up.facts.base_offset:020d}.log")
    url = f"s3://{t.config.bucket}/{up.log_key}"

    def dump(target: str, environ: dict) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lookupd", "dump", "--print-data", target], capture_output=True,
                              text=True, cwd=REPO, env=environ, timeout=120)

    want, got = dump(local, env), dump(url, env)
    assert got.returncode == 0, got.stderr
    assert got.stdout.replace(url, local) == want.stdout and len(want.stdout.splitlines()) > 10
    refused = dump(url, {**env, "AWS_PROFILE": "elsewhere"})  # a profile neither file has: one line, no traceback
    assert refused.returncode == 1 and refused.stderr == \
        "error: The config profile (elsewhere) could not be found: AWS_PROFILE names a profile that neither the " \
        "AWS config file nor the credentials file has\n", refused.stderr
    del env["AWS_PROFILE"]  # no credentials anywhere: refused by the store, saying so
    refused = dump(url, env)
    assert refused.returncode == 1 and "no AWS credentials were found" in refused.stderr, refused.stderr
