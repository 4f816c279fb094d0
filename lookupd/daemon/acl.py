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
calls, which read in bulk). Groups are only described (`groups`, and `group_offsets`, whose
answer keeps only the partitions of topics the principal may describe, as Kafka's OffsetFetch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import InvalidArgument, Unauthorized

DESCRIBE, READ = "describe", "read"
OPERATIONS = (DESCRIBE, READ)
ANONYMOUS = "anonymous"

# Which operation each topic-scoped method is (methods not listed take no topic: ping, auth, stats).
METHOD_OPERATIONS: dict[str, str] = {
    "partitions": DESCRIBE,  # filtered to what the principal may describe, never denied
    "segments": DESCRIBE,
    "lookup_offset": DESCRIBE,
    "lookup_timestamp": DESCRIBE,
    "resolve_offset": DESCRIBE,
    "offset_for_timestamp": DESCRIBE,
    "aborted_transactions": DESCRIBE,
    "read": READ,
    "lookup_offsets": READ,
    "resolve_offsets": READ,
    "offsets_for_timestamps": READ,
    "read_decoded": READ,  # and READ on the schemas topic, as `schemas` (lookupd.daemon.service)
}
# Which operation each group-scoped method is (its first param is a group, not a topic).
GROUP_METHOD_OPERATIONS: dict[str, str] = {
    "groups": DESCRIBE,  # filtered to the groups the principal may describe, never denied
    "group_offsets": DESCRIBE,
}


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
