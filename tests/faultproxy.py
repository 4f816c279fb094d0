r"""An HTTP proxy in front of the S3 test server that injects faults into chosen requests.

    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.inject("GET", r"\.log$", "503", times=2)   # the next two GETs of .log objects answer 503
        ... point lookupd at proxy.url ...

Faults: "503" (ServiceUnavailable), "slowdown" (503 SlowDown), "500", "403" (AccessDenied), "404" (NoSuchKey),
"reset" (the connection is reset before any answer), "slow" (the answer waits `delay` seconds),
"corrupt" (one bit of the answer's body flipped at `at`). Requests are forwarded with their headers as
signed, so SigV4 still verifies at the server. `hits` counts the requests each rule caught.
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_ERRORS = {
    "503": (503, "ServiceUnavailable", "Please reduce your request rate."),
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "403": (403, "AccessDenied", "Access Denied"),
    "404": (404, "NoSuchKey", "The specified key does not exist."),
}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass
class Rule:
    method: str
    pattern: re.Pattern
    fault: str
    times: int | None    # None: every matching request
    delay: float
    at: int
    range_pattern: re.Pattern | None = None  # None: any Range header or none
    hits: int = 0


class FaultProxy:
    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range) of every request seen
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                proxy._serve(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def inject(self, method: str, path_regex: str, fault: str, *, times: int | None = None, delay: float = 0.0,
               at: int = 0, range_regex: str | None = None) -> Rule:
        """Apply `fault` to the next `times` requests (all, when None) whose method and path match (and Range
        header, when `range_regex` is given)."""
        if fault not in _ERRORS and fault not in ("reset", "slow", "corrupt"):
            raise ValueError(f"unknown fault {fault!r}")
        rule = Rule(method, re.compile(path_regex), fault, times, delay, at,
                    None if range_regex is None else re.compile(range_regex))
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def _match(self, method: str, path: str, range_header: str | None = None) -> Rule | None:
        with self._lock:
            self.requests.append((method, path, range_header))
            for rule in self._rules:
                if rule.method in (method, "*") and rule.pattern.search(path.split("?", 1)[0]) and \
                        (rule.range_pattern is None or rule.range_pattern.fullmatch(range_header or "")) and \
                        (rule.times is None or rule.hits < rule.times):
                    rule.hits += 1
                    return rule
        return None

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        rule = self._match(h.command, h.path, h.headers.get("Range"))
        fault = rule.fault if rule else None
        if fault == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            h.connection.close()
            return
        if fault in _ERRORS:
            status, code, message = _ERRORS[fault]
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                   f"<Message>{message}</Message><Resource>{h.path}</Resource></Error>").encode()
            h.send_response(status)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(xml) if h.command != "HEAD" else 0))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(xml)
            return
        if fault == "slow":
            time.sleep(rule.delay)
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.putrequest(h.command, h.path, skip_host=True, skip_accept_encoding=True)
            for name, value in h.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if fault == "corrupt" and data:
            at = min(rule.at, len(data) - 1)
            data = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]
        h.send_response(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                h.send_header(name, value)
        h.send_header("Content-Length", str(len(data)) if h.command != "HEAD" else resp.getheader(
            "Content-Length", "0"))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
