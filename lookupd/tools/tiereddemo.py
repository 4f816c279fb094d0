"""`lookupd demo-data DIR --tiered` (`make demo-tiered`): the sample log dir tiered as a KIP-405 broker leaves
it, with a local S3 server holding the older segments, served until Ctrl-C.

orders-0's and orders-1's rolled segments are uploaded in the Aiven plugin's layout (lookupd.tools.tieredwriter):
orders-0's as they are, orders-1's zstd-compressed and encrypted (AES-GCM data keys wrapped with an RSA key made
here). All but the newest LOCAL_ROLLED of them are then deleted locally, as local retention would, so their
offsets are answered from the bucket. The commands printed read both tiers: queries, a dump of a segment in the
bucket, the FUSE mount, and a Spark read.

DIR/logs           the sample (lookupd.tools.demo), with partition.metadata and leader-epoch-checkpoint
DIR/s3             the S3 server's data (SeaweedFS's `weed mini`, lookupd.tools.s3local)
DIR/keys           demo-key.pem, the RSA key of orders-1's data keys
DIR/cache          lookupd's cache of remote segments
DIR/lookupd.toml   the daemon's config, its [remote] table ready
DIR/spark_read.py  the Spark read
"""

from __future__ import annotations

import json
import os
import sys

from ..format.names import SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX, segment_file_name
from .demo import command_prefix, serve, shown, write_sample
from .s3local import ACCESS_KEY, REGION, SECRET_KEY, running_server
from .tieredwriter import (Options, WrappingKey, kafka_uuid, local_segments, upload_partition,
                           write_leader_epoch_checkpoint, write_partition_metadata)

BUCKET = "lookupd-demo"
TOPIC = "orders"
PLAIN, ENCRYPTED = 0, 1  # orders' partitions uploaded as they are, and zstd + encrypted
KEY_ID = "demo-key"
CHUNK_BYTES = 16 << 10  # the plugin's chunk size here (its default is 4 MiB; the sample's segments are 64 KiB)
LOCAL_ROLLED = 1  # uploaded segments also kept on disk (local retention not reached yet), the newest ones


def tier(logs: str, client, key: WrappingKey) -> dict[int, list]:
    """Upload orders-0's and orders-1's rolled segments and delete the older ones locally; returns the uploads
    by partition. Every orders partition gets the topic's id in partition.metadata (how lookupd matches a
    local partition to its bucket directory)."""
    topic_id = kafka_uuid()
    for name in sorted(os.listdir(logs)):
        if name.startswith(f"{TOPIC}-"):
            write_partition_metadata(os.path.join(logs, name), topic_id)
    uploads = {}
    for partition, opts in ((PLAIN, Options(chunk_size=CHUNK_BYTES)),
                            (ENCRYPTED, Options(chunk_size=CHUNK_BYTES, compression=True, encryption=key))):
        part = os.path.join(logs, f"{TOPIC}-{partition}")
        uploaded = upload_partition(client, BUCKET, part, topic_id=topic_id, opts=opts)  # every rolled segment
        epochs: dict[int, int] = {}
        for up in uploaded:
            for epoch, offset in up.facts.leader_epochs.items():
                epochs.setdefault(epoch, offset)
        write_leader_epoch_checkpoint(part, sorted(epochs.items(), key=lambda e: e[1]))
        for base in [u.facts.base_offset for u in uploaded][:-LOCAL_ROLLED or None]:
            for suffix in SEGMENT_SUFFIXES + (SNAPSHOT_SUFFIX,):
                path = os.path.join(part, segment_file_name(base, suffix))
                if os.path.exists(path):
                    os.remove(path)
        uploads[partition] = uploaded
    return uploads


def write_config(root: str, endpoint_url: str, key: WrappingKey) -> str:
    path = os.path.join(root, "lookupd.toml")
    with open(path, "w") as f:
        f.write(f"""# lookupd demo-data --tiered: the sample's log dir and the local S3 bucket holding its older segments
log_dirs = [{json.dumps(os.path.join(root, "logs"))}]
socket = {json.dumps(os.path.join(root, "lookupd.sock"))}

[remote]
bucket = "{BUCKET}"
endpoint_url = "{endpoint_url}"
region = "{REGION}"
cache_dir = {json.dumps(os.path.join(root, "cache"))}
[remote.encryption.keys]
"{key.key_id}" = {json.dumps(key.pem_path)}
""")
    return path


SPARK_READ = '''"""The demo's Spark read: every record of topic orders, the tiered partitions' older segments read by the
executors straight from the bucket (zstd + encrypted included), counted by partition."""
import sys

from pyspark.sql import SparkSession, functions as F

import spark_client

SOCKET, KEYS = {socket!r}, {keys!r}


def read(spark):
    spark_client.register(spark)
    return (spark.read.format("kafka-segments").option("lookupd.address", SOCKET).option("subscribe", "orders")
            .option("lookupd.remote.encryption.keys", KEYS).load()
            .groupBy("partition").agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
                                      F.max("offset").alias("last_offset"))
            .orderBy("partition"))


if __name__ == "__main__":
    read(SparkSession.builder.master("local[2]").getOrCreate()).show()
    sys.exit(0)
'''


def run(args) -> int:
    root = os.path.abspath(args.dir)
    logs = os.path.join(root, "logs")
    write_sample(logs, args.records, args.seed)
    key = WrappingKey.create(_mkdir(root, "keys"), KEY_ID)
    with running_server(data_dir=_mkdir(root, "s3")) as server:
        server.client().create_bucket(Bucket=BUCKET)
        uploads = tier(logs, server.client(), key)
        config = write_config(root, server.endpoint_url, key)
        sock = os.path.join(root, "lookupd.sock")
        spark = os.path.join(root, "spark_read.py")
        with open(spark, "w") as f:
            f.write(SPARK_READ.format(socket=sock, keys=json.dumps({key.key_id: key.pem_path})))
        lookupd, fusefs = command_prefix("lookupd"), command_prefix("fusefs")
        remote = uploads[ENCRYPTED][0]
        creds = f"AWS_ACCESS_KEY_ID={ACCESS_KEY} AWS_SECRET_ACCESS_KEY={SECRET_KEY} AWS_REGION={REGION}"
        mnt = os.path.join(root, "mnt")
        os.makedirs(mnt, exist_ok=True)
        print(f"lookupd serves {logs} and the bucket {BUCKET} at {server.endpoint_url} ({config}): {TOPIC}-{PLAIN}'s "
              f"older segments are there as they are, {TOPIC}-{ENCRYPTED}'s zstd + encrypted ({len(uploads[PLAIN])} "
              f"and {len(uploads[ENCRYPTED])} uploaded, the oldest deleted locally). In another terminal try:")
        print(f"  {lookupd} query --socket {sock} partitions")
        print(f"  {lookupd} query --socket {sock} offset_for_timestamp {TOPIC} {ENCRYPTED} 2026-01-01T01:00:00Z")
        print(f"  {lookupd} query --socket {sock} resolve_offset {TOPIC} {PLAIN} 10")
        print(f"  {creds} {lookupd} verify --config {config} s3://{BUCKET}/{remote.log_key}")
        print(f"  {creds} {fusefs} mount --socket {sock} --config {config} {mnt} && ls {mnt}/{TOPIC}/{ENCRYPTED} "
              f"&& {fusefs} umount {mnt}")
        print(f"  {creds} {shown(sys.executable)} {spark}   (the spark extra: pip install -e '.[spark]')")
        print(f"The S3 server's credentials are {creds}. (Ctrl-C stops the daemon and the S3 server)", flush=True)
        return serve(config)


def _mkdir(root: str, name: str) -> str:
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path
