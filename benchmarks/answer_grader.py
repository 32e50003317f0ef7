"""The answer-level grader and reranker against the signal grader and plain hybrid, same run.

    .venv/bin/python benchmarks/answer_grader.py [--only fit,demo,waterworks,scifact,hotpotqa,rerank]

- fit: first attempts (k = 8, signal grader) of demo *train* questions and SciFact *train*
  claims with half their gold documents hidden; the answer grader's combination,
  calibration, threshold (5% false gaps) and cascade band are fitted on them
  (retrieval.tune.fit_answer_grader): these are the shipped defaults
  (routes/policies/answer_policy.py). AUCs of the cheap score and the model on the same examples.
- demo: the test split through the whole loop: gap precision, recall and F1, leakage, for
  the signal grader, the answer grader with and without the cascade.
- waterworks: eval_data/waterworks (written before any threshold was set, never tuned on):
  false-gap rate and gap recall, same graders.
- scifact: test nDCG@10 of plain hybrid, the loop, the loop with the answer reranker;
  ablation balanced accuracy (half the test claims' gold hidden) for both graders; cost:
  one-attempt p50 of each against the plain hybrid call, model ms per passage.
- hotpotqa: k = 8, share of questions whose context holds both gold paragraphs that end as
  gaps, and full support, for plain hybrid, the loop, the loop with the answer grader and
  with the reranker.
- rerank: SciFact, hybrid's top N reordered by the model with a prior for the retriever's
  rank; the prior chosen on train, nDCG@10 on test against hybrid's own order.

Writes benchmarks/results/answer_grader.json (or answer_grader-<parts>.json).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import time
from dataclasses import replace
from datetime import date
from typing import Any, Sequence

from benchmarks.common import CACHE, DATASETS, ROOT, build_or_reuse, machine, make_embedder, write_json
from benchmarks.grader_signals import auc
from indexes.beir import load_qrels, load_queries
from indexes.embedder import Embedder
from retrieval.answer_level import AnswerConfig, AnswerGrader, AnswerReranker, AnswerScores, RerankConfig
from retrieval.evaluate import Label
from retrieval.grader import GraderConfig
from retrieval.metrics import all_found, doc_ranking, mean, ndcg_at_k, percentile
from retrieval.policy import Policy
from retrieval.tune import fit_answer_grader
from retrieval.types import Filters, Principal
from routes.eval.ablation import ablate, ablated_index, gap_accuracy, unambiguous
from indexes.answer_model import default_path
from routes.policies.answer_policy import DEFAULTS_FILE, ModelScorer, shipped_defaults
from routes.eval.beir_eval import beir_labels
from routes.cli.demo import DEMO_SOURCES
from routes.service.view import IndexView, open_view
from routes.service.tuned import Policies
from routes.eval.evaluation import evaluate, load_label_file
from routes.eval.tuning import answer_examples, grade_rows, split_labels
from routes.service.service import Service

TODAY = date(2025, 11, 1)
SEED = 13
READER = Principal("bench")


def load_scores() -> AnswerScores:
    from indexes.answer_model import AnswerModel

    return AnswerScores(ModelScorer(AnswerModel.load()))


def with_grader(engine: IndexView, shared: AnswerScores, config: AnswerConfig | None,
                rerank: RerankConfig | None = None) -> IndexView:
    """The engine with the answer grader (None: the signal grader) and optionally the
    reranker, over a fresh score cache (so no variant is timed on another's cached scores)."""
    scores = AnswerScores(shared.scorer)
    engine.answer = scores
    base = Policies()
    policy = Policy()
    if config is not None:
        policy = replace(policy, grader=AnswerGrader(scores, base.grader, config))
    if rerank is not None:
        policy = replace(policy, reranker=AnswerReranker(scores, rerank))
    return engine.with_policy(policy)


def gap_figures(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = ("gap_precision", "gap_recall", "gap_f1", "leakage", "mean_attempts", "latency_p50_ms")
    return {k: metrics.get(k) for k in keys}


def false_gaps(engine: IndexView, labels: Sequence[Label], k: int = 8) -> dict[str, Any]:
    """False-gap rate on answerable labels and gap recall on unanswerable ones, whole loop."""
    fg = [engine.query(lb.question, lb.principal_obj(), k=k, today=lb.today).status == "evidence_gap"
          for lb in labels if lb.answerable]
    gr = [engine.query(lb.question, lb.principal_obj(), k=k, today=lb.today).status == "evidence_gap"
          for lb in labels if not lb.answerable]
    return {"answerable": len(fg), "unanswerable": len(gr), "false_gap_rate": round(mean(fg), 4),
            "gap_recall": round(mean(gr), 4)}


def part_fit(embedder: Embedder, scores: AnswerScores) -> dict[str, Any]:
    """The answer grader fitted as `quarry tune` fits it (routes/eval/tuning.py), on demo train
    questions and SciFact train claims with half their gold hidden, together."""
    index, _ = build_or_reuse("demo", DEMO_SOURCES, embedder)
    demo = open_view(index, embedder, today=TODAY, policies=Policies())
    train, _ = split_labels(load_label_file(ROOT / "eval_data" / "demo" / "questions.jsonl"))
    found = lambda lb, docs: lb.answerable and bool(set(lb.relevant) & set(docs))  # noqa: E731
    cheap, answer, y = answer_examples(grade_rows(Service.serving(demo), train, found), GraderConfig(), scores)
    demo.close()
    n_demo = len(y)
    root = DATASETS / "scifact"
    sf_train = beir_labels(root, "train")
    hidden_ids, hidden_docs = ablate(sf_train, SEED)
    sf_index = ablated_index(root, hidden_docs, embedder, CACHE / "scifact-train-ablation", reuse_from=_scifact(embedder))
    sf = open_view(sf_index, embedder, policies=Policies())
    more = answer_examples(grade_rows(Service.serving(sf), unambiguous(sf_train, hidden_ids, hidden_docs),
                                      lambda lb, docs: lb.id not in hidden_ids), GraderConfig(), scores)
    sf.close()
    cheap, answer, y = cheap + more[0], answer + more[1], y + more[2]
    config = fit_answer_grader(cheap, answer, y, GraderConfig(), target_false_gap=0.05, seed=SEED)
    p = [config.calibration(config.raw(c, a)) for c, a in zip(cheap, answer, strict=True)]
    grader = AnswerGrader(scores, GraderConfig(), config)
    sweep = {}
    for tol in (0.02, 0.05, 0.1, 0.2, 0.3):
        tried = fit_answer_grader(cheap, answer, y, GraderConfig(), target_false_gap=0.05, seed=SEED, tolerance=tol)
        graded = AnswerGrader(scores, GraderConfig(), tried)
        verdicts = [graded.verdict(c, lambda a=a: [a]) for c, a in zip(cheap, answer, strict=True)]
        sweep[str(tol)] = {"band": [round(tried.skip_below, 4), round(tried.skip_above, 4)],
                           "skip_share": round(mean(v[2]["answer_model"] == 0.0 for v in verdicts), 4),
                           "false_gap_rate": round(mean(not v[0] for v, t in zip(verdicts, y, strict=True) if t), 4),
                           "gap_recall": round(mean(not v[0] for v, t in zip(verdicts, y, strict=True) if not t), 4)}
    skipped = mean(grader.verdict(c, lambda: [0.5])[2]["answer_model"] == 0.0 for c in cheap)
    out = {"examples": len(y), "sufficient": sum(y), "demo_train": n_demo,
           "auc": {"cheap": round(auc(cheap, y), 4), "answer": round(auc(answer, y), 4), "combined": round(auc(p, y), 4)},
           "config": config.to_json(), "cascade_skip_share": round(skipped, 4), "cascade_sweep": sweep}
    print("cascade tolerance sweep (fit set, threshold refitted for 5% false gaps each time):", json.dumps(sweep))
    print(f"fit: {out['examples']} first attempts ({out['sufficient']} sufficient); AUC cheap {out['auc']['cheap']}, "
          f"answer {out['auc']['answer']}, combined {out['auc']['combined']}; threshold {config.threshold:.3f}; "
          f"cascade skips {skipped:.1%} (band {config.skip_below:.3f}..{config.skip_above:.3f})")
    return out


def _scifact(embedder: Embedder) -> Path:
    index, _ = build_or_reuse("scifact", [DATASETS / "scifact" / "corpus.jsonl"], embedder, default_acl=("public",))
    return index


def _graders(config: AnswerConfig) -> list[tuple[str, AnswerConfig | None]]:
    return [("signal", None), ("answer", replace(config, skip_below=0.0, skip_above=1.0)), ("answer+cascade", config)]


def part_demo(embedder: Embedder, scores: AnswerScores, config: AnswerConfig) -> dict[str, Any]:
    index, _ = build_or_reuse("demo", DEMO_SOURCES, embedder)
    _, test = split_labels(load_label_file(ROOT / "eval_data" / "demo" / "questions.jsonl"))
    out = {}
    for name, cfg in _graders(config):
        engine = with_grader(open_view(index, embedder, today=TODAY, policies=Policies()), scores, cfg)
        out[name] = gap_figures(evaluate(Service.serving(engine), test, 8))
        engine.close()
        print(f"demo test ({len(test)}), {name}: {out[name]}")
    return out


def part_waterworks(embedder: Embedder, scores: AnswerScores, config: AnswerConfig) -> dict[str, Any]:
    root = ROOT / "eval_data" / "waterworks"
    index, _ = build_or_reuse("waterworks", [root / "docs"], embedder)
    labels = load_label_file(root / "questions.jsonl")
    out = {}
    for name, cfg in _graders(config):
        engine = with_grader(open_view(index, embedder, policies=Policies()), scores, cfg)
        out[name] = {**false_gaps(engine, labels), **gap_figures(evaluate(Service.serving(engine), labels, 8))}
        engine.close()
        print(f"waterworks ({len(labels)}), {name}: {out[name]}")
    return out


def part_scifact(embedder: Embedder, scores: AnswerScores, config: AnswerConfig, top_n: int) -> dict[str, Any]:
    root = DATASETS / "scifact"
    index = _scifact(embedder)
    queries, qrels = load_queries(root), load_qrels(root, "test")
    out: dict[str, Any] = {}
    variants = [("loop signal", None, None), ("loop answer+cascade", config, None),
                ("loop answer+cascade+rerank", config, RerankConfig(top_n))]
    hybrid_ms: list[float] = []
    base: list[float] = []
    for name, cfg, rerank in variants:
        engine = with_grader(open_view(index, embedder, policies=Policies()), scores, cfg, rerank)
        ndcg, one_ms = [], []
        for qid, rel in qrels.items():
            if name == variants[0][0]:
                engine.embedder.clear_cache()
                t0 = time.perf_counter()
                single = engine.retrievers["hybrid"].search(queries[qid], READER.access_scope(), 10, Filters())
                hybrid_ms.append((time.perf_counter() - t0) * 1000)
                base.append(ndcg_at_k(doc_ranking(single), rel, 10))
            engine.embedder.clear_cache()
            t0 = time.perf_counter()
            result = engine.query(queries[qid], READER, k=10)
            ms = (time.perf_counter() - t0) * 1000
            ndcg.append(ndcg_at_k(doc_ranking(result.context), rel, 10))
            if len(result.attempts) == 1:
                one_ms.append(ms)
        engine.close()
        out[name] = {"ndcg@10": round(mean(ndcg), 4), "one_attempt_p50_ms": round(percentile(one_ms, 50), 2),
                     "one_attempt_queries": len(one_ms),
                     "model_pairs": engine.answer.pairs if engine.answer else 0}
        print(f"scifact {name}: {out[name]}")
    out["plain hybrid"] = {"ndcg@10": round(mean(base), 4), "p50_ms": round(percentile(hybrid_ms, 50), 2)}
    print(f"scifact plain hybrid: {out['plain hybrid']}")
    labels = beir_labels(root, "test")
    hidden_ids, hidden_docs = ablate(labels, SEED)
    ab_index = ablated_index(root, hidden_docs, embedder, CACHE / "scifact-test-ablation", reuse_from=index)
    for name, cfg in _graders(config)[::2]:
        engine = with_grader(open_view(ab_index, embedder, policies=Policies()), scores, cfg)
        out[f"ablation {name}"] = gap_accuracy(Service.serving(engine), unambiguous(labels, hidden_ids, hidden_docs), hidden_ids)
        engine.close()
        print(f"scifact ablation {name}: {out[f'ablation {name}']}")
    return out


PRIORS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def part_sweep(embedder: Embedder, scores: AnswerScores, config: AnswerConfig) -> dict[str, Any]:
    """The whole loop's (false-gap rate, gap recall) at each threshold, for both graders, on
    the demo test split and on waterworks: where each grader's operating curve lies (the
    thresholds are swept after the fact, so no point of it is a tuned figure)."""
    sets = [("demo test", build_or_reuse("demo", DEMO_SOURCES, embedder)[0], TODAY,
             split_labels(load_label_file(ROOT / "eval_data" / "demo" / "questions.jsonl"))[1]),
            ("waterworks", build_or_reuse("waterworks", [ROOT / "eval_data" / "waterworks" / "docs"], embedder)[0], None,
             load_label_file(ROOT / "eval_data" / "waterworks" / "questions.jsonl"))]
    out: dict[str, Any] = {}
    for name, index, today, labels in sets:
        out[name] = {"signal": {}, "answer": {}}
        for t in THRESHOLDS:
            for grader in ("signal", "answer"):
                engine = open_view(index, embedder, today=today, policies=Policies(grader=replace(GraderConfig(), threshold=t))
                                     if grader == "signal" else Policies())
                if grader == "answer":
                    chosen = AnswerGrader(scores, GraderConfig(), replace(config, threshold=t))
                    engine.with_policy(replace(Policy(), grader=chosen))
                out[name][grader][str(t)] = false_gaps(engine, [lb for lb in labels if lb.route != "sql"])
                engine.close()
        for grader in ("signal", "answer"):
            ok = [v["false_gap_rate"] for v in out[name][grader].values() if v["gap_recall"] >= 0.9]
            out[name][f"{grader}_best_false_gap_at_recall_0.9"] = min(ok) if ok else None
        print(f"sweep {name}: " + json.dumps(out[name]))
    return out




def _rerank_ndcg(engine: IndexView, scores: AnswerScores, queries: dict[str, str], qrels: dict[str, dict[str, float]],
                 top_n: int) -> dict[float, float]:
    """nDCG@10 of hybrid's top_n as the answer reranker orders them, per rank prior
    (infinite prior: hybrid's own order)."""
    import math

    per_prior: dict[float, list[float]] = {p: [] for p in (*PRIORS, math.inf)}
    for qid, rel in qrels.items():
        hits = engine.retrievers["hybrid"].search(queries[qid], READER.access_scope(), top_n, Filters())
        for prior in per_prior:
            ranked = hits if prior == math.inf else \
                AnswerReranker(scores, RerankConfig(top_n, prior)).rerank(queries[qid], hits, READER)
            per_prior[prior].append(ndcg_at_k(doc_ranking(ranked), rel, 10))
    return {p: mean(v) for p, v in per_prior.items()}


def part_rerank(embedder: Embedder, scores: AnswerScores, top_n: int) -> dict[str, Any]:
    """The reranker's rank prior chosen on SciFact train, reported on test."""
    import math

    root = DATASETS / "scifact"
    engine = open_view(_scifact(embedder), embedder, policies=Policies())
    queries = load_queries(root)
    train = _rerank_ndcg(engine, scores, queries, load_qrels(root, "train"), top_n)
    test = _rerank_ndcg(engine, scores, queries, load_qrels(root, "test"), top_n)
    engine.close()
    best = max(PRIORS, key=lambda p: (round(train[p], 4), p))
    out = {"top_n": top_n, "train": {str(p): round(v, 4) for p, v in train.items()},
           "test": {str(p): round(v, 4) for p, v in test.items()}, "chosen_prior": best,
           "test_hybrid": round(test[math.inf], 4), "test_reranked": round(test[best], 4)}
    print(f"scifact rerank top {top_n}: prior {best} chosen on train ({train[best]:.4f} vs hybrid "
          f"{train[math.inf]:.4f}); test {test[best]:.4f} vs hybrid {test[math.inf]:.4f}; all test {out['test']}")
    return out


def part_hotpotqa(embedder: Embedder, scores: AnswerScores, config: AnswerConfig, top_n: int) -> dict[str, Any]:
    root = DATASETS / "hotpotqa"
    index, _ = build_or_reuse("hotpotqa", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    queries, qrels = load_queries(root), load_qrels(root)
    k, out = 8, {}
    variants = [("loop signal", None, None), ("loop answer+cascade", config, None),
                ("loop answer+cascade+rerank", config, RerankConfig(top_n))]
    for name, cfg, rerank in variants:
        engine = with_grader(open_view(index, embedder, policies=Policies()), scores, cfg, rerank)
        base = full = gaps_with_gold = with_gold = 0
        for qid, rel in qrels.items():
            if name == variants[0][0]:
                hits = engine.retrievers["hybrid"].search(queries[qid], READER.access_scope(), k, Filters())
                base += all_found(doc_ranking(hits), rel, k)
            result = engine.query(queries[qid], READER, k=k, max_attempts=3, deadline_ms=10000)
            both = all_found(doc_ranking(result.context), rel, k)
            full += both and result.status == "answer_context"
            with_gold += both
            gaps_with_gold += both and result.status == "evidence_gap"
        engine.close()
        n = len(qrels)
        out[name] = {"full_support": round(full / n, 4), "context_holds_both": with_gold,
                     "gap_share_when_both": round(gaps_with_gold / max(1, with_gold), 4)}
        if name == variants[0][0]:
            out["plain hybrid"] = {"full_support": round(base / n, 4)}
            print(f"hotpotqa plain hybrid: {out['plain hybrid']}")
        print(f"hotpotqa {name}: {out[name]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="fit,demo,waterworks,scifact,hotpotqa,rerank")
    ap.add_argument("--top-n", type=int, default=20, help="candidates the reranker rescores")
    ap.add_argument("--save-defaults", action="store_true", help="write the fit as the model's shipped grader defaults")
    args = ap.parse_args()
    wanted = args.only.split(",")
    embedder = make_embedder().load()
    scores = load_scores()
    results: dict[str, Any] = {"machine": machine()}
    config = shipped_defaults(checksum=scores.checksum) or AnswerConfig()
    if "fit" in wanted:
        results["fit"] = part_fit(embedder, scores)
        config = AnswerConfig.from_json(results["fit"]["config"])
        if args.save_defaults:
            target = default_path() / DEFAULTS_FILE
            target.write_text(json.dumps({"written_by": "benchmarks/answer_grader.py --only fit --save-defaults",
                                          "model_sha256": scores.checksum, "cheap_grader": GraderConfig().to_json(),
                                          "fit": {
                                              k: v for k, v in results["fit"].items() if k != "config"},
                                          "config": results["fit"]["config"]}, indent=2) + "\n")
            print(f"wrote {target.relative_to(ROOT)}")
    results["config"] = config.to_json()
    for name, fn in (("demo", part_demo), ("waterworks", part_waterworks)):
        if name in wanted:
            results[name] = fn(embedder, scores, config)
    if "scifact" in wanted:
        results["scifact"] = part_scifact(embedder, scores, config, args.top_n)
    if "hotpotqa" in wanted:
        results["hotpotqa"] = part_hotpotqa(embedder, scores, config, args.top_n)
    if "sweep" in wanted:
        results["sweep"] = part_sweep(embedder, scores, config)
    if "rerank" in wanted:
        results["rerank"] = part_rerank(embedder, scores, args.top_n)
    everything = {"fit", "demo", "waterworks", "scifact", "hotpotqa", "rerank"}
    write_json("answer_grader" if set(wanted) == everything else f"answer_grader-{'-'.join(wanted)}", results)
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=1)[:4000])


if __name__ == "__main__":
    main()
