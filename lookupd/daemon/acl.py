"""Per-topic authorization in Kafka's ACL model: who (a principal) may do what (an operation) to which topics.

Pure logic, no I/O: the config gives the `[[acl]]` tables, the daemon names each connection's
principal, and `Acl.check` says whether a call on a topic is allowed.

Principals: the client certificate's subject under mutual TLS, as Kafka writes it (RFC 2253:
`CN=etl,O=acme`, lookupd.daemon.principal), `token:<name>`
(a named token from auth_tokens_file; `token:default` for the single auth_token_file),
`unix:<uid>` (a Unix socket peer, from SO_PEERCRED) and `anonymous` (TCP with neither).
A rule's principal and topics are literal, or a prefix when they end in `*` (`*` alone: all).

With no rule everything is allowed (as without ACLs); with any rule, what no rule allows is
denied. Operations: `describe` (listings and lookups) and `read` (record reads and columnar
calls, which read in bulk).
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

    def allows(self, principal: str, topic: str, operation: str) -> bool:
        return operation in self.operations and _matches(self.principal, principal) and \
            any(_matches(t, topic) for t in self.topics)


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
        raise InvalidArgument(f"{where} must be a table with principal, topics and operations")
    unknown = set(table) - {"principal", "topics", "operations"}
    if unknown:
        raise InvalidArgument(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                              f"known keys: principal, topics, operations")
    principal, topics, ops = table.get("principal"), table.get("topics"), table.get("operations")
    if not isinstance(principal, str) or not principal:
        raise InvalidArgument(f"{where}: principal must be a non-empty string like \"CN=spark-etl\", "
                              f"\"token:etl\" or \"unix:1000\"")
    for key, value in (("topics", topics), ("operations", ops)):
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise InvalidArgument(f"{where}: {key} must be a non-empty list of strings")
    bad = [op for op in ops if op not in OPERATIONS]
    if bad:
        raise InvalidArgument(f"{where}: unknown operation(s) {', '.join(bad)}; operations: {', '.join(OPERATIONS)}")
    return Rule(principal, tuple(topics), frozenset(ops))
