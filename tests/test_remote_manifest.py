"""The `.rsm-manifest` parser: the plugin's version "1" JSON, every variant, and clear errors for the rest."""

from __future__ import annotations

import base64
import copy
import json

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from lookupd.tools import tieredwriter
from lookupd.errors import CorruptDataError
from lookupd.log.remote.manifest import MAX_CHUNKS, decode_chunk_sizes, parse_manifest

KEY = "prefix/topic1-lZ6vvmajTWKDBUTV6SQAtQ/42/00000000000000000000-adh9f8BMS4anaUnD8KWfWg.rsm-manifest"

# The shape SegmentManifestV1SerdeTest expects (our own values).
FIXED = {
    "version": "1",
    "chunkIndex": {"type": "fixed", "originalChunkSize": 1024, "originalFileSize": 10240,
                   "transformedChunkSize": 1034, "finalTransformedChunkSize": 1034},
    "segmentIndexes": {"offset": {"position": 0, "size": 1}, "timestamp": {"position": 1, "size": 1},
                       "producerSnapshot": {"position": 2, "size": 1}, "leaderEpoch": {"position": 3, "size": 1},
                       "transaction": {"position": 4, "size": 1}},
    "compression": False,
    "remoteLogSegmentMetadata": {
        "remoteLogSegmentId": {"topicIdPartition": {"topicId": "lZ6vvmajTWKDBUTV6SQAtQ",
                                                    "topicPartition": {"topic": "topic1", "partition": 42}},
                               "id": "adh9f8BMS4anaUnD8KWfWg"},
        "startOffset": 0, "endOffset": 1000, "maxTimestampMs": 1000000000, "brokerId": 2,
        "eventTimestampMs": 2000000000, "segmentLeaderEpochs": {"0": 100, "1": 200, "2": 300}},
}


def _parse(doc) -> object:
    return parse_manifest(json.dumps(doc).encode(), KEY)


def _variable(sizes: list[int], chunk_size: int, file_size: int) -> dict:
    packed = zstandard.ZstdCompressor().compress(tieredwriter.encode_chunk_sizes(sizes))
    return {"type": "variable", "originalChunkSize": chunk_size, "originalFileSize": file_size,
            "transformedChunks": base64.b64encode(packed).decode()}


def test_fixed_index_with_metadata():
    m = _parse(FIXED)
    ci = m.chunk_index
    assert (ci.chunk_size, ci.file_size, ci.chunk_count) == (1024, 10240, 10)
    assert [ci.transformed_start(i) for i in range(11)] == list(range(0, 10341, 1034))
    assert ci.chunk_at_transformed(2 * 1034 + 5) == 2 and ci.chunk_at_transformed(50_000) == 9
    assert ci.chunks_for(0, 1) == range(0, 1) and ci.chunks_for(1023, 2) == range(0, 2)
    assert ci.chunks_for(9500, 10_000) == range(9, 10) and ci.chunks_for(10240, 5) == range(0)
    assert m.indexes == {"offset": (0, 1), "timestamp": (1, 1), "producer_snapshot": (2, 1),
                         "leader_epoch": (3, 1), "transaction": (4, 1)}
    assert not m.compression and m.encryption is None
    md = m.metadata
    assert (md.topic, md.partition, md.topic_id, md.segment_id) == ("topic1", 42, "lZ6vvmajTWKDBUTV6SQAtQ",
                                                                    "adh9f8BMS4anaUnD8KWfWg")
    assert (md.start_offset, md.end_offset, md.max_timestamp_ms) == (0, 1000, 1000000000)
    assert md.segment_leader_epochs == {0: 100, 1: 200, 2: 300}


def test_without_metadata_and_without_transaction_index():
    doc = copy.deepcopy(FIXED)
    del doc["remoteLogSegmentMetadata"]
    doc["segmentIndexes"]["transaction"] = None
    m = _parse(doc)
    assert m.metadata is None and m.indexes["transaction"] is None


def test_a_fixed_index_costs_nothing_per_chunk_up_to_the_chunk_bound():
    doc = copy.deepcopy(FIXED)
    doc["chunkIndex"].update(originalChunkSize=1024, originalFileSize=1024 * MAX_CHUNKS, transformedChunkSize=1052,
                             finalTransformedChunkSize=1052)
    ci = _parse(doc).chunk_index
    assert ci.chunk_count == MAX_CHUNKS and ci.transformed_start(ci.chunk_count) == 1052 * MAX_CHUNKS
    assert ci.starts is None
    doc["chunkIndex"].update(originalFileSize=2 ** 31 - 1)  # 2 million chunks: refused before anything per chunk
    with pytest.raises(CorruptDataError, match="MAX_CHUNKS"):
        _parse(doc)
    doc["chunkIndex"].update(originalChunkSize=1, originalFileSize=2)  # 1-byte chunks: refused, whatever their count
    with pytest.raises(CorruptDataError, match="MIN_CHUNK_BYTES"):
        _parse(doc)


def test_empty_segments():
    doc = copy.deepcopy(FIXED)
    doc["chunkIndex"].update(originalFileSize=0, finalTransformedChunkSize=0)
    ci = _parse(doc).chunk_index
    assert ci.chunk_count == 0 and ci.transformed_span(0, -1) == (0, 0) and ci.chunks_for(0, 100) == range(0)
    doc["chunkIndex"] = _variable([], 100, 0)
    assert _parse(doc).chunk_index.chunk_count == 0


def test_last_fixed_chunk_is_short():
    doc = copy.deepcopy(FIXED)
    doc["chunkIndex"].update(originalFileSize=9500, finalTransformedChunkSize=60)
    ci = _parse(doc).chunk_index
    assert ci.chunk_count == 10 and ci.transformed_start(10) == 9 * 1034 + 60
    assert ci.original_span(9) == (9216, 9500)


def test_encryption_and_variable_index():
    doc = copy.deepcopy(FIXED)
    doc["compression"] = True
    doc["chunkIndex"] = _variable([70, 65, 90, 12], 1024, 3100)
    doc["encryption"] = {"dataKey": "key-1:" + base64.b64encode(b"w" * 256).decode(),
                         "aad": base64.b64encode(b"\x0a\x0b\x0c\x0d").decode()}
    m = _parse(doc)
    assert [m.chunk_index.transformed_start(i) for i in range(5)] == [0, 70, 135, 225, 237]
    assert m.chunk_index.chunk_at_transformed(200) == 2
    assert m.encryption.key_id == "key-1" and m.encryption.wrapped_key == b"w" * 256
    assert m.encryption.aad == bytes([10, 11, 12, 13])


@given(st.lists(st.integers(0, 2 ** 31 - 1), max_size=300))
def test_chunk_sizes_codec_round_trips(sizes):
    assert decode_chunk_sizes(tieredwriter.encode_chunk_sizes(sizes)) == sizes


def test_a_manifest_without_segment_indexes_is_pre_release_and_unsupported():
    doc = copy.deepcopy(FIXED)
    del doc["segmentIndexes"]
    with pytest.raises(CorruptDataError, match="pre-release") as e:
        _parse(doc)
    assert e.value.code == "CORRUPT_DATA" and e.value.path == KEY


def _broken(change) -> dict:
    doc = copy.deepcopy(FIXED)
    change(doc)
    return doc


@pytest.mark.parametrize("doc,message", [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    ([1, 2], "not a JSON object"),
    (_broken(lambda d: d.update(version="2")), "version '2'"),
    (_broken(lambda d: d.pop("compression")), "compression must be bool"),
    (_broken(lambda d: d["chunkIndex"].update(type="weird")), "neither"),
    (_broken(lambda d: d["chunkIndex"].update(originalChunkSize=0)), "originalChunkSize 0"),
    (_broken(lambda d: d["chunkIndex"].update(originalFileSize=-1)), "originalFileSize -1"),
    (_broken(lambda d: d["chunkIndex"].update(transformedChunkSize="x")), "transformedChunkSize must be int"),
    (_broken(lambda d: d.update(chunkIndex=_variable([5, 5], 1024, 10240))), "holds 2 chunks"),
    (_broken(lambda d: d.update(chunkIndex={**_variable([5], 100, 50), "transformedChunks": "!!"})), "base64"),
    (_broken(lambda d: d.update(chunkIndex={**_variable([5], 100, 50), "transformedChunks": "AAAA"})), "zstd"),
    (_broken(lambda d: d.update(compression=True)), "variable chunk index"),
    (_broken(lambda d: d["segmentIndexes"].pop("offset")), "offset is missing"),
    (_broken(lambda d: d["segmentIndexes"]["timestamp"].update(size=-3)), "size -3"),
    (_broken(lambda d: d.update(encryption={"dataKey": "nocolon", "aad": ""})), "keyId"),
    (_broken(lambda d: d.update(encryption={"dataKey": "k:@@", "aad": ""})), "base64"),
    (_broken(lambda d: d.update(encryption={"dataKey": "k:", "aad": ""})), "empty wrapped key"),
    (_broken(lambda d: d["remoteLogSegmentMetadata"].update(startOffset="0")), "startOffset must be int"),
    (_broken(lambda d: d["remoteLogSegmentMetadata"].update(segmentLeaderEpochs={"x": 1})), "epochs"),
])
def test_corrupt_manifests_name_the_object_key(doc, message):
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    with pytest.raises(CorruptDataError, match=message) as e:
        parse_manifest(data, KEY)
    assert e.value.path == KEY and KEY in str(e.value)


@pytest.mark.parametrize("raw", [b"", b"\0\0\0\2", b"\0\0\0\1\0\0", b"\0\0\0\3\0\0\0\0\5\0\0\0\0\0\0\0",
                                 b"\xff\xff\xff\xff", b"\0\0\0\2\0\0\0\0\1\1\0\0\0\0\0"])
def test_bad_chunk_size_encodings_are_rejected(raw):
    data = json.dumps(_broken(lambda d: d.update(chunkIndex={
        **_variable([5], 100, 50),
        "transformedChunks": base64.b64encode(zstandard.ZstdCompressor().compress(raw)).decode()}))).encode()
    with pytest.raises(CorruptDataError, match="chunk sizes"):
        parse_manifest(data, KEY)
