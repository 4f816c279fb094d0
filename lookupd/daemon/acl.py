"""Per-topic and per-group authorization in Kafka's ACL model: who (a principal) may do what (an operation)
to which topics and consumer groups.

Pure logic, no I/O: the config gives the `[[acl]]` tables, the daemon names each connection's
principal, and `Acl.check` says whether a call on a topic is allowed (`check_group`, on a group).

Principals: the client certificate's subject under mutual TLS, as Kafka writes it (RFC 2253:
`CN=etl,O=acme`, lookupd.daemon.principal), `token:<name>`
(a named token from auth_tokens_file; `token:default` for the single auth_token_file),
`unix:<uid>` (a Unix socket peer, from SO_PEERCRED) and `anonymous` (TCP with neither).
A rule's principal, topics and groups are literal, or a prefix when they end in `*` (`*` alone: all).

With no rule everything is allowed (as without ACLs); with any rule, what no rule allows is
denied. Operations: `describe` (listings and lookups) and `read` (record reads and columnar
calls, which read in bulk). Which a method needs, and on what, is its row of the method table
(lookupd.rpc.methods: `access`), which `check_call` and `filter_answer` read. Groups are only described
(`groups`, and `group_offsets`, whose answer keeps only the partitions of topics the principal may
describe, as Kafka's OffsetFetch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import InvalidArgument, Unauthorized
# (READ: the Kafka listener takes the operations from here)
from ..rpc.methods import (DESCRIBE, GROUP, LISTED_GROUPS, LISTED_TOPICS, OPERATIONS, READ,  # noqa: F401
                           SCHEMAS_TOPIC, TOPIC, Access)

ANONYMOUS = "anonymous"


def _matches(pattern: str, name: str) -> bool:
    """A literal, or a prefix when the pattern ends in `*`."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


@dataclass(frozen=True)
class Rule:
    principal: str
    topics: tuple[str, ...]
    operations: frozenset[str]
    groups: tuple[str, ...] = ()

    def allows(self, principal: str, topic: str, operation: str) -> bool:
        return operation in self.operations and _matches(self.principal, principal) and \
            any(_matches(t, topic) for t in self.topics)

    def allows_group(self, principal: str, group: str, operation: str) -> bool:
        return operation in self.operations and _matches(self.principal, principal) and \
            any(_matches(g, group) for g in self.groups)


class Acl:
    """The `[[acl]]` rules; `check` raises Unauthorized naming the topic and operation."""

    def __init__(self, rules: Iterable[Rule]):
        self.rules = tuple(rules)
        self.denials: dict[str, int] = {}  # principal -> calls denied (for metrics; never a secret)

    @classmethod
    def from_config(cls, tables: list[dict[str, Any]]) -> "Acl | None":
        """The rules from the config's `[[acl]]` tables, or None when there are none (all allowed)."""
        if not tables:
            return None
        return cls(parse_rule(t, i) for i, t in enumerate(tables))

    def allowed(self, principal: str, topic: str, operation: str) -> bool:
        return any(r.allows(principal, topic, operation) for r in self.rules)

    def allowed_group(self, principal: str, group: str, operation: str) -> bool:
        return any(r.allows_group(principal, group, operation) for r in self.rules)

    def check_group(self, principal: str, group: Any, operation: str) -> None:
        """Raise Unauthorized unless `principal` may `operation` the consumer group (a non-string group is
        left to the method)."""
        if not isinstance(group, str) or self.allowed_group(principal, group, operation):
            return
        self.denials[principal] = self.denials.get(principal, 0) + 1
        raise Unauthorized(f"{principal} may not {operation} group {group!r:.300}: no [[acl]] rule allows it "
                           f"(rules name groups with groups = [...])")

    def check_call(self, principal: str, access: tuple[Access, ...], params: list, schemas_topic: str) -> None:
        """Raise Unauthorized unless `principal` may make a call needing `access` (its method's row) with
        `params`; listings are never refused (`filter_answer` keeps what the principal may see)."""
        for a in access:
            if a.resource == TOPIC:
                self.check(principal, params[0], a.operation)
            elif a.resource == GROUP:
                self.check_group(principal, params[0], a.operation)
            elif a.resource == SCHEMAS_TOPIC:
                self.check(principal, schemas_topic, a.operation)

    def filter_answer(self, principal: str, access: tuple[Access, ...], answer: Any) -> Any:
        """The answer of a call needing `access`, keeping what `principal` may see: the partitions of
        the topics, or the groups, it lists; a group's offsets of the topics it may describe (as Kafka's
        OffsetFetch)."""
        for a in access:
            if a.resource == LISTED_TOPICS:
                answer = [p for p in answer if self.allowed(principal, p["topic"], a.operation)]
            elif a.resource == LISTED_GROUPS:
                answer["groups"] = [g for g in answer["groups"] if self.allowed_group(principal, g["group"], a.operation)]
            elif a.resource == GROUP:
                cols = answer["offsets"]
                keep = [i for i, topic in enumerate(cols["topic"]) if self.allowed(principal, topic, DESCRIBE)]
                answer = {**answer, "offsets": {name: [values[i] for i in keep] for name, values in cols.items()}}
        return answer

    def check(self, principal: str, topic: Any, operation: str) -> None:
        """Raise Unauthorized unless `principal` may `operation` `topic` (a non-string topic is left to
        the method, which rejects it as an invalid argument)."""
        if not isinstance(topic, str) or self.allowed(principal, topic, operation):
            return
        self.denials[principal] = self.denials.get(principal, 0) + 1
        raise Unauthorized(f"{principal} may not {operation} topic {topic!r:.300}: no [[acl]] rule allows it")


def parse_rule(table: Any, index: int) -> Rule:
    """One `[[acl]]` table -> Rule; InvalidArgument naming the table and what is wrong."""
    where = f"[[acl]] number {index + 1}"
    if not isinstance(table, dict):
        raise InvalidArgument(f"{where} must be a table with principal, topics and/or groups, and operations")
    unknown = set(table) - {"principal", "topics", "groups", "operations"}
    if unknown:
        raise InvalidArgument(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                              f"known keys: principal, topics, groups, operations")
    principal, ops = table.get("principal"), table.get("operations")
    if not isinstance(principal, str) or not principal:
        raise InvalidArgument(f"{where}: principal must be a non-empty string like \"CN=spark-etl\", "
                              f"\"token:etl\" or \"unix:1000\"")
    if "topics" not in table and "groups" not in table:
        raise InvalidArgument(f"{where}: give topics = [...], groups = [...], or both")
    for key in ("topics", "groups", "operations"):
        value = table.get(key, ["-"] if key != "operations" else None)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise InvalidArgument(f"{where}: {key} must be a non-empty list of strings")
    bad = [op for op in ops if op not in OPERATIONS]
    if bad:
        raise InvalidArgument(f"{where}: unknown operation(s) {', '.join(bad)}; operations: {', '.join(OPERATIONS)}")
    if "groups" in table and DESCRIBE not in ops:
        raise InvalidArgument(f"{where}: groups are only described: its operations must include \"describe\"")
    return Rule(principal, tuple(table.get("topics", ())), frozenset(ops), tuple(table.get("groups", ())))
