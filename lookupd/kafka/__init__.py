"""Kafka's wire protocol with no I/O (as h11 is HTTP's): framing, request and response headers, and the
bodies of the requests the daemon's Kafka listener answers. Nothing here reads a file or a socket; the
listener (lookupd.daemon.kafkalistener) feeds it bytes and sends what it returns."""
