"""Question-to-SQL accuracy on the labeled demo questions (and the held-out set when present).

    .venv/bin/python benchmarks/sql.py

For each answerable question: exact (result rows match the labeled rows), declined, or
wrong; for each question labeled "decline": declined or not. Writes benchmarks/results/sql.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

from benchmarks.common import CACHE, ROOT, machine, make_embedder, write_json
from indexes.catalog import Catalog
from indexes.sql_runner import SqlRunner
from indexes.snapshot_build import build_snapshot
from indexes.snapshot_load import current_snapshot_path
from retrieval.metrics import percentile
from retrieval.retrievers.sql import SqlRetriever, compare_rows
from retrieval.sql.meaning import ColumnMeaning
from retrieval.sql.translate import Decline
from retrieval.types import Principal

GROUPS = {"alice": ("sre",), "bob": ("finance",), "carol": ("security", "sre"), "dave": ("hr",), "erin": (), "marcus": ("admin",)}


def score(retriever: SqlRetriever, path: Path) -> dict:
    exact = wrong = declined = decline_ok = decline_missed = 0
    failures, latencies = [], []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        principal = Principal(q["principal"], tuple(q.get("groups") or GROUPS.get(q["principal"], ())))
        t0 = time.perf_counter()
        out = retriever.answer(q["question"], principal, date.fromisoformat(q["today"]))
        latencies.append((time.perf_counter() - t0) * 1000)
        if q["decline"]:
            if isinstance(out, Decline):
                decline_ok += 1
            else:
                decline_missed += 1
                failures.append({"id": q["id"], "question": q["question"], "outcome": "answered", "sql": out.sql})
            continue
        if isinstance(out, Decline):
            declined += 1
            failures.append({"id": q["id"], "question": q["question"], "outcome": "declined", "reason": out.reason,
                             "unlinked": list(out.unlinked)})
        elif compare_rows(q["answer_rows"], out.rows, q["ordered"]):
            exact += 1
        else:
            wrong += 1
            failures.append({"id": q["id"], "question": q["question"], "outcome": "wrong", "sql": out.sql})
    answerable = exact + wrong + declined
    return {
        "answerable": answerable, "exact": exact, "declined": declined, "wrong": wrong,
        "exact_rate": round(exact / answerable, 4) if answerable else 0.0,
        "decline_questions": decline_ok + decline_missed, "declined_correctly": decline_ok,
        "latency_p50_ms": round(percentile(latencies, 50), 2), "failures": failures,
    }


def main() -> None:
    index = CACHE / "demo-tables"
    embedder = make_embedder()
    build_snapshot([ROOT / "eval_data" / "demo" / "tables"], index, embedder)
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    # as the service builds it: words link to the columns they mean through the embedding model
    threads = ThreadPoolExecutor(4)  # as the runtime gives the route: statement watchdogs and profile builds
    retriever = SqlRetriever(SqlRunner(catalog, watchdogs=threads), meaning=ColumnMeaning(embedder.load().encode_query),
                             builder=threads)
    results = {"machine": machine()}
    for name in ("sql_questions", "sql_questions_holdout", "sql_questions_holdout2"):
        path = ROOT / "eval_data" / "demo" / f"{name}.jsonl"
        if path.exists():
            r = results[name] = score(retriever, path)
            print(f"{name}: {r['exact']}/{r['answerable']} exact ({r['exact_rate']:.1%}), {r['declined']} declined, "
                  f"{r['wrong']} wrong; {r['declined_correctly']}/{r['decline_questions']} decline-questions declined; "
                  f"p50 {r['latency_p50_ms']} ms")
            for f in r["failures"]:
                print(f"   {f['outcome']:<9} {f['id']} {f['question']}")
    threads.shutdown()
    catalog.close()
    write_json("sql", results)


if __name__ == "__main__":
    main()
