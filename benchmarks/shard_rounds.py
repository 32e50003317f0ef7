"""Rounds a question costs over shards: how many sequential steps of shard calls the loop waits on.

    .venv/bin/python benchmarks/shard_rounds.py [--shards 2] [--latency-ms 5] [--tag T]

The demo corpus (documents and tables) at N shards, served in this process (`LocalShard`)
behind a stand-in for the network that adds a fixed latency to every call, as a Ray call's
round trip would. Every labeled demo question is asked once by each of 4 principals through
the whole loop (the served defaults), and for each question the calls to shard 00 are
recorded: every step of the loop calls every shard once, so shard 00's calls are the calls
per shard, and their intervals merged (calls that overlap in time are one step) are the
sequential rounds the question waited on. With the latency added, a round costs at least
that latency; the loop's wall time is printed beside one node's, in the same run.

Writes benchmarks/results/shard-rounds-<tag>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import statistics
import threading
import time
from datetime import date
from typing import Any, Callable

from benchmarks.common import CACHE, ROOT, build_or_reuse, machine, make_embedder, write_json

TODAY = date(2025, 11, 1)


class Latent:
    """A shard behind a stand-in network: each call waits `latency_s`, then runs; the calls
    of shard 00 are logged as (method, start, end)."""

    def __init__(self, shard: Any, latency_s: float, log: list[tuple[str, float, float]] | None) -> None:
        self._shard, self._latency, self._log = shard, latency_s, log
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._shard, name)
        if not callable(method) or name.startswith("_"):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            time.sleep(self._latency)
            try:
                return method(*args, **kwargs)
            finally:
                if self._log is not None:
                    with self._lock:
                        self._log.append((name, start, time.perf_counter()))

        return call


def rounds(calls: list[tuple[str, float, float]]) -> int:
    """Sequential steps: the calls' intervals, overlapping ones merged."""
    steps, end = 0, float("-inf")
    for _, s, e in sorted(calls, key=lambda c: c[1]):
        if s >= end:
            steps += 1
            end = e
        else:
            end = max(end, e)
    return steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--tag", default="run")
    args = ap.parse_args()

    from indexes.shards import build_shards, load_cluster
    from indexes.snapshot_build import BuildOptions
    from retrieval.limits import Limits
    from retrieval.shard import LocalShard
    from retrieval.types import Principal
    from routes.service.resources import Resources
    from routes.service.settings import Settings
    from routes.service.sharded import open_sharded
    from routes.service.view import open_view

    embedder = make_embedder()
    demo = ROOT / "eval_data" / "demo"
    single_index, _ = build_or_reuse("demo", [demo / "docs", demo / "tables"], embedder)
    index = CACHE / f"demo-{args.shards}-shards"
    if not (index / "cluster.json").exists():
        build_shards([demo / "docs", demo / "tables"], index, embedder, args.shards, BuildOptions(reuse_from=single_index))
    limits = Limits(call_timeout_ms=60000, max_deadline_ms=120000)
    settings = Settings()
    resources = Resources.open(settings)
    _, snapshots = load_cluster(index, embedder)
    log: list[tuple[str, float, float]] = []
    shards = [Latent(LocalShard(s.chunks, s.bm25, s.dense, s.catalog, resources.name_keys), args.latency_ms / 1000,
                     log if i == 0 else None) for i, s in enumerate(snapshots)]
    view = open_sharded(index, shards, embedder, resources, settings, resources.shard_calls, limits, TODAY)
    single = open_view(single_index, embedder, limits=limits, today=TODAY)
    principals = (Principal("alice", frozenset({"sre"})), Principal("bob", frozenset({"finance"})), Principal("erin"),
                  Principal("root", frozenset({"admin"})))
    questions = [json.loads(line)["question"] for line in (demo / "questions.jsonl").read_text().splitlines()]
    for p in principals:  # tables profiled and backgrounds cached first, as on a warm server
        view.tables_ready(p)
        single.tables_ready(p)
        view.query(questions[0], p, deadline_ms=60000)
        single.query(questions[0], p, deadline_ms=60000)
    per_question: list[dict[str, Any]] = []
    for p in principals:
        for q in questions:
            log.clear()
            t0 = time.perf_counter()
            got = view.query(q, p, deadline_ms=60000)
            sharded_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            single.query(q, p, deadline_ms=60000)
            single_s = time.perf_counter() - t0
            methods: dict[str, int] = {}
            for name, _, _ in log:
                methods[name] = methods.get(name, 0) + 1
            per_question.append({"principal": p.id, "question": q, "attempts": len(got.attempts),
                                 "route": got.decision.chosen, "calls": len(log), "rounds": rounds(list(log)),
                                 "methods": methods, "sharded_ms": sharded_s * 1000, "single_ms": single_s * 1000})
    view.close()
    single.close()
    resources.shutdown()
    for s in snapshots:
        s.close()

    def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"questions": len(rows),
                "rounds_p50": statistics.median(r["rounds"] for r in rows), "rounds_max": max(r["rounds"] for r in rows),
                "calls_p50": statistics.median(r["calls"] for r in rows), "calls_max": max(r["calls"] for r in rows),
                "sharded_ms_p50": round(statistics.median(r["sharded_ms"] for r in rows), 1),
                "single_ms_p50": round(statistics.median(r["single_ms"] for r in rows), 1)}

    first = [r for r in per_question if r["attempts"] == 1]
    hybrid_first = [r for r in first if r["route"] == "hybrid"]
    out = {"shards": args.shards, "latency_ms": args.latency_ms, "machine": machine(),
           "all": summary(per_question), "one_attempt": summary(first) if first else None,
           "one_hybrid_attempt": summary(hybrid_first) if hybrid_first else None, "per_question": per_question}
    totals: dict[str, int] = {}
    for r in per_question:
        for name, n in r["methods"].items():
            totals[name] = totals.get(name, 0) + n
    out["calls_per_question_by_method"] = {k: round(v / len(per_question), 2) for k, v in sorted(totals.items())}
    for name in ("all", "one_attempt", "one_hybrid_attempt"):
        print(name, out[name])
    print("calls per question by method:", out["calls_per_question_by_method"])
    write_json(f"shard-rounds-{args.tag}", out)


if __name__ == "__main__":
    main()
