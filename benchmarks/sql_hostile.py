"""Hostile SQL against the serving bounds: time, outcome and memory growth per statement, and
what other callers see meanwhile.

    .venv/bin/python benchmarks/sql_hostile.py [--generated 200] [--pairs 100]

1. Named statements, one at a time, through the same guard and runner the server uses (time
   limit 2 s, row cap 1000, result cap 4 MB, the SQL route's own 128 MB database): the typed
   outcome, the wall time, and the process's resident memory growth at its peak (sampled every
   5 ms) and after. The baseline is a benign statement over the same tables in the same run.
2. A real `quarry serve` (a child process) over the demo tables, sent `--generated`
   statements from benchmarks/hostile_sql.py (nestings of string, regex, list and aggregate
   functions over self-joins, each under 300 characters) one at a time: the status, the
   seconds, and the server's peak resident growth (sampled from /proc every 5 ms).
3. The same statements two at a time (`--pairs` pairs) while another client polls `/healthz`
   every 20 ms: its latency (the baseline: the same polling with the server idle).
4. The two statements of the security review, each sent again and again by two clients for
   10 s, while a third caller (another key) sends a simple statement every 100 ms.

Writes benchmarks/results/sql_hostile.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import socket
import statistics
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from benchmarks.common import CACHE, ROOT, machine, make_embedder, write_json
from benchmarks.hostile_sql import Peak, Schema, hostile_statements, rss_mb
from indexes.catalog import Catalog
from indexes.snapshot_build import build_snapshot
from indexes.snapshot_load import current_snapshot_path
from indexes.sql_runner import SqlRunner
from retrieval.errors import RetrievalError
from retrieval.retrievers.sql import SqlLimits, SqlRetriever
from retrieval.types import Principal

CALLER = Principal("alice", ("sre",), frozenset({"query", "sql"}))
STATEMENTS = {
    "baseline: grouped count": "SELECT severity, count(*), avg(resolution_hours) FROM incidents GROUP BY 1",
    "rpad to 1e9 characters": "SELECT length(rpad('x', 1000000000, 'y'))",
    "lpad of every title to 2e9": "SELECT length(lpad(title, 2000000000, 'y')) FROM incidents",
    "repeat 1e9": "SELECT repeat('x', 1000000000)",
    "printf width 1e9": "SELECT printf('%1000000000d', 1)",
    "five-way cross join": "SELECT count(*) FROM incidents a, incidents b, incidents c, incidents d, incidents e",
    "string_agg over a cross join":
        "SELECT length(string_agg(lpad(a.title, 4000, 'y'), ',')) FROM incidents a, incidents b, incidents c",
    "4 kB values x 1000 rows": "SELECT lpad(a.title, 4000, 'y') FROM incidents a, incidents b",
    "parentheses 42 deep": "SELECT " + "(" * 42 + "1" + ")" * 42,
}
# The security review's two: regexp_replace nested twice, and a list of 6.25M elements (its
# `assets` table was 50 rows; tickets has 120).
REPORTED = {
    "regexp_replace nested twice": "SELECT max(length(regexp_replace(regexp_replace(title, '', title, 'g'), '', "
                                   "regexp_replace(title, '', title, 'g'), 'g'))) FROM incidents",
    "array_agg over a 4-way self-join": "SELECT array_agg(a.cost_usd) FROM tickets a, tickets b, tickets c, tickets d",
}
SCHEMA = Schema("incidents", ("title", "service", "team"), "resolution_hours")
SIMPLE = "SELECT count(*) FROM tickets"


def in_process(index: Path) -> dict:
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    threads = ThreadPoolExecutor(4)  # as the runtime gives the route: statement watchdogs and profile builds
    sql = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(timeout_s=2.0), builder=threads)
    out = {}
    try:
        for name, statement in {**STATEMENTS, **REPORTED}.items():
            with Peak() as peak:
                t0 = time.perf_counter()
                try:
                    outcome = f"rows ({len(sql.run_statement(statement, CALLER).rows)})"
                except RetrievalError as e:
                    outcome = f"{e.code}: {e.message[:70]}"
                elapsed = time.perf_counter() - t0
            out[name] = {"outcome": outcome, "seconds": round(elapsed, 3), "rss_peak_growth_mb": round(peak.growth, 1),
                         "rss_after_growth_mb": round(rss_mb() - peak.before, 1)}
    finally:
        sql.close()
        threads.shutdown()
        catalog.close()
    return out


class Server:
    """`quarry serve` in a child process, with a key for the attacker and one for another caller."""

    def __init__(self, index: Path, work: Path) -> None:
        from auth.keys import KeyStore

        store = KeyStore(work / "keys.json")
        self.attacker = store.add("mallory", ["sre"], ["query", "sql"])[0]
        self.other = store.add("olga", ["sre"], ["query", "sql"])[0]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "QUARRY_RATE_PER_SECOND": "1000", "QUARRY_BURST": "1000", "QUARRY_RELOAD_INTERVAL_S": "0"}
        self.proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "serve", "--index", str(index), "--keys",
                                      str(work / "keys.json"), "--port", str(self.port)], cwd=ROOT, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)

    def sql(self, statement: str, key: str | None = None) -> tuple[int, float]:
        t0 = time.perf_counter()
        r = httpx.post(self.url + "/v1/sql", json={"sql": statement}, timeout=60,
                       headers={"Authorization": f"Bearer {key or self.attacker}"})
        return r.status_code, time.perf_counter() - t0

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Poller:
    """Another client asking `/healthz` every 20 ms; latencies in ms."""

    def __init__(self, url: str) -> None:
        self.url, self.latencies, self._done = url, [], threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._done.is_set():
                t0 = time.perf_counter()
                client.get(self.url + "/healthz")
                self.latencies.append((time.perf_counter() - t0) * 1000)
                self._done.wait(0.02)

    def __enter__(self) -> Poller:
        self._thread.start()
        while not self.latencies:  # polling has begun
            time.sleep(0.001)
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"n": len(values), "p50": round(statistics.median(ordered), 1),
            "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1), "max": round(ordered[-1], 1)}


def served(index: Path, generated: int, pairs: int) -> dict:
    statements = hostile_statements(generated, SCHEMA)
    server = Server(index, CACHE / "sql-hostile-server")
    pid = str(server.proc.pid)
    try:
        with Poller(server.url) as idle:
            time.sleep(3)
        one_at_a_time = []
        for statement in statements:
            with Peak(pid) as peak:
                status, seconds = server.sql(statement)
            one_at_a_time.append({"statement": statement, "status": status, "seconds": round(seconds, 3),
                                  "rss_peak_growth_mb": round(peak.growth, 1)})
        two_at_a_time = []
        with ThreadPoolExecutor(2) as pool:
            for i in range(min(pairs, len(statements) // 2)):
                with Poller(server.url) as poll:
                    results = list(pool.map(server.sql, statements[2 * i : 2 * i + 2]))
                two_at_a_time.append({"statuses": [s for s, _ in results], "seconds": [round(t, 3) for _, t in results],
                                      "healthz_max_ms": round(max(poll.latencies), 1), "healthz_ms": poll.latencies})
        reported = storm(server)
    finally:
        server.close()
    healthz = [x for p in two_at_a_time for x in p.pop("healthz_ms")]
    return {
        "statements": one_at_a_time,
        "statuses": dict(Counter(r["status"] for r in one_at_a_time)),
        "seconds_max": max(r["seconds"] for r in one_at_a_time),
        "rss_peak_growth_mb_max": max(r["rss_peak_growth_mb"] for r in one_at_a_time),
        "pairs": two_at_a_time,
        "pair_seconds_max": max(t for p in two_at_a_time for t in p["seconds"]),
        "healthz_idle_ms": summary(idle.latencies),
        "healthz_during_pairs_ms": summary(healthz),
        "reported": reported,
    }


def storm(server: Server, seconds: float = 10.0) -> dict:
    """The reported statements again and again from two clients; another key's simple SQL meanwhile."""
    stop = time.monotonic() + seconds
    hostile: dict[str, list[tuple[int, float]]] = {name: [] for name in REPORTED}
    simple: list[tuple[int, float]] = []

    def attack(name: str) -> None:
        while time.monotonic() < stop:
            hostile[name].append(server.sql(REPORTED[name]))

    def other() -> None:
        while time.monotonic() < stop:
            simple.append(server.sql(SIMPLE, server.other))
            time.sleep(0.1)

    threads = [threading.Thread(target=attack, args=(n,)) for n in REPORTED] + [threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"hostile": {n: {"statuses": dict(Counter(s for s, _ in r)), "seconds_max": round(max(t for _, t in r), 3)}
                        for n, r in hostile.items()},
            "simple": {"statuses": dict(Counter(s for s, _ in simple)), "seconds": summary([t * 1000 for _, t in simple])}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generated", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=100)
    args = parser.parse_args()
    index = CACHE / "demo-tables"
    build_snapshot([ROOT / "eval_data" / "demo" / "tables"], index, make_embedder())
    named = in_process(index)
    print(f"{'statement':34} {'seconds':>8} {'peak MB':>8} {'after MB':>8}  outcome")
    for name, r in named.items():
        print(f"{name:34} {r['seconds']:8.3f} {r['rss_peak_growth_mb']:8.1f} {r['rss_after_growth_mb']:8.1f}  {r['outcome']}")
    out = served(index, args.generated, args.pairs)
    print(f"\n{args.generated} generated statements, one at a time: statuses {out['statuses']}, "
          f"slowest {out['seconds_max']:.2f} s, largest server growth {out['rss_peak_growth_mb_max']:.1f} MB")
    print(f"two at a time ({len(out['pairs'])} pairs): slowest {out['pair_seconds_max']:.2f} s; /healthz "
          f"{out['healthz_during_pairs_ms']} ms (idle server: {out['healthz_idle_ms']} ms)")
    for name, r in out["reported"]["hostile"].items():
        print(f"reported, sent for 10 s by its own client: {name}: {r}")
    print(f"another key's simple SQL meanwhile: {out['reported']['simple']}")
    write_json("sql_hostile", {"machine": machine(), "limits": {"timeout_s": 2.0, "max_rows": 1000, "max_bytes": 4_000_000,
                                                                "sql_memory_mb": 128, "value_bytes": 16384},
                               "named": named, "served": out})


if __name__ == "__main__":
    main()
