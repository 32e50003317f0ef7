"""Prometheus metrics in a registry of the app's own (two apps never share counters)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("quarry_requests_total", "HTTP requests", ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram("quarry_request_seconds", "HTTP request latency", ["endpoint", "status"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.attempts = Histogram("quarry_attempts", "Retrieval attempts per question", buckets=(1, 2, 3, 4, 5, 6),
                                  registry=self.registry)
        self.outcomes = Counter("quarry_outcomes_total", "Answers by status and gap reason", ["status", "reason"],
                                registry=self.registry)
        self.routes = Counter("quarry_routes_total", "Chosen first route", ["route"], registry=self.registry)
        self.errors = Counter("quarry_errors_total", "Error responses by code", ["code"], registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
