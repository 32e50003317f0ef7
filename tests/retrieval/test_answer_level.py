"""The answer grader and reranker over an answer scorer: what they decide, when the model is
asked, and what they may never change. The real model is tested in tests/routes/policies/test_answer_policy.py;
here a scorer with known outputs shows the policies' own logic."""

from __future__ import annotations

from datetime import date

import pytest

from retrieval.answer_level import AnswerConfig, AnswerGrader, AnswerReranker, AnswerScores, RerankConfig
from retrieval.calibration import Calibration
from retrieval.constraints import extract
from retrieval.grader import GraderConfig
from retrieval.policy import Evidence
from retrieval.tune import cascade_band, fit_answer_grader
from retrieval.types import Hit, Principal

TODAY = date(2025, 11, 1)
WEAK = (("bm25", 1.0), ("dense", 0.35), ("qcov", 0.2), ("tcov", 0.2))  # the cheap grader alone calls this a gap
READER = Principal("u")
# The cheap grader these tests combine with the model: fixed here, not the shipped default, so
# what they show does not move when the default is refitted (raw cosine and BM25 weights, the
# identity calibration).
CHEAP = GraderConfig(bias=-3.0, weights={"top_dense": 0.6, "dense_margin": 2.7, "top_coverage": 1.0, "top_bm25": 1.7,
                                         "qcov_dense": 3.5, "literal_share": 3.0}, threshold=0.55,
                    calibration=Calibration())


class TableScorer:
    """P(answers) looked up by passage text: a known answer for every pair; counts its calls."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.asked: list[str] = []

    def score(self, question, passages):
        self.asked.extend(passages)
        return [next((p for k, p in self.table.items() if k in text), 0.01) for text in passages]


def hit(n: int, text: str, signals=WEAK, score: float = 1.0) -> Hit:
    return Hit(f"c{n}", f"d{n}", text, score, ("hybrid",), 0, len(text), signals=signals)


def evidence(question: str, hits: list[Hit]) -> Evidence:
    return Evidence(question, extract(question, TODAY), hits, TODAY)


CONFIG = AnswerConfig(passages=2, bias=0.0, w_cheap=0.0, w_answer=1.0, calibration=Calibration(), threshold=0.5)


def test_the_model_turns_a_weak_cheap_score_into_an_answer_and_shows_its_probability():
    scorer = TableScorer({"payouts run on Monday": 0.93})
    g = AnswerGrader(AnswerScores(scorer), CHEAP, CONFIG).grade(evidence(
        "When do carriers get paid?", [hit(0, "Carrier payouts run on Monday and Friday."), hit(1, "Unrelated.")]))
    assert g.sufficient and g.reason is None and g.source == "answer"
    assert g.p_sufficient == pytest.approx(0.93, abs=1e-6)
    assert g.features["answer_top"] == pytest.approx(0.93) and g.features["answer_model"] == 1.0
    assert g.to_json()["p_sufficient"] == pytest.approx(0.93, abs=1e-4)


def test_on_topic_passages_the_model_reads_as_not_answering_are_a_gap():
    scorer = TableScorer({})
    g = AnswerGrader(AnswerScores(scorer), CHEAP, CONFIG).grade(evidence(
        "What is the guest wifi password?", [hit(0, "The office wifi is managed by IT."), hit(1, "Ask IT.")]))
    assert (g.sufficient, g.reason, g.missing) == (False, "insufficient_evidence", ("relevance",))
    assert g.p_sufficient == pytest.approx(0.01)


def test_only_the_top_passages_are_read():
    scorer = TableScorer({"answer": 0.99})
    hits = [hit(0, "nothing"), hit(1, "nothing either"), hit(2, "the answer")]
    g = AnswerGrader(AnswerScores(scorer), CHEAP, CONFIG).grade(evidence("a question?", hits))
    assert not g.sufficient and scorer.asked == ["nothing", "nothing either"]


def test_unmet_constraints_stay_hard_and_the_model_is_not_asked():
    scorer = TableScorer({"Release": 0.99})
    g = AnswerGrader(AnswerScores(scorer), CHEAP, CONFIG).grade(evidence(
        "Which release fixed INC-2041?", [hit(0, "Release 4.2 fixed the ledger lock timeout.")]))
    assert (g.sufficient, g.reason, g.missing) == (False, "constraint_unmet", ("identifier:INC-2041",))
    assert scorer.asked == [] and g.p_sufficient == 0.0


def test_the_cascade_skips_the_model_where_the_cheap_grade_is_sure():
    strong = (("bm25", 12.0), ("dense", 0.82), ("qcov", 0.9), ("tcov", 0.9))
    scorer = TableScorer({})
    cascade = AnswerConfig(passages=2, w_cheap=0.0, w_answer=1.0, skip_below=0.05, skip_above=0.6)
    grader = AnswerGrader(AnswerScores(scorer), CHEAP, cascade)
    sure = grader.grade(evidence("Why did the ledger outage take four hours?",
                                 [hit(0, "The ledger outage took four hours because the replica lagged.", strong)]))
    assert sure.sufficient and scorer.asked == [] and sure.source.startswith("answer (cascade")
    assert sure.p_sufficient == pytest.approx(sure.score)  # the cheap grade's own (identity) calibration
    unsure = grader.grade(evidence("When do carriers get paid?", [hit(0, "Carrier payouts run weekly.")]))
    assert scorer.asked == ["Carrier payouts run weekly."] and unsure.source == "answer"


def test_the_cheap_score_the_cascade_reads_is_the_part_by_part_score_of_a_multi_part_question():
    strong = (("bm25", 12.0), ("dense", 0.82), ("qcov", 0.9), ("tcov", 0.9))
    question = "The badge reader at the east entrance stopped accepting cards. When do visiting hours end?"
    hits = [hit(0, "The badge reader was reset."), hit(1, "Visiting hours end at 8 pm.")]
    cascade = AnswerConfig(passages=2, w_cheap=0.0, w_answer=1.0, skip_below=0.05, skip_above=0.6)
    scorer = TableScorer({})
    grader = AnswerGrader(AnswerScores(scorer), CHEAP, cascade)
    whole = grader.grade(evidence(question, hits))
    assert not whole.sufficient and "parts" not in whole.features
    by_parts = grader.grade(Evidence(question, extract(question, TODAY), hits, TODAY,
                                     rescore=lambda part: [hit(0, "The badge reader was reset.", strong),
                                                           hit(1, "Visiting hours end at 8 pm.", strong)]))
    assert by_parts.sufficient and by_parts.features["parts"] == 2 and by_parts.source.startswith("answer (cascade")


def test_scores_are_cached_per_question_and_the_cache_is_bounded():
    scorer = TableScorer({"x": 0.7})
    scores = AnswerScores(scorer, cache_size=2)
    hits = [hit(0, "x one"), hit(1, "x two")]
    assert scores.of("q", hits) == [0.7, 0.7] and scores.of("q", hits) == [0.7, 0.7]
    assert scores.pairs == 2 and scores.calls == 1
    scores.of("another question", hits[:1])  # evicts the oldest entry
    scores.of("q", hits)
    assert scores.pairs == 4


def test_the_reranker_orders_by_answer_probability_and_only_reorders():
    scorer = TableScorer({"answers": 0.9, "close": 0.4, "tail": 0.2})
    hits = [hit(0, "off topic", score=3.0), hit(1, "close call", score=2.0), hit(2, "it answers", score=1.0),
            hit(3, "the tail", score=0.5)]
    rr = AnswerReranker(AnswerScores(scorer), RerankConfig(top_n=3))
    assert rr.candidates(2) == 3 and rr.candidates(8) == 8
    out = rr.rerank("q", hits, READER)
    assert [h.chunk_id for h in out] == ["c2", "c1", "c3", "c0"]
    assert [round(h.score, 2) for h in out] == [0.9, 0.4, 0.2, 0.01]  # every returned hit rescored
    assert {h.text for h in out} == {h.text for h in hits}
    # a strong rank prior keeps the retriever's order
    kept = AnswerReranker(AnswerScores(scorer), RerankConfig(top_n=3, rank_prior=100.0)).rerank("q", hits, READER)
    assert [h.chunk_id for h in kept] == ["c0", "c1", "c2", "c3"]


class Broken:
    def score(self, question, passages):
        raise RuntimeError("onnxruntime: bad input")


def test_a_failing_model_leaves_the_cheap_grade_and_the_retrievers_order():
    hits = [hit(0, "Carrier payouts run weekly."), hit(1, "Unrelated.")]
    g = AnswerGrader(AnswerScores(Broken()), CHEAP, CONFIG).grade(evidence("When do carriers get paid?", hits))
    assert g.source == "answer (model failed: cheap grade)" and g.sufficient == (g.score >= CHEAP.threshold)
    assert AnswerReranker(AnswerScores(Broken()), RerankConfig(top_n=5)).rerank("q", hits, READER) == hits


def test_a_passage_whose_text_differs_is_scored_again_under_the_same_id():
    scorer = TableScorer({"count=12": 0.9, "count=15": 0.1})
    scores = AnswerScores(scorer)
    a = Hit("table:t#0", "t", "count=12", 1.0, ("sql",), 0, 8)
    b = Hit("table:t#0", "t", "count=15", 1.0, ("sql",), 0, 8)  # another caller's row under the same position id
    assert scores.of("how many?", [a]) == [0.9] and scores.of("how many?", [b]) == [0.1]


def _examples(seed: int, n: int, cheap_means: tuple[float, float], answer_means: tuple[float, float],
              cheap_sd: float = 0.15) -> tuple[list[float], list[float], list[bool]]:
    """(cheap score, best answer probability, sufficient) drawn around two means per class."""
    import random

    rng = random.Random(seed)
    cheap, answer, y = [], [], []
    for _ in range(n):
        suff = rng.random() < 0.5
        cheap.append(min(0.99, max(0.01, rng.gauss(cheap_means[suff], cheap_sd))))
        answer.append(min(0.99, max(0.01, rng.gauss(answer_means[suff], 0.2))))
        y.append(suff)
    return cheap, answer, y


def test_fitting_meets_its_false_gap_target_on_the_examples_it_saw():
    cheap, answer, y = _examples(5, 400, (0.4, 0.55), (0.2, 0.7))
    config = fit_answer_grader(cheap, answer, y, GraderConfig(), target_false_gap=0.05)
    assert config.w_answer > 0 and config.target_false_gap == 0.05
    p = [config.calibration(config.raw(c, a)) for c, a in zip(cheap, answer, strict=True)]
    false_gaps = sum(q < config.threshold for q, t in zip(p, y, strict=True) if t) / sum(y)
    assert false_gaps <= 0.05
    assert AnswerConfig.from_json(config.to_json()).threshold == pytest.approx(config.threshold, abs=1e-6)


def test_the_cascade_band_trusts_only_sure_regions_of_enough_examples():
    p = [i / 100 for i in range(100)]
    y = [i >= 50 for i in range(100)]  # perfectly ordered: both ends are sure
    assert cascade_band(p, y, tolerance=0.0) == pytest.approx((0.495, 0.495))
    noisy = [i % 2 == 0 for i in range(100)]  # nowhere sure: never skip
    assert cascade_band(p, noisy, tolerance=0.02) == (0.0, 1.0)
    assert cascade_band(p[:30], y[:30], tolerance=0.0) == (0.0, 1.0) or cascade_band(p[:30], y[:30])[1] == 1.0


def test_the_cascade_band_never_cuts_through_tied_scores():
    # 29 sufficient and 1 insufficient at 0.9, 30 insufficient at 0.1
    p = [0.9] * 30 + [0.1] * 30
    y = [True] * 29 + [False] + [False] * 30
    below, above = cascade_band(p, y, tolerance=0.05)
    assert below <= 0.5 and above >= 0.5  # the 0.9 group is never called a gap, the 0.1 group never sufficient
    assert not any(q < below for q, t in zip(p, y, strict=True) if t)


def test_with_a_cascade_the_false_gap_target_holds_for_the_whole_decision():
    cheap, answer, y = _examples(11, 600, (0.35, 0.6), (0.3, 0.65), cheap_sd=0.18)
    config = fit_answer_grader(cheap, answer, y, GraderConfig(), target_false_gap=0.05)
    scorer = TableScorer({})
    grader = AnswerGrader(AnswerScores(scorer), CHEAP, config)
    gaps = [not grader.verdict(c, lambda a=a: [a])[0] for c, a in zip(cheap, answer, strict=True)]
    skipped = sum(v[2]["answer_model"] == 0.0 for v in (grader.verdict(c, lambda: [0.5]) for c in cheap))
    assert skipped > 0 and scorer.asked == []  # the band decides some examples without the model
    assert sum(g for g, t in zip(gaps, y, strict=True) if t) <= 0.05 * sum(y)
