"""Live writes on BEIR SciFact (5,183 abstracts): what a change costs, against a full rebuild.

    .venv/bin/python benchmarks/live_writes.py [--writes 40] [--queries 100]

On a copy of the SciFact index, in-process (the Writer a server uses, no HTTP): the latency
of single puts (new documents, embedded at write time), ACL changes, deletes and 10-document
batches until the write is visible; search latency (bm25, dense, hybrid, k=10) on the base
before any write and on the live view after them (base + delta segment + tombstones), and
test nDCG@10 on both (writes touch only documents no test claim cites, so it moves only
through the collection statistics and the added near-duplicates);
then the baseline, a full rebuild of the same final corpus (vectors reused from the index,
as `quarry ingest` does), and a compaction. Writes benchmarks/results/live_writes.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import random
import shutil
import time

from benchmarks.common import CACHE, DATASETS, build_or_reuse, machine, make_embedder, timed, write_json
from indexes.beir import load_qrels, load_queries
from indexes.corpus import make_document
from indexes.live import Delete, Put, SetAcl, live_documents
from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.metrics import doc_ranking, mean, ndcg_at_k, percentile
from retrieval.search import search
from retrieval.types import Filters, Principal
from routes.service.view import open_view
from routes.service.generations import Generations
from routes.service.writes import Writer

READER = Principal("bench")
ROUTES = ("bm25", "dense", "hybrid")


def _search_figures(generations: Generations, queries: dict[str, str], qrels: dict) -> dict:
    out = {}
    with generations.lease() as served:
        engine = served.engine
        for route in ROUTES:
            engine.embedder.clear_cache()  # every route and pass embeds its queries afresh
            lat, ndcg = [], []
            for qid, rel in qrels.items():
                hits, ms = timed(lambda: search(engine.retrievers, route, queries[qid], READER, 10,  # noqa: B023
                                                Filters(), engine.limits))
                lat.append(ms)
                ndcg.append(ndcg_at_k(doc_ranking(hits), rel, 10))
            out[route] = {"p50_ms": round(percentile(lat, 50), 2), "p95_ms": round(percentile(lat, 95), 2),
                          "ndcg@10": round(mean(ndcg), 4)}
    return out


def _doc(doc_id: str, record: dict):
    """A new document with an existing abstract's text (so it reads like the corpus)."""
    return make_document({"id": doc_id, "title": record.get("title"), "text": record["text"], "acl": ["public"]},
                         None, ("public",))


def _p(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": round(percentile(values, 50), 1), "p95_ms": round(percentile(values, 95), 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=40, help="single puts (and a quarter as many ACL changes and deletes)")
    ap.add_argument("--queries", type=int, default=100, help="test claims to time and score")
    args = ap.parse_args()
    embedder = make_embedder()
    corpus_path = DATASETS / "scifact" / "corpus.jsonl"
    built, _ = build_or_reuse("scifact", [corpus_path], embedder, default_acl=("public",))
    work = CACHE / "live-scifact"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(built, work, ignore=shutil.ignore_patterns("*.lock", "wal.log*", "audit.duckdb*"))
    queries = load_queries(DATASETS / "scifact")
    qrels_all = load_qrels(DATASETS / "scifact", "test")
    qrels = dict(list(qrels_all.items())[: args.queries])
    cited = {d for rel in qrels_all.values() for d in rel}
    records = [json.loads(line) for line in corpus_path.open()]
    uncited = [r for r in records if r["_id"] not in cited]
    rng = random.Random(7)

    generations = Generations(open_view(work, embedder, plugins=False, warm=True), owned=True)
    writer = Writer(work, generations)
    try:
        before = _search_figures(generations, queries, qrels)
        puts, acls, deletes, batches = [], [], [], []
        donors = rng.sample(uncited, args.writes + 10 * 5)
        for i in range(args.writes):  # new documents: an uncited abstract's text under a new id
            doc = _doc(f"live-{i}", donors[i])
            puts.append(timed(lambda: writer.write([Put(doc, "bench")], None))[1])  # noqa: B023
        targets = rng.sample(uncited, 2 * max(1, args.writes // 4))
        for d in targets[: len(targets) // 2]:
            acls.append(timed(lambda: writer.write([SetAcl(d["_id"], ("group:bench-hidden",))], None))[1])  # noqa: B023
        for d in targets[len(targets) // 2 :]:
            deletes.append(timed(lambda: writer.write([Delete(d["_id"])], None))[1])  # noqa: B023
        for b in range(5):
            chosen = donors[args.writes + 10 * b : args.writes + 10 * (b + 1)]
            docs = [_doc(f"batch-{b}-{j}", d) for j, d in enumerate(chosen)]
            batches.append(timed(lambda: writer.write([Put(doc, "bench") for doc in docs], None))[1])  # noqa: B023
        after = _search_figures(generations, queries, qrels)
        with generations.lease() as served:
            live = dict(served.engine.snapshot.manifest["live"])
            final = live_documents(served.engine.base or served.engine.snapshot, served.engine.live)
        # Baseline: what the same change costs as a full rebuild (vectors reused, as `quarry ingest` does).
        src = work.parent / "live-scifact-final"
        src.mkdir(exist_ok=True)
        with (src / "docs.jsonl").open("w") as f:
            for doc, _, _ in final:
                f.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text, "acl": list(doc.acl)}) + "\n")
        rebuild_dir = work.parent / "live-scifact-rebuild"
        shutil.rmtree(rebuild_dir, ignore_errors=True)
        t0 = time.perf_counter()
        build_snapshot([src / "docs.jsonl"], rebuild_dir, embedder, BuildOptions(default_acl=("public",), reuse_from=work))
        rebuild_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        compacted = writer.compact(embedder)
        compact_s = time.perf_counter() - t0
    finally:
        writer.close()
        generations.close()
    payload = {
        "machine": machine(), "corpus": "BEIR SciFact (5,183 abstracts)", "queries": len(qrels),
        "writes": {"put_one": _p(puts), "acl_one": _p(acls), "delete_one": _p(deletes), "batch_of_10": _p(batches)},
        "live_view": live,
        "search_base": before, "search_live": after,
        "baseline_full_rebuild_s": round(rebuild_s, 2), "compaction_s": round(compact_s, 2),
        "compacted": {k: compacted.get(k) for k in ("status", "generation", "counts")},
    }
    w = payload["writes"]
    print(f"writes until visible (ms):  put p50 {w['put_one']['p50_ms']}  p95 {w['put_one']['p95_ms']}"
          f" | acl p50 {w['acl_one']['p50_ms']} | delete p50 {w['delete_one']['p50_ms']}"
          f" | batch of 10 p50 {w['batch_of_10']['p50_ms']}")
    print(f"live view: {live}")
    for route in ROUTES:
        b, a = before[route], after[route]
        print(f"{route:>7}: p50 {b['p50_ms']:>6} -> {a['p50_ms']:>6} ms   p95 {b['p95_ms']:>6} -> {a['p95_ms']:>6} ms   "
              f"nDCG@10 {b['ndcg@10']} -> {a['ndcg@10']}")
    print(f"baseline, full rebuild of the final corpus (vectors reused): {rebuild_s:.1f} s;  compaction: {compact_s:.1f} s")
    write_json("live_writes", payload)


if __name__ == "__main__":
    main()
