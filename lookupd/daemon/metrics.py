"""Prometheus metrics for the daemon, counted cheaply on the request path and rendered only when scraped.

The request path does a dict lookup, two integer increments and a bisect per request
(`RequestMetrics.observe`, well under a microsecond); `prometheus_client` is imported and its
text format produced only by `serve_metrics`, in its own thread, when Prometheus scrapes.
Off by default: `metrics = "127.0.0.1:9471"` in the config turns it on.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any, Callable, Iterable

from ..rpc.address import parse_host_port

log = logging.getLogger(__name__)

# Request latency buckets, in seconds: from an in-memory answer on the event loop (tens of
# microseconds) to a cold index paged in from a slow disk (hundreds of milliseconds).
LATENCY_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 250e-3, 1.0)

# Methods are labels: names a client made up would let one client grow the label set without
# bound, so every name that is not a daemon method is counted as this one.
OTHER_METHOD = "other"


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


class Collector:
    """A prometheus_client collector over RequestMetrics and the daemon's `stats` answer."""

    def __init__(self, requests: RequestMetrics, stats: Callable[[], dict[str, Any]], worker: int = 0):
        self.requests = requests
        self.stats = stats
        self.worker = str(worker)

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


def serve_metrics(spec: str, collector: Collector):
    """Serve the Prometheus text format at http://HOST:PORT/metrics in a daemon thread; returns the
    (server, thread) pair from prometheus_client so the caller can shut it down."""
    from prometheus_client import CollectorRegistry, start_http_server

    host, port = parse_host_port(spec)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, thread = start_http_server(port, addr=host, registry=registry)
    log.info("metrics on http://%s:%d/metrics", host, server.server_port)
    return server, thread
