"""The daemon's method table, with no I/O: method name -> handler(LogManager, params).

Handlers check the params' count and types (topic names, offsets and modes are checked by
the core, which says what was wrong), call the core, and turn its NamedTuples and numpy
arrays into plain maps and lists that msgpack can send. Every failure is a LookupdError
whose `.code` goes on the wire; see `error_for` for everything else.

The methods, their params, where each runs and what its ACLs check are one table, lookupd.rpc.methods;
`HANDLERS` here gives each its handler, and `bind` joins the two. Groups are replayed from
`__consumer_offsets` (lookupd.log.coordinators), kept current by replaying what was appended.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np

from ..errors import InvalidArgument, LookupdError, TooLarge, Unauthorized, Unavailable, UnknownPartition
from ..format.batch import ensure_valid, parse_header, whole_frames
from ..format.records import decode_batch
from ..format.render import record_json
from ..format.schemas import DEFAULT_TOPIC as DEFAULT_SCHEMAS_TOPIC, Registry
from ..format.wire import ValueDecoder, require
from ..log.fileio import CAN_READ_NOWAIT, WouldBlock, mode as nonblocking_mode
from ..log.bulk import int64_array
from ..log.logmanager import LogManager
from ..log.positions import coordinators_of, group_offset_columns, groups
from ..log.schemastore import SchemaStore
from ..rpc import methods as method_table
from ..rpc.columns import pack_column
from ..rpc.methods import INLINE, THREAD, MethodSpec
from ..rpc.protocol import Packed, pack
from .acl import ANONYMOUS, DESCRIBE, Acl
from .hints import unknown_partition_hint

log = logging.getLogger(__name__)


class UnknownMethod(LookupdError):
    code = "UNKNOWN_METHOD"


@dataclass
class Limits:
    max_read_bytes: int = 8 << 20
    max_batch_lookups: int = 100_000


@dataclass
class Counters:
    """What the server counts, for `stats`."""

    started: float = field(default_factory=time.monotonic)
    requests: int = 0
    errors: int = 0
    connections: int = 0
    fetches_read_ahead: int = 0  # Kafka Fetches answered with the answer read ahead for them (lookupd.daemon.fetchahead)


@dataclass
class Session:
    """Per-connection state: Unix socket peers are `trusted` (file permissions guard them); `principal`
    is who the ACLs see (lookupd.daemon.acl): set by the listener, then by a named token's `auth`."""

    trusted: bool
    authenticated: bool = False
    principal: str = ANONYMOUS
    auth_failures: int = 0  # wrong tokens sent on this connection
    source: str = ""  # whom wrong tokens are counted against across connections (authlimit.source_key)

    @property
    def needs_auth(self) -> bool:
        """Whether this session may call nothing but `auth` yet (given a token is configured)."""
        return not (self.trusted or self.authenticated)


# The MAX_AUTH_FAILURES-th wrong token on one connection closes it. How often a source address may
# try a token at all, across its connections, is lookupd.daemon.authlimit's business.
MAX_AUTH_FAILURES = 5


# Where a method runs is its row's `runs` (lookupd.rpc.methods): a HOT one is tried on the event loop in
# non-blocking mode (lookupd.log.fileio) and goes to a worker thread when it would wait for the disk.
NEEDS_THREAD = object()  # call_inline's answer for a call that must go to a worker thread
# The largest `read` (its max_bytes) answered on the event loop when hot. Reading, checksumming and
# packing run at roughly 1-2 GB/s here, so 64 KiB costs tens of microseconds, less than the trip to a
# worker thread (~100-200 us); an 8 MiB read costs milliseconds that every other client would wait
# (pipelined 8 MiB reads raised another client's ping p99 from 0.06 ms to 1.4 s). Larger reads go
# to a worker thread. (A read still returns at least one whole batch, which a broker keeps within
# its max.message.bytes.)
INLINE_READ_MAX_BYTES = 64 << 10
# The most partitions served for which an UNKNOWN_PARTITION's hint (lookupd.daemon.hints) is made on the event
# loop: comparing a mistyped name with each topic's costs ~15 us, ~0.5 ms for this many; more go to a thread.
INLINE_HINT_MAX_PARTITIONS = 32
# group_offsets answers kept packed, by (group, isolation): each is as large as its group (a few KB for a
# hundred partitions), and is packed again when its group's answer changes.
MAX_PACKED_ANSWERS = 256


Handler = Callable[["Service", list], Any]


class Method(NamedTuple):
    """A method as the service runs it: its row of the method table and its handler."""

    handler: Handler | None  # None for auth, which Service handles (connection state)
    spec: MethodSpec
    too_big_inline: Callable[[list], bool] | None = None  # a HOT call's params that send it to a thread anyway

    @property
    def params(self) -> tuple[str, ...]:
        return self.spec.params


class Service:
    """Dispatches requests for one LogManager; holds no sockets and no event loop."""

    def __init__(self, manager: LogManager, *, limits: Limits | None = None, counters: Counters | None = None,
                 token: str | None = None, tokens: dict[str, str] | None = None, acl: Acl | None = None,
                 inline_hot_lookups: bool = True, worker: int = 0, offsets_topic_partitions: int = 50,
                 schemas_topic: str = DEFAULT_SCHEMAS_TOPIC):
        self.manager = manager
        # the groups' replays, shared with any other part of this process reading the same LogManager
        self.coordinators = coordinators_of(manager, offsets_topic_partitions)
        self.schemas_topic = schemas_topic  # the Schema Registry's topic (`schemas`, `read_decoded`)
        self._schemas: tuple[object, SchemaStore] | None = None  # (the log it reads, the store)
        self._decoder: ValueDecoder | None = None
        self.worker = worker  # which worker process this is (workers = N), for stats
        self.limits = limits or Limits()
        self.counters = counters or Counters()
        # token name -> secret: auth_tokens_file's, and auth_token_file's as "default"
        self.tokens = {**({"default": token} if token is not None else {}), **(tokens or {})}
        self.acl = acl  # None: every principal may do everything
        self.inline_hot_lookups = inline_hot_lookups
        # (group, isolation) -> (group_offset_columns' answer, its bytes): packed again when it is another
        self.packed_answers: dict[tuple, tuple[dict, Packed]] = {}

    # ------------------------------------------------------------------ dispatch

    def method(self, name: str) -> Method:
        m = METHODS.get(name)
        if m is None:
            raise UnknownMethod(f"unknown method {name!r:.80}; methods: {', '.join(sorted(METHODS))}")
        return m

    def authorize(self, session: Session, name: str) -> None:
        """Raise Unauthorized unless the session may call `name`."""
        if name != "auth" and not (session.trusted or session.authenticated or not self.tokens):
            raise Unauthorized("this connection must call auth [token] first (the daemon has a token configured)")

    def call_inline(self, name: str, params: list, session: Session) -> Any:
        """Run the call now if nothing it reads has to come from the disk, else return NEEDS_THREAD.

        A "hot" method runs in non-blocking mode: an index not mapped or not resident, or a
        `.log` read that would wait (RWF_NOWAIT), raises WouldBlock, and the whole call is run
        again in a worker thread (`call`); lookups only read, so nothing is left half done.
        """
        m = METHODS.get(name)
        if m is None or m.spec.runs == INLINE:
            return self.call(name, params, session)
        if not session.trusted:  # a trusted session may call anything: no call to authorize
            self.authorize(session, name)  # (before any thread: a refusal costs no trip to one)
        if m.spec.runs == THREAD or not self.inline_hot_lookups or not CAN_READ_NOWAIT or \
                (m.too_big_inline is not None and m.too_big_inline(params)):
            return NEEDS_THREAD
        nonblocking_mode.on = True  # this thread's reads raise WouldBlock until reset below (fileio.mode)
        try:
            return self._run(m, name, params, session)
        except WouldBlock:
            return NEEDS_THREAD
        finally:
            nonblocking_mode.on = False

    def call(self, name: str, params: list, session: Session, *, packed: bool = False) -> Any:
        """Run one method (in a worker thread: it may block); raises LookupdError for caller mistakes.
        A columnar answer's columns are lists, or with `packed` their msgpack bytes (Columns)."""
        self.authorize(session, name)
        result = self._run(self.method(name), name, params, session)
        if type(result) is Columns:
            return result.packed() if packed else result.plain()
        return result

    def _run(self, m: Method, name: str, params: list, session: Session) -> Any:
        """An authorized call of method `m` (`call_inline` looks it up only once), under the ACLs its row's
        `access` names."""
        spec = m.spec
        if len(params) != len(spec.params):
            want = ", ".join(spec.params) if spec.params else "none"
            raise InvalidArgument(f"{name} takes {len(spec.params)} params ({want}), got {len(params)}")
        if name == "auth":
            return self._auth(session, params[0])
        acl = self.acl if spec.access else None
        if acl is not None:
            acl.check_call(session.principal, spec.access, params, self.schemas_topic)
        try:
            answer = m.handler(self, params)
        except UnknownPartition as err:
            if spec.params[:1] != ("topic",):  # (a group's names the group's partition: no topic hint)
                raise
            raise UnknownPartition(f"{err}; {self._unknown_partition_hint(session, params[0])}") from None
        return answer if acl is None else acl.filter_answer(session.principal, spec.access, answer)

    def _unknown_partition_hint(self, session: Session, topic: str) -> str:
        """The served partitions or nearest topic names: on the event loop for a few partitions, else in a worker
        thread (comparing names costs ~15 us each)."""
        logs = self.manager.logs()
        if nonblocking_mode.on and len(logs) > INLINE_HINT_MAX_PARTITIONS:
            raise WouldBlock
        may = (lambda t: True) if self.acl is None else (lambda t: self.acl.allowed(session.principal, t, DESCRIBE))
        return unknown_partition_hint(topic, ((llog.topic, llog.partition) for llog in logs), may)

    def _auth(self, session: Session, token: Any) -> bool:
        if not isinstance(token, (str, bytes)):
            raise InvalidArgument(f"token must be a string, got {type(token).__name__}")
        if self.tokens:
            # Any bytes are a token to compare: invalid UTF-8 arrives as surrogates (the unpacker's
            # surrogateescape) and goes back to the bytes sent, a wrong token like any other.
            given = token.encode("utf-8", "surrogateescape") if isinstance(token, str) else token
            # Every secret compared, in constant time each: which name matched is not timed.
            names = [n for n, secret in self.tokens.items() if hmac.compare_digest(given, secret.encode())]
            if not names:
                session.auth_failures += 1
                left = MAX_AUTH_FAILURES - session.auth_failures
                raise Unauthorized("wrong token" + (f"; {left} more closes the connection" if left > 0 else
                                                    "; closing the connection"))
            session.principal = f"token:{names[0]}"
        session.authenticated = True
        return True

    # ------------------------------------------------------------------ helpers

    def _log(self, params: list):
        return self.manager.get(params[0], params[1])

    def registry(self) -> Registry | None:
        """The Schema Registry's state from the schemas topic's partition 0 (None when it is not served),
        brought up to its log end."""
        try:
            llog = self.manager.get(self.schemas_topic, 0)
        except UnknownPartition:
            return None
        held = self._schemas
        if held is None or held[0] is not llog:
            held = self._schemas = (llog, SchemaStore(llog))
        return held[1].registry()

    def decoder(self) -> ValueDecoder | None:
        """A decoder over `registry()` (a new one when the registry changed), None without schemas."""
        reg = self.registry()
        if reg is None:
            return None
        dec = self._decoder
        if dec is None or dec.registry is not reg:
            require()
            dec = self._decoder = ValueDecoder(reg)
        return dec

    def _targets(self, values: Any, what: str) -> np.ndarray:
        """A list of int64 values (or the array `targets_array` made of one) as an array; TOO_LARGE past
        max_batch_lookups."""
        if isinstance(values, (list, np.ndarray)) and len(values) > self.limits.max_batch_lookups:
            raise TooLarge(f"{len(values)} {what} in one call; the limit is {self.limits.max_batch_lookups} "
                           f"(max_batch_lookups): split the list")
        return int64_array(values, what)


# Columnar calls' lists of targets (their third param) at least this long are held as int64 arrays from
# the moment they are read (`compact_targets`): 100,000 targets are 3.2 MB of Python ints (and 0.8 MB of
# list) while the call waits for a thread, and 0.8 MB as an array; ints freed at once leave no arena behind.
COMPACT_TARGETS_MIN = 1024


def compact_targets(method: str, params: Any) -> None:
    """Replace a columnar call's long list of targets by the int64 array it will be read as (in place); a
    list that is not one (floats, nesting, too large a value) stays, for the call to refuse as it would."""
    m = METHODS.get(method)
    if m is None or m.spec.targets is None or not isinstance(params, list) or len(params) <= m.spec.targets_index:
        return
    at = m.spec.targets_index
    values = params[at]
    if isinstance(values, list) and len(values) >= COMPACT_TARGETS_MIN:
        try:
            params[at] = int64_array(values, m.spec.targets)
        except InvalidArgument:
            pass


class Columns(dict):
    """A columnar answer as the core gives it: int64 numpy columns by name, and the `error` column (a message
    or nil per row) when corrupt data failed some rows. `Service.call` hands out `plain()` (lists), or
    `packed()`, the wire form, for the daemon's connections."""

    def plain(self) -> dict[str, list]:
        return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in self.items()}

    def packed(self) -> dict[str, Any]:
        """Each int64 column as msgpack bytes made straight from the array (lookupd.rpc.columns: no Python
        int per value, whose scattered survivors kept the small-object allocator's arenas after bursts)."""
        return {k: Packed(pack_column(v)) if isinstance(v, np.ndarray) else v for k, v in self.items()}


def _columns(cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> Columns:
    out = Columns((k, cols[k]) for k in keys)
    if "error" in cols:
        out["error"] = cols["error"]
    return out


def _ping(s: Service, p: list) -> str:
    return "pong"


def _stats(s: Service, p: list) -> dict:
    c, m = s.counters, s.manager
    cache = m.cache
    return {"worker": s.worker, "uptime": round(time.monotonic() - c.started, 3), "requests": c.requests,
            "errors": c.errors,
            "connections": c.connections, "partitions": len(m.logs()), "segments": m.segment_count,
            "open_indexes": cache.open_count, "mapped_bytes": cache.mapped_bytes,
            "lazy_loads": cache.lazy_loads, "evictions": cache.evictions, "remote": _remote_location(m)}


def _remote_location(m) -> dict | None:
    """Where the [remote] tier is (never credentials nor key files), so that clients reading the bucket
    themselves (the Spark source) default to it; None without one."""
    if m.remote is None:
        return None
    c = m.remote.config
    return {"bucket": c.bucket, "prefix": c.prefix, "endpoint_url": c.endpoint_url, "region": c.region}


def _partitions(s: Service, p: list) -> list:
    """Every partition's listing; one deleted while being listed drops out of the answer."""
    out = []
    for llog in s.manager.logs():
        try:
            out.append(llog.info())
        except Unavailable:
            continue
    return out


def _segments(s: Service, p: list) -> list:
    return s._log(p).segments_info()


# The single lookups answer their NamedTuple as a map, `dict(zip(r._fields, r))` written out in each:
# a shared helper would add a Python frame to every hot lookup.


def _lookup_offset(s: Service, p: list) -> dict | None:
    r = s.manager.get(p[0], p[1]).lookup_offset(p[2], p[3])
    return None if r is None else dict(zip(r._fields, r))


def _lookup_timestamp(s: Service, p: list) -> dict | None:
    r = s.manager.get(p[0], p[1]).lookup_timestamp(p[2], p[3])
    return None if r is None else dict(zip(r._fields, r))


def _resolve_offset(s: Service, p: list) -> dict | None:
    r = s.manager.get(p[0], p[1]).resolve_offset(p[2])
    return None if r is None else dict(zip(r._fields, r))


def _offset_for_timestamp(s: Service, p: list) -> dict | None:
    r = s.manager.get(p[0], p[1]).offset_for_timestamp(p[2])
    return None if r is None else {"offset": r.offset, "timestamp": r.timestamp, "segment": r.segment,
                                   "position": r.position}


def _aborted_transactions(s: Service, p: list) -> list:
    return [t._asdict() for t in s._log(p).aborted_transactions(p[2], p[3])]


def _read_too_big_inline(p: list) -> bool:
    return len(p) == 4 and type(p[3]) is int and p[3] > INLINE_READ_MAX_BYTES


def _read(s: Service, p: list) -> dict:
    max_bytes = p[3]
    if isinstance(max_bytes, int) and not isinstance(max_bytes, bool) and max_bytes > s.limits.max_read_bytes:
        raise TooLarge(f"max_bytes {max_bytes} is above the daemon's limit of {s.limits.max_read_bytes} "
                       f"(max_read_bytes): read in smaller pieces")
    r = s.manager.get(p[0], p[1]).read(p[2], max_bytes)
    return dict(zip(r._fields, r))


def _schemas(s: Service, p: list) -> dict | None:
    reg = s.registry()
    return None if reg is None else {"topic": s.schemas_topic, **reg.to_json()}


def _read_decoded(s: Service, p: list) -> dict:
    """`read`'s batches as records (`.records.jsonl`'s form), keys and values in the wire format decoded."""
    r = _read(s, p)
    decoder = s.decoder()
    where = f"{p[0]}-{p[1]}/{r['segment']:020d}.log"
    records = []
    data = r["records"]
    for off, size in whole_frames(data, r["position"], where):
        header = parse_header(data, off, r["position"] + off, where)
        batch = memoryview(data)[off:off + size]
        ensure_valid(header, batch, where)
        records += [record_json(rec, header, decoder) for rec in decode_batch(header, batch, path=where)]
    return {"segment": r["segment"], "position": r["position"], "next_offset": r["next_offset"], "records": records}


def _lookup_offsets(s: Service, p: list) -> dict:
    llog = s._log(p)
    return _columns(llog.lookup_offsets(s._targets(p[2], "offsets"), p[3]), ("segment", "offset", "position"))


def _resolve_offsets(s: Service, p: list) -> dict:
    llog = s._log(p)
    return _columns(llog.resolve_offsets(s._targets(p[2], "offsets")),
                    ("segment", "base_offset", "last_offset", "position", "size"))


def _offsets_for_timestamps(s: Service, p: list) -> dict:
    llog = s._log(p)
    return _columns(llog.offsets_for_timestamps(s._targets(p[2], "timestamps")),
                    ("offset", "timestamp", "segment", "position"))


def _groups(s: Service, p: list) -> dict:
    listing, warnings = groups(s.coordinators)
    return {"groups": listing, "warnings": warnings}


def _group_offsets(s: Service, p: list) -> dict | Packed:
    """The answer, packed once while it stays the same object (positions keeps it while the group's
    partitions do not change); under ACLs a dict, for `_group_call` to keep the principal's topics."""
    answer = group_offset_columns(s.coordinators, p[0], p[1])
    if s.acl is not None:
        return answer
    key = (p[0], p[1])
    kept = s.packed_answers.get(key)
    if kept is None or kept[0] is not answer:
        if len(s.packed_answers) >= MAX_PACKED_ANSWERS:
            s.packed_answers.clear()  # (the event loop and worker threads share it: no iteration)
        kept = s.packed_answers[key] = (answer, pack(answer))
    return kept[1]


HANDLERS: dict[str, Handler | None] = {
    "ping": _ping,
    "auth": None,  # connection state: handled by Service._run
    "stats": _stats,
    "partitions": _partitions,
    "segments": _segments,
    "lookup_offset": _lookup_offset,
    "lookup_timestamp": _lookup_timestamp,
    "resolve_offset": _resolve_offset,
    "offset_for_timestamp": _offset_for_timestamp,
    "aborted_transactions": _aborted_transactions,
    "read": _read,
    "lookup_offsets": _lookup_offsets,
    "resolve_offsets": _resolve_offsets,
    "offsets_for_timestamps": _offsets_for_timestamps,
    "groups": _groups,
    "group_offsets": _group_offsets,
    "schemas": _schemas,
    "read_decoded": _read_decoded,
}
TOO_BIG_INLINE = {"read": _read_too_big_inline}  # HOT methods whose large calls go to a thread anyway


def bind(specs: dict[str, MethodSpec], handlers: dict[str, Handler | None],
         too_big_inline: dict[str, Callable[[list], bool]] | None = None) -> dict[str, Method]:
    """The service's methods: each row of the method table with its handler. ValueError naming them
    for a row with no handler or a handler with no row."""
    too_big_inline = TOO_BIG_INLINE if too_big_inline is None else too_big_inline
    unbound, unknown = specs.keys() - handlers.keys(), (handlers.keys() | too_big_inline.keys()) - specs.keys()
    if unbound or unknown:
        raise ValueError(f"the method table (lookupd.rpc.methods) and the handlers disagree: "
                         f"no handler for {sorted(unbound)}, no row for {sorted(unknown)}")
    return {name: Method(handlers[name], spec, too_big_inline.get(name)) for name, spec in specs.items()}


METHODS: dict[str, Method] = bind(method_table.METHODS, HANDLERS)


def error_for(err: BaseException, method: str = "?") -> dict:
    """The wire error map for an exception raised by `Service.call`.

    LookupdError: its own code and message. OSError (a file the broker removed or an I/O
    error): UNAVAILABLE. Anything else is a bug: INTERNAL, logged with its traceback.
    """
    if isinstance(err, LookupdError):
        return {"code": err.code, "message": str(err)}
    if isinstance(err, OSError):
        log.warning("%s: %s", method, err)
        return {"code": Unavailable.code, "message": f"cannot read the log files right now: {err}"}
    log.error("%s failed unexpectedly", method, exc_info=err)
    return {"code": "INTERNAL", "message": f"internal error in {method}: {type(err).__name__}: {err} "
                                          f"(logged by the daemon; please report it)"}
