"""ObjectStore: listings and ranged GETs against S3, retried on transient faults, mapped onto lookupd's errors.

Read-only: only ListObjectsV2, HEAD and GET are ever sent. Thread-safe: one client shared by the daemon's
worker threads. Credentials come from the standard AWS chain.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import boto3
import botocore.config
import botocore.exceptions

from ...errors import Unauthorized, Unavailable
from .config import RemoteConfig

ATTEMPTS = 5                # transient faults (503, SlowDown, resets, timeouts) are retried this often in all
BACKOFF_FIRST = 0.05        # seconds before the first retry; doubled each time (full jitter)
BACKOFF_MAX = 2.0           # a retry never waits longer than this
CONNECT_TIMEOUT = 5.0       # seconds; a store that does not accept a connection by then counts as down
READ_TIMEOUT = 15.0         # seconds without a byte on an open request; a slow store is retried, then UNAVAILABLE
MAX_POOL_CONNECTIONS = 32   # the daemon's worker threads plus read-ahead share the pool
_TRANSIENT_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                    "ThrottlingException", "RequestTimeTooSkewed"}


class ObjectNotFound(Unavailable):
    """The object is gone (deleted by retention after it was listed): relist, and the segment drops out."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class _Transient(Exception):
    """A fault worth retrying; carries the description for the final UNAVAILABLE."""


class ObjectStore:
    """One bucket, read through one shared S3 client."""

    def __init__(self, cfg: RemoteConfig, *, read_timeout: float = READ_TIMEOUT, attempts: int = ATTEMPTS):
        self.bucket = cfg.bucket
        self._attempts = attempts
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=cfg.endpoint_url, region_name=cfg.region,
            config=botocore.config.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},  # retried here, with our errors
                connect_timeout=CONNECT_TIMEOUT, read_timeout=read_timeout,
                max_pool_connections=MAX_POOL_CONNECTIONS, s3={"addressing_style": "path"}))
        self._stats_lock = threading.Lock()
        self.requests = 0         # GET/HEAD/LIST requests sent, retries included (for benchmarks and tests)
        self.bytes_fetched = 0    # body bytes received by GETs

    def _count(self, nbytes: int = 0) -> None:
        with self._stats_lock:
            self.requests += 1
            self.bytes_fetched += nbytes

    def _call(self, what: str, key: str, fn):
        """fn() with retries on transient faults; every failure mapped onto a LookupdError naming bucket and key."""
        where = f"s3://{self.bucket}/{key}"
        last = ""
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(random.uniform(0, min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** attempt)))
            try:
                return fn()
            except botocore.exceptions.ClientError as e:
                err = e.response.get("Error", {})
                code = str(err.get("Code", ""))
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if status in (401, 403) or code in ("AccessDenied", "SignatureDoesNotMatch",
                                                    "InvalidAccessKeyId", "ExpiredToken"):
                    raise Unauthorized(f"{what} {where}: the store refused the credentials ({code or status}); "
                                       "check the AWS credentials lookupd runs with") from None
                if code == "NoSuchBucket":
                    raise Unavailable(f"{what} {where}: bucket {self.bucket!r} does not exist; check "
                                      "remote.bucket and remote.endpoint_url") from None
                if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
                    raise ObjectNotFound(f"{what} {where}: no such object (deleted by retention?)") from None
                if status >= 500 or code in _TRANSIENT_CODES:
                    last = f"{code or 'HTTP'} {status}"
                    continue
                raise Unavailable(f"{what} {where}: the store answered {code} ({status}): "
                                  f"{err.get('Message', '')}") from None
            except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError,
                    botocore.exceptions.ResponseStreamingError, botocore.exceptions.FlexibleChecksumError,
                    _Transient, ConnectionError, TimeoutError) as e:  # a checksum mismatch: damaged in transit
                last = f"{type(e).__name__}: {e}"
                continue
        raise Unavailable(f"{what} {where}: the store did not answer after {self._attempts} attempts "
                          f"(last: {last}); try again later")

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (ListObjectsV2, all pages)."""
        return self._list(prefix, None)[0]

    def list_dirs(self, prefix: str) -> list[str]:
        """The "directories" right under `prefix`: common prefixes ending in "/"."""
        return self._list(prefix, "/")[1]

    def _list(self, prefix: str, delimiter: str | None) -> tuple[list[ObjectInfo], list[str]]:
        objects: list[ObjectInfo] = []
        dirs: list[str] = []
        token = None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": prefix}
            if delimiter:
                kwargs["Delimiter"] = delimiter
            if token:
                kwargs["ContinuationToken"] = token

            def page():
                self._count()
                return self._client.list_objects_v2(**kwargs)

            resp = self._call("listing", prefix, page)
            objects += [ObjectInfo(o["Key"], o["Size"]) for o in resp.get("Contents", ())]
            dirs += [p["Prefix"] for p in resp.get("CommonPrefixes", ())]
            if not resp.get("IsTruncated"):
                return objects, dirs
            token = resp.get("NextContinuationToken")

    def size(self, key: str) -> int:
        """The object's size in bytes (HEAD)."""
        def head():
            self._count()
            return self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
        return self._call("HEAD", key, head)

    def get(self, key: str) -> bytes:
        """The whole object."""
        def whole():
            resp = self._client.get_object(Bucket=self.bucket, Key=key)
            data = resp["Body"].read()
            self._count(len(data))
            if len(data) != resp["ContentLength"]:
                raise _Transient(f"got {len(data)} of {resp['ContentLength']} bytes")
            return data
        return self._call("GET", key, whole)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object, fewer only where the object ends before `end`."""
        if not 0 <= start < end:
            return b""

        def ranged():
            try:
                resp = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
            except botocore.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") == "InvalidRange":
                    self._count()
                    return b""  # start at or past the object's end
                raise
            data = resp["Body"].read()
            self._count(len(data))
            if len(data) != resp["ContentLength"] or len(data) > end - start:
                raise _Transient(f"got {len(data)} bytes for a range of {end - start}")
            return data
        return self._call(f"GET bytes {start}-{end - 1} of", key, ranged)
