"""Is the evidence set sufficient? Hard constraints first, then calibrated relevance.

Judged on the set, not on single passages: every identifier, quoted phrase, entity and date
range of the question must be met by some returned passage or row (a date by a document
dated inside the range, or by a day, month, quarter or year a passage writes that lies
wholly inside it: a bare "2025" in March's figures only overlaps "April 2025", and a
passage's "last year" is relative to when it was written, so neither meets it), and a
logistic score over relevance signals must reach the threshold. The signals are the same
whatever route produced the hits (every hit is scored by BM25 and dense before grading):

- top_dense: best cosine between question and passage; dense_margin: best minus the mean
  of the top 5 (a clear winner is a good sign); mean_dense_top3;
- top_coverage: the largest share of the question's (stemmed, non-stopword) terms that one
  passage contains;
- agreement: overlap of the top 3 passages by BM25 and by dense (two views agreeing);
- top_bm25: best BM25 score per query term, squashed to [0, 1);
A set is also insufficient while the question names (by title) a readable document it does
not hold. Documents only its top passages name are a second hop to follow (multi-hop
evidence points at it), never a reason to call the set insufficient.

- top_qcov: the largest idf-weighted share of the question's terms one passage contains
  (rare, specific terms count most); qcov_dense: that share times the passage's cosine,
  for the single best passage by this product (one passage both on topic and specific);
- z_top, nqc, z_spread (query performance prediction): the best cosine, the spread
  (standard deviation) and the range of the set's cosines, in units of the standard
  deviation of the question's cosine over every readable chunk (Shtok et al., "Predicting
  query performance by query-drift estimation", TOIS 2012, for NQC);
- literal_share: the share of the question's content terms that sit in its identifiers and
  quoted phrases (when those are met, a question that is mostly an identifier is answered
  by the passages that carry it).

Every signal above is a maximum over single passages, so a set that answers a multi-part
question one part per passage ("Alice led a sev1 on 13 June 2024. In the release that fixed
it, at what queue depth ...?") looks weak: no passage holds most of it. Where the whole
question falls short, a question of several parts (retrieval/parts.py) is also judged part by
part against the same set, each part scored exactly as a question of its own, and the set
scores what its weakest part scores (every part must be answered); the grade keeps the
better of the two. A question of one part is judged as before.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Callable, Literal, Mapping, Sequence

from retrieval.calibration import Calibration
from retrieval.constraints import Constraints, literal_share
from retrieval.dates import written_periods
from retrieval.parts import question_parts
from retrieval.text import normalize, term_set
from retrieval.types import Hit, Listing

GRADE_FEATURES = ("top_dense", "dense_margin", "mean_dense_top3", "top_coverage", "agreement", "top_bm25",
                  "top_qcov", "qcov_dense", "literal_share", "z_top", "nqc", "z_spread")
Reason = Literal["no_authorized_evidence", "constraint_unmet", "insufficient_evidence"]
# (cheap score, its features) -> (sufficient, p_sufficient, more features): a relevance decision
# other than the threshold on the cheap score (an answer-level model's, retrieval/answer_level.py)
Decide = Callable[[float, Mapping[str, float]], tuple[bool, float, Mapping[str, float]]]
# a text -> the same hits with their signals computed against that text (a part of the question)
Rescore = Callable[[str], Sequence[Hit]]


@dataclass(frozen=True)
class GraderConfig:
    # The untuned default, meant for corpora it never saw: fitted across five labeled domains
    # (demo, waterworks, contracts, product, retail: eval_data/), each weighing the same, on
    # signals whose scale does not depend on the corpus (retrieval/tune.py SCALE_FREE_FEATURES),
    # its threshold set for 20% false gaps on those domains' first attempts; written by
    # `benchmarks/domains.py --target 0.2`, which also judges it leave-one-domain-out.
    # `quarry tune` refits it on a corpus's own labels.
    bias: float = -2.672939
    weights: Mapping[str, float] = field(default_factory=lambda: {
        "z_top": 0.40255, "nqc": 0.519435, "z_spread": 0.246121, "top_coverage": 0.859791, "top_qcov": -0.846904,
        "agreement": 0.613131, "literal_share": 3.800752,
    })
    threshold: float = 0.405148
    link_passages: int = 1  # documents named by the question or the top n passages but absent are missing evidence
    source: str = "defaults"
    calibration: Calibration = Calibration("platt", 1.056859, 0.818869, fitted_on=496)  # score -> p_sufficient

    def to_json(self) -> dict[str, Any]:
        return {"bias": self.bias, "weights": dict(self.weights), "threshold": self.threshold,
                "link_passages": self.link_passages, "source": self.source, "calibration": self.calibration.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraderConfig:
        return cls(float(data["bias"]), dict(data["weights"]), float(data.get("threshold", 0.5)),
                   int(data.get("link_passages", 1)), data.get("source", "file"),
                   Calibration.from_json(data.get("calibration")))


@dataclass(frozen=True)
class Grade:
    sufficient: bool
    reason: Reason | None
    missing: tuple[str, ...] = ()
    score: float = 0.0
    features: Mapping[str, float] = field(default_factory=dict)
    links: tuple[str, ...] = ()  # readable documents the top passages name that the set lacks: to follow, not missing
    source: str = ""  # which grader decided, when not the built-in one (a judge, a fallback after its failure)
    p_sufficient: float | None = None  # calibrated P(the set answers); None from a grader that gives none
    listing: Listing | None = None  # a list question's plan: what it gathered (retrieval/listing.py)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sufficient": self.sufficient, "reason": self.reason, "missing": list(self.missing),
                               "score": round(self.score, 4),
                               "p_sufficient": None if self.p_sufficient is None else round(self.p_sufficient, 4)}
        if self.source:
            out["source"] = self.source
        if self.listing is not None:
            out["listing"] = self.listing.to_json()
        return out


def _whole_token(needle: str, haystack: str) -> bool:
    return re.search(r"(?<![\w])" + re.escape(needle.lower()) + r"(?![\w])", haystack) is not None


def _searchable(title: str | None, meta: str | None, text: str) -> str:
    """A passage's text as constraints are checked against it: its document's title and
    metadata values too, as the exact route reads them."""
    return normalize(f"{title or ''}\n{meta or ''}\n{text}")


def unmet_constraints(constraints: Constraints, hits: Sequence[Hit], also: str = "") -> list[str]:
    """Labels of the constraints no hit satisfies (`also`: more evidence text, e.g. the SQL;
    dates are met by the hits alone, see the module docstring)."""
    if constraints.is_empty():
        return []
    texts = [_searchable(h.title, h.meta, h.text) for h in hits] + ([normalize(also)] if also else [])
    missing = [f"identifier:{i}" for i in constraints.identifiers if not any(_whole_token(i, t) for t in texts)]
    missing += [f"phrase:{p}" for p in constraints.phrases if not any(normalize(p) in t for t in texts)]
    missing += [f"entity:{e}" for e in constraints.entities if not any(_whole_token(normalize(e), t) for t in texts)]
    for d in constraints.dates:
        # A period written in a passage meets the range only when it lies inside it: a bare
        # "2025" somewhere in March's figures does not answer "April 2025" (it overlaps it).
        dated = any(h.date and d.contains(date.fromisoformat(h.date[:10])) for h in hits)
        if not (dated or any(d.holds(first, last) for h in hits for first, last in written_periods(h.text))):
            missing.append(f"date:{d.text}")
    return missing


def evidence_features(question: str, hits: Sequence[Hit], constraints: Constraints | None = None) -> dict[str, float]:
    """The relevance signals of an evidence set (see the module docstring)."""
    sig = [dict(h.signals) for h in hits]  # read each hit's signals once
    dense_of = [s.get("dense") or 0.0 for s in sig]
    bm25_of = [s.get("bm25") or 0.0 for s in sig]
    qcov_of = [s.get("qcov") or 0.0 for s in sig]
    dense = sorted(dense_of, reverse=True)
    by_bm25 = [hits[i].chunk_id for i in sorted(range(len(hits)), key=lambda i: -bm25_of[i])[:3]]
    by_dense = [hits[i].chunk_id for i in sorted(range(len(hits)), key=lambda i: -dense_of[i])[:3]]
    top_bm25 = max(bm25_of, default=0.0) / max(1, len(term_set(question)))
    return {
        "top_dense": dense[0] if dense else 0.0,
        "dense_margin": (dense[0] - sum(dense[:5]) / len(dense[:5])) if dense else 0.0,
        "mean_dense_top3": sum(dense[:3]) / len(dense[:3]) if dense else 0.0,
        "top_coverage": max((s.get("tcov") or 0.0 for s in sig), default=0.0),
        "agreement": len(set(by_bm25) & set(by_dense)) / 3 if hits else 0.0,
        "top_bm25": top_bm25 / (top_bm25 + 1.0),
        "top_qcov": max(qcov_of, default=0.0),
        "qcov_dense": max((q * max(0.0, d) for q, d in zip(qcov_of, dense_of, strict=True)), default=0.0),
        "literal_share": literal_share(question, constraints) if constraints is not None else 0.0,
        **_qpp(sig, dense),
    }


def _qpp(sig: Sequence[Mapping[str, float]], dense: list[float]) -> dict[str, float]:
    sd = next((s["bg_sd"] for s in sig if s.get("bg_sd")), None)
    mean = next((s["bg_mean"] for s in sig if s.get("bg_mean") is not None), 0.0)
    if not sd or not dense:
        return {"z_top": 0.0, "nqc": 0.0, "z_spread": 0.0}
    avg = sum(dense) / len(dense)
    std = (sum((d - avg) ** 2 for d in dense) / len(dense)) ** 0.5
    return {"z_top": (dense[0] - mean) / sd, "nqc": std / sd, "z_spread": (dense[0] - dense[-1]) / sd}


def relevance(features: Mapping[str, float], config: GraderConfig) -> float:
    z = config.bias + sum(config.weights.get(f, 0.0) * features.get(f, 0.0) for f in GRADE_FEATURES)
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def pending_links(hits: Sequence[Hit], linked: Sequence[tuple[str, float, bool]]) -> tuple[list[str], list[str]]:
    """Readable documents the question names / only the top passages name (by title) that
    the set does not hold, most similar to the question first. What the question names is
    missing evidence; what only a passage names is a second hop to follow, never a reason to
    call the set insufficient (retrieved text must not steer a verdict). A second hop is often
    unlike the question (that is why the first hop missed it), so no similarity bar applies."""
    present = {h.doc_id for h in hits}
    pending = [(d, by_question) for d, _, by_question in linked if d not in present]
    return [d for d, q in pending if q], [d for d, q in pending if not q]


def part_score(question: str, constraints: Constraints, rescore: Rescore, config: GraderConfig) -> tuple[float, int]:
    """(the score of the weakest part, number of parts) of a multi-part question judged
    against one set; (0.0, 0) for a question of one part."""
    parts = question_parts(question)
    if not parts:
        return 0.0, 0
    return min(relevance(evidence_features(p, rescore(p), constraints), config) for p in parts), len(parts)


def grade(question: str, constraints: Constraints, hits: Sequence[Hit], config: GraderConfig, today: date,
          rows_sql: str | None = None, linked: Callable[[], Sequence[tuple[str, float, bool]]] = tuple,
          decide: Decide | None = None, rescore: Rescore | None = None) -> Grade:
    """Verdict on one evidence set. Rows from a confident SQL translation (`rows_sql` is its
    statement) are relevant by construction: only their presence and the constraints are
    checked, against the rows and the statement (which carries the date predicates).
    `linked()` gives the documents the set points to; it is asked only of a set that passes
    everything else. `decide` replaces the threshold on the cheap score (it sees that score
    and its features); unmet constraints and named documents stay hard either way.
    `rescore` lets a multi-part question be judged part by part (module docstring); it is
    called only when the whole question falls short."""
    if not hits:
        return Grade(False, "no_authorized_evidence", tuple(constraints.labels()), p_sufficient=0.0)
    if rows_sql is not None:
        missing = [m for m in unmet_constraints(constraints, hits, also=rows_sql) if not m.startswith("date:")]
        return Grade(not missing, "constraint_unmet" if missing else None, tuple(missing), 1.0,
                     p_sufficient=0.0 if missing else 1.0)
    missing = unmet_constraints(constraints, hits)
    feats = evidence_features(question, hits, constraints)
    score = relevance(feats, config)
    if missing:
        return Grade(False, "constraint_unmet", tuple(missing), score, feats, p_sufficient=0.0)
    if rescore is not None and score < config.threshold:
        parts, n = part_score(question, constraints, rescore, config)
        if n:
            feats = {**feats, "parts": float(n), "part_min": parts}
            score = max(score, parts)
    if decide is None:
        sufficient, p = score >= config.threshold, config.calibration(score)
    else:
        sufficient, p, more = decide(score, feats)
        feats = {**feats, **more}
    if not sufficient:
        return Grade(False, "insufficient_evidence", ("relevance",), score, feats, p_sufficient=p)
    named, links = pending_links(hits, linked())
    if named:
        return Grade(False, "insufficient_evidence", tuple(f"linked:{d}" for d in named), score, feats, p_sufficient=p)
    return Grade(True, None, (), score, feats, tuple(links), p_sufficient=p)
