"""The broker's files about tiered segments: partition.metadata, leader-epoch-checkpoint and the
__remote_log_metadata events, read through the log layer."""

from __future__ import annotations

import os
import uuid

import pytest

from lookupd.errors import CorruptDataError
from lookupd.log.logmanager import LogManager
from lookupd.log.tiered.brokerfiles import (COPY_SEGMENT_FINISHED, DELETE_PARTITION_MARKED, DELETE_SEGMENT_FINISHED,
                                         DELETE_SEGMENT_STARTED, decode_event, read_leader_epoch_checkpoint,
                                         read_remote_log_metadata, read_topic_id, uuid_bytes, uuid_text)
from remote_metadata_writer import copied, partition_delete, segment_metadata, segment_update, write_metadata_topic
from lookupd.tools.tieredwriter import write_leader_epoch_checkpoint, write_partition_metadata


def _id() -> str:
    return uuid_text(uuid.uuid4().bytes)


def test_uuid_round_trip_and_refusals():
    raw = bytes(range(16))
    text = uuid_text(raw)
    assert len(text) == 22 and uuid_bytes(text) == raw
    for bad in ("short", text + "A", "!" * 22):
        with pytest.raises(ValueError):
            uuid_bytes(bad)


def test_partition_metadata_exact_form(tmp_path):
    assert read_topic_id(tmp_path) is None
    tid = _id()
    write_partition_metadata(tmp_path, tid)
    assert (tmp_path / "partition.metadata").read_bytes() == f"version: 0\ntopic_id: {tid}".encode()
    assert read_topic_id(tmp_path) == tid
    (tmp_path / "partition.metadata").write_text("version: 1\ntopic_id: x")
    with pytest.raises(CorruptDataError, match="partition.metadata at byte 0"):
        read_topic_id(tmp_path)
    (tmp_path / "partition.metadata").write_text("version: 0\ntopic_id: not-an-id")
    with pytest.raises(CorruptDataError, match="not-an-id"):
        read_topic_id(tmp_path)


def test_leader_epoch_checkpoint(tmp_path):
    assert read_leader_epoch_checkpoint(tmp_path) == []
    write_leader_epoch_checkpoint(tmp_path, [(0, 0), (3, 120), (5, 400)])
    assert read_leader_epoch_checkpoint(tmp_path) == [(0, 0), (3, 120), (5, 400)]
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\nx y\n")
    assert read_leader_epoch_checkpoint(tmp_path) == []


@pytest.mark.parametrize("version", [0, 1])
def test_segment_metadata_decodes(version):
    tid, sid = _id(), _id()
    value = segment_metadata("t", tid, 3, sid, start_offset=100, end_offset=199, max_timestamp=12345,
                             leader_epochs=[(1, 100), (2, 150)], size=4096, version=version)
    event = decode_event(value)
    assert (event.topic, event.topic_id, event.partition, event.segment_id) == ("t", tid, 3, sid)
    assert (event.start_offset, event.end_offset, event.max_timestamp, event.size) == (100, 199, 12345, 4096)
    assert event.leader_epochs == ((1, 100), (2, 150))
    with pytest.raises(ValueError, match="bytes left"):
        decode_event(value + b"\x00")
    with pytest.raises(ValueError, match="frame version"):
        decode_event(b"\x00" + value[1:])
    with pytest.raises(ValueError, match="needs"):
        decode_event(value[:30])


def test_events_fold_through_the_log(tmp_path):
    tid, other = _id(), _id()
    a, b, c, d = (_id() for _ in range(4))
    meta = dict(end_offset=9, max_timestamp=1, leader_epochs=[(0, 0)], size=10)
    values = [*copied("t", tid, 0, a, start_offset=0, **meta),
              *copied("t", tid, 0, b, start_offset=10, **meta),
              segment_metadata("t", tid, 0, c, start_offset=20, **meta),  # copy started only
              *copied("t", tid, 0, d, start_offset=30, **meta),
              segment_update("t", tid, 0, d, DELETE_SEGMENT_STARTED),
              segment_update("t", tid, 0, a, DELETE_SEGMENT_FINISHED),
              *copied("u", other, 0, a, start_offset=0, **meta),
              partition_delete("u", other, 0, DELETE_PARTITION_MARKED)]
    write_metadata_topic(tmp_path, values)
    lm = LogManager([tmp_path])
    try:
        state = read_remote_log_metadata(lm.logs())
        assert set(state.finished(tid, 0)) == {b}
        assert state.finished(tid, 0)[b].state == COPY_SEGMENT_FINISHED
        assert state.finished(other, 0) == {}
        assert state.finished(tid, 1) == {}
    finally:
        lm.close()


def test_no_metadata_topic_and_a_bad_record(tmp_path):
    assert read_remote_log_metadata([]) is None
    write_metadata_topic(tmp_path, [b"\x01\x07\x00garbage"])
    lm = LogManager([tmp_path])
    try:
        with pytest.raises(CorruptDataError, match=r"__remote_log_metadata-0.*offset 0.*unknown api key 7"):
            read_remote_log_metadata(lm.logs())
    finally:
        lm.close()
