"""The LLM judge against a stand-in that stalls, drips or floods: how long a question takes
against its deadline, and what another caller's search costs meanwhile.

    .venv/bin/python benchmarks/judge_deadline.py [--runs 5] [--deadline-ms 2000]

A local stand-in judge (benchmarks/judge_stand_in.py, served by uvicorn on 127.0.0.1) answers
slowly (after 60 s), drips one byte every 0.5 s, or sends 200 MB; the judge's own timeout is
60 s, so only the question's deadline bounds it. For each mode, `--runs` questions (one
attempt, the demo index, bob) are timed end to end against `--deadline-ms`, while another
thread runs BM25 searches for carol back to back; the baseline is the same searches with no
question running (same process). Writes benchmarks/results/judge_deadline.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import statistics
import threading
import time
from dataclasses import replace
from datetime import date
from types import SimpleNamespace

from benchmarks.common import ROOT, build_or_reuse, machine, make_embedder, write_json
from benchmarks.judge_stand_in import stand_in
from retrieval.loop import Budget, run_loop
from retrieval.search import search
from retrieval.types import Filters, Principal

BOB, CAROL = Principal("bob", ("finance",)), Principal("carol", ("security", "sre"))
QUESTION = "What is the Q3 2025 budget for the payments platform?"
SEARCHES = ("rotate the signing key", "ledger lock timeouts", "tracking consumer lag", "postgres failover")


class StandIn:
    """The stand-in judge under uvicorn in a thread of this process."""

    def __init__(self, state: dict) -> None:
        import socket

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        self.server = uvicorn.Server(uvicorn.Config(stand_in(state), host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def searches_while(engine, busy: threading.Event) -> list[float]:
    """Milliseconds per search, back to back, while `busy` is set."""
    out, i = [], 0
    while busy.is_set():
        t0 = time.perf_counter()
        search(engine.retrievers, "bm25", SEARCHES[i % len(SEARCHES)], CAROL, 8, Filters(), engine.limits)
        out.append((time.perf_counter() - t0) * 1000)
        i += 1
    return out


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 2),
            "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2), "max": round(ordered[-1], 2)}


def main() -> None:
    from routes.service.view import open_view
    from routes.service.plugins import load_policy

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--deadline-ms", type=int, default=2000)
    args = parser.parse_args()
    embedder = make_embedder()
    index, _ = build_or_reuse("demo", [ROOT / "eval_data" / "demo" / "docs", ROOT / "eval_data" / "demo" / "tables"], embedder)
    engine = open_view(index, embedder, today=date(2025, 11, 1))
    state: dict = {"requests": [], "sleep": 60.0}
    judge = StandIn(state)
    try:
        settings = SimpleNamespace(grader="routes.policies.judge:make_judge", judge_url=judge.url, judge_model="stand-in",
                                   judge_timeout_s=60.0, judge_max_passages=3)
        deps = replace(engine.deps, policy=load_policy(settings, engine, engine.deps.policy))
        budget = Budget(max_attempts=1, deadline_ms=args.deadline_ms, call_timeout_ms=min(1500, args.deadline_ms))
        busy = threading.Event()
        busy.set()
        baseline = []
        t = threading.Thread(target=lambda: baseline.extend(searches_while(engine, busy)))
        t.start()
        time.sleep(3)
        busy.clear()
        t.join()
        out = {"baseline_search_ms": summary(baseline), "modes": {}}
        for mode in ("slow", "drip", "huge"):
            state["mode"] = mode
            seconds, sources, during = [], set(), []
            for _ in range(args.runs):
                busy.set()
                t = threading.Thread(target=lambda into=during: into.extend(searches_while(engine, busy)))
                t.start()
                t0 = time.perf_counter()
                result = run_loop(QUESTION, BOB, budget, deps)
                seconds.append(time.perf_counter() - t0)
                busy.clear()
                t.join()
                sources.add(result.attempts[0].grade.source if result.attempts and result.attempts[0].grade else None)
            out["modes"][mode] = {"question_s": [round(s, 3) for s in seconds],
                                  "max_over_deadline": round(max(seconds) * 1000 / args.deadline_ms, 3),
                                  "grade_sources": sorted(map(str, sources)), "search_ms_meanwhile": summary(during)}
    finally:
        judge.close()
        engine.close()
    print(f"deadline {args.deadline_ms} ms, {args.runs} questions per mode; carol's BM25 search alone: "
          f"{out['baseline_search_ms']} ms")
    for mode, r in out["modes"].items():
        print(f"{mode:5} question {min(r['question_s']):.3f}-{max(r['question_s']):.3f} s (max {r['max_over_deadline']:.3f}x "
              f"the deadline), grade {r['grade_sources']}; search meanwhile {r['search_ms_meanwhile']} ms")
    write_json("judge_deadline", {"machine": machine(), "deadline_ms": args.deadline_ms, **out})


if __name__ == "__main__":
    main()
