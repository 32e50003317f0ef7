"""Another key's simple SQL while one key floods the SQL slots with slow statements.

    .venv/bin/python benchmarks/sql_fairness.py [--rounds 10] [--statements 45] [--in-process 30]

One key (mallory) sends the five-way cross join count that only the time limit stops (2 s),
from 8 loops at once; another key (olga) sends `SELECT count(*) FROM tickets`, one at a
time, one every 20 ms. Her latency while the flood runs is compared, in the same run, with
her latency on the idle server (the target) and while mallory sends one slow statement at a
time (the floor fair slots can reach: the flood still runs one statement, on one core):

1. A real `quarry serve` (a child process, uvicorn on 127.0.0.1) over the demo tables, with
   the default two statement slots, shared fairly between keys (indexes/fair_slots.py).
   `--rounds` rounds of three phases (idle, one loop, eight loops) of `--statements`
   statements each, so that a change of the machine's load falls on all three. Mallory is a
   client process of its own (as an attacker is: her threads do not share olga's
   interpreter), started 1 s before olga's first statement of the phase (her requests are
   then running or waiting for a slot).
2. The baseline, in process (the same guard, runner and DuckDB): idle and eight loops with
   the runner's slots shared fairly, then with one plain semaphore, as the slots were before
   (a freed slot goes to whichever waiting statement wakes first). `--in-process` statements
   per phase (a statement waiting behind the plain semaphore can take the whole 2 s).

Olga's figures: p50 / p99 / max in ms, and her errors (any status but 200, or an error
raised in process). Writes benchmarks/results/sql_fairness.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import json
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Hashable

import httpx

from benchmarks.common import CACHE, ROOT, machine, make_embedder, write_json
from benchmarks.sql_hostile import Server
from indexes.catalog import Catalog
from indexes.fair_slots import FairSlots
from indexes.snapshot_build import build_snapshot
from indexes.snapshot_load import current_snapshot_path
from indexes.sql_runner import SqlRunner
from retrieval.errors import RetrievalError
from retrieval.retrievers.sql import SqlLimits, SqlRetriever
from retrieval.types import Principal

HOSTILE = "SELECT count(*) FROM incidents a, incidents b, incidents c, incidents d, incidents e"
SIMPLE = "SELECT count(*) FROM tickets"
LOOPS = 8
PACE_S = 0.02
TIMEOUT_S = 2.0  # the server's default statement time limit
MALLORY = Principal("mallory", ("sre",), frozenset({"query", "sql"}))
OLGA = Principal("olga", ("sre",), frozenset({"query", "sql"}))


class PlainSlots:
    """The slots before: one bounded semaphore; a freed slot goes to whoever wakes first."""

    def __init__(self, slots: int) -> None:
        self.slots = self.per_owner = slots
        self._free = threading.BoundedSemaphore(slots)

    def acquire(self, owner: Hashable, timeout: float | None = None) -> bool:
        return self._free.acquire(timeout=timeout)

    def release(self, owner: Hashable) -> None:
        self._free.release()


def summary(ms: list[float]) -> dict:
    ordered = sorted(ms)
    if not ordered:
        return {"n": 0}
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), "p50": round(at(0.5), 2), "p99": round(at(0.99), 2), "max": round(ordered[-1], 2)}


class Flood:
    """`loops` threads sending the slow statement again and again until stopped; outcomes
    counted. In process, or in a client process of its own (`FloodProcess`)."""

    def __init__(self, send: Callable[[], str], loops: int) -> None:
        self.outcomes: Counter[str] = Counter()
        self._send, self._stop, self._lock = send, threading.Event(), threading.Lock()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(loops)]

    def _loop(self) -> None:
        while not self._stop.is_set():
            outcome = self._send()
            with self._lock:
                self.outcomes[outcome] += 1

    def __enter__(self) -> Flood:
        for t in self._threads:
            t.start()
        time.sleep(1.0)  # every loop's first statement is running or waiting for a slot
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


class FloodProcess:
    """A `Flood` of mallory's statements against the server from a child process, until its
    stdin closes; then it writes its outcomes as JSON."""

    def __init__(self, url: str, key: str, loops: int, nice: int = 0) -> None:
        self.args, self.outcomes, self.nice = [url, key, str(loops)], Counter(), nice

    def __enter__(self) -> FloodProcess:
        self._proc = subprocess.Popen([sys.executable, __file__, "--flood", *self.args], cwd=ROOT,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                      preexec_fn=lambda: os.nice(self.nice))
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "flooding":
            raise RuntimeError("the flood process did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        out, _ = self._proc.communicate(timeout=60)
        self.outcomes = Counter(json.loads(out.strip().splitlines()[-1]))


def http_sender(url: str, key: str, statement: str) -> Callable[[], str]:
    """Sends `statement` with `key`, one keep-alive client per thread; the status as a string."""
    local = threading.local()

    def send() -> str:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"})
        return str(local.client.post("/v1/sql", json={"sql": statement}).status_code)
    return send


def flood_until_stdin_closes(url: str, key: str, loops: str) -> None:
    with Flood(http_sender(url, key, HOSTILE), int(loops)) as flood:
        print("flooding", flush=True)
        sys.stdin.read()
    print(json.dumps(dict(flood.outcomes)))


class Phase:
    """Olga's statements in one condition, over every round: latencies (ms) and outcomes,
    and mallory's outcomes meanwhile."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.outcomes: Counter[str] = Counter()
        self.mallory: Counter[str] = Counter()

    def run(self, simple: Callable[[], str], n: int) -> None:
        """`n` of olga's statements, one every PACE_S."""
        for _ in range(n):
            t0 = time.perf_counter()
            outcome = simple()
            self.ms.append((time.perf_counter() - t0) * 1000)
            self.outcomes[outcome] += 1
            time.sleep(PACE_S)

    def report(self, ok: str) -> dict:
        return {"olga_ms": summary(self.ms), "olga_errors": sum(n for o, n in self.outcomes.items() if o != ok),
                "olga_outcomes": dict(self.outcomes), "mallory_outcomes": dict(self.mallory)}


def served(index: Path, rounds: int, n: int, attacker_nice: int = 0) -> dict:
    server = Server(index, CACHE / "sql-fairness-server")
    simple = http_sender(server.url, server.other, SIMPLE)
    phases = {"idle": Phase(), "one loop": Phase(), f"{LOOPS} loops": Phase()}
    try:
        Phase().run(simple, 20)  # warm-up: connections, the first statement's plan
        for _ in range(rounds):
            phases["idle"].run(simple, n)
            for loops in (1, LOOPS):
                phase = phases["one loop" if loops == 1 else f"{LOOPS} loops"]
                with FloodProcess(server.url, server.attacker, loops, attacker_nice) as flood:
                    phase.run(simple, n)
                phase.mallory += flood.outcomes
    finally:
        server.close()
    return {name: p.report("200") for name, p in phases.items()}


def in_process(index: Path, n: int) -> dict:
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    threads = ThreadPoolExecutor(4)  # statement watchdogs and profile builds, as the runtime gives the route
    out = {}
    try:
        for name, slots in (("fair", FairSlots(2)), ("plain semaphore (before)", PlainSlots(2))):
            runner = SqlRunner(catalog, watchdogs=threads, slots=slots)  # type: ignore[arg-type]
            sql = SqlRetriever(runner, SqlLimits(timeout_s=TIMEOUT_S), builder=threads)

            def run(statement: str, who: Principal, sql: SqlRetriever = sql) -> Callable[[], str]:
                def send() -> str:
                    try:
                        sql.run_statement(statement, who)
                        return "rows"
                    except RetrievalError as e:
                        return e.code
                return send

            idle, flooded = Phase(), Phase()
            try:
                Phase().run(run(SIMPLE, OLGA), 20)
                idle.run(run(SIMPLE, OLGA), n)
                with Flood(run(HOSTILE, MALLORY), LOOPS) as flood:
                    flooded.run(run(SIMPLE, OLGA), n)
                flooded.mallory += flood.outcomes
            finally:
                sql.close()
            out[name] = {"idle": idle.report("rows"), f"{LOOPS} loops": flooded.report("rows")}
    finally:
        threads.shutdown()
        catalog.close()
    return out


def print_phases(title: str, phases: dict, idle: dict) -> None:
    print(title)
    for name, r in phases.items():
        ms = r["olga_ms"]
        print(f"  {name:10} p50 {ms['p50']:7.1f}  p99 {ms['p99']:7.1f}  max {ms['max']:7.1f} ms  "
              f"(p99 / idle p99 {ms['p99'] / idle['olga_ms']['p99']:6.2f}); olga's errors {r['olga_errors']} of "
              f"{ms['n']}; mallory's outcomes {r['mallory_outcomes']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the three phases against the server")
    parser.add_argument("--statements", type=int, default=45, help="olga's statements per server phase and round")
    parser.add_argument("--in-process", type=int, default=30, help="olga's statements per in-process phase")
    parser.add_argument("--attacker-nice", type=int, default=0, help="the flooding process's nice value: a lower "
                        "priority stands in for an attacker on another machine (on one 2-core machine its threads "
                        "otherwise take a core from the server)")
    parser.add_argument("--flood", nargs=3, metavar=("URL", "KEY", "LOOPS"), help=argparse.SUPPRESS)  # its own process
    args = parser.parse_args()
    if args.flood:
        flood_until_stdin_closes(*args.flood)
        return
    index = CACHE / "demo-tables"
    build_snapshot([ROOT / "eval_data" / "demo" / "tables"], index, make_embedder())
    http = served(index, args.rounds, args.statements, args.attacker_nice)
    print_phases("quarry serve, fair slots (olga's latency):", http, http["idle"])
    local = in_process(index, args.in_process)
    for name, r in local.items():
        print_phases(f"in process, {name}:", r, r["idle"])
    write_json("sql_fairness" + (f"-attacker-nice{args.attacker_nice}" if args.attacker_nice else ""),
               {"machine": machine(), "attacker_nice": args.attacker_nice, "loops": LOOPS, "pace_s": PACE_S,
                "timeout_s": TIMEOUT_S, "hostile": HOSTILE, "simple": SIMPLE, "rounds": args.rounds,
                "statements": args.statements, "served": http, "in_process": local})


if __name__ == "__main__":
    main()
