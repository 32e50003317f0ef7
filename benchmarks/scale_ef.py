"""Recall against latency of the HNSW graph's search breadth, on a scale run's index.

    .venv/bin/python benchmarks/scale_ef.py --chunks 1000000 [--ef 128,256,512,1024] [--queries 60]
        [--corpus zipf|topical|real|remix] [--encoder standin|static|model]

Needs the index of `benchmarks/scale.py` with the same arguments built. When that index is
not a graph (below `dense_graph_from`), graphs are built here from the run's exact vectors,
one per access class as the ingest would build them (`DenseIndex.build` with a graph
threshold of 0), and the served
index (an 8-bit scan) is timed as the baseline. For each efSearch and the 100% and 10%
principals of scale.py: dense p50/p95 (k=10) and recall@10 against an exact float scan of
the same principal's rows. Writes benchmarks/results/<scale run>-ef.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import indexes.dense_index as dense_module
from benchmarks.common import RESULTS, timed
from benchmarks.scale import ENCODERS, PRINCIPALS, exact_top, make_encoder, queries, reference_vectors, root_of
from benchmarks.scale_corpus import KINDS
from indexes.dense_index import DenseIndex
from indexes.snapshot_load import current_snapshot_path
from retrieval.metrics import percentile
from retrieval.types import Filters


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--ef", default="128,256,512,1024")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--corpus", choices=KINDS, default="zipf")
    ap.add_argument("--encoder", choices=ENCODERS, default="standin")
    args = ap.parse_args()
    from indexes.catalog import Catalog

    root = root_of(args.chunks, args.corpus, args.encoder)
    path = current_snapshot_path(root / "index")
    walkers = ThreadPoolExecutor(dense_module.WALKERS)  # as the runtime gives a served index
    dense = DenseIndex.load(path / "dense.faiss", walkers=walkers)
    catalog = Catalog(path / "catalog.duckdb")
    chunks = catalog.chunk_table()
    encoder = make_encoder(args.encoder)
    vectors = reference_vectors(root, root / "index", encoder, args.chunks, args.corpus)
    qs = queries(args.chunks, args.queries, args.corpus)
    out: dict = {"chunks": args.chunks, "corpus": args.corpus, "encoder": encoder.model_id, "served_index": dense.kind,
                 "runs": []}
    served = dense
    if not dense.kind.endswith("+hnsw"):  # one graph per access class, as the ingest builds them
        classes = np.unique(np.asarray([",".join(sorted(a)) for a in chunks.acls]), return_inverse=True)[1]
        (dense, build_ms) = timed(lambda: DenseIndex.build(vectors, hnsw_from=0, classes=classes, walkers=walkers))
        out["graph_built_here_s"] = round(build_ms / 1000, 1)
    for scope in ("100%", "10%"):
        allowed = chunks.mask(PRINCIPALS[scope].access_scope(), Filters())
        want = [exact_top(vectors, encoder.encode_query(q), allowed, 10) for q in qs]
        if served is not dense:
            lat = [timed(lambda: served.top_k(encoder.encode_query(q), allowed, 10))[1] for q in qs]  # noqa: B023
            rec = [len(set(served.top_k(encoder.encode_query(q), allowed, 10)[0].tolist()) & w) / len(w)
                   for q, w in zip(qs, want, strict=True)]
            run = {"scope": scope, "index": served.kind, "p50_ms": round(percentile(lat, 50), 2),
                   "recall@10": round(float(np.mean(rec)), 4)}
            out["runs"].append(run)
            print(run, flush=True)
        for ef in (int(x) for x in args.ef.split(",")):
            dense_module.EF_SEARCH = dense_module.EF_BUDGET = ef  # the same breadth for every walk
            dense_module.EF_MAX = max(ef, dense_module.EF_MAX)
            lat, rec = [], []
            for q, w in zip(qs, want, strict=True):
                (rows, _), ms = timed(lambda: dense.top_k(encoder.encode_query(q), allowed, 10))  # noqa: B023
                lat.append(ms)
                rec.append(len(set(rows.tolist()) & w) / len(w))
            run = {"scope": scope, "index": dense.kind, "ef_search": ef, "p50_ms": round(percentile(lat, 50), 2),
                   "p95_ms": round(percentile(lat, 95), 2), "recall@10": round(float(np.mean(rec)), 4)}
            out["runs"].append(run)
            print(run, flush=True)
    catalog.close()
    walkers.shutdown()
    path_out = RESULTS / f"{root.name}-ef.json"
    path_out.write_text(json.dumps(out, indent=2))
    print(f"wrote {path_out}")


if __name__ == "__main__":
    main()
