"""Fusion methods against each other on the same candidate lists.

    .venv/bin/python benchmarks/fusion.py [--depths 100,1000]

For every query, BM25 and dense each return their top `depth` chunks once (ACL-free public
corpora); reciprocal-rank fusion (k = 60, equal weights: today's default) and z-score fusion
(bm25 weight w, dense 1 - w) are computed over exactly those lists, so the comparison holds
the candidates fixed. The z-score weight is chosen on SciFact *train* and reported on test;
HotpotQA (not tuned on) reports nDCG@10 and both-gold-paragraphs-in-the-top-8.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import DATASETS, build_or_reuse, machine, make_embedder, write_json  # noqa: E402
from indexes.beir import load_qrels, load_queries  # noqa: E402
from retrieval.fusion import rrf_scores, zscore_scores  # noqa: E402
from retrieval.metrics import all_found, mean, ndcg_at_k  # noqa: E402
from retrieval.types import Filters, Principal  # noqa: E402
from routes.service.view import open_view  # noqa: E402

READER = Principal("bench-reader")
WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)


def candidate_lists(engine, queries: dict[str, str], qids: list[str], depth: int) -> dict[str, dict]:
    out = {}
    for qid in qids:
        out[qid] = {name: engine.retrievers[name].rank(queries[qid], READER.access_scope(), depth, Filters())
                    for name in ("bm25", "dense")}
    return out


def doc_order(fused: dict[int, float], best: dict[int, int], doc_ids) -> list[str]:
    seen: dict[str, None] = {}
    for row in sorted(fused, key=lambda r: (-fused[r], best[r], r)):
        seen.setdefault(doc_ids[row], None)
    return list(seen)


def fuse(lists: dict, method: str, w: float, doc_ids) -> list[str]:
    rows = {name: [int(r) for r in rs] for name, (rs, _) in lists.items()}
    if method == "rrf":
        return doc_order(*rrf_scores(rows, 60), doc_ids)
    scored = {name: (rows[name], [float(s) for s in lists[name][1]]) for name in rows}
    return doc_order(*zscore_scores(scored, {"bm25": w, "dense": 1.0 - w}), doc_ids)


def measure(cands: dict, qrels: dict, method: str, w: float, doc_ids, full_support_k: int | None = None) -> dict:
    ranked = {qid: fuse(lists, method, w, doc_ids) for qid, lists in cands.items()}
    out = {"ndcg@10": round(mean(ndcg_at_k(ranked[q], qrels[q], 10) for q in ranked), 4)}
    if full_support_k:
        supported = (float(all_found(ranked[q], qrels[q], full_support_k)) for q in ranked)
        out[f"full_support@{full_support_k}"] = round(mean(supported), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--depths", default="100,1000")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    embedder = make_embedder().load()
    payload: dict = {"machine": machine(), "weights_tried": WEIGHTS}

    root = DATASETS / "scifact"
    index, _ = build_or_reuse("scifact", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    engine = open_view(index, embedder)
    queries, train, test = load_queries(root), load_qrels(root, "train"), load_qrels(root, "test")
    doc_ids = engine.snapshot.chunks.doc_ids
    payload["scifact"] = {}
    for depth in depths:
        tr = candidate_lists(engine, queries, [q for q in train if q in queries], depth)
        te = candidate_lists(engine, queries, list(test), depth)
        by_w = {w: measure(tr, train, "zscore", w, doc_ids)["ndcg@10"] for w in WEIGHTS}
        best_w = max(WEIGHTS, key=lambda w: (by_w[w], -abs(w - 0.5)))
        row = {"rrf_test": measure(te, test, "rrf", 0.0, doc_ids), "zscore_train_by_weight": by_w, "zscore_weight": best_w,
               "zscore_test": measure(te, test, "zscore", best_w, doc_ids),
               "zscore_test_by_weight": {w: measure(te, test, "zscore", w, doc_ids)["ndcg@10"] for w in WEIGHTS}}
        payload["scifact"][depth] = row
        print(f"SciFact test, depth {depth}: RRF nDCG@10 {row['rrf_test']['ndcg@10']:.4f}; z-score (w={best_w} from train) "
              f"{row['zscore_test']['ndcg@10']:.4f}; by weight {row['zscore_test_by_weight']}")
    engine.close()

    root = DATASETS / "hotpotqa"
    index, _ = build_or_reuse("hotpotqa", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    engine = open_view(index, embedder)
    queries, qrels = load_queries(root), load_qrels(root)
    doc_ids = engine.snapshot.chunks.doc_ids
    payload["hotpotqa"] = {}
    for depth in depths:
        cands = candidate_lists(engine, queries, list(qrels), depth)
        w = payload["scifact"][depth]["zscore_weight"]
        row = {"rrf": measure(cands, qrels, "rrf", 0.0, doc_ids, 8), "zscore_weight_from_scifact": w,
               "zscore": measure(cands, qrels, "zscore", w, doc_ids, 8),
               "zscore_by_weight": {x: measure(cands, qrels, "zscore", x, doc_ids, 8) for x in WEIGHTS}}
        payload["hotpotqa"][depth] = row
        print(f"HotpotQA, depth {depth}: RRF {row['rrf']}; z-score (w={w}) {row['zscore']}")
    engine.close()
    write_json("fusion", payload)


if __name__ == "__main__":
    main()
