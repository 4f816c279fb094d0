"""The remote tier through the daemon: configured by its [remote] table, answering as the fully local
partition through the real daemon subprocess, and never doing remote I/O on the event loop."""

from __future__ import annotations

import dataclasses
import os

import msgpack

import reference as R
from daemon_helpers import blocking_call, short_dir, start_daemon, stop_daemon  # noqa: F401 - fixture
from faultproxy import FaultProxy
from s3server import s3_server  # noqa: F401 - fixture
from tiered_helpers import tier_partition
from lookupd.tools.tieredwriter import Options

from lookupd.daemon.service import NEEDS_THREAD, Service, Session
from lookupd.log.logmanager import LogManager
from lookupd.log.tiered.listing import RemoteTier

TRUSTED = Session(trusted=True)


def _config_file(path: str, cfg, socket_path: str, log_dir) -> None:
    with open(path, "w") as f:
        f.write(f'log_dirs = ["{log_dir}"]\nsocket = "{socket_path}"\n[remote]\nbucket = "{cfg.bucket}"\n'
                f'endpoint_url = "{cfg.endpoint_url}"\ncache_dir = "{cfg.cache_dir}"\nprefix = "{cfg.prefix}"\n')


def test_the_daemon_subprocess_answers_across_tiers(s3_server, short_dir, tmp_path):  # noqa: F811
    R.require()
    t = tier_partition(tmp_path, R.log_dir("compressed-0"), s3_server, cut=5, opts=Options(compression=True))
    sock = os.path.join(short_dir, "s")
    conf = os.path.join(short_dir, "c.toml")
    _config_file(conf, t.config, sock, t.tiered_dir)
    lm = LogManager([t.local_dir])
    local = Service(lm)
    proc = start_daemon(["--config", conf], short_dir, sock)
    try:
        segs = blocking_call(sock, "segments", "compressed", 0)[1]
        assert [s["tier"] for s in segs[:6]] == ["remote"] * 5 + ["local"]
        for method, *params in (("read", 10, 3000), ("resolve_offset", 200), ("offset_for_timestamp", -2),
                                ("lookup_offset", 300, "ceiling"), ("offsets_for_timestamps", [0, 1, -1]),
                                ("aborted_transactions", 0, 10_000)):
            err, got = blocking_call(sock, method, "compressed", 0, *params)
            assert err is None, err
            want = local.call(method, ["compressed", 0, *params], TRUSTED)
            assert msgpack.unpackb(msgpack.packb(want), raw=False) == got, method
    finally:
        code, stderr = stop_daemon(proc)
        lm.close()
    assert code == 0, stderr


def test_remote_io_never_runs_on_the_event_loop(s3_server, tmp_path):  # noqa: F811
    """Every call that needs the remote tier is sent to a worker thread, before and after its data is
    cached; the local segments of the same partition are still answered on the loop."""
    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        lm = LogManager([t.tiered_dir], remote=RemoteTier(dataclasses.replace(t.config, endpoint_url=proxy.url)))
        try:
            s = Service(lm)
            calls = [("read", ["plain", 0, 100, 1000]), ("resolve_offset", ["plain", 0, 100]),
                     ("lookup_offset", ["plain", 0, 100, "floor"]), ("offset_for_timestamp", ["plain", 0, 0]),
                     ("lookup_timestamp", ["plain", 0, 0, "floor"]), ("aborted_transactions", ["plain", 0, 0, 50])]
            for warm in (False, True):
                seen = len(proxy.requests)
                for name, params in calls:
                    assert s.call_inline(name, params, TRUSTED) is NEEDS_THREAD, (name, warm)
                assert len(proxy.requests) == seen  # nothing was fetched on the loop
                for name, params in calls:
                    s.call(name, params, TRUSTED)  # in a worker thread: fetches and caches
            local = s.call_inline("resolve_offset", ["plain", 0, 900], TRUSTED)
            if local is not NEEDS_THREAD:  # hot local data: answered on the loop, as before
                assert local == s.call("resolve_offset", ["plain", 0, 900], TRUSTED)
        finally:
            lm.close()


def test_sighup_lists_the_bucket_again(s3_server, short_dir, tmp_path):  # noqa: F811
    """Retention deleted the oldest remote segment: after SIGHUP the daemon's log start is the next one's."""
    import signal
    import time

    R.require()
    t = tier_partition(tmp_path, R.log_dir("plain-0"), s3_server, cut=3, metadata_topic=False)
    sock = os.path.join(short_dir, "s")
    conf = os.path.join(short_dir, "c.toml")
    _config_file(conf, t.config, sock, t.tiered_dir)
    proc = start_daemon(["--config", conf], short_dir, sock)
    try:
        def log_start():
            return [p for p in blocking_call(sock, "partitions")[1] if p["topic"] == "plain"][0]["log_start_offset"]

        assert log_start() == 0
        for key in (t.uploaded[0].manifest_key, t.uploaded[0].log_key, t.uploaded[0].indexes_key):
            s3_server.client().delete_object(Bucket=t.config.bucket, Key=key)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while log_start() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log_start() == t.uploaded[1].facts.base_offset
    finally:
        code, stderr = stop_daemon(proc)
    assert code == 0, stderr
