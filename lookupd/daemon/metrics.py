"""Prometheus metrics for the daemon, counted cheaply on the request path and rendered only when scraped.

The request path does a dict lookup, two integer increments and a bisect per request
(`RequestMetrics.observe`, well under a microsecond); `prometheus_client` is imported and its
text format produced only by `serve_metrics`, in its own thread, when Prometheus scrapes.
Off by default: `metrics = "127.0.0.1:9471"` in the config turns it on.
"""

from __future__ import annotations

import bisect
import logging
import socket
import threading
import time
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..rpc.address import parse_host_port

log = logging.getLogger(__name__)

# Request latency buckets, in seconds: from an in-memory answer on the event loop (tens of
# microseconds) to a cold index paged in from a slow disk (hundreds of milliseconds).
LATENCY_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 250e-3, 1.0)

# Methods are labels: names a client made up would let one client grow the label set without
# bound, so every name that is not a daemon method is counted as this one.
OTHER_METHOD = "other"

# The metrics endpoint serves this many connections at once, each in its own thread. Prometheus scrapes
# one at a time: without a cap, idle connections each held a thread, and under systemd's TasksMax the
# daemon could not start the threads lookups need.
METRICS_MAX_THREADS = 4
# A metrics connection, from getting its slot through the TLS handshake and the request to the last byte of the
# answer, gets this long in all, then is cut: a scrape takes milliseconds (Prometheus's own timeout is
# 10 s), and a client sending a byte every few seconds could hold a slot for ever under a timeout per read.
METRICS_DEADLINE_S = 2.0
# A connection accepted while every slot is busy waits this long for one, then is closed: past the
# deadline, so a scrape behind connections that hold every slot gets the first one freed. The accept
# loop waits meanwhile; the connections it accepts next are queued behind the scrape.
METRICS_SLOT_WAIT_S = METRICS_DEADLINE_S + 0.5
# How often connections past their deadline are looked for (by the accept loop, also while it waits
# for a slot): a connection is cut at most this late.
METRICS_CHECK_S = 0.1
# Connections the kernel queues for the metrics accept(): enough that a burst is accepted (and the
# excess closed at once) rather than left retrying its SYN.
METRICS_BACKLOG = 64


class _MethodStats:
    __slots__ = ("count", "seconds", "buckets", "errors")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.errors: dict[str, int] = {}


class RequestMetrics:
    """Requests, errors by code and a latency histogram per method: plain integers, no locks (the
    event loop is the only writer; a scrape reads them from another thread, where a value one
    request old is fine)."""

    def __init__(self, methods: Iterable[str]):
        self._known = frozenset(methods)
        self._by_method: dict[str, _MethodStats] = {}

    def observe(self, method: str, seconds: float, error_code: str | None = None) -> None:
        if method not in self._known:
            method = OTHER_METHOD
        st = self._by_method.get(method)
        if st is None:
            st = self._by_method[method] = _MethodStats()
        st.count += 1
        st.seconds += seconds
        st.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        if error_code is not None:
            st.errors[error_code] = st.errors.get(error_code, 0) + 1

    def snapshot(self) -> dict[str, _MethodStats]:
        return dict(self._by_method)


# The Kafka listener's counters: how often its read ahead (lookupd.daemon.fetchahead) and the reactor's busy poll
# for a consumer's next request (lookupd.daemon.reactor) paid off.
KAFKA_COUNTERS = (("fetches_read_ahead", "Fetches answered with the answer read ahead for them"),
                  ("requests_caught_polling", "Requests found by busy-polling for them rather than by waking up"))


class Collector:
    """A prometheus_client collector over RequestMetrics and the daemon's `stats` answer."""

    def __init__(self, requests: RequestMetrics, stats: Callable[[], dict[str, Any]], worker: int = 0,
                 denials: dict[str, int] | None = None, kafka: Callable[[], dict[str, int]] | None = None):
        self.requests = requests
        self.stats = stats
        self.worker = str(worker)
        self.denials = denials  # principal -> calls the ACLs denied (lookupd.daemon.acl), when ACLs are on
        self.kafka = kafka  # the Kafka listener's counters (KAFKA_COUNTERS), when it is on

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        w = self.worker
        reqs = CounterMetricFamily("lookupd_requests", "Requests answered, by method", labels=["worker", "method"])
        errs = CounterMetricFamily("lookupd_errors", "Error answers, by method and error code",
                                   labels=["worker", "method", "code"])
        lat = HistogramMetricFamily("lookupd_request_seconds", "Time from a request's arrival to its answer",
                                    labels=["worker", "method"])
        for method, st in sorted(self.requests.snapshot().items()):
            reqs.add_metric([w, method], st.count)
            for code, n in sorted(st.errors.items()):
                errs.add_metric([w, method, code], n)
            cumulative, buckets = 0, []
            for bound, n in zip(LATENCY_BUCKETS + (float("inf"),), st.buckets):
                cumulative += n
                buckets.append((_bound(bound), cumulative))
            lat.add_metric([w, method], buckets, st.seconds)
        yield from (reqs, errs, lat)
        if self.denials is not None:
            denied = CounterMetricFamily("lookupd_acl_denials", "Calls denied by the [[acl]] rules, by principal",
                                         labels=["worker", "principal"])
            for principal, n in sorted(dict(self.denials).items()):
                denied.add_metric([w, principal], n)
            yield denied
        if self.kafka is not None:
            counts = self.kafka()
            for name, help_ in KAFKA_COUNTERS:
                family = CounterMetricFamily(f"lookupd_kafka_{name}", help_, labels=["worker"])
                family.add_metric([w], counts[name])
                yield family
        s = self.stats()
        for name, help_, kind in (("connections", "Open client connections", GaugeMetricFamily),
                                  ("partitions", "Partitions served", GaugeMetricFamily),
                                  ("segments", "Segments served", GaugeMetricFamily),
                                  ("open_indexes", "Index files mapped now", GaugeMetricFamily),
                                  ("mapped_bytes", "Bytes of index files mapped now", GaugeMetricFamily),
                                  ("lazy_loads", "Indexes mapped on first use since start", CounterMetricFamily),
                                  ("evictions", "Indexes unmapped by the cache's limits since start",
                                   CounterMetricFamily)):
            if name in s:
                family = kind(f"lookupd_{name}", help_, labels=["worker"])
                family.add_metric([w], s[name])
                yield family


def _bound(b: float) -> str:
    return "+Inf" if b == float("inf") else repr(b)


class _QuietHandler(WSGIRequestHandler):
    timeout = METRICS_DEADLINE_S  # socketserver sets it on the connection; the whole connection is bounded too

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds is not news


class MetricsServer(WSGIServer):
    """A WSGI server with at most METRICS_MAX_THREADS connections at once, each cut METRICS_DEADLINE_S after
    it got its slot, over TLS when given the daemon's TlsServer (its current context: a SIGHUP reload applies
    here too)."""

    daemon_threads = True
    request_queue_size = METRICS_BACKLOG

    def __init__(self, host: str, port: int, app: Callable, tls: Any = None):
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self._tls = tls
        self._slots = threading.BoundedSemaphore(METRICS_MAX_THREADS)
        # Connections being served -> when each must be done (time.monotonic()); cut by `_cut_late` under
        # the lock, which `_serve_one` takes to drop its connection before closing it (no descriptor reuse).
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__((host, port), _QuietHandler)
        self.set_app(app)
        self._thread = threading.Thread(target=self.serve_forever, args=(METRICS_CHECK_S,), name="lookupd-metrics",
                                        daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._closing.set()  # a wait for a slot ends now
        super().shutdown()

    def service_actions(self) -> None:
        self._cut_late()  # serve_forever calls it every METRICS_CHECK_S

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        give_up = time.monotonic() + METRICS_SLOT_WAIT_S
        while not self._slots.acquire(timeout=METRICS_CHECK_S):
            self._cut_late()
            if self._closing.is_set() or time.monotonic() >= give_up:
                self.shutdown_request(request)  # every slot still busy: closed, nothing held
                return
        with self._lock:
            self._deadlines[request] = time.monotonic() + METRICS_DEADLINE_S
        threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True).start()

    def _cut_late(self) -> None:
        """Shut down the sockets of connections past their deadline: the thread serving one is woken from
        its read or write, and its slot comes back (SSLSocket's own shutdown is bypassed: it would drop the
        TLS state the serving thread is using)."""
        at = time.monotonic()
        with self._lock:
            for sock, deadline in list(self._deadlines.items()):
                if at >= deadline:
                    del self._deadlines[sock]
                    try:
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    except OSError:
                        pass  # already gone

    def _serve_one(self, request: socket.socket, client_address: Any) -> None:
        raw = request
        try:
            request.settimeout(METRICS_DEADLINE_S)
            if self._tls is not None:
                with self._lock:  # the TLS socket takes over the descriptor, and the deadline with it
                    deadline = self._deadlines.pop(raw, None)
                    request = self._tls.context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
                    if deadline is not None:
                        self._deadlines[request] = deadline
                request.do_handshake()
            self.finish_request(request, client_address)
        except OSError as err:  # ssl.SSLError, a timeout, a reset, a cut: this connection's, logged and dropped
            log.debug("metrics connection from %s: %s", client_address, err)
        finally:
            with self._lock:
                self._deadlines.pop(request, None)
                self._deadlines.pop(raw, None)
            self.shutdown_request(request)
            self._slots.release()


def serve_metrics(spec: str, collector: Collector, tls: Any = None) -> MetricsServer:
    """Serve the Prometheus text format at http(s)://HOST:PORT/metrics from a thread of its own; `tls`:
    the daemon's TlsServer for https. The caller shuts the returned server down."""
    from prometheus_client import CollectorRegistry, make_wsgi_app

    host, port = parse_host_port(spec)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = MetricsServer(host, port, make_wsgi_app(registry), tls)
    log.info("metrics on %s://%s:%d/metrics", "https" if tls is not None else "http", host, server.server_port)
    return server
