"""Independent msgpack-rpc clients talk to the daemon: pynvim's (Python) and msgpack5rpc (Node)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import reference as R
from daemon_helpers import start_daemon, stop_daemon

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")


@pytest.fixture(scope="module")
def sock(tmp_path_factory):
    R.require()
    d = str(tmp_path_factory.mktemp("interop"))
    path = os.path.join(d, "run", "lookupd.sock")
    proc = start_daemon(["--log-dir", str(R.LOGS)], d, path)
    yield path
    code, stderr = stop_daemon(proc)
    assert code == 0, stderr


class Remote(Exception):
    pass


def test_pynvim(sock):
    msgpack_rpc = pytest.importorskip("pynvim.msgpack_rpc", reason="pynvim is not installed (pip install pynvim)")
    session = msgpack_rpc.socket_session(sock)  # sends an nvim_set_client_info notification first
    session.error_wrapper = lambda err: Remote(err)
    try:
        assert session.request("ping") in ("pong", b"pong")
        got = session.request("lookup_offset", "plain", 0, 100, "floor")
        assert {k.decode() if isinstance(k, bytes) else k: v for k, v in got.items()} == \
               {"segment": 0, "offset": 89, "position": 13079}
        with pytest.raises(Remote) as e:
            session.request("resolve_offset", "plain", 0, 10**9)
        err = e.value.args[0]
        assert (err.get("code") or err.get(b"code")) in ("OFFSET_OUT_OF_RANGE", b"OFFSET_OUT_OF_RANGE")
        assert session.request("ping") in ("pong", b"pong")  # the session survives an error
    finally:
        session.close()


def npm_ready() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm not found (Debian packages nodejs, npm): the Node interop test needs them")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "msgpack5rpc")):
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            pytest.skip(f"npm ci in tests/node failed (offline?): {r.stderr.strip()[-300:]}")
    return node


def test_node_msgpack5rpc(sock):
    node = npm_ready()
    r = subprocess.run([node, "lookupd_client.js", sock], cwd=NODE_DIR, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ping"] == "pong"
    assert out["lookup"] == {"segment": 0, "offset": 89, "position": 13079}
    assert out["error"]["code"] == "UNKNOWN_METHOD"
