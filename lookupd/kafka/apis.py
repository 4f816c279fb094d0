"""What the listener answers: every API key it advertises in ApiVersions, with the versions it speaks.

Produce is advertised although every produce is refused: librdkafka enables its v2 message format (and
so ever sends a Fetch) only for a broker that advertises Produce v3+ and Fetch v4+. The lowest versions
are those Kafka 4.0 still serves (KIP-896's baseline, Kafka 2.1's), or lower where the decoding is the
same; the highest are Kafka 4.0's.
"""

from __future__ import annotations

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 12, 13, 14
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36

NAMES = {PRODUCE: "Produce", FETCH: "Fetch", LIST_OFFSETS: "ListOffsets", METADATA: "Metadata",
         OFFSET_COMMIT: "OffsetCommit", OFFSET_FETCH: "OffsetFetch", FIND_COORDINATOR: "FindCoordinator",
         JOIN_GROUP: "JoinGroup", HEARTBEAT: "Heartbeat", LEAVE_GROUP: "LeaveGroup", SYNC_GROUP: "SyncGroup",
         SASL_HANDSHAKE: "SaslHandshake", API_VERSIONS: "ApiVersions", SASL_AUTHENTICATE: "SaslAuthenticate"}

# api key -> (lowest, highest) version answered. SaslHandshake v0 (raw SASL bytes after it, pre-KIP-152)
# is not: a client that offers only it gets UNSUPPORTED_VERSION.
ADVERTISED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),
    FETCH: (4, 17),
    LIST_OFFSETS: (1, 10),
    METADATA: (0, 12),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 5),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    SASL_HANDSHAKE: (1, 1),
    API_VERSIONS: (0, 4),
    SASL_AUTHENTICATE: (0, 2),
}

# Answered before authentication (Kafka's SASL listeners accept these and nothing else first).
PRE_AUTH = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))


def supported(api_key: int, version: int) -> bool:
    rng = ADVERTISED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]
