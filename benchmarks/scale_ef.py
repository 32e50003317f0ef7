"""Recall against latency of the HNSW graph's search breadth, on a scale run's index.

    .venv/bin/python benchmarks/scale_ef.py --chunks 1000000 [--ef 128,256,512,1024] [--queries 60]

Needs the index `benchmarks/scale.py --chunks N` built (a graph from 500k chunks). For each
efSearch and the 100% and 10% principals of scale.py: dense p50/p95 (k=10) and recall@10
against an exact float scan of the same principal's rows. Writes
benchmarks/results/scale-ef-<N>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json

import numpy as np

import indexes.dense as dense_module
from benchmarks.common import CACHE, RESULTS, timed
from benchmarks.scale import PRINCIPALS, exact_top, queries
from benchmarks.scale_corpus import StandInEncoder, documents
from indexes.dense import DenseIndex
from indexes.snapshot import current_snapshot_path
from retrieval.metrics import percentile
from retrieval.types import Filters


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--ef", default="128,256,512,1024")
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args()
    from indexes.catalog import Catalog

    path = current_snapshot_path(CACHE / f"scale-{args.chunks}" / "index")
    dense = DenseIndex.load(path / "dense.faiss")
    catalog = Catalog(path / "catalog.duckdb")
    chunks = catalog.chunk_table()
    encoder = StandInEncoder()
    vectors = encoder.encode([f"{d['title']}\n{d['text']}" for d in documents(args.chunks)])
    qs = queries(args.chunks, args.queries)
    out: dict = {"chunks": args.chunks, "dense_index": dense.kind, "encoder": "stand-in", "runs": []}
    for scope in ("100%", "10%"):
        allowed = chunks.mask(PRINCIPALS[scope], Filters())
        want = [exact_top(vectors, encoder.encode_query(q), allowed, 10) for q in qs]
        for ef in (int(x) for x in args.ef.split(",")):
            dense_module.EF_SEARCH, dense_module.EF_MAX = ef, max(ef, dense_module.EF_MAX)
            lat, rec = [], []
            for q, w in zip(qs, want, strict=True):
                (rows, _), ms = timed(lambda: dense.top_k(encoder.encode_query(q), allowed, 10))  # noqa: B023
                lat.append(ms)
                rec.append(len(set(rows.tolist()) & w) / len(w))
            run = {"scope": scope, "ef_search": ef, "p50_ms": round(percentile(lat, 50), 2),
                   "p95_ms": round(percentile(lat, 95), 2), "recall@10": round(float(np.mean(rec)), 4)}
            out["runs"].append(run)
            print(run, flush=True)
    catalog.close()
    path_out = RESULTS / f"scale-ef-{args.chunks}.json"
    path_out.write_text(json.dumps(out, indent=2))
    print(f"wrote {path_out}")


if __name__ == "__main__":
    main()
