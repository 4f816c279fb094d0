"""Write the README's Performance summary and docs/performance.md from one results file (the newest by default).

    python bench/report.py [RESULTS.json]

Everything between the `bench:begin`/`bench:end` markers is replaced. In docs/performance.md: the
machine, one sentence per plot on what it means for a user, the plots, and a table of every
figure and ratio. In README.md: the machine, the headline ratios and a few plots, with a link to
the full page. Each number comes straight from the results file (tests/test_bench_results.py
checks that both still match it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
README = os.path.join(REPO, "README.md")
PERFORMANCE = os.path.join(REPO, "docs", "performance.md")
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"

# One sentence per plot, for a user; {name} is the value of the ratio called that in the results.
SENTENCES = {
    "index-latency": "One in-process lookup costs about two microseconds in Python either way; the warm-section search is "
                     "there for the page cache, not the CPU (warm-section over plain: {warm-section vs plain search, tail target:.2f}x for tail targets).",
    "index-many": "Resolving many offsets in one call costs tens to a couple of hundred nanoseconds each, in line with numpy's "
                  "own `searchsorted` on a native copy of the entries ({many-lookups vs numpy searchsorted, 100,000 random targets:.2f}x "
                  "its time for 100,000 random targets, {many-lookups vs numpy searchsorted, 100,000 sorted-tail targets:.2f}x for sorted "
                  "tail targets); batches of a thousand pay a fixed cost per call ({many-lookups vs numpy searchsorted, 1,000 random targets:.1f}x).",
    "index-faults": "On a growing index that was evicted from the page cache, tail lookups with the warm-section search take "
                    "{page faults, plain vs warm-section search, 1,000,000 entries:.1f}x fewer major page faults than a plain binary search, "
                    "so lookups by consumers near the end keep hitting pages that are already in memory.",
    "decode": "lookupd's Python decoder (the reference, used by the dump and the FUSE view) decodes {decode speed vs kafka-python, plain-0:.1f}x "
              "kafka-python's MB/s on the same uncompressed batches ({decode speed vs kafka-python, compressed-0:.1f}x on mixed codecs).",
    "decode-records": "The native columnar decoder the Spark source uses, in records per second against aiokafka's Cython decoder on "
                      "the same batches: {columnar decode vs aiokafka, plain-0:.1f}x on plain-0, "
                      "{columnar decode vs aiokafka, large-0:.1f}x on large-0 (one-record batches), "
                      "{columnar decode vs aiokafka, compressed-0:.1f}x on mixed codecs, where decompression dominates both: "
                      "the columnar decoder calls the codec libraries from C; decompressing those batches alone, one codec call "
                      "per batch from a Python loop and no decoding, runs at "
                      "{decompression alone vs aiokafka, compressed-0:.1f}x aiokafka's records/s.",
    "groups-replay": "Replaying a live `__consumer_offsets` partition to its groups' positions runs at "
                     "{groups replay vs columnar decoder, steady:.2f}x the native columnar decoder's records/s on the same "
                     "segment files (commits of one key over and over, applied in a C table); one as the cleaner leaves "
                     "it, where every commit is a new key, at {groups replay vs columnar decoder, compacted:.2f}x.",
    "groups-daemon": "A warm `group_offsets` of a group with 100 partitions takes a round trip of "
                     "{group_offsets vs resolve_offset, p50:.1f}x a `resolve_offset`'s p50 on the same daemon and connection "
                     "(it reads the 100 partitions' log ends and sends 100 rows of 12 columns).",
    "coldstart": "A log dir of many segments opens in a fraction of a second and a small amount of memory, because nothing is "
                 "mapped until it is looked up; the first lookup on a segment whose files are not cached costs a few milliseconds of disk reads.",
    "daemon-latency": "Over a Unix socket, unpinned, one floor lookup takes a round trip of {lookupd vs redis, single-client p50 latency:.1f}x "
                      "redis's for the same floor query; resolve_offset {lookupd resolve_offset vs redis, single-client p50:.1f}x, "
                      "offset_for_timestamp {lookupd offset_for_timestamp vs redis, single-client p50:.1f}x. Unpinned, each server's "
                      "p50 is mostly whether the scheduler ran the client beside it on one vCPU or across two (daemon-placement), "
                      "which can turn either way between runs. Part of lookupd's own cost is the lookup's Python running "
                      "with the CPU's caches cold when one client waits between requests (in process, a floor lookup after 200 us "
                      "idle takes {lookup after idle vs in a loop:.1f}x as long as one in a tight loop: daemon-policy).",
    "daemon-placement": "The same round trips with the client and the server pinned: on two cores, where each request and each "
                        "answer wakes the other vCPU, lookupd's floor lookup takes {lookupd lookup_offset floor vs redis, single-client p50, two cores:.2f}x "
                        "redis's round trip (offset_for_timestamp {lookupd offset_for_timestamp vs redis, single-client p50, two cores:.2f}x, "
                        "read of one batch {lookupd read one batch vs redis, single-client p50, two cores:.2f}x); on one core, where the "
                        "round trip is the two processes' CPU time and no wake-up, {lookupd lookup_offset floor vs redis, single-client p50, one core:.2f}x "
                        "(offset_for_timestamp {lookupd offset_for_timestamp vs redis, single-client p50, one core:.2f}x): there lookupd's "
                        "Python and trio per request show in full, as in the CPU per request below.",
    "daemon-throughput": "With 8 closed-loop clients lookupd serves {lookupd lookup_offset floor vs redis, 8 clients:.2f}x redis's floor lookups per "
                         "second (resolve_offset {lookupd resolve_offset vs redis, 8 clients:.2f}x, read of one batch "
                         "{lookupd read one batch vs redis, 8 clients:.2f}x); two workers give {workers=2 vs workers=1, 64 clients:.2f}x one "
                         "worker's rate at 64 clients on these 2 cores, shared with the load generator. For bulk work the columnar calls "
                         "resolve far more offsets per second than single requests can.",
    "daemon-cpu": "Server CPU per request, from /proc: lookupd spends {lookupd lookup_offset floor vs redis, server CPU per request:.1f}x "
                  "redis's microseconds on a floor lookup. Prometheus metrics on cost {metrics on vs off, server CPU per request:.2f}x "
                  "the CPU per request and give {metrics on vs off, 8 clients:.2f}x the throughput of the same daemon with them "
                  "off, the two measured alternately.",
    "daemon-tls": "Over TLS (loopback TCP, the same certificate and client code for both), at 8 clients lookupd serves "
                  "{lookupd lookup_offset floor vs redis over TLS, 8 clients:.2f}x redis's floor lookups per second "
                  "(resolve_offset {lookupd resolve_offset vs redis over TLS, 8 clients:.2f}x, read of one batch "
                  "{lookupd read one batch vs redis over TLS, 8 clients:.2f}x), and one client's floor lookup takes "
                  "{lookupd lookup_offset floor vs redis over TLS, single-client p50:.2f}x redis's round trip. A TLS "
                  "connection is served by the same engine and reactor, decrypting what it reads and encrypting what it writes.",
    "daemon-inprocess": "Partition-level calls in process on `lookupd demo-data`, against the targets in their names: the "
                        "index searches (a rolled segment's time index and offset index in one call), the batch-header walk, "
                        "the timestamp scan inside a batch and JSON rendering are C; the rest of each call (the index's "
                        "safety checks, the segment listing, building the answer) is Python.",
    "daemon-policy": "Answering a lookup on the event loop instead of hopping to a worker thread is what keeps single lookups fast "
                     "({inline vs threaded hot lookups, 8 clients:.1f}x the throughput at 8 clients).",
    "fuse-read": "Raw reads of a rolled segment through the mount run at {fuse read throughput vs disk:.2f}x the speed of reading the "
                 "file directly when both are warm (the kernel's page cache serves them), and {fuse cold read throughput vs disk:.2f}x "
                 "when both start cold (every read goes through the FUSE process).",
    "fuse-records": "Decoded records come through `.records.jsonl` at {fuse records/s vs in-process:.2f}x the speed of the same "
                    "rendering in process.",
    "fuse-bykey": "Finding every record with one key through `by-key/` runs at {fuse by-key scan vs in-process:.2f}x the speed of "
                  "the same scan in process.",
    "fuse-ls": "`ls -lR` over thousands of segments: each directory listing carries its entries' attributes "
               "(READDIRPLUS, libfuse 3), so the walk costs a few calls into the FUSE process per directory, not one "
               "per file, and the mount's ENOTSUP for extended attributes stops `ls -l` asking about ACLs per file. "
               "The mount lists six files per segment, the log dir three.",
    "spark-positions": "Resolving positions with columnar requests per task is {spark-positions-speedup:.0f}x faster than one "
                       "request per row, which is what makes `resolve_positions` usable on large DataFrames.",
    "spark-read": "The Spark source decodes into Arrow columns natively; on this 2-core machine, with Spark's own JVM sharing "
                  "the cores, it reads {spark source vs aiokafka in one process:.2f}x the records per second of aiokafka's "
                  "Cython decoder looping over the same batches in one process ({spark-read-speedup:.2f}x lookupd's Python "
                  "decoder's).",
    "spark-stream-latency": "A streaming query with the default trigger delivers an appended batch's records to its sink in the "
                            "time shown (append to foreachBatch); catching up with Trigger.AvailableNow reads "
                            "{spark-available-now-vs-batch:.2f}x the records per second of a batch read of the same data, "
                            "a streaming query's fixed cost included.",
    "spark-tiered-read": "The Spark source reading a fully tiered topic (every segment in the bucket, read by the "
                         "executors themselves by ranged GETs of 4 MiB chunks from a local SeaweedFS) runs at "
                         "{spark tiered vs local read:.2f}x the records per second of the same topic read from local "
                         "segments (target 0.8).",
    "remote-clients": "Ranged GETs from a local SeaweedFS through the three candidate S3 clients: obstore, lookupd's client "
                      "for listings and ranged GETs, gets {S3 client obstore vs boto3, 64 KiB ranged GETs:.1f}x boto3's MB/s on "
                      "64 KiB ranges and {S3 client obstore vs boto3, 4096 KiB ranged GETs:.2f}x on 4 MiB chunks.",
    "remote-read": "A whole tiered segment read sequentially through lookupd (4 MiB chunks by ranged GET, decoded, cached and "
                   "read ahead) runs at {remote sequential read vs plain ranged GETs, plain:.2f}x the MB/s of plain ranged GETs "
                   "of the same object with the same client, two in flight; zstd-compressed and encrypted, at "
                   "{remote sequential read vs plain ranged GETs, zstd+encrypted:.2f}x: there the plain GETs fetch a third "
                   "of the bytes and decode nothing, while lookupd decompresses each chunk (about 1.2 GB/s a core, its "
                   "chunks decoded in parallel, one thread a core) on the same 2 cores as the S3 server.",
    "remote-read-cpu": "The CPU time of each sequential read above, in lookupd's process and in the S3 server, which "
                       "share this machine's cores: a compressed and encrypted read spends most of it decompressing (the "
                       "data key's unwrap, once per segment, is under 1 ms), so on loopback it is bound by the two "
                       "cores, not by the network.",
    "remote-cold": "A cold lookup into a tiered segment fetches the manifest, the offset and time indexes (adjacent: one "
                   "ranged GET) and the chunk holding the batch: three GETs.",
    "kafka": "Through the Kafka listener, a raw client's plain Fetches (sendfile) move "
             "{kafka Fetch vs file reads, warm:.2f}x the MB/s of reading the same segment bytes from the files with 1 MiB "
             "fetches ({kafka Fetch of 8 MiB vs file reads, warm:.2f}x with 8 MiB); with its busy poll off "
             "(kafka.busy_poll_us = 0) {kafka Fetch with busy poll off vs file reads, warm:.2f}x, the busy poll costing "
             "{kafka Fetch CPU per MB, busy poll on vs off:.2f}x the listener's CPU per MB. A by-hand server that only "
             "sendfiles the same 1 MiB ranges over the same loopback, its listening socket on reno as the listener's is, "
             "and sleeps between requests, moves {minimal sendfile server on reno vs file reads, warm:.2f}x, and "
             "{minimal sendfile server on reno to a Fetch client vs file reads, warm:.2f}x to a client that does the raw "
             "Fetch client's own work for each answer; the listener moves "
             "{kafka Fetch vs the minimal sendfile server to a Fetch client, warm:.2f}x that. A ListOffsets by timestamp "
             "takes {kafka ListOffsets vs msgpack offset_for_timestamp, p50:.2f}x the round trip of msgpack's "
             "offset_for_timestamp, both over loopback TCP; while confluent-kafka consumes, the listener spends "
             "{kafka listener vs consumer CPU per MB:.2f}x the consumer's CPU per MB.",
}


# The README's summary: the ratios a newcomer asks about first (lookupd against its anchors), and the
# plots that read at a glance; everything else is in docs/performance.md.
HEADLINE_RATIOS = [
    "lookupd vs redis, single-client p50 latency",
    "lookupd vs redis, 8 clients",
    "inline vs threaded hot lookups, 8 clients",
    "columnar decode vs aiokafka, plain-0",
    "columnar decode vs aiokafka, compressed-0",
    "fuse read throughput vs disk",
    "spark source vs aiokafka in one process",
    "spark-positions-speedup",
    "remote sequential read vs plain ranged GETs, plain",
]
SUMMARY_PLOTS = ["daemon-throughput", "decode-records", "spark-read"]


def newest(results_dir: str = os.path.join(HERE, "results")) -> str:
    """The results file with the latest run date, full runs before quick ones (a fresh checkout
    gives every file the same mtime, so the date inside the file decides)."""
    runs = []
    for path in glob.glob(os.path.join(results_dir, "*.json")):
        with open(path) as f:
            doc = json.load(f)
        runs.append((not doc.get("quick", True), doc.get("date", ""), path))
    if not runs:
        raise SystemExit(f"no results file in {results_dir}: run `make bench` first")
    return max(runs)[2]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _header(doc: dict, path: str, base: str) -> list[str]:
    """The results file (linked relative to the page at `base`) and the machine it ran on."""
    m = doc["machine"]
    rel = os.path.relpath(path, base)
    return [f"Results file: [`{os.path.relpath(path, REPO)}`]({rel}) ({'quick run' if doc['quick'] else 'full run'}, {doc['date']}).",
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_bytes'] / 2**30:.0f} GiB, Linux {m['kernel']}, "
            f"Python {m['python']}; {m.get('java', '')}.", ""]


def _plot(path: str, group: str, base: str) -> list[str]:
    """The plot of one group, linked relative to the page at `base`; nothing when the run made none."""
    png = f"{path[:-len('.json')]}-{group}.png"
    return [f"![{group}]({os.path.relpath(png, base)})", ""] if os.path.exists(png) else []


def section(path: str) -> str:
    """docs/performance.md's block: a sentence and a plot per group, then every figure and ratio."""
    doc = _load(path)
    base = os.path.dirname(PERFORMANCE)
    ratios = {r["name"]: r["value"] for r in doc["ratios"]}
    groups: dict[str, list[dict]] = {}
    for fig in doc["figures"]:
        groups.setdefault(fig["group"], []).append(fig)
    lines = [BEGIN, ""] + _header(doc, path, base)
    for group, figs in groups.items():
        sentence = SENTENCES.get(group)
        if sentence is None:
            continue
        try:
            text = sentence.format_map(ratios)
        except (KeyError, ValueError):
            text = re.sub(r"\s*\([^()]*\{[^}]*\}[^()]*\)", "", sentence)  # a ratio this run did not measure
            text = re.sub(r"\{[^}]*\}x? ?", "", text)
        lines += [f"**{group}.** {text}", ""]
        lines += _plot(path, group, base)
    lines += ["| figure | median | min | max | unit |", "|---|---:|---:|---:|---|"]
    for fig in doc["figures"]:
        lines.append(f"| {fig['name']} | {_fmt(fig['median'])} | {_fmt(fig['min'])} | {_fmt(fig['max'])} | {fig['unit']} |")
    lines += ["", "| ratio (same run) | value | meaning |", "|---|---:|---|"]
    for r in doc["ratios"]:
        lines.append(f"| {r['name']} | {r['value']:.2f}x | {r['meaning']} |")
    lines += ["", END]
    return "\n".join(lines)


def summary(path: str) -> str:
    """The README's block: the machine, the headline ratios this run measured, a few plots, a link to the rest."""
    doc = _load(path)
    base = REPO
    ratios = {r["name"]: r for r in doc["ratios"]}
    lines = [BEGIN, ""] + _header(doc, path, base)
    lines += ["| ratio (same run) | value | meaning |", "|---|---:|---|"]
    for name in HEADLINE_RATIOS:
        if name in ratios:
            lines.append(f"| {name} | {ratios[name]['value']:.2f}x | {ratios[name]['meaning']} |")
    lines.append("")
    for group in SUMMARY_PLOTS:
        lines += _plot(path, group, base)
    lines += ["Every plot, figure and ratio of this run, each with what it means for a user: "
              "[docs/performance.md](docs/performance.md).", "", END]
    return "\n".join(lines)


def _replace_block(page: str, block: str) -> str:
    with open(page) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page} has no {BEGIN} ... {END} block to fill")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="a results file (default: the newest in bench/results/)")
    path = ap.parse_args(argv).results or newest()
    # Both pages are made in full first: a bad results file leaves them as they were.
    pages = {README: _replace_block(README, summary(path)), PERFORMANCE: _replace_block(PERFORMANCE, section(path))}
    for page, text in pages.items():
        tmp = page + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, page)
    print(f"README.md's Performance summary and docs/performance.md written from {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
