"""Values decoded with the schemas of `_schemas`: through the mount and the Spark source, against a plain loop.

The anchor is fastavro decoding the very payloads (the wire format's 5-byte header cut off) in a
plain Python loop, `schemaless_reader` over a BytesIO, in the same run (at its start, and again after
each round of Spark reads): what a consumer with the schema in hand does. Measured against it:
records/s of `.records.jsonl` read through the mount with values decoded (the whole JSON line made,
not only the value; each repeat a partition not read before, the mount keeping what it rendered), and
of the Spark source with `lookupd.decodeValues` = `json` and `struct` (a column of each value summed,
so each is decoded), on local[2] with two splits, beside the same read without decoding (the three
taking turns), and the source's own reading of those splits in process (what the executors' tasks
do, without Spark, on one core). Then the cost for records with no schema: a batch of text values
rendered with a decoder (the schemas topic present) and without, in process. And the Protobuf parser
chosen: the pure parser (proto-schema-parser, in process) against protoc (grpcio-tools) writing a
descriptor set from the same .proto text, per schema.

Run: python bench/bench_schemas.py [--quick] [--json OUT]
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

from bench_fuse import Mounted  # noqa: E402
from lookupd.format import render  # noqa: E402
from lookupd.format.batch import parse_header  # noqa: E402
from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.format.schemas import Registry  # noqa: E402
from lookupd.format.wire import ValueDecoder  # noqa: E402
from lookupd.tools.writer import LogWriter  # noqa: E402

T0 = 1_767_225_600_000
PER_BATCH = 200
SCHEMA = {"type": "record", "name": "Click", "namespace": "bench", "fields": [
    {"name": "user", "type": "string"}, {"name": "page", "type": "string"}, {"name": "n", "type": "long"},
    {"name": "ms", "type": "double"}, {"name": "ok", "type": "boolean"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "ref", "type": ["null", "string"], "default": None}]}
PROTO = 'syntax = "proto3";\npackage bench;\n' + "\n".join(
    f"message M{i} {{ int64 a = 1; string b = 2; repeated int32 c = 3; map<string, int32> d = 4; "
    f"optional bool e = 5; M{i} f = 6; }}" for i in range(20))


def _payloads(n: int) -> list[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"user": f"u{i % 977}", "page": f"/p/{i % 131}", "n": i,
                                                 "ms": i / 7, "ok": bool(i % 2), "tags": ["a", "b"][:i % 3],
                                                 "ref": None if i % 4 else "https://example.com/"})
        out.append(buf.getvalue())
    return out


def write(root: str, n: int, partitions: int, spark_n: int) -> list[bytes]:
    """`_schemas` with the schema as id 1; `clicks` with n wire-format values in each of `partitions` partitions
    (one per repeat: the mount keeps the batches it rendered, so a repeat must read new ones) and spark_n
    in `clicks-big` (Spark's fixed cost per query amortized); `plain` with n text values."""
    payloads = _payloads(max(n, spark_n))
    records = []
    for subject in ("clicks-value", "clicks_big-value"):  # one schema, one id, under both topics' subjects
        records.append((T0, json.dumps({"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1}).encode(),
                        json.dumps({"subject": subject, "version": 1, "id": 1, "schema": json.dumps(SCHEMA),
                                    "deleted": False}).encode(), ()))
    w = LogWriter(os.path.join(root, "_schemas-0"))
    w.append(build_batch(records, base_offset=0))
    w.close()
    wire = [b"\0" + struct.pack(">I", 1) + p for p in payloads]
    topics = [(f"clicks-{p}", wire[:n]) for p in range(partitions)] + [("clicks_big-0", wire[:spark_n])] + \
        [("plain-0", [f"plain value {i} of some text".encode() for i in range(n)])]
    for name, values in topics:
        w = LogWriter(os.path.join(root, name))
        for b in range(0, len(values), PER_BATCH):
            chunk = values[b:b + PER_BATCH]
            w.append(build_batch([(T0 + b + i, f"k{b + i}".encode(), v, ()) for i, v in enumerate(chunk)],
                                 base_offset=b))
        w.close()
    return payloads[:spark_n]


def fastavro_loop(payloads: list[bytes]) -> float:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    reader = fastavro.schemaless_reader
    t0 = time.perf_counter()
    for p in payloads:
        reader(io.BytesIO(p), parsed, None)
    return len(payloads) / (time.perf_counter() - t0)


def read_jsonl(path: str, n: int) -> float:
    t0 = time.perf_counter()
    lines = 0
    with open(path, "rb", buffering=1 << 20) as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
    took = time.perf_counter() - t0
    assert lines == n, (lines, n)
    return n / took


def plain_rendering(root: str, n: int, times: int) -> tuple[list[float], list[float]]:
    """Records/s of rendering the plain topic's batches in process, without and with a decoder."""
    from lookupd.log.segment import LogSegment

    seg = LogSegment.open(os.path.join(root, "plain-0"), 0)
    batches = []
    for buf, off, pos, size in seg.log.frames(0, seg.size()):
        data = bytes(buf[off:off + size]) if off + size <= len(buf) else seg.log.read(pos, size)
        batches.append((parse_header(data, 0, pos), data))
    seg.close()
    reg = Registry.from_records([(0, json.dumps({"keytype": "SCHEMA", "subject": "x", "version": 1}).encode(),
                                  json.dumps({"subject": "x", "version": 1, "id": 1,
                                              "schema": json.dumps(SCHEMA)}).encode())])
    decoder = ValueDecoder(reg)
    without, with_ = [], []
    for _ in range(times):
        for dec, out in ((None, without), (decoder, with_)):
            t0 = time.perf_counter()
            for h, data in batches:
                render.record_lines(h, data, decoder=dec)
            out.append(n / (time.perf_counter() - t0))
    return without, with_


def spark_rate(spark, sock: str, mode: str | None, n: int) -> float:
    """Records/s of a read of clicks_big (two splits, so both cores decode) that decodes every value."""
    reader = (spark.read.format("kafka-segments").option("lookupd.address", sock).option("subscribe", "clicks_big")
              .option("minPartitions", "2"))
    if mode is None:
        exprs = ["sum(length(value))", "count(*)", "0"]
    else:
        reader = reader.option("lookupd.decodeValues", mode)
        exprs = ["sum(length(decodedValue))" if mode == "json" else "sum(decodedValue.n)", "count(*)",
                 "count(decodeError)"]
    t0 = time.perf_counter()
    got = reader.load().selectExpr(*exprs).collect()[0]
    took = time.perf_counter() - t0
    assert got[1] == n and got[2] == 0, got
    return n / took


def executor_rate(sock: str, mode: str, n: int) -> float:
    """Records/s of the Spark source's own reading of clicks_big's splits in this process, one after the other
    (no Spark: what each executor task does, on one core)."""
    from spark_client.datasource import KafkaSegmentsDataSource

    ds = KafkaSegmentsDataSource({"lookupd.address": sock, "subscribe": "clicks_big", "minPartitions": "2",
                                  "lookupd.decodeValues": mode})
    reader = ds.reader(ds.schema())
    splits = reader.partitions()
    t0 = time.perf_counter()
    rows = sum(b.num_rows for s in splits for b in reader.read(s))
    took = time.perf_counter() - t0
    assert rows == n, rows
    return n / took


def parser_ms(times: int) -> tuple[list[float], list[float]]:
    """ms per schema: the pure parser's descriptor, and protoc's (grpcio-tools) through a temporary dir."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    from lookupd.format.protoschema import file_descriptor

    pure, compiled = [], []
    for _ in range(times):
        t0 = time.perf_counter()
        file_descriptor(PROTO, "bench.proto")
        pure.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "bench.proto"), "w") as f:
                f.write(PROTO)
            assert protoc.main(["protoc", f"-I{d}", f"--descriptor_set_out={d}/out.pb", f"{d}/bench.proto"]) == 0
            with open(f"{d}/out.pb", "rb") as f:
                descriptor_pb2.FileDescriptorSet.FromString(f.read())
        compiled.append((time.perf_counter() - t0) * 1000)
    return pure, compiled


def run(quick: bool = False) -> list[Figure]:
    from bench_spark import spark_session

    n = 50_000 if quick else 200_000
    spark_n = 200_000 if quick else 1_000_000
    times = 3 if quick else 5
    figures = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/var/tmp")) as d:
        logs = os.path.join(d, "logs")
        payloads = write(logs, n, times + 1, spark_n)
        params = {"records": spark_n, "value_bytes": sum(map(len, payloads)) // spark_n}
        anchor = [fastavro_loop(payloads) for _ in range(times)]  # and after each round of Spark reads, below
        with Mounted(logs, d) as m:
            paths = [os.path.join(m.root, "clicks", str(p), f"{0:020d}.records.jsonl") for p in range(times + 1)]
            through = [read_jsonl(path, n) for path in paths][1:]  # the first: warm-up (the schema parsed)
            in_process = {mode: [executor_rate(m.sock, mode, spark_n) for _ in range(times)] for mode in ("json", "struct")}
            spark = spark_session()
            try:
                # A million records a read: three rounds after the warm-up keep the suite short. The modes take
                # turns and the anchor is measured again after each round, so a burst of load on the shared
                # machine falls on both sides of the ratios rather than on Spark's figures alone.
                rates: dict = {None: [], "json": [], "struct": []}
                for rnd in range(4):
                    for mode, got in rates.items():
                        rate = spark_rate(spark, m.sock, mode, spark_n)
                        got += [rate] if rnd else []
                    anchor += [fastavro_loop(payloads)] if rnd else []
            finally:
                spark.stop()
        figures.append(Figure("fastavro loop over the payloads", "records/s", anchor, group="schemas",
                              params=params, higher_is_better=True))
        figures.append(Figure(".records.jsonl with values decoded, through the mount", "records/s", through,
                              group="schemas", params={**params, "records": n}, higher_is_better=True))
        for mode, values in rates.items():
            name = "Spark source, no decoding" if mode is None else f"Spark source, lookupd.decodeValues={mode}"
            figures.append(Figure(name, "records/s", values, group="schemas",
                                  params={**params, "master": "local[2]", "splits": 2}, higher_is_better=True))
        for mode, values in in_process.items():
            figures.append(Figure(f"Spark source's split reading in process, lookupd.decodeValues={mode}", "records/s",
                                  values, group="schemas", params={**params, "cores": 1}, higher_is_better=True))
        without, with_ = plain_rendering(logs, n, times)
        figures.append(Figure("records with no schema rendered, no decoder", "records/s", without,
                              group="schemas-plain", params={"records": n}, higher_is_better=True))
        figures.append(Figure("records with no schema rendered, with a decoder", "records/s", with_,
                              group="schemas-plain", params={"records": n}, higher_is_better=True))
    pure, compiled = parser_ms(times)
    figures.append(Figure("descriptor from .proto text, pure parser (proto-schema-parser)", "ms", pure,
                          group="schemas-parser", params={"messages": 20}))
    figures.append(Figure("descriptor from .proto text, protoc (grpcio-tools) via a temporary dir", "ms", compiled,
                          group="schemas-parser", params={"messages": 20}))
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    names = {f.name for f in figures}
    anchor = "fastavro loop over the payloads"
    out = [ratio(f"{name} vs a fastavro loop", figures, name, anchor,
                 "decoded records/s as a fraction of fastavro decoding the same payloads in a plain loop"
                 + (" (target 0.5x)" if "Spark" in name else ""))
           for name in (".records.jsonl with values decoded, through the mount",
                        "Spark source, lookupd.decodeValues=json", "Spark source, lookupd.decodeValues=struct",
                        "Spark source's split reading in process, lookupd.decodeValues=json",
                        "Spark source's split reading in process, lookupd.decodeValues=struct")
           if name in names]
    out.append(ratio("records with no schema, decoder vs none", figures,
                     "records with no schema rendered, with a decoder", "records with no schema rendered, no decoder",
                     "rendering speed of records not in the wire format with the schemas present (target 1x)"))
    out.append(ratio("pure .proto parser vs protoc", figures,
                     "descriptor from .proto text, protoc (grpcio-tools) via a temporary dir",
                     "descriptor from .proto text, pure parser (proto-schema-parser)",
                     "how many times faster the pure parser builds a schema's descriptor than protoc (below 1: slower)"))
    return out


if __name__ == "__main__":
    common.main(run, __doc__)
