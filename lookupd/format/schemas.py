"""The Schema Registry's state, rebuilt from the records of its `_schemas` topic. No I/O.

Confluent's Schema Registry keeps everything in one single-partition topic (`_schemas` by default,
its `kafkastore.topic`) and rebuilds its state at start-up by reading it from the beginning, in
offset order (KafkaStoreReaderThread). Every record's key and value are JSON:

- key `{"keytype": "SCHEMA", "subject": S, "version": V, "magic": 1}`, value `{"subject", "version",
  "id", "schema", "schemaType" (absent: AVRO), "references": [{"name", "subject", "version"}],
  "deleted"}`: version V of subject S, with its global id. `deleted: true` is a soft delete: the
  version leaves the subject's listing, but its id still resolves (consumers must read old data).
  A null value (a tombstone) is a hard delete: the version is gone, and its id with it once no
  other version carries that id.
- key `DELETE_SUBJECT`, value `{"subject", "version"}`: every version of the subject up to `version`
  is soft-deleted.
- key `CLEAR_SUBJECT`, value `{"subject"}`: the subject's soft-deleted versions are dropped.
- `CONFIG`, `MODE`, `NOOP`, `CONTEXT`, `ASSOC` keys say nothing about schemas and are passed over,
  as are records whose key or value does not parse (the registry logs those and goes on).

As the registry's validation does, a version whose id is already taken by another schema text is
refused. Ids are per context: a subject `:.ctx:name` is in context `.ctx`, every other in the default
context; a wire-format value is looked up in the default context (`Registry.by_id`).

Everything here comes from a topic anyone who could produce to it wrote: sizes, counts and the depth
of references are bounded by the named limits below, and a record past them is passed over with the
reason kept in `Registry.skipped`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterable, NamedTuple

DEFAULT_TOPIC = "_schemas"  # the registry's default kafkastore.topic
DEFAULT_CONTEXT = "."
CONTEXT_PREFIX = ":."  # a qualified subject: `:.<context>:<subject>`
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
# One schema's text: the registry's own bound is the topic's max message size (1 MiB by default).
MAX_SCHEMA_BYTES = 1 << 20
MAX_KEY_BYTES = 64 << 10  # a key is a few names and numbers
MAX_SCHEMAS = 100_000  # subject versions held at once (a registry holds thousands)
MAX_SUBJECT_CHARS = 4096
MAX_REFERENCES = 256  # references of one schema
MAX_REFERENCE_DEPTH = 32  # references of references...: resolution stops there (a cycle ends there too)
MAX_SKIPPED = 100  # reasons kept for records passed over (the count goes on)
_INT32 = (1 << 31) - 1


class Reference(NamedTuple):
    """A schema's import: `name` (an Avro full name, a .proto import path, a JSON `$ref`) resolves to
    version `version` of `subject` (-1: its latest version)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SchemaVersion:
    """One version of one subject, as its last `_schemas` record left it."""

    subject: str
    version: int
    id: int
    schema_type: str  # AVRO, PROTOBUF or JSON
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False
    offset: int = -1  # of the `_schemas` record it came from

    @property
    def context(self) -> str:
        return context_of(self.subject)

    def to_json(self) -> dict:
        return {"subject": self.subject, "version": self.version, "id": self.id, "schemaType": self.schema_type,
                "references": [r._asdict() for r in self.references], "deleted": self.deleted,
                "offset": self.offset, "schema": self.schema}


class Skipped(ValueError):
    """A `_schemas` record that says nothing this state keeps, and why."""


def context_of(subject: str) -> str:
    """The context of a subject: `.ctx` for `:.ctx:name`, the default context `.` otherwise."""
    if subject.startswith(CONTEXT_PREFIX):
        end = subject.find(":", len(CONTEXT_PREFIX))
        if end > 0:
            return subject[1:end]
    return DEFAULT_CONTEXT


def _qualify(subject: str, parent: str) -> str:
    """A reference's subject in its parent's context when it names none (qualifySubjectWithParent)."""
    ctx = context_of(parent)
    if ctx == DEFAULT_CONTEXT or subject.startswith(CONTEXT_PREFIX):
        return subject
    return f":{ctx}:{subject}"


@dataclass
class Registry:
    """Subjects, versions and ids as the registry holds them after reading its topic up to `end_offset`."""

    versions: dict[tuple[str, int], SchemaVersion] = field(default_factory=dict)
    end_offset: int = 0  # the offset after the last record applied
    skipped: list[str] = field(default_factory=list)  # the first MAX_SKIPPED reasons
    skipped_count: int = 0
    # (context, id) -> the subject versions carrying it (deleted ones too), in registration order
    _ids: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_records(cls, records: Iterable[tuple[int, bytes | None, bytes | None]]) -> "Registry":
        """The state after (offset, key, value) records of the topic, in offset order."""
        reg = cls()
        for offset, key, value in records:
            reg.apply(offset, key, value)
        return reg

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """One record of the topic: its effect on the state, or a reason kept in `skipped`."""
        self.end_offset = max(self.end_offset, offset + 1)
        try:
            self._apply(offset, key, value)
        except Skipped as why:
            self.skipped_count += 1
            if len(self.skipped) < MAX_SKIPPED:
                self.skipped.append(f"offset {offset}: {why}")

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        k = _json_object(key, MAX_KEY_BYTES, "key")
        if k is None:
            raise Skipped("no key")
        keytype = k.get("keytype")
        if keytype == "SCHEMA":
            subject, version = _subject(k), _version(k.get("version"), "key")
            if k.get("magic", 1) not in (0, 1):
                raise Skipped(f"SCHEMA key with magic {k.get('magic')!r}")
            if value is None:
                self._forget(subject, version)
                return
            self._register(subject, version, _json_object(value, MAX_SCHEMA_BYTES + MAX_KEY_BYTES, "value"), offset)
        elif keytype == "DELETE_SUBJECT" and value is not None:
            v = _json_object(value, MAX_KEY_BYTES, "value")
            subject, upto = _subject(v), _version(v.get("version"), "DELETE_SUBJECT value")
            for (s, n), sv in list(self.versions.items()):
                if s == subject and n <= upto and not sv.deleted:
                    self.versions[(s, n)] = replace(sv, deleted=True)
        elif keytype == "CLEAR_SUBJECT" and value is not None:
            subject = _subject(_json_object(value, MAX_KEY_BYTES, "value"))
            for (s, n), sv in list(self.versions.items()):
                if s == subject and sv.deleted:
                    self._forget(s, n)
        elif not isinstance(keytype, str):
            raise Skipped("key without a keytype")
        # CONFIG, MODE, NOOP, CONTEXT, ASSOC and tombstones of them: nothing about schemas

    def _register(self, subject: str, version: int, v: dict, offset: int) -> None:
        sid = v.get("id")
        if type(sid) is not int or not 0 <= sid <= _INT32:
            raise Skipped(f"schema id {sid!r} is not an int32 >= 0")
        text = v.get("schema")
        if not isinstance(text, str):
            raise Skipped("schema value without a schema string")
        if len(text) > MAX_SCHEMA_BYTES:
            raise Skipped(f"schema of {subject} version {version} is longer than {MAX_SCHEMA_BYTES} characters")
        schema_type = v.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise Skipped(f"schemaType {schema_type!r} is not one of {', '.join(SCHEMA_TYPES)}")
        refs = v.get("references") or []
        if not isinstance(refs, list) or len(refs) > MAX_REFERENCES:
            raise Skipped(f"references of {subject} version {version}: not a list of at most {MAX_REFERENCES}")
        references = tuple(_reference(r) for r in refs)
        deleted = v.get("deleted", False) is True
        ctx = context_of(subject)
        holders = self._ids.get((ctx, sid), [])
        for other in holders:
            if self.versions[other].schema != text and other != (subject, version):
                raise Skipped(f"schema id {sid} is already {other[0]} version {other[1]}, another schema "
                              f"(the registry refuses a duplicate id)")
        if (subject, version) not in self.versions and len(self.versions) >= MAX_SCHEMAS:
            raise Skipped(f"more than {MAX_SCHEMAS} subject versions")
        self._forget(subject, version)
        self.versions[(subject, version)] = SchemaVersion(subject, version, sid, schema_type, text, references,
                                                          deleted, offset)
        self._ids.setdefault((ctx, sid), []).append((subject, version))

    def _forget(self, subject: str, version: int) -> None:
        old = self.versions.pop((subject, version), None)
        if old is None:
            return
        holders = self._ids.get((old.context, old.id), [])
        if (subject, version) in holders:
            holders.remove((subject, version))
        if not holders:
            self._ids.pop((old.context, old.id), None)

    def copy(self) -> "Registry":
        """A registry to apply more records to, leaving this one as its readers hold it."""
        out = Registry(dict(self.versions), self.end_offset, list(self.skipped), self.skipped_count)
        out._ids = {k: list(v) for k, v in self._ids.items()}
        return out

    # ------------------------------------------------------------------ lookups

    def by_id(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> SchemaVersion | None:
        """The schema with this global id (a soft-deleted version still answers, as the registry's
        GET /schemas/ids/{id} does): the first version registered with it that is still held. An id not
        in `context` but in exactly one other context is taken from there."""
        holders = self._ids.get((context, schema_id))
        if not holders:
            others = [h for (ctx, i), h in self._ids.items() if i == schema_id and ctx != context and h]
            if len(others) != 1:
                return None
            holders = others[0]
        return self.versions[holders[0]]

    def version(self, subject: str, version: int) -> SchemaVersion | None:
        """A subject's version (-1: its latest one that is not deleted)."""
        if version == -1:
            return self.latest(subject)
        return self.versions.get((subject, version))

    def latest(self, subject: str) -> SchemaVersion | None:
        live = [sv for (s, _), sv in self.versions.items() if s == subject and not sv.deleted]
        return max(live, key=lambda sv: sv.version, default=None)

    def subjects(self, include_deleted: bool = False) -> dict[str, list[SchemaVersion]]:
        """Subject -> its versions in version order (soft-deleted ones only with include_deleted)."""
        out: dict[str, list[SchemaVersion]] = {}
        for (s, n) in sorted(self.versions):
            sv = self.versions[(s, n)]
            if include_deleted or not sv.deleted:
                out.setdefault(s, []).append(sv)
        return out

    def resolve(self, sv: SchemaVersion) -> list[tuple[str, SchemaVersion]]:
        """Every schema `sv` references, directly or not, as (name, version), dependencies before what
        needs them, each once. Raises LookupError naming a reference that is not held, or a chain deeper
        than MAX_REFERENCE_DEPTH (a cycle is one)."""
        out: list[tuple[str, SchemaVersion]] = []
        seen: set[tuple[str, int]] = set()

        def visit(parent: SchemaVersion, depth: int) -> None:
            if depth > MAX_REFERENCE_DEPTH:
                raise LookupError(f"references of {sv.subject} version {sv.version} nest deeper than "
                                  f"{MAX_REFERENCE_DEPTH} (a cycle?)")
            for ref in parent.references:
                target = self.version(_qualify(ref.subject, parent.subject), ref.version)
                if target is None:
                    raise LookupError(f"reference {ref.name!r} of {parent.subject} version {parent.version} names "
                                      f"{ref.subject} version {ref.version}, which _schemas does not hold")
                visit(target, depth + 1)
                if (target.subject, target.version) not in seen:
                    seen.add((target.subject, target.version))
                    out.append((ref.name, target))

        visit(sv, 1)
        return out

    def to_json(self) -> dict:
        """What the daemon's `schemas` answers (and `from_json` takes back)."""
        return {"end_offset": self.end_offset, "skipped": self.skipped_count,
                "versions": [self.versions[k].to_json() for k in sorted(self.versions, key=lambda k:
                                                                         self.versions[k].offset)]}

    @classmethod
    def from_json(cls, d: dict) -> "Registry":
        """A registry from `to_json`'s form (as received from a daemon: checked as untrusted)."""
        reg = cls()
        for v in d.get("versions", [])[:MAX_SCHEMAS]:
            reg._register_checked(v)
        reg.end_offset = int(d.get("end_offset", 0))
        reg.skipped_count += int(d.get("skipped", 0))
        return reg

    def _register_checked(self, v: dict) -> None:
        try:
            if not isinstance(v, dict):
                raise Skipped("not a map")
            offset = v.get("offset", -1)
            self._register(_subject(v), _version(v.get("version"), "version"), v,
                           offset if type(offset) is int else -1)
        except Skipped as why:
            self.skipped_count += 1
            if len(self.skipped) < MAX_SKIPPED:
                self.skipped.append(str(why))


def _json_object(data: bytes | None, limit: int, what: str) -> dict | None:
    if data is None:
        return None
    if len(data) > limit:
        raise Skipped(f"{what} of {len(data)} bytes is over {limit}")
    try:
        obj = json.loads(bytes(data))
    except (ValueError, RecursionError) as err:
        raise Skipped(f"{what} is not JSON: {err}") from None
    if not isinstance(obj, dict):
        raise Skipped(f"{what} is not a JSON object")
    return obj


def _subject(obj: dict) -> str:
    s = obj.get("subject")
    if not isinstance(s, str) or not s or len(s) > MAX_SUBJECT_CHARS:
        raise Skipped(f"subject {str(s)[:80]!r} is not a name of 1 to {MAX_SUBJECT_CHARS} characters")
    return s


def _version(v, what: str) -> int:
    if type(v) is not int or not 1 <= v <= _INT32:
        raise Skipped(f"{what} version {v!r} is not an int32 >= 1")
    return v


def _reference(r) -> Reference:
    if not isinstance(r, dict):
        raise Skipped("a reference is not a map")
    name, subject, version = r.get("name"), r.get("subject"), r.get("version")
    if not isinstance(name, str) or not isinstance(subject, str) or type(version) is not int \
            or len(name) > MAX_SUBJECT_CHARS or len(subject) > MAX_SUBJECT_CHARS:
        raise Skipped(f"reference {str(r)[:120]} is not {{name, subject, version}}")
    return Reference(name, subject, version)
