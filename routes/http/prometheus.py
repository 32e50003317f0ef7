"""Prometheus metrics in a registry of the app's own (two apps never share counters).

Answers of the loop are counted from the answer shape, so `/v1/query`, the
`retrieve_context` tool over `/v1/tools/call` and over `/mcp` count alike; tool errors are
counted under their tool code beside the error responses.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from routes.service.tools import ToolCall

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
        self.errors = Counter("quarry_errors_total", "Error responses and tool errors by code", ["code"],
                              registry=self.registry)
        self.audit_dropped = Counter("quarry_audit_dropped_total", "Audit rows that could not be written, by reason "
                                     "(write_failed, queue_full)", ["reason"], registry=self.registry)
        self.key_fetches = Counter("quarry_identity_key_fetches_total", "Reads of an identity provider's keys "
                                   "(discovery and JWKS), by issuer and outcome (ok, failed)", ["issuer", "outcome"],
                                   registry=self.registry)
        self.reloads = Counter("quarry_reloads_total", "New snapshots named by CURRENT, by outcome (switched: now "
                               "served; failed: refused, the old one keeps serving)", ["outcome"], registry=self.registry)

    def watch_shards(self, stats: Callable[[], list[dict[str, Any]]]) -> None:
        """Export a sharded front's per-shard call counts (`Service.shard_stats`), read at each scrape."""
        self.registry.register(_ShardCollector(stats))

    def count_answer(self, answer: Mapping[str, Any]) -> None:
        """Attempts, first route, and status with gap reason of one answer of the loop."""
        self.attempts.observe(len(answer["attempts"]))
        self.routes.labels(answer["route"]["chosen"]).inc()
        self.outcomes.labels(answer["status"], (answer.get("gap") or {}).get("reason", "")).inc()

    def count_tool(self, call: ToolCall) -> None:
        if call.error is not None:
            self.errors.labels(call.error.code).inc()
        elif call.name == "retrieve_context" and call.result is not None:
            self.count_answer(call.result)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ShardCollector(Collector):
    """quarry_shard_calls_total{shard, outcome}: every call a front sent a shard (`sent`), those
    sent again after a replica failed (`retried`) and those no live replica answered in time
    (`unavailable`, each a retryable 503 for its request)."""

    def __init__(self, stats: Callable[[], list[dict[str, Any]]]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        calls = CounterMetricFamily("quarry_shard_calls", "Calls a front sent each shard, by outcome",
                                    labels=["shard", "outcome"])
        for row in self._stats():
            shard = f"{row['shard']:02d}"
            for outcome, key in (("sent", "calls"), ("retried", "retried"), ("unavailable", "unavailable")):
                if key in row:
                    calls.add_metric([shard, outcome], row[key])
        yield calls
