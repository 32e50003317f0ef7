"""`quarry tune`: fit fusion, router and grader on labeled questions, read through the
loop's own first step, judge the fit on the held-out split (retrieval.keep_rule) and save
it as the index's tuned.json only when it is kept; a refused fit goes to tuned.refused.json,
which nothing loads."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

from retrieval.answer_level import AnswerConfig, AnswerReranker, AnswerScores, RerankConfig
from retrieval.constraints import Constraints
from retrieval.evaluate import Label
from retrieval.fusion import DEFAULT_RRF_K, fuse_hits
from retrieval.grader import GraderConfig, evidence_features, relevance, unmet_constraints
from retrieval.metrics import doc_ranking, mean, ndcg_at_k
from retrieval.retrievers.hybrid import FusionParams
from retrieval.router import features
from retrieval.tune import best_fusion, fit_answer_grader, fit_grader, fit_router
from retrieval.types import Hit, Principal
from routes.service.service import Service
from retrieval.keep_rule import Verdict
from routes.service.tuned import TUNED_CONFIG, TUNED_REFUSED, Policies
from routes.service.settings import Settings

TUNED_BACKUP = TUNED_CONFIG + ".bak"
MIN_TRAIN_QUESTIONS = 50  # below this, tuned parameters mostly fit noise: `tune` warns
# (method, rrf k, bm25 weight): RRF weighs bm25 against dense 1.0; z-score splits 1.0 between them
FUSION_GRID = [("rrf", k, w) for k in (10, 30, 60, 100) for w in (0.6, 0.8, 1.0, 1.25, 1.5)] + \
    [("zscore", DEFAULT_RRF_K, w) for w in (0.3, 0.4, 0.5, 0.6, 0.7)]
DEFAULT_FUSION = ("rrf", DEFAULT_RRF_K, 1.0)


def fusion_params(method: str, rrf_k: int, w: float) -> FusionParams:
    dense = 1.0 if method == "rrf" else round(1.0 - w, 6)
    return FusionParams(rrf_k=rrf_k, depth=100, weights={"bm25": w, "dense": dense}, method=method)


def _fused(b: list[Hit], d: list[Hit], method: str, rrf_k: int, w: float) -> list[Hit]:
    params = fusion_params(method, rrf_k, w)
    return fuse_hits({"bm25": b, "dense": d}, method, rrf_k, params.weights, limit=100)


def _fusion_scores(service: Service, labels: Sequence[Label]) -> dict[tuple[str, int, float], float]:
    ranked = [lb for lb in labels if lb.answerable and lb.relevant]
    lists = []
    for lb in ranked:
        p = lb.principal_obj()
        lists.append((service.candidates(p, "bm25", lb.question, 100),
                      service.candidates(p, "dense", lb.question, 100), lb))
    scores = {}
    for key in FUSION_GRID:
        scores[key] = mean(ndcg_at_k(doc_ranking(_fused(b, d, *key)), {x: 1.0 for x in lb.relevant}, 10)
                           for b, d, lb in lists) if lists else 0.0
    return scores


# (candidates rescored, rank prior); (0, 0.0) is no reranking, which wins ties
RERANK_GRID = [(0, 0.0)] + [(n, prior) for n in (10, 20) for prior in (0.0, 0.5, 1.0, 2.0, 4.0)]


def _rerank_choice(service: Service, labels: Sequence[Label], fusion: tuple[str, int, float], answer: AnswerScores
                   ) -> tuple[RerankConfig, dict[str, Any]]:
    """The answer reranker's candidates and rank prior with the best train nDCG@10 over the
    tuned fusion's top candidates (no reranking when nothing beats it)."""
    ranked = [lb for lb in labels if lb.answerable and lb.relevant]
    depth = max(n for n, _ in RERANK_GRID)
    pools = []
    for lb in ranked:
        p = lb.principal_obj()
        fused = _fused(service.candidates(p, "bm25", lb.question, 100),
                       service.candidates(p, "dense", lb.question, 100), *fusion)
        pools.append((lb, p, fused[:depth]))
    scores: dict[tuple[int, float], float] = {}
    for n, prior in RERANK_GRID:
        reranker = AnswerReranker(answer, RerankConfig(n, prior))
        scores[(n, prior)] = mean(
            ndcg_at_k(doc_ranking(reranker.rerank(lb.question, hits[:n], p) + hits[n:] if n else hits),
                      {x: 1.0 for x in lb.relevant}, 10) for lb, p, hits in pools) if pools else 0.0
    best = max(scores, key=lambda c: (round(scores[c], 4), c[0] == 0, c[1], -c[0]))
    return RerankConfig(best[0], best[1], f"tuned on {len(pools)} questions"), {
        "top_n": best[0], "rank_prior": best[1], "train_ndcg@10": round(scores[best], 4),
        "train_ndcg@10_without": round(scores[(0, 0.0)], 4), "questions": len(pools)}


def question_features(service: Service, question: str, principal: Principal, today: date | None = None
                      ) -> tuple[Constraints, dict[str, float]]:
    """A question's constraints and route features, read by the loop's own first step
    (relative dates against `today`, else the service's date)."""
    read = service.understand(principal, question, today)
    i = read.inputs
    return read.constraints, features(i.question, i.constraints, i.sql_linked, i.term_stats)


def first_attempt_evidence(service: Service, question: str, principal: Principal, k: int = 8, today: date | None = None
                           ) -> tuple[Constraints, list[Hit]]:
    """The passages a question's first attempt is graded on, from a one-attempt run of the
    loop itself (route, retrieval, date order, signals); none when rows answered it."""
    result = service.query(principal, question, k=k, max_attempts=1, deadline_ms=service.limits.max_deadline_ms,
                           today=today, wait_for_tables=True)
    first = next((a for a in result.attempts if not a.rejected), None)
    if first is None or first.rows is not None:
        return result.constraints, []
    return result.constraints, list(first.hits)


def _route_rows(service: Service, labels: Sequence[Label]) -> tuple[list[dict[str, float]], list[str]]:
    labeled = [(lb, lb.route) for lb in labels if lb.route]
    features = [question_features(service, lb.question, lb.principal_obj(), lb.today)[1] for lb, _ in labeled]
    return features, [route for _, route in labeled]


@dataclass
class GradeRows:
    """Each question's first attempt on its routed text retriever: evidence features, whether
    it was sufficient, and (for the answer grader) the question, its top passages and
    whether every constraint was met (an unmet one is a hard gap the model never sees)."""

    rows: list[dict[str, float]] = field(default_factory=list)
    sufficient: list[bool] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    tops: list[list[Hit]] = field(default_factory=list)
    met: list[bool] = field(default_factory=list)


def grade_rows(service: Service, labels: Sequence[Label], sufficient_of: Callable[[Label, list[str]], bool],
               top: int = 3) -> GradeRows:
    out = GradeRows()
    for lb in labels:
        if lb.route == "sql" or lb.answer_rows is not None:
            continue
        if lb.answerable and not lb.relevant:  # no document to tell a sufficient first attempt by (feedback on a gap)
            continue
        constraints, hits = first_attempt_evidence(service, lb.question, lb.principal_obj(), today=lb.today)
        if not hits:
            continue
        out.rows.append(evidence_features(lb.question, hits, constraints))
        out.sufficient.append(sufficient_of(lb, [h.doc_id for h in hits]))
        out.questions.append(lb.question)
        out.tops.append(list(hits[:top]))
        out.met.append(not unmet_constraints(constraints, hits))
    return out


def answer_examples(g: GradeRows, grader: GraderConfig, answer: AnswerScores, passages: int = 3
                    ) -> tuple[list[float], list[float], list[bool]]:
    """(cheap score, best answer probability over the top `passages`, sufficient) of the
    first attempts whose constraints were met: what the answer grader decides on."""
    idx = [i for i, ok in enumerate(g.met) if ok]
    cheap = [relevance(g.rows[i], grader) for i in idx]
    best = [max(answer.of(g.questions[i], g.tops[i][:passages])) for i in idx]
    return cheap, best, [g.sufficient[i] for i in idx]


def _fit_answer(g: GradeRows, grader: GraderConfig, answer: AnswerScores, target: float, seed: int, passages: int
                ) -> tuple[AnswerConfig | None, dict[str, Any]]:
    cheap, best, ys = answer_examples(g, grader, answer, passages)
    if len(set(ys)) < 2:
        return None, {"skipped": "needs both sufficient and insufficient first attempts"}
    config = fit_answer_grader(cheap, best, ys, grader, target_false_gap=target, passages=passages, seed=seed)
    return config, {"train_examples": len(ys), "train_sufficient": sum(ys), "threshold": round(config.threshold, 4),
                    "target_false_gap": target, "cascade": [round(config.skip_below, 4), round(config.skip_above, 4)]}


def fit_policies(service: Service, train: Sequence[Label], seed: int, tune_router: bool = True,
                 grader_service: Service | None = None, sufficient_of: Callable[[Label, list[str]], bool] | None = None,
                 grader_labels: Sequence[Label] | None = None, answer: AnswerScores | None = None,
                 target_false_gap: float = 0.05, answer_passages: int = 3, settings: Settings | None = None,
                 rerank: AnswerScores | None = None) -> tuple[Policies, dict[str, Any]]:
    """Fusion, then router, then grader (each fitted with the previous ones in place), then,
    given the answer model's scores, the answer grader on the same first attempts; given
    `rerank` (the model's scores for the answer reranker), its candidates and rank prior
    first. The first attempts are read through the policies `settings` name (a reranker
    changes them).
    `notes["warnings"]` says when the training set is too small to trust the fits."""
    notes: dict[str, Any] = {}
    if len(train) < MIN_TRAIN_QUESTIONS:
        notes["warnings"] = [f"only {len(train)} training questions (fewer than {MIN_TRAIN_QUESTIONS}): "
                             "the tuned parameters may fit noise; the fit is kept only if the held-out split shows "
                             "it better beyond the noise; label more questions before trusting it"]
    scores = _fusion_scores(service, train)
    method, rrf_k, w = best_fusion(scores)
    fusion = fusion_params(method, rrf_k, w)
    notes["fusion"] = {"method": method, "rrf_k": rrf_k, "bm25_weight": w, "train_ndcg@10": round(scores[(method, rrf_k, w)], 4),
                       "train_ndcg@10_default": round(scores.get(DEFAULT_FUSION, 0.0), 4)}
    current = service.policies
    router = current.router
    if tune_router:
        rows, routes = _route_rows(service, train)
        if rows:
            router = fit_router(rows, routes, seed)
            notes["router_train_examples"] = len(rows)
    policies = Policies(router, current.grader, fusion)
    if rerank is not None:
        chosen, notes["rerank"] = _rerank_choice(service, train, (method, rrf_k, w), rerank)
        policies = replace(policies, rerank=chosen, rerank_model=rerank.checksum)
    reading = settings.model_copy(update={"grader": ""}) if settings is not None else None  # the grade is refitted here
    with (grader_service or service).sibling(policies=policies, settings=reading, answer=answer) as tuned_g:
        suff = sufficient_of or (lambda lb, docs: lb.answerable and bool(set(lb.relevant) & set(docs)))
        g = grade_rows(tuned_g, grader_labels or train, suff, top=answer_passages)
    fit = fit_grader(g.rows, g.sufficient, current.grader, seed)
    notes["grader"] = {"train_examples": len(g.sufficient), "train_sufficient": int(sum(g.sufficient)),
                       "train_balanced_accuracy": round(fit.train_balanced_accuracy, 4), "threshold": fit.config.threshold}
    fitted = replace(policies, grader=fit.config)
    if answer is not None:
        config, notes["answer"] = _fit_answer(g, fit.config, answer, target_false_gap, seed, answer_passages)
        if config is not None:
            fitted = replace(fitted, answer=config, answer_model=answer.checksum)
    return fitted, notes


def _policies_json(policies: Policies, notes: dict[str, Any], seed: int, verdict: Verdict | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "router": policies.router.to_json(), "grader": policies.grader.to_json(),
        "fusion": {"method": policies.fusion.method, "rrf_k": policies.fusion.rrf_k, "depth": policies.fusion.depth,
                   "weights": dict(policies.fusion.weights)},
        "seed": seed, "notes": notes}
    if verdict is not None:
        data["kept"] = verdict.keep
        data["judgement"] = verdict.to_json()
    if policies.answer_model is not None:
        data["answer"] = {"config": policies.answer.to_json(), "model_sha256": policies.answer_model}
    if policies.rerank is not None:
        data["rerank"] = {"config": policies.rerank.to_json(), "model_sha256": policies.rerank_model}
    return data


def _write_atomically(path: Path, data: dict[str, Any]) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
    return path


def save_policies(index_dir: Path, policies: Policies, notes: dict[str, Any], seed: int, verdict: Verdict | None = None
                  ) -> Path:
    """Write tuned.json atomically; serve, query and mcp load it from the index directory.
    A previous tuned.json is kept as tuned.json.bak (copy it back to undo a tuning run).
    A refused `verdict` is never written here: it goes through save_refused."""
    if verdict is not None and not verdict.keep:
        raise ValueError("a refused fit is not saved where serve reads it; use save_refused")
    path = index_dir / TUNED_CONFIG
    if path.is_file():  # tuned.json stays in place until the new one replaces it
        backup = path.with_name(TUNED_BACKUP)
        shutil.copyfile(path, backup.with_suffix(".tmp"))
        os.replace(backup.with_suffix(".tmp"), backup)
    return _write_atomically(path, _policies_json(policies, notes, seed, verdict))


def save_refused(index_dir: Path, policies: Policies, notes: dict[str, Any], seed: int, verdict: Verdict) -> Path:
    """Write a refused fit, marked `"kept": false` with its judgement, to tuned.refused.json
    for reading; tuned.json (what serve loads) is left as it was."""
    return _write_atomically(index_dir / TUNED_REFUSED, _policies_json(policies, notes, seed, verdict))


def split_labels(labels: Sequence[Label]) -> tuple[list[Label], list[Label]]:
    train = [lb for lb in labels if lb.split in (None, "train")]
    test = [lb for lb in labels if lb.split == "test"]
    return train, test
