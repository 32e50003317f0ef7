"""Answer-level evidence: a model that reads the question against each passage, used twice.

The cheap grader (retrieval/grader.py) sees retrieval scores; none of them reads a question
against a passage, so an on-topic passage that does not answer looks like one that does. An
answer scorer gives P(this passage answers the question) per (question, passage) pair
(Quarry's is a MiniLM cross-encoder, indexes/answer_model.py; anything with `score` fits).

- `AnswerGrader`: hard constraints and named documents exactly as before; the relevance
  decision becomes a logistic combination of the cheap score and the best answer
  probability over the top passages, calibrated into `p_sufficient` and compared with a
  threshold that `quarry tune` picks for a target false-gap rate. A cascade keeps the cost
  down: where the cheap grader is already sure (its calibrated probability outside
  [skip_below, skip_above]) the model is not run. If the model fails, the cheap grade
  stands and the grade says so.
- `AnswerReranker`: rescores the top-N authorized candidates of the chosen route by answer
  probability, with a prior for the retriever's rank.

Both share one `AnswerScores`, whose cache means a passage graded after reranking (or
returned again by a rewrite) is never scored twice for the same question.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from threading import Lock
from typing import Any, Callable, Mapping, Protocol, Sequence

from retrieval.calibration import Calibration, logit, sigmoid
from retrieval.grader import Grade, GraderConfig, grade
from retrieval.lru import Lru
from retrieval.policy import Evidence
from retrieval.types import Hit, Principal

log = logging.getLogger("quarry.answer")


class AnswerScorer(Protocol):
    def score(self, question: str, passages: Sequence[str]) -> Sequence[float]:
        """P(passage answers question) for each passage, in input order."""
        ...


def passage_text(hit: Hit) -> str:
    """A hit as the model reads it: its document's title, then the passage."""
    return f"{hit.title}\n{hit.text}" if hit.title else hit.text


class AnswerScores:
    """Answer probabilities of hits for a question, through a bounded LRU cache.

    Keys are (question, the passage as the model reads it): a score is a function of that
    pair only, so a passage whose text differs by caller (a row under row ACLs, say) is
    scored for each text it has, never served another caller's score. `pairs` counts pairs
    the model actually scored (what a cascade saves shows there).
    """

    def __init__(self, scorer: AnswerScorer, cache_size: int = 4096, cache_bytes: int = 32 << 20) -> None:
        self.scorer = scorer
        self.cache_size = cache_size
        self._cache: Lru[tuple[str, str], float] = Lru(cache_size, cache_bytes, lambda key, _p: len(key[0]) + len(key[1]))
        self._lock = Lock()
        self.pairs = 0
        self.calls = 0

    @property
    def checksum(self) -> str | None:
        """The scorer's model checksum, when it has one: what tuned settings are tied to."""
        value = getattr(self.scorer, "checksum", None)
        return None if value is None else str(value)

    def of(self, question: str, hits: Sequence[Hit]) -> list[float]:
        keys = [(question, passage_text(h)) for h in hits]
        known = {k: p for k in keys if (p := self._cache.get(k)) is not None}
        todo = [i for i, k in enumerate(keys) if k not in known]
        if todo:
            scored = list(self.scorer.score(question, [keys[i][1] for i in todo]))
            if len(scored) != len(todo):
                raise ValueError(f"answer scorer returned {len(scored)} scores for {len(todo)} passages")
            with self._lock:
                self.pairs += len(todo)
                self.calls += 1
            for i, p in zip(todo, scored, strict=True):
                known[keys[i]] = float(p)
                self._cache.put(keys[i], float(p))
        return [known[k] for k in keys]


@dataclass(frozen=True)
class AnswerConfig:
    """How the answer grader decides: fitted by `quarry tune`, or the fit shipped beside the
    model (routes/policies/answer_policy.py `shipped_defaults`); these field defaults are neutral."""

    passages: int = 3  # top passages of the set the model reads
    skip_below: float = 0.0  # cheap p_sufficient below this: a gap without the model
    skip_above: float = 1.0  # cheap p_sufficient above this: sufficient without the model
    bias: float = 0.0
    w_cheap: float = 1.0  # weight of the cheap score's logit
    w_answer: float = 1.0  # weight of the best answer probability's logit
    calibration: Calibration = Calibration()
    threshold: float = 0.5  # on p_sufficient
    target_false_gap: float | None = None  # what `quarry tune` chose the threshold for
    source: str = "defaults"

    def raw(self, cheap: float, answer: float) -> float:
        """The uncalibrated combined score in (0, 1)."""
        return sigmoid(self.bias + self.w_cheap * logit(cheap) + self.w_answer * logit(answer))

    def to_json(self) -> dict[str, Any]:
        return {"passages": self.passages, "skip_below": self.skip_below, "skip_above": self.skip_above,
                "bias": round(self.bias, 6), "w_cheap": round(self.w_cheap, 6), "w_answer": round(self.w_answer, 6),
                "calibration": self.calibration.to_json(), "threshold": round(self.threshold, 6),
                "target_false_gap": self.target_false_gap, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnswerConfig:
        target = data.get("target_false_gap")
        return cls(int(data.get("passages", 3)), float(data.get("skip_below", 0.0)), float(data.get("skip_above", 1.0)),
                   float(data.get("bias", 0.0)), float(data.get("w_cheap", 1.0)), float(data.get("w_answer", 1.0)),
                   Calibration.from_json(data.get("calibration")), float(data.get("threshold", 0.5)),
                   None if target is None else float(target), str(data.get("source", "file")))


class AnswerGrader:
    """The signal grader's hard checks, with the relevance decision read by the answer model."""

    def __init__(self, scores: AnswerScores, cheap: GraderConfig = GraderConfig(),
                 config: AnswerConfig = AnswerConfig()) -> None:
        self.scores = scores
        self.cheap = cheap
        self.config = config

    def answer_probabilities(self, question: str, hits: Sequence[Hit]) -> list[float]:
        """The model's probabilities for the passages it reads (the set's first `passages`)."""
        return self.scores.of(question, hits[: max(1, self.config.passages)])

    def verdict(self, score: float, best: Callable[[], list[float]]) -> tuple[bool, float, dict[str, float]]:
        """(sufficient, p_sufficient, features) from the cheap score, asking `best()` for the
        model's probabilities only inside the cascade band. A model that fails leaves the
        cheap grade standing (its features say so)."""
        cfg = self.config
        cheap_p = self.cheap.calibration(score)
        if cheap_p < cfg.skip_below or cheap_p > cfg.skip_above:
            return cheap_p > cfg.skip_above, cheap_p, {"answer_model": 0.0}
        try:
            probs = best()
        except Exception:  # noqa: BLE001 - a failing model must not fail the question
            log.exception("answer model failed; the cheap grade stands")
            return score >= self.cheap.threshold, cheap_p, {"answer_model": -1.0}
        top = max(probs)
        p = cfg.calibration(cfg.raw(score, top))
        return p >= cfg.threshold, p, {"answer_model": 1.0, "answer_top": top, "answer_first": probs[0]}

    def grade(self, evidence: Evidence) -> Grade:
        hits, question = evidence.hits, evidence.question
        top = list(hits[: self.cheap.link_passages])
        verdict = grade(question, evidence.constraints, hits, self.cheap, evidence.today, rows_sql=evidence.rows_sql,
                        linked=lambda: evidence.linked(top), rescore=evidence.rescore,
                        decide=lambda score, _: self.verdict(score, lambda: self.answer_probabilities(question, hits)))
        used = verdict.features.get("answer_model")
        if used is None:
            return verdict
        source = {1.0: "answer", 0.0: "answer (cascade: cheap grade)"}.get(used, "answer (model failed: cheap grade)")
        return replace(verdict, source=source)


@dataclass(frozen=True)
class RerankConfig:
    top_n: int = 0  # candidates rescored (0: no reranking)
    rank_prior: float = 0.0  # weight of -log(1 + retriever rank) beside the answer logit
    source: str = "defaults"

    def to_json(self) -> dict[str, Any]:
        return {"top_n": self.top_n, "rank_prior": self.rank_prior, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RerankConfig:
        return cls(int(data.get("top_n", 0)), float(data.get("rank_prior", 0.0)), str(data.get("source", "file")))


class AnswerReranker:
    """Rescores every candidate (the route's top `candidates(k)`) by logit(answer probability)
    - rank_prior * log(1 + retriever rank); a rescored hit's score is its answer probability.
    If the model fails, the retriever's order stands."""

    def __init__(self, scores: AnswerScores, config: RerankConfig = RerankConfig()) -> None:
        self.scores = scores
        self.config = config

    def candidates(self, k: int) -> int:
        return max(k, self.config.top_n)

    def rerank(self, question: str, hits: Sequence[Hit], principal: Principal) -> list[Hit]:
        if len(hits) < 2 or self.config.top_n < 2:
            return list(hits)
        try:
            probs = self.scores.of(question, hits)
        except Exception:  # noqa: BLE001 - a failing model must not fail the question
            log.exception("answer model failed; the retriever's order stands")
            return list(hits)
        prior = self.config.rank_prior
        keyed = sorted(range(len(hits)), key=lambda i: (-(logit(probs[i]) - prior * math.log1p(i)), i))
        return [replace(hits[i], score=probs[i]) for i in keyed]
