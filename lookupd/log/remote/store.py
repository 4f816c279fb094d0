"""ObjectStore: listings and ranged GETs against S3, retried on transient faults, mapped onto lookupd's errors.

Read-only: only ListObjectsV2 and GET (HEAD for `size`) are ever sent. Thread-safe: the clients are
shared by the daemon's worker threads and the read-ahead. A thread in local-only mode (lookupd.log.remote.errors:
the daemon's worker threads for local calls) sends nothing: StoreWouldWait, and the call goes to the
daemon's remote pool.

Listings and ranged GETs (the chunks and indexes: nearly all traffic) go through obstore (Rust, the GIL
released while it waits), chosen by measurement (bench/bench_remote.py: obstore, boto3 and
pyarrow.fs.S3FileSystem on ranged GETs; pyarrow's ranged reads also lose the HTTP status of a failed GET,
403, 404 and 503 all reading "INTERNAL_FAILURE"). Whole-object GETs (the manifests, a few KB once per
segment) go through boto3, which checks the store's full-object checksum: a manifest damaged in transit
is retried, never parsed into wrong chunk positions (ranged GETs carry no such checksum; encrypted chunks
have their GCM tag). Credentials come from the standard AWS chain of boto3's session (environment,
AWS_PROFILE, instance role), handed to obstore as a credential provider.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import threading
import time

import boto3
import botocore
import botocore.config
import botocore.exceptions
import obstore
import obstore.exceptions as oe
from obstore.auth.boto3 import Boto3CredentialProvider
from obstore.store import S3Store

from ...errors import InvalidArgument, Unauthorized, Unavailable
from .config import RemoteConfig
from .errors import ObjectNotFound, ObjectTooLarge, StoreWouldWait, local_only  # noqa: F401 - callers catch them here
from .objects import ObjectInfo

ATTEMPTS = 5                # transient faults (5xx, SlowDown, resets, timeouts) are tried this often in all
BACKOFF_FIRST = 0.05        # seconds before the first retry; doubled each time (full jitter)
BACKOFF_MAX = 2.0           # a retry never waits longer than this
CONNECT_TIMEOUT = 5.0       # seconds; a store that does not accept a connection by then counts as down
REQUEST_TIMEOUT = 30.0      # seconds for a whole request: a 32 MiB GET on a slow link, then retried
LIST_PAGE = 1000            # keys per ListObjectsV2 page (S3's maximum)
_STATUS = re.compile(r"status code: (\d{3})")


def endpoint_url(cfg: RemoteConfig) -> str | None:
    """The S3 endpoint to use: remote.endpoint_url, else AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL from the
    environment (as boto3 and the AWS CLI read them), else None: AWS's own endpoint for the region."""
    return cfg.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


class ObjectStore:
    """One bucket, read through one shared S3 client."""

    def __init__(self, cfg: RemoteConfig, *, request_timeout: float = REQUEST_TIMEOUT, attempts: int = ATTEMPTS):
        self.bucket = cfg.bucket
        self._attempts = attempts
        try:
            session = boto3.session.Session()
            # No credentials anywhere in the chain: requests go unsigned (a public bucket still reads) and a
            # 403 says that none were found.
            self._anonymous = session.get_credentials() is None
        except botocore.exceptions.ProfileNotFound as e:
            raise InvalidArgument(f"{e}: AWS_PROFILE names a profile that neither the AWS config file nor the "
                                  f"credentials file has") from None
        options = {"connect_timeout": f"{CONNECT_TIMEOUT}s", "timeout": f"{request_timeout}s"}
        endpoint = endpoint_url(cfg)
        if endpoint and endpoint.startswith("http://"):
            options["allow_http"] = True
        self._whole = session.client(
            "s3", endpoint_url=endpoint, region_name=cfg.region,
            config=botocore.config.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},  # retried here, as the ranged GETs
                connect_timeout=CONNECT_TIMEOUT, read_timeout=request_timeout,
                response_checksum_validation="when_supported", s3={"addressing_style": "path"},
                signature_version=botocore.UNSIGNED if self._anonymous else None))
        self._store = S3Store(
            cfg.bucket, region=cfg.region, **({"endpoint": endpoint} if endpoint else {}), client_options=options,
            virtual_hosted_style_request=False,
            # Retried here, with lookupd's errors and counts; obstore's own retries off.
            retry_config={"max_retries": 0, "retry_timeout": dt.timedelta(seconds=request_timeout),
                          "backoff": {"init_backoff": dt.timedelta(seconds=BACKOFF_FIRST),
                                      "max_backoff": dt.timedelta(seconds=BACKOFF_MAX), "base": 2}},
            skip_signature=self._anonymous,
            credential_provider=None if self._anonymous else Boto3CredentialProvider(session))
        self._stats_lock = threading.Lock()
        self.requests = 0         # requests sent, retries included (for benchmarks and tests)
        self.bytes_fetched = 0    # body bytes received by GETs

    def _count(self, requests: int = 1, nbytes: int = 0) -> None:
        with self._stats_lock:
            self.requests += requests
            self.bytes_fetched += nbytes

    def _call(self, what: str, key: str, fn):
        """fn() with retries on transient faults; every failure mapped onto a LookupdError naming bucket and key.
        In local-only mode (lookupd.log.remote.errors), StoreWouldWait before any request."""
        if local_only.on:
            raise StoreWouldWait()
        where = f"s3://{self.bucket}/{key}"
        last = ""
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(random.uniform(0, min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** attempt)))
            try:
                return fn()
            except (oe.BaseError, OSError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
                kind, detail = _classify(e)
                if kind == "unauthorized":
                    why = ("no AWS credentials were found (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                           "AWS_PROFILE, or an instance role)" if self._anonymous else
                           "check the AWS credentials lookupd runs with")
                    raise Unauthorized(f"{what} {where}: the store refused the request ({detail}); {why}") from None
                if kind == "no_bucket":
                    raise Unavailable(f"{what} {where}: bucket {self.bucket!r} does not exist; check "
                                      "remote.bucket and remote.endpoint_url") from None
                if kind == "not_found":
                    raise ObjectNotFound(f"{what} {where}: no such object (deleted by retention?)") from None
                if kind == "refused":
                    raise Unavailable(f"{what} {where}: the store answered {detail}") from None
                last = detail  # transient: 5xx, SlowDown, 408/429, resets, timeouts, damaged in transit
        raise Unavailable(f"{what} {where}: the store did not answer after {self._attempts} attempts "
                          f"(last: {last}); try again later")

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (ListObjectsV2, all pages). A key obstore cannot
        represent (a newline, say: anyone who can write to the bucket can make one) does not fail the
        listing: it is listed again by boto3, which takes any key."""
        def listing():
            out = []
            pages = 0
            try:
                for page in obstore.list(self._store, _parent(prefix), chunk_size=LIST_PAGE):
                    pages += 1
                    out += [ObjectInfo(m["path"], m["size"], m.get("e_tag")) for m in page
                            if m["path"].startswith(prefix)]
            except oe.InvalidPathError:
                self._count(pages)
                return self._list_any_key(prefix)
            self._count(max(pages, 1))  # an empty listing is still one request
            return out
        return self._call("listing", prefix, listing)

    def _list_any_key(self, prefix: str) -> list[ObjectInfo]:
        out = []
        for page in self._whole.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": LIST_PAGE}):
            self._count()
            out += [ObjectInfo(o["Key"], o["Size"], o.get("ETag", "").strip('"') or None)
                    for o in page.get("Contents", ())]
        return out

    def list_dirs(self, prefix: str) -> list[str]:
        """The "directories" right under `prefix` (delimiter "/"), each ending in "/"."""
        def listing():
            self._count()
            try:
                dirs = [d + "/" for d in obstore.list_with_delimiter(self._store, _parent(prefix))["common_prefixes"]]
            except oe.InvalidPathError:  # a key obstore cannot represent: see `list`
                parent = _parent(prefix)
                dirs = []
                for page in self._whole.get_paginator("list_objects_v2").paginate(
                        Bucket=self.bucket, Prefix=parent + "/" if parent else "", Delimiter="/"):
                    dirs += [d["Prefix"] for d in page.get("CommonPrefixes", ())]
            return sorted(d for d in dirs if d.startswith(prefix))
        return self._call("listing", prefix, listing)

    def size(self, key: str) -> int:
        """The object's size in bytes (HEAD)."""
        def head():
            self._count()
            return obstore.head(self._store, key)["size"]
        return self._call("HEAD", key, head)

    def get(self, key: str, max_bytes: int | None = None, what: str = "object") -> bytes:
        """The whole object, checked against the store's checksum when it has one (through boto3).
        `max_bytes`: ObjectTooLarge (naming it `what`) for a longer object, its length read from the answer's
        headers before any of its body."""
        def whole():
            answer = self._whole.get_object(Bucket=self.bucket, Key=key)
            if max_bytes is not None and answer["ContentLength"] > max_bytes:
                answer["Body"].close()
                self._count()
                raise ObjectTooLarge(key, answer["ContentLength"], max_bytes, what)
            data = answer["Body"].read()
            self._count(nbytes=len(data))
            return data
        return self._call("GET", key, whole)

    def get_range_buffer(self, key: str, start: int, end: int) -> memoryview:
        """Bytes [start, end) of the object as a read-only buffer (no copy), clipped at the object's end."""
        if not 0 <= start < end:
            return memoryview(b"")

        def ranged():
            try:
                data = obstore.get_range(self._store, key, start=start, end=end)
            except (oe.BaseError, OSError) as e:
                if "InvalidRange" in str(e) or _http_status(str(e)) == 416:
                    self._count()
                    return memoryview(b"")  # start at or past the object's end
                raise
            self._count(nbytes=len(data))
            return memoryview(data)
        return self._call(f"GET bytes {start}-{end - 1} of", key, ranged)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object, fewer only where the object ends before `end`."""
        return bytes(self.get_range_buffer(key, start, end))


def _parent(prefix: str) -> str | None:
    """The "directory" to list for `prefix`: obstore lists whole path segments only, so a prefix that
    ends inside a name (a key.prefix like "prod-") is listed from its parent and filtered."""
    return prefix.rpartition("/")[0] or None


_AUTH_CODES = {"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken", "InvalidToken"}


def _http_status(text: str) -> int:
    """The HTTP status an obstore error message reports, 0 when none (a reset, a timeout)."""
    m = _STATUS.search(text)
    return int(m.group(1)) if m else 0


def _classify(e: Exception) -> tuple[str, str]:
    """(kind, detail) of a failed request: unauthorized, no_bucket, not_found, refused (another 4xx: no
    retry) or transient (worth another try)."""
    if isinstance(e, botocore.exceptions.ClientError):
        code = str(e.response.get("Error", {}).get("Code", ""))
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = str(e.response.get("Error", {}).get("Message", ""))
    elif isinstance(e, botocore.exceptions.BotoCoreError):  # connection, timeout, checksum mismatch
        return "transient", f"{type(e).__name__}: {e}"
    else:  # obstore: the status and the store's XML answer are in the message
        code, message = "", _first_line(str(e))
        status = _http_status(str(e))
    if isinstance(e, (oe.PermissionDeniedError, oe.UnauthenticatedError)) or status in (401, 403) or \
            code in _AUTH_CODES:
        return "unauthorized", code or str(status or 403)
    if code == "NoSuchBucket" or "<Code>NoSuchBucket</Code>" in str(e):
        return "no_bucket", "NoSuchBucket"
    if isinstance(e, FileNotFoundError) or status == 404 or code in ("NoSuchKey", "NotFound"):
        return "not_found", "404"
    if 400 <= status < 500 and status not in (408, 429) and code not in ("SlowDown", "RequestTimeout"):
        return "refused", f"{status} {code}: {message}".replace("  ", " ")
    return "transient", f"{code} {status}".strip() if (code or status) else message


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "?"
