"""The exact route's DuckDB scan on a built index: the served statement against the per-row
statement (what catalogs written before quarry.document_search run), same process, same rows.

    .venv/bin/python benchmarks/exact_scan.py --index var/bench/scale-remix-static-1000000/index [--questions 100] [--repeat 3]

The questions are the datasets' own (benchmarks/scale_corpus.py `real_questions`, as
`scale.py --corpus real/remix` asks them); only those with a quoted phrase or an identifier
are timed, since only they give the exact route something to scan for. The caller reads
every chunk (the widest scan). Each statement runs `--repeat` times per question, alternating,
and the median per question is kept; the table gives the median over questions and checks
that both statements return the same rows and scores.

Writes benchmarks/results/exact_scan.json (or --out).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa

from benchmarks.common import RESULTS, machine
from benchmarks.scale_corpus import real_questions
from indexes.catalog import Catalog, match_sql
from indexes.snapshot_load import current_snapshot_path
from retrieval.constraints import exact_query, identifiers, quoted_phrases
from retrieval.retrievers.exact import _ranking_terms


def run(catalog: Catalog, sql: str, params: list, rows: np.ndarray) -> tuple[float, list[tuple[int, float]]]:
    cur = catalog.cursor()
    cur.register("quarry_allowed_rows", pa.table({"r": rows}))
    try:
        t0 = time.perf_counter()
        got = cur.execute(sql, params).fetchall()
        return (time.perf_counter() - t0) * 1000, sorted((int(r), round(float(s), 6)) for r, s in got)
    finally:
        cur.unregister("quarry_allowed_rows")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True, help="an index directory (its current snapshot is read)")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "exact_scan.json")
    args = ap.parse_args()
    catalog = Catalog(current_snapshot_path(args.index) / "catalog.duckdb")
    n = catalog.cursor().execute("SELECT count(*) FROM quarry.chunks").fetchall()[0][0]
    rows = np.arange(n, dtype=np.int32)
    asked = [q for q in real_questions(args.questions) if quoted_phrases(q) or identifiers(q)]
    served, per_row, same, matches = [], [], 0, []
    for q in asked:
        spec = exact_query(q)
        terms = [] if spec.regex else _ranking_terms(q)
        new = match_sql(spec.phrases, spec.patterns, terms, True, spec.identifiers)
        old = match_sql(spec.phrases, spec.patterns, terms, False, spec.identifiers)
        a_ms, b_ms = [], []
        for _ in range(args.repeat):
            ms, a = run(catalog, *new, rows)
            a_ms.append(ms)
            ms, b = run(catalog, *old, rows)
            b_ms.append(ms)
        served.append(statistics.median(a_ms))
        per_row.append(statistics.median(b_ms))
        same += a == b
        matches.append(len(a))
        print(f"{served[-1]:8.1f} ms vs {per_row[-1]:8.1f} ms  {len(a):6d} rows  same={a == b}  {q[:70]!r}", flush=True)
    catalog.close()
    out = {"index": str(args.index), "chunks": n, "machine": machine(), "questions": len(asked),
           "served_p50_ms": round(statistics.median(served), 1) if served else None,
           "served_max_ms": round(max(served), 1) if served else None,
           "per_row_p50_ms": round(statistics.median(per_row), 1) if per_row else None,
           "per_row_max_ms": round(max(per_row), 1) if per_row else None,
           "same_rows_and_scores": f"{same}/{len(asked)}", "matched_rows": matches}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k not in ("machine", "matched_rows")}, indent=1))


if __name__ == "__main__":
    main()
