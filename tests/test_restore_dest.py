"""`lookupd restore` and the directory it writes (issue 40): restore usually runs as root, so DEST_DIR must
be its user's and writable by no one else, and nothing is ever written through a symbolic link planted in
it, before or during the run (a victim file outside DEST_DIR keeps its bytes)."""

from __future__ import annotations

import hashlib
import os
import stat
import threading

import pytest

import reference as R
from s3server import s3_server  # noqa: F401 - fixture
from test_restore import _assert_identical, _lookupd, _tiered, _topic_id

from lookupd.tools.durable import Directory, write_atomically


@pytest.fixture
def tiered_plain(s3_server, tmp_path):  # noqa: F811
    R.require()
    t, _key, conf = _tiered(tmp_path, s3_server, "plain-0")
    return t, conf


def _restore(conf: str, t, dest) -> tuple[int, str, str]:
    return _lookupd("restore", "--config", conf, "--topic", t.topic, "--partition", "0", str(dest))


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_dest_of_another_user_or_writable_by_others_is_refused(tiered_plain, tmp_path):
    t, conf = tiered_plain
    dest = tmp_path / "dest"
    dest.mkdir(mode=0o755)
    os.chown(dest, 12345, 12345)
    rc, out, err = _restore(conf, t, dest)
    assert rc == 1 and len(err.strip().splitlines()) == 1, (out, err)
    assert "owned by uid 12345" in err and "not by the user running lookupd" in err
    os.chown(dest, os.geteuid(), os.getegid())
    os.chmod(dest, 0o777)
    rc, out, err = _restore(conf, t, dest)
    assert rc == 1 and len(err.strip().splitlines()) == 1, (out, err)
    assert "may be written by others (mode 0777)" in err
    assert os.listdir(dest) == []
    os.chmod(dest, 0o755)
    old = os.umask(0o002)  # a DEST_DIR restore makes is not group-writable, whatever the umask
    try:
        rc, out, err = _restore(conf, t, tmp_path / "made" / "here")
    finally:
        os.umask(old)
    assert rc == 0, err
    assert stat.S_IMODE(os.stat(tmp_path / "made" / "here").st_mode) == 0o755
    _assert_identical(t.local_dir / "plain-0", tmp_path / "made" / "here", _topic_id(t))


def test_symbolic_links_planted_in_dest_are_never_written_through(tiered_plain, tmp_path):
    """Someone plants symbolic links to a victim file under every name restore writes, before the run and
    again as fast as restore removes them. The victim keeps its bytes; restore refuses, in one line."""
    t, conf = tiered_plain
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious " * 1000)
    before = _digest(victim)
    dest = tmp_path / "dest"
    dest.mkdir(mode=0o755)
    bases = [f"{up.facts.base_offset:020d}" for up in t.uploaded]
    names = ["partition.metadata.tmp"] + [
        f"{b}{suffix}{tmp}" for b in bases for suffix in (".log", ".index", ".timeindex", ".txnindex")
        for tmp in (".tmp", "")]
    stop = threading.Event()

    def plant() -> None:
        while not stop.is_set():
            for name in names:
                try:
                    os.symlink(victim, dest / name)
                except FileExistsError:
                    pass

    planter = threading.Thread(target=plant)
    planter.start()
    try:
        for _ in range(3):
            rc, out, err = _restore(conf, t, dest)
            assert _digest(victim) == before, "restore wrote through a planted link into a file outside DEST_DIR"
            assert rc == 1 and len(err.strip().splitlines()) == 1, (out, err)
            assert "symbolic link" in err or "created by someone else" in err, err
    finally:
        stop.set()
        planter.join()
    assert all(os.path.islink(dest / n) or not n.endswith(".tmp") for n in os.listdir(dest))


def test_a_directory_never_writes_through_a_link(tmp_path):
    """The primitives restore and recover write with: a name someone planted is refused at creation, and a
    rename replaces a link at the final name instead of writing through it."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    d = tmp_path / "d"
    d.mkdir()
    os.symlink(victim, d / "a.tmp")
    os.symlink(victim, d / "a")
    with Directory(str(d)) as directory:
        with pytest.raises(FileExistsError):
            directory.create("a.tmp")
        write_atomically(directory, {"a": b"index bytes"})  # the leftover link is removed, not followed
    assert victim.read_bytes() == b"precious"
    assert not os.path.islink(d / "a") and (d / "a").read_bytes() == b"index bytes"
    assert sorted(os.listdir(d)) == ["a"]


def test_only_this_restores_files_are_its_own():
    """DEST_DIR's names are read as names.py reads a log dir's: a base offset is 20 ASCII digits (`\\d` would take
    other scripts' digits, which int() reads as an offset of this restore's), and a segment outside the restored
    ones is foreign too."""
    from lookupd.tools.restore import foreign_files

    arabic = "\u0660" * 20 + ".log"  # int() reads it as 0
    names = [arabic, "00000000000000000000.log", "00000000000000000000.index.tmp", "partition.metadata",
             "partition.metadata.tmp", "00000000000000000007.timeindex", "00000000000000000000.snapshot"]
    assert foreign_files(names, {0}) == sorted([arabic, "00000000000000000007.timeindex",
                                                "00000000000000000000.snapshot"])
