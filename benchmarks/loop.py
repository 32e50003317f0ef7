"""The agentic loop against single-shot baselines run in the same process.

    .venv/bin/python benchmarks/loop.py [--only hotpotqa,scifact,demo-gaps,scifact-gaps]

- HotpotQA (296 multi-hop questions): share of questions with both supporting paragraphs in
  the returned context at k = 8, loop vs single-shot hybrid (stemmed BM25 + MiniLM, RRF).
- SciFact test: nDCG@10 of the auto-routed loop vs plain hybrid; mean attempts; p50 latency
  of one-attempt queries and of the plain hybrid call.
- Gap detection by ablation: the gold documents of a random half of the questions become
  private to a group nobody asking has; the loop should answer `evidence_gap` for those and
  `answer_context` for the rest (demo answerable questions, and SciFact test claims).
- Loop overhead: time outside retriever calls, per attempt.

Writes benchmarks/results/loop.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import random
import time
from datetime import date

from benchmarks.common import CACHE, DATASETS, ROOT, build_or_reuse, machine, make_embedder, write_json
from indexes.beir import load_qrels, load_queries
from indexes.corpus import load_documents
from indexes.embedder import Embedder
from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.metrics import all_found, doc_ranking, mean, ndcg_at_k, percentile
from retrieval.types import Filters, Principal
from benchmarks.domains import PREVIOUS
from retrieval.grader import GraderConfig
from routes.service.view import open_view
from routes.service.tuned import Policies

READER = Principal("bench")
SEED = 13


def hotpotqa(embedder: Embedder, grader: GraderConfig | None = None) -> dict:
    root = DATASETS / "hotpotqa"
    index, _ = build_or_reuse("hotpotqa", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    engine = open_view(index, embedder, policies=None if grader is None else Policies(grader=grader))
    queries, qrels = load_queries(root), load_qrels(root)
    k = 8
    base_hits, loop_hits, complete_gaps, attempts, strategies = 0, 0, 0, [], {}
    for qid, rel in qrels.items():
        single = doc_ranking(engine.retrievers["hybrid"].search(queries[qid], READER.access_scope(), k, Filters()))
        base_hits += all_found(single, rel, k)
        result = engine.query(queries[qid], READER, k=k, max_attempts=3, deadline_ms=5000)
        ranked = doc_ranking(result.context)
        loop_hits += all_found(ranked, rel, k)  # both gold paragraphs in the context, whatever the status
        complete_gaps += all_found(ranked, rel, k) and result.status == "evidence_gap"
        attempts.append(len(result.attempts))
        for a in result.attempts:
            strategies[a.plan.strategy] = strategies.get(a.plan.strategy, 0) + 1
    engine.close()
    n = len(qrels)
    out = {"questions": n, "k": k, "single_shot_hybrid_full_support": round(base_hits / n, 4),
           "loop_full_support": round(loop_hits / n, 4), "gain_points": round(100 * (loop_hits - base_hits) / n, 1),
           "complete_contexts_called_gaps": complete_gaps,
           "mean_attempts": round(mean(attempts), 3), "strategies": strategies}
    print(f"HotpotQA full support @8: single-shot hybrid {out['single_shot_hybrid_full_support']:.3f}, "
          f"loop {out['loop_full_support']:.3f} ({out['gain_points']:+.1f} points), mean attempts {out['mean_attempts']}; "
          f"contexts holding both gold paragraphs called gaps: {complete_gaps} of {loop_hits}")
    return out


def scifact(embedder: Embedder, grader: GraderConfig | None = None) -> dict:
    root = DATASETS / "scifact"
    index, _ = build_or_reuse("scifact", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    engine = open_view(index, embedder, policies=None if grader is None else Policies(grader=grader))
    queries, qrels = load_queries(root), load_qrels(root, "test")
    k = 10
    base, auto, attempts, one_attempt_ms, hybrid_ms, overhead, routes, strategies = [], [], [], [], [], [], {}, {}
    for qid, rel in qrels.items():
        engine.embedder.clear_cache()
        t0 = time.perf_counter()
        single = engine.retrievers["hybrid"].search(queries[qid], READER.access_scope(), k, Filters())
        hybrid_ms.append((time.perf_counter() - t0) * 1000)
        base.append(ndcg_at_k(doc_ranking(single), rel, 10))
        engine.embedder.clear_cache()
        t0 = time.perf_counter()
        result = engine.query(queries[qid], READER, k=k)
        ms = (time.perf_counter() - t0) * 1000
        auto.append(ndcg_at_k(doc_ranking(result.context), rel, 10))
        attempts.append(len(result.attempts))
        overhead.append(result.loop_overhead_ms / len(result.attempts))
        routes[result.decision.chosen] = routes.get(result.decision.chosen, 0) + 1
        for a in result.attempts:
            strategies[a.plan.strategy] = strategies.get(a.plan.strategy, 0) + 1
        if len(result.attempts) == 1:
            one_attempt_ms.append(ms)
    engine.close()
    out = {"queries": len(qrels), "plain_hybrid_ndcg@10": round(mean(base), 4), "loop_ndcg@10": round(mean(auto), 4),
           "mean_attempts": round(mean(attempts), 3), "routes": routes, "strategies": strategies,
           "one_attempt_p50_ms": round(percentile(one_attempt_ms, 50), 2), "one_attempt_queries": len(one_attempt_ms),
           "plain_hybrid_p50_ms": round(percentile(hybrid_ms, 50), 2),
           "loop_overhead_ms_per_attempt_p50": round(percentile(overhead, 50), 3),
           "loop_overhead_ms_per_attempt_mean": round(mean(overhead), 3)}
    print(f"SciFact nDCG@10: plain hybrid {out['plain_hybrid_ndcg@10']:.4f}, loop {out['loop_ndcg@10']:.4f}; "
          f"mean attempts {out['mean_attempts']}; one-attempt p50 {out['one_attempt_p50_ms']} ms "
          f"(plain hybrid call p50 {out['plain_hybrid_p50_ms']} ms); "
          f"overhead/attempt p50 {out['loop_overhead_ms_per_attempt_p50']} ms")
    return out


def _write_corpus(path: Path, docs: list[dict]) -> None:
    with path.open("w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")


def gap_detection(embedder: Embedder, name: str, docs: list[dict], questions: list[dict], sources_extra: list[Path],
                  today: date | None = None) -> dict:
    """Ablate the gold documents of a random half of the questions; score gap detection."""
    rng = random.Random(SEED)
    order = list(range(len(questions)))
    rng.shuffle(order)
    ablated_ids = set(order[: len(order) // 2])
    hidden = set().union(*(set(questions[i]["relevant"]) for i in ablated_ids))
    kept = [i for i in range(len(questions)) if i not in ablated_ids and not (set(questions[i]["relevant"]) & hidden)]
    work = CACHE / f"{name}-ablation"
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    _write_corpus(corpus, [{**d, "acl": ["group:ablated"]} if d["id"] in hidden else d for d in docs])
    index = work / "index"
    reuse = CACHE / name if (CACHE / name).exists() else None
    build_snapshot([corpus, *sources_extra], index, embedder, BuildOptions(reuse_from=reuse))
    engine = open_view(index, embedder, today=today)
    tp = fn = tn = fp = 0
    reasons: dict[str, int] = {}
    for i in sorted(ablated_ids) + kept:
        q = questions[i]
        principal = Principal(q.get("principal", "bench"), tuple(q.get("groups", ())))
        result = engine.query(q["question"], principal, k=8)
        gap = result.status == "evidence_gap"
        if gap:
            reasons[result.gap.reason] = reasons.get(result.gap.reason, 0) + 1
        if i in ablated_ids:
            tp += gap
            fn += not gap
        else:
            tn += not gap
            fp += gap
    engine.close()
    gap_recall = tp / max(1, tp + fn)
    answer_rate = tn / max(1, tn + fp)
    out = {"ablated": tp + fn, "not_ablated": tn + fp, "gap_on_ablated": round(gap_recall, 4),
           "answer_on_rest": round(answer_rate, 4), "balanced_accuracy": round((gap_recall + answer_rate) / 2, 4),
           "gap_reasons": reasons}
    print(f"{name} gap detection: evidence_gap on {out['gap_on_ablated']:.1%} of {out['ablated']} ablated, "
          f"answer_context on {out['answer_on_rest']:.1%} of {out['not_ablated']} others; "
          f"balanced accuracy {out['balanced_accuracy']:.3f}")
    return out


def demo_gaps(embedder: Embedder) -> dict:
    demo = ROOT / "eval_data" / "demo"
    labeled = [json.loads(line) for line in (demo / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions = [q for q in labeled if q["answerable"] and q["relevant"] and q["route"] != "sql"]
    docs = []
    for ld in load_documents([demo / "docs"]):
        d = ld.doc
        docs.append({"id": d.id, "text": d.text, "title": d.title, "source": d.source,
                     "date": d.date.isoformat() if d.date else None, "metadata": dict(d.metadata), "acl": list(d.acl)})
    build_or_reuse("demo", [demo / "docs", demo / "tables"], embedder)
    return gap_detection(embedder, "demo", docs, questions, [demo / "tables"], today=date(2025, 11, 1))


def scifact_gaps(embedder: Embedder) -> dict:
    root = DATASETS / "scifact"
    build_or_reuse("scifact", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    queries, qrels = load_queries(root), load_qrels(root, "test")
    docs = [{"id": d["_id"], "title": d.get("title") or None, "text": d["text"], "acl": ["public"]}
            for d in map(json.loads, (root / "corpus.jsonl").read_text().splitlines())]
    questions = [{"question": queries[qid], "relevant": sorted(rel)} for qid, rel in qrels.items()]
    return gap_detection(embedder, "scifact", docs, questions, [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="hotpotqa,scifact,demo-gaps,scifact-gaps")
    ap.add_argument("--previous", action="store_true",
                    help="also run hotpotqa and scifact with the previous release's grader (benchmarks/domains.py)")
    args = ap.parse_args()
    wanted = set(args.only.split(","))
    embedder = make_embedder().load()
    results: dict = {"machine": machine()}
    for name, fn in (("hotpotqa", hotpotqa), ("scifact", scifact), ("demo-gaps", demo_gaps), ("scifact-gaps", scifact_gaps)):  # noqa: E501
        if name in wanted:
            results[name] = fn(embedder)
            if args.previous and name in ("hotpotqa", "scifact"):
                print("  (previous grader)")
                results[f"{name}-previous-grader"] = fn(embedder, PREVIOUS)  # type: ignore[operator]
    everything = {"hotpotqa", "scifact", "demo-gaps", "scifact-gaps"}
    write_json("loop" if wanted == everything else f"loop-{'-'.join(sorted(wanted))}", results)


if __name__ == "__main__":
    main()
