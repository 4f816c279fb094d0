"""The lookup daemon: configuration, listeners, systemd integration and the trio server around
the service that maps each msgpack-rpc method onto `lookupd.log`.

Imports `lookupd.log`, `lookupd.rpc` and `lookupd.format`; nothing outside `lookupd.tools` imports it.
"""
