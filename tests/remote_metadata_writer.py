"""Test support: what a tiered broker leaves in its log dirs beside the bucket, `__remote_log_metadata` records
in Kafka's serialization (AbstractApiMessageSerde's frame over the flexible-version messages of
storage/src/main/resources/message/), appended as Kafka batches with lookupd's writer. (`partition.metadata`
and `leader-epoch-checkpoint`: lookupd.tools.tieredwriter, which the tiered demo writes them with too.)
"""

from __future__ import annotations

import os
import struct
from typing import Iterable

from lookupd.format.builder import _uvarint, build_batch  # Kafka's unsigned varint
from lookupd.log.tiered.brokerfiles import (COPY_SEGMENT_FINISHED, COPY_SEGMENT_STARTED, FRAME_VERSION,
                                         PARTITION_DELETE, REMOTE_LOG_METADATA_TOPIC, SEGMENT_METADATA,
                                         SEGMENT_UPDATE, uuid_bytes)
from lookupd.tools.writer import LogWriter

BROKER_ID = 1
EVENT_TIME = 1_700_000_000_000


def _string(s: str) -> bytes:
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _tagged(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    return _uvarint(len(fields)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in sorted(fields.items()))


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    return _uvarint(FRAME_VERSION) + _uvarint(api_key) + _uvarint(version) + body


def _topic_id_partition(topic: str, topic_id: str, partition: int) -> bytes:
    return _string(topic) + uuid_bytes(topic_id) + struct.pack(">i", partition) + _tagged()


def _segment_id(topic: str, topic_id: str, partition: int, segment_id: str) -> bytes:
    return _topic_id_partition(topic, topic_id, partition) + uuid_bytes(segment_id) + _tagged()


def segment_metadata(topic: str, topic_id: str, partition: int, segment_id: str, *, start_offset: int,
                     end_offset: int, max_timestamp: int, leader_epochs: Iterable[tuple[int, int]], size: int,
                     state: int = COPY_SEGMENT_STARTED, version: int = 1) -> bytes:
    """RemoteLogSegmentMetadataRecord's value (api key 0), as RemoteLogMetadataSerde writes it."""
    epochs = list(leader_epochs)
    body = (_segment_id(topic, topic_id, partition, segment_id)
            + struct.pack(">qqiqq", start_offset, end_offset, BROKER_ID, max_timestamp, EVENT_TIME)
            + _uvarint(len(epochs) + 1) + b"".join(struct.pack(">iq", e, o) + _tagged() for e, o in epochs)
            + struct.pack(">i", size) + _uvarint(0)  # custom metadata: null
            + struct.pack(">b", state)
            + _tagged({0: b"\x00"} if version == 0 else {0: b"\x00", 1: struct.pack(">i", 0)}))
    return _frame(SEGMENT_METADATA, version, body)


def segment_update(topic: str, topic_id: str, partition: int, segment_id: str, state: int, *,
                   version: int = 1) -> bytes:
    """RemoteLogSegmentMetadataUpdateRecord's value (api key 1)."""
    body = (_segment_id(topic, topic_id, partition, segment_id) + struct.pack(">iq", BROKER_ID, EVENT_TIME)
            + _uvarint(0) + struct.pack(">b", state) + _tagged())
    return _frame(SEGMENT_UPDATE, version, body)


def partition_delete(topic: str, topic_id: str, partition: int, state: int) -> bytes:
    """RemotePartitionDeleteMetadataRecord's value (api key 2)."""
    body = _topic_id_partition(topic, topic_id, partition) + struct.pack(">iqb", BROKER_ID, EVENT_TIME, state) \
        + _tagged()
    return _frame(PARTITION_DELETE, 1, body)


def copied(topic: str, topic_id: str, partition: int, segment_id: str, **metadata) -> list[bytes]:
    """The two events of a finished upload: copy started (with the metadata), then copy finished."""
    return [segment_metadata(topic, topic_id, partition, segment_id, **metadata),
            segment_update(topic, topic_id, partition, segment_id, COPY_SEGMENT_FINISHED)]


def write_metadata_topic(log_dir: str | os.PathLike, values: Iterable[bytes], *, partition: int = 0,
                         per_batch: int = 3) -> str:
    """Append the record values to `<log_dir>/__remote_log_metadata-<partition>` (a few per batch, null
    keys, as the broker's producer sends them); returns the partition directory."""
    directory = os.path.join(os.fspath(log_dir), f"{REMOTE_LOG_METADATA_TOPIC}-{partition}")
    writer = LogWriter(directory)
    values = list(values)
    offset = writer.next_offset
    for i in range(0, len(values), per_batch):
        chunk = values[i:i + per_batch]
        writer.append(build_batch([(EVENT_TIME + i + k, None, v, ()) for k, v in enumerate(chunk)],
                                  base_offset=offset))
        offset += len(chunk)
    writer.close(trim_active=True)
    return directory
