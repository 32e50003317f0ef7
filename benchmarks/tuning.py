"""Tuning, measured on held-out data against the untuned service and plain RRF in the same run.

    .venv/bin/python benchmarks/tuning.py [--only demo,scifact,hotpotqa] [--seed 0]

- demo: fit on the train split of eval_data/demo/questions.jsonl, report the test split.
- SciFact: fit fusion on the train qrels and the grader on train claims with half their gold
  documents hidden; report test nDCG@10 (context of 20 passages) next to plain RRF of
  stemmed BM25 + MiniLM at the same depth, and gap detection on test claims with half their
  gold documents hidden (balanced accuracy).
- HotpotQA (one split only): fit on a seeded half of the questions, report full support at
  k = 8 on the other half.

Nothing is written into the cached indexes: tuned policies are passed in memory.
Writes benchmarks/results/tuning.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import random
from datetime import date

from benchmarks.common import CACHE, DATASETS, ROOT, build_or_reuse, machine, make_embedder, write_json
from indexes.embedder import Embedder
from retrieval.metrics import doc_ranking, mean, ndcg_at_k
from retrieval.types import Filters
from routes.cli.demo import DEMO_SOURCES
from routes.service.view import open_view
from routes.service.tuned import Policies
from routes.eval.evaluation import (READER, ablate, ablated_index, beir_labels, evaluate, fit_policies, gap_accuracy,
                               load_label_file, split_labels, unambiguous)
from routes.service.service import Service

KEYS = ("route_accuracy", "route_accuracy_strict", "gap_precision", "gap_recall", "gap_f1", "leakage", "ndcg@10", "recall@k",
        "mrr", "full_support@k", "sql_exact", "mean_attempts", "latency_p50_ms")


def pick(r: dict) -> dict:
    return {k: r[k] for k in KEYS if r.get(k) is not None}


def demo(embedder: Embedder, seed: int) -> dict:
    index, _ = build_or_reuse("demo", DEMO_SOURCES, embedder)
    today = date(2025, 11, 1)
    labels = load_label_file(ROOT / "eval_data" / "demo" / "questions.jsonl")
    train, test = split_labels(labels)
    base = open_view(index, embedder, today=today, policies=Policies())
    try:
        before = pick(evaluate(Service.serving(base), test, 8))
        policies, notes = fit_policies(Service.serving(base), train, seed)
    finally:
        base.close()
    tuned = open_view(index, embedder, today=today, policies=policies)
    try:
        after = pick(evaluate(Service.serving(tuned), test, 8))
    finally:
        tuned.close()
    print(f"demo test split ({len(test)} questions): route accuracy {before['route_accuracy']} -> {after['route_accuracy']} "
          f"(strict {before['route_accuracy_strict']} -> {after['route_accuracy_strict']}), "
          f"gap F1 {before['gap_f1']} -> {after['gap_f1']}, nDCG@10 {before['ndcg@10']} -> {after['ndcg@10']}, "
          f"leakage {before['leakage']} / {after['leakage']}")
    return {"train": len(train), "test": len(test), "before": before, "after": after, "notes": notes}


def scifact(embedder: Embedder, seed: int) -> dict:
    root = DATASETS / "scifact"
    index, _ = build_or_reuse("scifact", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    train, test = beir_labels(root, "train"), beir_labels(root, "test")
    k = 20
    base = open_view(index, embedder, policies=Policies())
    try:
        before = pick(evaluate(Service.serving(base), test, k))
        reader = READER.access_scope()
        plain_rrf = mean(ndcg_at_k(doc_ranking(base.retrievers["hybrid"].search(lb.question, reader, k, Filters())),
                                   {d: 1.0 for d in lb.relevant}, 10) for lb in test)
        hidden_train, hidden_docs = ablate(train, seed)
        ab = open_view(ablated_index(root, hidden_docs, embedder, CACHE / "scifact-train-ablation-tune", index), embedder)
        try:
            policies, notes = fit_policies(Service.serving(base), train, seed, tune_router=False,
                                           grader_service=Service.serving(ab),
                                           sufficient_of=lambda lb, docs: lb.id not in hidden_train,
                                           grader_labels=unambiguous(train, hidden_train, hidden_docs))
        finally:
            ab.close()
    finally:
        base.close()
    tuned = open_view(index, embedder, policies=policies)
    try:
        after = pick(evaluate(Service.serving(tuned), test, k))
    finally:
        tuned.close()
    hidden_test, hidden_test_docs = ablate(test, seed + 1)
    test_index = ablated_index(root, hidden_test_docs, embedder, CACHE / "scifact-test-ablation-tune", index)
    gaps = {}
    for name, pol in (("before", Policies()), ("after", policies)):
        e = open_view(test_index, embedder, policies=pol)
        try:
            gaps[name] = gap_accuracy(Service.serving(e), unambiguous(test, hidden_test, hidden_test_docs), hidden_test)
        finally:
            e.close()
    print(f"SciFact test: plain RRF nDCG@10 {plain_rrf:.4f}; loop {before['ndcg@10']} -> tuned {after['ndcg@10']}; "
          f"gap balanced accuracy {gaps['before']['balanced_accuracy']} -> {gaps['after']['balanced_accuracy']}")
    return {"k": k, "plain_rrf_ndcg@10": round(plain_rrf, 4), "before": before, "after": after, "gaps": gaps, "notes": notes}


def hotpotqa(embedder: Embedder, seed: int) -> dict:
    root = DATASETS / "hotpotqa"
    index, _ = build_or_reuse("hotpotqa", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    labels = beir_labels(root, "test")
    order = sorted(lb.id for lb in labels)
    random.Random(seed).shuffle(order)
    fit_ids = set(order[: len(order) // 2])
    fit_half = [lb for lb in labels if lb.id in fit_ids]
    held_out = [lb for lb in labels if lb.id not in fit_ids]
    base = open_view(index, embedder, policies=Policies())
    try:
        before = pick(evaluate(Service.serving(base), held_out, 8))
        policies, notes = fit_policies(Service.serving(base), fit_half, seed, tune_router=False,
                                       sufficient_of=lambda lb, docs: set(lb.relevant) <= set(docs))
    finally:
        base.close()
    tuned = open_view(index, embedder, policies=policies)
    try:
        after = pick(evaluate(Service.serving(tuned), held_out, 8))
    finally:
        tuned.close()
    print(f"HotpotQA held-out half ({len(held_out)}): full support@8 {before['full_support@k']} -> {after['full_support@k']}, "
          f"attempts {before['mean_attempts']} -> {after['mean_attempts']}")
    return {"fit": len(fit_half), "held_out": len(held_out), "before": before, "after": after, "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="demo,scifact,hotpotqa")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    embedder = make_embedder().load()
    results: dict = {"machine": machine(), "seed": args.seed}
    for name, fn in (("demo", demo), ("scifact", scifact), ("hotpotqa", hotpotqa)):
        if name in args.only.split(","):
            results[name] = fn(embedder, args.seed)
    write_json("tuning", results)


if __name__ == "__main__":
    main()
