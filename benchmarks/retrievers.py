"""Retriever quality and speed on BEIR SciFact (test split), with rank-bm25 as the baseline.

    .venv/bin/python benchmarks/retrievers.py [--rebuild] [--skip-scale]

Prints nDCG@10 and Recall@100 (depth 100) and p50/p95 latency of a k=10 call per retriever
(one query at a time, in-process, query embedding included, cold embedding cache), the ingest
time split into embedding and the rest, and a second run at 100k chunks for latency. Writes
benchmarks/results/retrievers.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import re
import time

import numpy as np

from benchmarks.common import DATASETS, build_or_reuse, machine, make_embedder, timed, write_json
from indexes.beir import load_qrels, load_queries
from retrieval.metrics import doc_ranking, mean, ndcg_at_k, percentile, recall_at_k
from retrieval.types import Filters, Principal
from routes.service.view import open_view

READER = Principal("bench")
DEPTH = 100


def rank_bm25_baseline(corpus_path, queries, qrels, k_latency: int = 10):
    """rank_bm25.BM25Okapi over title + text, lower-cased word tokens without stopwords or stemming."""
    from rank_bm25 import BM25Okapi

    from retrieval.text import STOPWORDS

    def tok(text: str) -> list[str]:
        return [w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS]

    ids, docs = [], []
    for line in corpus_path.open():
        d = json.loads(line)
        ids.append(d["_id"])
        docs.append(tok(f"{d.get('title') or ''} {d['text']}"))
    model = BM25Okapi(docs)
    def top(q: str, k: int) -> list[str]:
        scores = model.get_scores(tok(q))
        best = np.argpartition(-scores, k)[:k]
        return [ids[i] for i in best[np.argsort(-scores[best])]]

    ndcg, rec, lat = [], [], []
    for qid, rel in qrels.items():
        ranked = top(queries[qid], DEPTH)
        ndcg.append(ndcg_at_k(ranked, rel, 10))
        rec.append(recall_at_k(ranked, rel, 100))
        lat.append(timed(lambda: top(queries[qid], k_latency))[1])  # noqa: B023 - timed() calls it at once
    return summary(ndcg, rec, lat)


def summary(ndcg, rec, lat) -> dict:
    return {"ndcg@10": round(mean(ndcg), 4), "recall@100": round(mean(rec), 4),
            "p50_ms": round(percentile(lat, 50), 3), "p95_ms": round(percentile(lat, 95), 3), "queries": len(ndcg)}


def run_retriever(retriever, embedder, queries, qrels, k_latency: int = 10):
    """Quality at depth 100; latency of a k=10 call, one query at a time, with a cold
    query-embedding cache (so hybrid does not reuse the dense run's vectors)."""
    ndcg, rec, lat = [], [], []
    for qid, rel in qrels.items():
        ranked = doc_ranking(retriever.search(queries[qid], READER.access_scope(), DEPTH, Filters()))
        ndcg.append(ndcg_at_k(ranked, rel, 10))
        rec.append(recall_at_k(ranked, rel, 100))
    embedder.clear_cache()
    for qid in qrels:
        lat.append(timed(lambda: retriever.search(queries[qid], READER.access_scope(), k_latency, Filters()))[1])  # noqa: B023 - called at once
    embedder.clear_cache()
    return summary(ndcg, rec, lat)


def scale_run(embedder, n_chunks: int = 100_000) -> dict:
    """Latency at 100k chunks. BM25 indexes synthetic 60-token passages drawn from SciFact's
    vocabulary; the FAISS index holds random unit vectors (search cost does not depend on the
    values), while queries are embedded by the real model. ACL masks are applied as in serving."""
    from indexes.bm25_index import Bm25Index
    from indexes.dense_index import DenseIndex
    from retrieval.access import ChunkTable
    from retrieval.retrievers.bm25 import Bm25Retriever
    from retrieval.retrievers.dense import DenseRetriever
    from retrieval.retrievers.hybrid import HybridRetriever

    rng = np.random.default_rng(7)
    with (DATASETS / "scifact" / "corpus.jsonl").open() as corpus:
        vocab = sorted({w for line in corpus for w in re.findall(r"[a-z]{3,}", json.loads(line)["text"].lower())})
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    perm = rng.permutation(len(vocab))
    words = np.array(vocab)[perm]
    drawn = rng.choice(len(words), size=(n_chunks, 60), p=zipf)
    texts = [" ".join(words[row]) for row in drawn]
    t0 = time.perf_counter()
    bm25 = Bm25Index.build(texts)
    bm25_build = time.perf_counter() - t0
    vecs = rng.standard_normal((n_chunks, embedder.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    dense = DenseIndex.build(vecs)
    acls = [("public",) if i % 2 else ("group:sre",) for i in range(n_chunks)]
    table = ChunkTable([f"s{i}#0" for i in range(n_chunks)], [f"s{i}" for i in range(n_chunks)], texts,
                       np.zeros(n_chunks, np.int64), np.full(n_chunks, 10, np.int64), [None] * n_chunks,
                       ["synthetic"] * n_chunks, [None] * n_chunks, acls)
    b, d = Bm25Retriever(bm25, table), DenseRetriever(dense, embedder.encode_query, table)
    retrievers = {"bm25": b, "dense": d, "hybrid": HybridRetriever(b, d)}
    queries = [" ".join(words[row]) for row in rng.choice(len(words), size=(200, 6), p=zipf)]
    out = {"chunks": n_chunks, "bm25_build_s": round(bm25_build, 2), "dense_index": dense.kind,
           "principal": "group-less reader (half the chunks readable)"}
    for name, r in retrievers.items():
        lat = []
        embedder.clear_cache()
        for q in queries:
            lat.append(timed(lambda: r.search(q, READER.access_scope(), 10, Filters()))[1])  # noqa: B023 - timed() calls it at once
        out[name] = {"p50_ms": round(percentile(lat, 50), 3), "p95_ms": round(percentile(lat, 95), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the SciFact index (measures ingest)")
    ap.add_argument("--skip-scale", action="store_true", help="skip the 100k-chunk latency run")
    args = ap.parse_args()

    root = DATASETS / "scifact"
    queries, qrels = load_queries(root), load_qrels(root, "test")
    embedder = make_embedder().load()
    index, manifest = build_or_reuse("scifact", [root / "corpus.jsonl"], embedder, rebuild=args.rebuild, default_acl=("public",))
    last_build = index / "last_build.json"
    timings = json.loads(last_build.read_text()) if last_build.exists() else manifest["timings_s"]
    embed_s = timings["embed"]
    total_s = timings.get("wall_total", sum(v for k, v in timings.items() if k != "wall_total"))
    ingest = {**timings, "overhead_beyond_embedding": round((total_s - embed_s) / embed_s, 4),
              "chunks": manifest["counts"]["chunks"], "documents": manifest["counts"]["documents"]}

    engine = open_view(index, embedder)
    results = {}
    for name in ("bm25", "dense", "hybrid"):
        r = engine.retrievers[name]
        for qid in list(qrels)[:5]:
            r.search(queries[qid] + " warmup", READER.access_scope(), DEPTH, Filters())
        results[name] = run_retriever(r, embedder, queries, qrels)
    results["rank_bm25_baseline"] = rank_bm25_baseline(root / "corpus.jsonl", queries, qrels)
    ratio = results["rank_bm25_baseline"]["p50_ms"] / results["bm25"]["p50_ms"]

    print(f"SciFact test, {len(qrels)} queries, {manifest['counts']['documents']} docs -> {manifest['counts']['chunks']} chunks")
    print(f"{'retriever':<20}{'nDCG@10':>9}{'R@100':>8}{'p50 ms':>9}{'p95 ms':>9}")
    for name, r in results.items():
        print(f"{name:<20}{r['ndcg@10']:>9.4f}{r['recall@100']:>8.4f}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}")
    print(f"bm25 p50 is {ratio:.1f}x lower than rank-bm25's")
    print(f"ingest: {json.dumps(ingest)}")
    payload = {"dataset": "scifact/test", "machine": machine(), "retrievers": results,
               "bm25_speedup_vs_rank_bm25_p50": round(ratio, 1), "ingest_s": ingest}
    if not args.skip_scale:
        payload["scale_100k"] = scale = scale_run(embedder)
        print(f"100k chunks: {json.dumps(scale)}")
    write_json("retrievers", payload)


if __name__ == "__main__":
    main()
