"""The msgpack-rpc protocol (sans-I/O framing and messages) and the blocking and trio clients.

Imports `lookupd.errors` only: a client never pulls in the daemon, the log layer or numpy.
"""
