"""Tuning, measured on held-out data against the untuned service and plain RRF in the same run.

    .venv/bin/python benchmarks/tuning.py [--only demo,scifact,hotpotqa] [--seed 0]
    .venv/bin/python benchmarks/tuning.py --curve [--counts 10,20,35,50] [--draws 3]
                                          [--domains waterworks,contracts,product,retail]

- demo: fit on the train split of eval_data/demo/questions.jsonl, report the test split.
- SciFact: fit fusion on the train qrels and the grader on train claims with half their gold
  documents hidden; report test nDCG@10 (context of 20 passages) next to plain RRF of
  stemmed BM25 + MiniLM at the same depth, and gap detection on test claims with half their
  gold documents hidden (balanced accuracy).
- HotpotQA (one split only): fit on a seeded half of the questions, report full support at
  k = 8 on the other half.

- learning curve (`--curve`): for each count n and each labeled domain of eval_data/ whose
  questions are all held out (split "test": waterworks, contracts, product, retail), several
  seeded draws of n labels; as a user would, half of them (rounded up) are the train split and
  the other half the held-out split `quarry tune` judges the fit on (retrieval.keep_rule). The
  fit (fusion, router, grader, as `quarry tune` fits them) and the untuned defaults then run on
  the rest of the domain, which neither saw: false gaps (answerable questions called gaps) and
  gaps caught (unanswerable questions called gaps), for the raw fit (what tune saved before
  the keep rule) and for what tune now keeps (the fit if kept, else the defaults). Per draw,
  "worse beyond the noise" means the lower bound of the one-sided 90% paired-bootstrap interval
  of the harm on the rest (1,000 resamples) is above 0. Writes benchmarks/results/tuning_curve.json.

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
from retrieval.evaluate import Label, Record
from retrieval.keep_rule import HeldOut, judge
from retrieval.limits import Limits
from retrieval.metrics import doc_ranking, mean, ndcg_at_k
from retrieval.types import Filters
from routes.cli.demo import DEMO_SOURCES
from routes.service.view import open_view
from routes.service.tuned import Policies
from routes.eval.evaluation import (READER, ablate, ablated_index, beir_labels, evaluate, fit_policies, gap_accuracy,
                               load_label_file, run_labels, split_labels, unambiguous)
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


CURVE_DOMAINS = ("waterworks", "contracts", "product", "retail")
CURVE_TODAY = date(2025, 11, 1)
CURVE_LIMITS = Limits(default_deadline_ms=30000)  # a busy machine must not turn a slow question into a gap


def _gapped(records: list[Record]) -> dict[str, bool]:
    return {r.label.id: r.status == "evidence_gap" for r in records}


def _counts(labels: list[Label], gapped: dict[str, bool]) -> dict[str, int]:
    ans = [lb for lb in labels if lb.answerable]
    una = [lb for lb in labels if not lb.answerable]
    return {"false_gaps": sum(gapped[lb.id] for lb in ans), "answerable": len(ans),
            "gaps_caught": sum(gapped[lb.id] for lb in una), "unanswerable": len(una)}


def _harm_bounds(labels: list[Label], before: dict[str, bool], after: dict[str, bool], seed: int,
                 resamples: int = 1000, confidence: float = 0.90) -> dict[str, dict[str, float]]:
    """Per figure, the harm (after - before as the keep rule counts it) on `labels` and the
    bounds of its one-sided intervals from a paired bootstrap (lower: worse beyond the noise
    when above 0; upper: better beyond the noise when below 0)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for name, answerable, sign in (("false_gaps", True, 1), ("gaps_caught", False, -1)):
        d = np.array([sign * (int(after[lb.id]) - int(before[lb.id])) for lb in labels if lb.answerable == answerable],
                     dtype=np.float64)
        if not len(d):
            out[name] = {"harm": 0.0, "lower": 0.0, "upper": 0.0, "questions": 0}
            continue
        means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
        lower = float(np.quantile(means, 1 - confidence, method="lower"))
        upper = float(np.quantile(means, confidence, method="higher"))
        out[name] = {"harm": round(float(d.mean()), 4), "lower": round(lower, 4), "upper": round(upper, 4), "questions": len(d)}
    return out


def _one_draw(index: Path, embedder: Embedder, labels: list[Label], untuned: dict[str, bool], n: int, draw: int,
              seed: int, domain: str) -> dict:
    rng = random.Random(f"{seed}:{domain}:{n}:{draw}")
    drawn = rng.sample(labels, n)
    train, held = drawn[: n - n // 2], drawn[n - n // 2:]
    chosen = {lb.id for lb in drawn}
    rest = [lb for lb in labels if lb.id not in chosen]
    base = open_view(index, embedder, CURVE_LIMITS, CURVE_TODAY, Policies())
    try:
        policies, _ = fit_policies(Service.serving(base), train, seed)
    finally:
        base.close()
    tuned_view = open_view(index, embedder, CURVE_LIMITS, CURVE_TODAY, policies)
    try:
        tuned = _gapped(run_labels(Service.serving(tuned_view), held + rest, 8))
    finally:
        tuned_view.close()
    verdict = judge([HeldOut(lb.answerable, untuned[lb.id], tuned[lb.id]) for lb in held])
    kept = tuned if verdict.keep else untuned
    return {"n": n, "draw": draw, "train": len(train), "held_out": len(held), "rest": len(rest), "kept": verdict.keep,
            "reason": verdict.reason, "untuned": _counts(rest, untuned), "raw_fit": _counts(rest, tuned),
            "kept_result": _counts(rest, kept), "raw_harm": _harm_bounds(rest, untuned, tuned, seed),
            "kept_harm": _harm_bounds(rest, untuned, kept, seed)}


def _rate(draws: list[dict], which: str, figure: str, of: str) -> float:
    return round(sum(d[which][figure] for d in draws) / max(1, sum(d[which][of] for d in draws)), 3)


def _worse(draws: list[dict], which: str) -> int:
    return sum(any(d[which][f]["lower"] > 0 for f in ("false_gaps", "gaps_caught")) for d in draws)


def learning_curve(embedder: Embedder, seed: int, counts: list[int], draws: int, domains: list[str]) -> dict:
    """Tuned against untuned on the rest of each held-out domain, by label count (see the docstring)."""
    import time

    from benchmarks.domains import sources_of

    runs: list[dict] = []
    for domain in domains:
        folder = ROOT / "eval_data" / domain
        index, _ = build_or_reuse(domain, sources_of(folder), embedder)
        labels = load_label_file(folder / "questions.jsonl")
        base = open_view(index, embedder, CURVE_LIMITS, CURVE_TODAY, Policies())
        try:
            untuned = _gapped(run_labels(Service.serving(base), labels, 8))
        finally:
            base.close()
        for n in counts:
            if n >= len(labels):
                continue
            for draw in range(draws):
                t0 = time.perf_counter()
                run = _one_draw(index, embedder, labels, untuned, n, draw, seed, domain) | {"domain": domain}
                runs.append(run)
                print(f"{domain} n={n} draw {draw}: {'kept' if run['kept'] else 'refused'}; rest {run['rest']}: false gaps "
                      f"{run['untuned']['false_gaps']} -> raw {run['raw_fit']['false_gaps']} / kept "
                      f"{run['kept_result']['false_gaps']} of {run['untuned']['answerable']}, gaps caught "
                      f"{run['untuned']['gaps_caught']} -> raw {run['raw_fit']['gaps_caught']} / kept "
                      f"{run['kept_result']['gaps_caught']} of {run['untuned']['unanswerable']} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    table = []
    for n in counts:
        at = [r for r in runs if r["n"] == n]
        if not at:
            continue
        which = ("untuned", "raw_fit", "kept_result")
        table.append({"n": n, "draws": len(at), "kept": sum(r["kept"] for r in at),
                      "false_gap_rate": {w: _rate(at, w, "false_gaps", "answerable") for w in which},
                      "gap_recall": {w: _rate(at, w, "gaps_caught", "unanswerable") for w in which},
                      "worse_beyond_noise": {"raw_fit": _worse(at, "raw_harm"), "kept_result": _worse(at, "kept_harm")}})
    print("\nlabels | draws | kept | false-gap rate on the rest: untuned / raw fit / kept | gap recall: untuned / raw fit / kept"
          " | draws worse beyond noise: raw fit / kept")
    for row in table:
        f, g, w = row["false_gap_rate"], row["gap_recall"], row["worse_beyond_noise"]
        print(f"{row['n']:>6} | {row['draws']:>5} | {row['kept']:>4} | {f['untuned']:.3f} / {f['raw_fit']:.3f} / "
              f"{f['kept_result']:.3f} | {g['untuned']:.3f} / {g['raw_fit']:.3f} / {g['kept_result']:.3f} | "
              f"{w['raw_fit']} / {w['kept_result']}")
    return {"counts": counts, "draws": draws, "domains": domains, "table": table, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="demo,scifact,hotpotqa")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--curve", action="store_true", help="the learning curve on the held-out domains instead")
    ap.add_argument("--counts", default="10,20,35,50")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--domains", default=",".join(CURVE_DOMAINS))
    args = ap.parse_args()
    embedder = make_embedder().load()
    if args.curve:
        counts = [int(c) for c in args.counts.split(",") if c]
        domains = [d for d in args.domains.split(",") if d]
        write_json("tuning_curve", {"machine": machine(), "seed": args.seed,
                                    **learning_curve(embedder, args.seed, counts, args.draws, domains)})
        return
    results: dict = {"machine": machine(), "seed": args.seed}
    for name, fn in (("demo", demo), ("scifact", scifact), ("hotpotqa", hotpotqa)):
        if name in args.only.split(","):
            results[name] = fn(embedder, args.seed)
    write_json("tuning", results)


if __name__ == "__main__":
    main()
