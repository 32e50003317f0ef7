"""Hostile SQL against the serving bounds: time, outcome and memory growth per statement.

    .venv/bin/python benchmarks/sql_hostile.py

Each statement runs through the same guard and runner the server uses (time limit 2 s, row
cap 1000, result cap 4 MB, DuckDB memory 1 GB), one at a time, on the demo tables. For each:
the typed outcome, the wall time, and the process's resident memory before, at its peak
while the statement ran (sampled every 5 ms) and after. The baseline is a benign statement
over the same tables in the same run. Writes benchmarks/results/sql_hostile.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import threading
import time

from benchmarks.common import CACHE, ROOT, machine, make_embedder, write_json
from indexes.catalog import Catalog, SqlRunner
from indexes.snapshot import build_snapshot, current_snapshot_path
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
        "SELECT length(string_agg(lpad(a.title, 10000, 'y'), ',')) FROM incidents a, incidents b, incidents c",
    "10 kB values x 1000 rows": "SELECT lpad(a.title, 10000, 'y') FROM incidents a, incidents b",
    "parentheses 42 deep": "SELECT " + "(" * 42 + "1" + ")" * 42,
}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def run(sql: SqlRetriever, statement: str) -> dict:
    peak, done = [rss_mb()], threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak.append(rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    before = rss_mb()
    sampler.start()
    t0 = time.perf_counter()
    try:
        result = sql.run_statement(statement, CALLER)
        outcome = f"rows ({len(result.rows)})"
    except RetrievalError as e:
        outcome = f"{e.code}: {e.message[:70]}"
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    return {"outcome": outcome, "seconds": round(elapsed, 3), "rss_before_mb": round(before, 1),
            "rss_peak_growth_mb": round(max(peak) - before, 1), "rss_after_growth_mb": round(rss_mb() - before, 1)}


def main() -> None:
    index = CACHE / "demo-tables"
    build_snapshot([ROOT / "eval_data" / "demo" / "tables"], index, make_embedder())
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        sql = SqlRetriever(SqlRunner(catalog), SqlLimits(timeout_s=2.0))
        out = {name: run(sql, statement) for name, statement in STATEMENTS.items()}
    finally:
        catalog.close()
    print(f"{'statement':32} {'seconds':>8} {'peak MB':>8} {'after MB':>8}  outcome")
    for name, r in out.items():
        print(f"{name:32} {r['seconds']:8.3f} {r['rss_peak_growth_mb']:8.1f} {r['rss_after_growth_mb']:8.1f}  {r['outcome']}")
    write_json("sql_hostile", {"machine": machine(), "limits": {"timeout_s": 2.0, "max_rows": 1000, "max_bytes": 4_000_000,
                                                                "duckdb_memory": "1GB"}, "statements": out})


if __name__ == "__main__":
    main()
