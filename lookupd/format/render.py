"""How batches, records and index entries are shown: kafka-dump-log's text lines, and JSON.

Shared by `lookupd dump` and the FUSE view's decoded files, so a record looks the same
wherever it is printed. In JSON, keys, values and header values are UTF-8 text when they
decode as such, else `{"base64": "..."}`, and null when absent.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from json.decoder import scanstring
from typing import NamedTuple, Sequence

from .batch import CONTROL_MASK, BatchHeader, TimestampType
from .records import Record, _v2_records, control_record, decode_batch, native_v2
from .wire import ValueDecoder, WireError
from ..errors import CorruptRecordError

from . import _accel

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def payload(data: bytes | None):
    """A key, value or header value for JSON: text if it is valid UTF-8, else marked base64."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def batch_json(h: BatchHeader) -> dict:
    return {
        "position": h.position, "base_offset": h.base_offset, "last_offset": h.last_offset,
        "count": h.record_count, "size": h.size, "magic": h.magic,
        "base_timestamp": h.base_timestamp, "max_timestamp": h.max_timestamp,
        "timestamp_type": h.timestamp_type.label, "compression": h.compression.label, "crc": h.crc,
        "producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
        "last_sequence": h.last_sequence, "partition_leader_epoch": h.partition_leader_epoch,
        "transactional": h.is_transactional, "control": h.is_control,
    }


def _batch_facts(h: BatchHeader) -> dict:
    """What each record's JSON repeats of its batch."""
    return {"position": h.position, "base_offset": h.base_offset, "last_offset": h.last_offset,
            "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
            "transactional": h.is_transactional, "control": h.is_control}


def record_json(r: Record, h: BatchHeader, decoder: ValueDecoder | None = None) -> dict:
    """One record for `.records.jsonl` / `dump --json`, with the batch facts a reader needs. With a
    `decoder`, a key or value in the wire format is shown decoded (see `decoded_field`)."""
    out = {"offset": r.offset, "timestamp": r.timestamp, "timestamp_type": h.timestamp_type.label}
    if decoder is None:
        out["key"], out["value"] = payload(r.key), payload(r.value)
    else:
        decoded_field(out, "key", r.key, decoder)
        decoded_field(out, "value", r.value, decoder)
    out["headers"] = [{"key": k, "value": payload(v)} for k, v in r.headers]
    out["batch"] = _batch_facts(h)
    if h.is_control:
        marker = control_record(r)
        out["control"] = {"type": marker.type, "coordinator_epoch": marker.coordinator_epoch}
    return out


def decoded_field(out: dict, name: str, data: bytes | None, decoder: ValueDecoder) -> None:
    """`out[name]` for a key or value: decoded, with `<name>_schema_id`, when it is in the wire format and
    decodes; as `payload` shows it, with `<name>_schema_id` and `<name>_error` (the reason), when it is in
    the wire format and does not; as `payload` shows it, alone, otherwise."""
    try:
        got = decoder.decode(data)
    except WireError as err:
        out[name] = payload(data)
        out[f"{name}_schema_id"] = err.schema_id
        out[f"{name}_error"] = str(err)
        return
    if got is None:
        out[name] = payload(data)
    else:
        out[name] = got.value
        out[f"{name}_schema_id"] = got.schema_id


class JsonLines(NamedTuple):
    """A batch's records as JSON lines (ASCII): their offsets, where each line starts (then the end), the bytes."""

    offsets: Sequence[int]
    starts: Sequence[int]
    data: bytes


def record_lines(header: BatchHeader, batch, path=None, head: bytes = b"{", *, key: bytes | None = None,
                 decoder: ValueDecoder | None = None) -> JsonLines:
    """`record_json` of each record of a batch whose CRC was checked (only those whose key is `key`, when
    given), a line each, every line starting with `head` (the opening brace and any fields put before the
    record's). v2 data batches are decoded to columns and rendered from them in C (`_accel.render_batch`);
    the reference path, `reference_lines`, does control batches, legacy messages, machines without the
    extension and any batch the C decoder hands back, so it also raises the errors. Both give the same bytes.

    With a `decoder`, a batch that may hold a key or value in the wire format (five bytes or more starting
    with byte 0: the C decoder says so) is rendered by the reference path, decoding them; the others are
    as without one, at the same speed."""
    if not _accel.mode.python and header.magic >= 2 and not header.attributes & CONTROL_MASK and header.record_count > 0:
        try:
            records = _v2_records(header, batch, path)
        except CorruptRecordError:
            pass  # the reference path reports it
        else:
            done = _accel.render_batch(*native_v2(header, records), head, _MID[header.timestamp_type],
                                       _tail(header), key)
            if done is not None:
                data, offsets, starts, holds_wire = done
                offsets, starts = memoryview(offsets).cast("q"), memoryview(starts).cast("q")
                if decoder is None or not holds_wire:
                    return JsonLines(offsets, starts, data)
                return decoded_lines(JsonLines(offsets, starts, data), _MID[header.timestamp_type], decoder)
    return reference_lines(header, batch, path, head, key=key, decoder=decoder)


def decoded_lines(lines: JsonLines, mid: bytes, decoder: ValueDecoder) -> JsonLines:
    """Rendered lines with their wire-format keys and values decoded in place: the bytes `reference_lines`
    gives with the decoder, without decoding the batch again in Python. Each line is head, offset and
    timestamp, `mid` (ending `"key":`), the key, `,"value":`, the value, `,"headers":`...; neither marker
    can occur inside a JSON string (its quotes are escaped) or a base64 object, so the first of each after
    `mid` is the field's. A key or value is taken back from its JSON form (text, or base64) and decoded when
    it may be in the wire format."""
    data, starts = lines.data, lines.starts
    out: list[bytes] = []
    new_starts = [0]
    for i in range(len(lines.offsets)):
        line = data[starts[i]:starts[i + 1]]
        k = line.find(mid) + len(mid)
        v = line.find(b',"value":', k)
        end = line.find(b',"headers":', v)
        key, value = line[k:v], line[v + 9:end]
        if _WIRE_FORM.match(key) or _WIRE_FORM.match(value):
            line = b"".join((line[:k - 6], _decoded_json("key", key, decoder), b',',  # 6: len('"key":')
                             _decoded_json("value", value, decoder), line[end:]))
        out.append(line)
        new_starts.append(new_starts[-1] + len(line))
    return JsonLines(lines.offsets, new_starts, b"".join(out))


# A key or value as render writes one starting with byte 0 and five bytes or more: text whose first
# character is NUL, or base64 whose first character is "A" (six zero bits).
_WIRE_FORM = re.compile(rb'"\\u0000|\{"base64":"A')


def _decoded_json(name: str, rendered: bytes, decoder: ValueDecoder) -> bytes:
    """`"name":...` as `decoded_field` shows the key or value whose JSON form is `rendered`."""
    if rendered == b"null":
        return b'"%s":null' % name.encode()
    if rendered.startswith(b'{"base64":"'):
        raw = base64.b64decode(rendered[11:-2])
    else:
        raw = scanstring(rendered.decode("ascii"), 1)[0].encode("utf-8")
    try:
        got = decoder.decode_object(raw)
    except WireError as err:
        return ('"%s":%s,"%s_schema_id":%d,"%s_error":%s' % (
            name, rendered.decode("ascii"), name, err.schema_id, name, _dumps(str(err)))).encode("ascii")
    if got is None:
        return b'"%s":%s' % (name.encode(), rendered)
    sid, obj, codec = got
    return ('"%s":%s,"%s_schema_id":%d' % (name, codec.json_text(obj, ascii=True), name, sid)).encode("ascii")


# What each line holds between the record's timestamp and its key, by timestamp type.
_MID = {t: f',"timestamp_type":{_dumps(t.label)},"key":'.encode("ascii") for t in TimestampType}


def _tail(h: BatchHeader) -> bytes:
    """The end of each line of a data batch: its batch facts (integers and booleans, as json writes them)."""
    return (f',"batch":{{"position":{h.position},"base_offset":{h.base_offset},"last_offset":{h.last_offset},'
            f'"producer_id":{h.producer_id},"producer_epoch":{h.producer_epoch},'
            f'"transactional":{"true" if h.is_transactional else "false"},"control":false}}}}\n').encode("ascii")


def reference_lines(header: BatchHeader, batch, path=None, head: bytes = b"{", *, key: bytes | None = None,
                    decoder: ValueDecoder | None = None) -> JsonLines:
    """`record_lines` through `record_json` and the json module, one record at a time."""
    records = decode_batch(header, batch, path=path)
    if key is not None:
        records = [r for r in records if r.key == key]
    prefix = head.decode("ascii")
    lines = [prefix + _dumps(record_json(r, header, decoder))[1:] + "\n" for r in records]  # ASCII: a byte a character
    return JsonLines([r.offset for r in records], list(itertools.accumulate(map(len, lines), initial=0)),
                     "".join(lines).encode("ascii"))


def batch_line(h: BatchHeader, valid: bool) -> str:
    """A batch as kafka-dump-log prints it."""
    if h.magic >= 2:
        head = (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
                f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()}")
    else:
        head = f"offset: {h.last_offset}"
    return (f"{head} position: {h.position} {h.timestamp_type.label}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {h.compression.label} crc: {h.crc} isvalid: {str(valid).lower()}")


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", "backslashreplace")


def _decoded_text(data: bytes | None, decoder: ValueDecoder | None) -> str:
    """A key or payload for `record_line`: with a decoder, one in the wire format as compact JSON and its
    schema id, or its text and why it did not decode."""
    if decoder is not None:
        try:
            got = decoder.decode(data)
        except WireError as err:
            return f"{_text(data)} (not decoded: {err})"
        if got is not None:
            return f"{_dumps(got.value)} (schema id {got.schema_id})"
    return _text(data)


def record_line(r: Record, h: BatchHeader, *, print_data: bool, decoder: ValueDecoder | None = None) -> str:
    """A record as kafka-dump-log's deep iteration prints it (`| offset: ...`); with a `decoder`, keys and
    payloads in the wire format decoded, as kafka-dump-log's --key-decoder-class and --value-decoder-class
    would."""
    line = (f"| offset: {r.offset} {h.timestamp_type.label}: {r.timestamp} "
            f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)}")
    if h.magic >= 2:
        line += f" headerKeys: [{','.join(k for k, _ in r.headers)}]"
    if h.is_control:
        marker = control_record(r)
        if marker.coordinator_epoch is not None:
            line += f" endTxnMarker: {marker.type} coordinatorEpoch: {marker.coordinator_epoch}"
        else:
            line += f" controlType: {marker.type}"
    elif print_data:
        line += f" key: {_decoded_text(r.key, decoder)} payload: {_decoded_text(r.value, decoder)}"
    return line
