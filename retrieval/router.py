"""Route scoring: which retriever fits a question, from its surface features.

A linear model per route over a small, documented feature vector; the weights live in a
JSON config (defaults below are hand-set; `quarry tune` fits them on labeled questions).
Features read the question, its constraints and term statistics counted over the chunks
the caller may read (never retrieved text, never statistics of forbidden chunks), so the
route cannot depend on documents the caller may not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from retrieval.constraints import Constraints, is_strong_identifier
from retrieval.registry import ROUTES
from retrieval.text import STOPWORDS, words

# Hybrid is the default route for text questions: it fuses bm25 and dense, so it answers a
# question labeled with either (route accuracy counts it so). The single-retriever routes
# stay reachable: the defaults send short keyword lists to bm25, a router fitted by `quarry
# tune` chooses bm25 or dense wherever the labels prefer them, and `search` takes any by name.
FEATURES = (
    "identifier", "weak_identifier", "phrase", "regex", "sql_link", "aggregate_cue", "question_word", "short_keywords",
    "long_question", "multi_part", "entity", "date", "n_terms", "proper_noun", "rare_share", "known_share",
)
_PROPER = re.compile(r"(?<=[\w,;:] )[A-Z][a-z]+")
_QUESTION = re.compile(
    r"^\s*(who|whom|whose|what|which|when|where|why|how|is|are|was|were|do|does|did|can|could|should|will|i|we|my|our)\b", re.I)
_AGG = re.compile(
    r"\b(how many|count|number of|average|mean|total|sum|per|by each|broken down|top \d+|most|fewest|maximum|minimum"
    r"|longest|shortest)\b", re.I)
_MULTI = re.compile(r"\b(and|both|compare|compared|versus|vs\.?|or|than|whereas|while|either|neither)\b", re.I)


def features(question: str, constraints: Constraints, sql_linked: bool,
             term_stats: tuple[int, int, int] | None = None) -> dict[str, float]:
    """The route features of a question (all in [0, 1]). `term_stats` (terms, found in a
    readable chunk, rare among readable chunks) comes from the caller's own access scope."""
    ws = words(question)
    content = [w for w in ws if w not in STOPWORDS]
    is_question = bool(_QUESTION.search(question)) or question.strip().endswith("?")
    q = question.strip()
    return {
        "identifier": 1.0 if any(is_strong_identifier(i) for i in constraints.identifiers) else 0.0,
        "weak_identifier": 1.0 if any(not is_strong_identifier(i) for i in constraints.identifiers) else 0.0,
        "phrase": 1.0 if constraints.phrases else 0.0,
        "regex": 1.0 if len(q) > 2 and q.startswith("/") and q.endswith("/") else 0.0,
        "sql_link": 1.0 if sql_linked else 0.0,
        "aggregate_cue": 1.0 if _AGG.search(question) else 0.0,
        "question_word": 1.0 if is_question else 0.0,
        # a keyword list: short, not a question, not a sentence (no closing period)
        "short_keywords": 1.0 if len(ws) <= 6 and not is_question and not q.endswith(".") else 0.0,
        "long_question": min(1.0, max(0.0, (len(ws) - 6) / 14)),
        "multi_part": 1.0 if _MULTI.search(question) and is_question else 0.0,
        "entity": 1.0 if constraints.entities else 0.0,
        "date": 1.0 if constraints.dates else 0.0,
        "n_terms": min(1.0, len(content) / 12),
        "proper_noun": 1.0 if _PROPER.search(question) else 0.0,
        "rare_share": term_stats[2] / term_stats[0] if term_stats and term_stats[0] else 0.0,
        "known_share": term_stats[1] / term_stats[0] if term_stats and term_stats[0] else 0.0,
    }


@dataclass(frozen=True)
class RouterConfig:
    """Per-route bias and feature weights; score = bias + sum(weight * feature)."""

    # Hand-set defaults: hybrid unless a strong cue says otherwise (it fuses bm25 and dense and
    # is the best single route on SciFact); `quarry tune` refits these on labeled questions.
    bias: Mapping[str, float] = field(
        default_factory=lambda: {"exact": -1.0, "bm25": 0.0, "dense": 0.0, "hybrid": 1.0, "sql": -2.0})
    weights: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: {
        "exact": {"identifier": 3.0, "phrase": 3.0, "regex": 6.0, "sql_link": -1.0, "multi_part": -0.5, "long_question": -2.5},
        "bm25": {"short_keywords": 1.2, "question_word": -0.5, "identifier": 0.5, "weak_identifier": 0.3},
        "dense": {"question_word": 0.3, "long_question": 0.3, "identifier": -1.0, "entity": -0.3},
        "hybrid": {"multi_part": 0.3, "entity": 0.2},
        "sql": {"sql_link": 4.0, "aggregate_cue": 1.0},
    })
    source: str = "defaults"

    def to_json(self) -> dict[str, Any]:
        return {"bias": dict(self.bias), "weights": {r: dict(w) for r, w in self.weights.items()}, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouterConfig:
        return cls(dict(data["bias"]), {r: dict(w) for r, w in data["weights"].items()}, data.get("source", "file"))


@dataclass(frozen=True)
class RouteDecision:
    chosen: str
    scores: dict[str, float]
    ranked: tuple[str, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "scores": {k: round(v, 4) for k, v in self.scores.items()}, "reason": self.reason}


def route(feats: Mapping[str, float], config: RouterConfig, available: Sequence[str]) -> RouteDecision:
    """Score every available route; ties go to the order of ROUTES (exact before hybrid)."""
    scores = {}
    for r in (r for r in ROUTES if r in available):
        w = config.weights.get(r, {})
        scores[r] = config.bias.get(r, 0.0) + sum(w.get(f, 0.0) * feats.get(f, 0.0) for f in FEATURES)
    ranked = tuple(sorted(scores, key=lambda r: (-scores[r], ROUTES.index(r))))
    chosen = ranked[0]
    w = config.weights.get(chosen, {})
    drivers = sorted(((w.get(f, 0.0) * feats.get(f, 0.0), f) for f in FEATURES), reverse=True)
    top = [f for v, f in drivers if v > 0][:3]
    reason = f"{chosen}: " + (", ".join(top) if top else "default preference") + f" (score {scores[chosen]:.2f})"
    return RouteDecision(chosen, scores, ranked, reason)
