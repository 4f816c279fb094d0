"""The mount's `__groups/<group>.json`: each consumer group of `__consumer_offsets`, its positions and lag
as the daemon's group_offsets answers them; a real daemon and a real mount over the coordinator corpus."""

from __future__ import annotations

import errno
import json
import os

import pytest

import reference as R
from lookupd.log.coordinators import Coordinators
from lookupd.log.logmanager import LogManager
from lookupd.log.positions import group_offsets
from test_fusefs_helpers import mounted


def test_groups_are_files_beside_the_topics():
    with mounted([R.COORDINATOR / "logs"]) as (mount, _):
        names = os.listdir(mount.path())
        assert "__groups" in names and "__consumer_offsets" in names
        groups = sorted(os.listdir(mount.path("__groups")))
        assert len(groups) == 19 and "consumer-app-51.json" in groups and "simple-consumer-29.json" in groups
        with open(mount.path("__groups", "classic-app-163.json")) as f:
            shown = json.load(f)
        want = group_offsets(Coordinators(LogManager([R.COORDINATOR / "logs"])), "classic-app-163")
        assert shown == want and shown["offsets"][1]["leader_epoch"] == 3
        assert os.stat(mount.path("__groups", "share-app-9.json")).st_mode & 0o444
        for missing in ("nobody.json", "classic-app-163.txt"):
            with pytest.raises(OSError) as e:
                os.stat(mount.path("__groups", missing))
            assert e.value.errno == errno.ENOENT
