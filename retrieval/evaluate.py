"""Scoring loop results against labeled questions: pure functions over values.

A label (JSONL, DESIGN.md): `{id, question, principal, groups?, route, relevant, answerable,
answer_rows?, tags, split?}`. Metrics:

- route_accuracy: the first route chosen equals the labeled route (with a confusion matrix);
- gap_precision / gap_recall / gap_f1: positive = the label is not answerable, predicted
  positive = the answer is an evidence gap;
- ndcg@10, recall@k, mrr, full_support@k: over answerable labels with relevant documents,
  on the document ranking of the returned context;
- sql_exact: labeled result rows equal the returned rows (extra columns allowed);
- leakage: returned documents the asking principal may not read (context, every attempt's
  hits, rows' documents); must be 0;
- constraint_preservation: share of dispatched attempts whose queries keep every constraint;
- mean_attempts, latency_p50_ms / latency_p95_ms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from retrieval.constraints import missing_from_queries
from retrieval.errors import InvalidRequest
from retrieval.metrics import all_found, doc_ranking, mean, ndcg_at_k, percentile, reciprocal_rank, recall_at_k
from retrieval.types import Principal

LABEL_FIELDS = {"id", "question", "principal", "groups", "route", "relevant", "answerable", "answer_rows", "tags",
                "split", "today"}


@dataclass(frozen=True)
class Label:
    id: str
    question: str
    principal: str
    groups: tuple[str, ...] = ()
    route: str | None = None
    relevant: tuple[str, ...] = ()
    answerable: bool = True
    answer_rows: tuple | None = None
    tags: tuple[str, ...] = ()
    split: str | None = None

    def principal_obj(self) -> Principal:
        return Principal(self.principal, self.groups)


def parse_labels(text: str, origin: str = "labels") -> list[Label]:
    """Validate labeled questions; errors name the line."""
    out = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"{origin}:{n}: malformed JSON ({e.msg})") from None
        if not isinstance(d, dict) or set(d) - LABEL_FIELDS or not {"id", "question", "principal"} <= set(d):
            raise InvalidRequest(f"{origin}:{n}: a label needs id, question, principal and only the fields {sorted(LABEL_FIELDS)}")
        if d["id"] in seen:
            raise InvalidRequest(f"{origin}:{n}: duplicate label id {d['id']!r}")
        seen.add(d["id"])
        out.append(Label(
            id=str(d["id"]), question=d["question"], principal=d["principal"], groups=tuple(d.get("groups") or ()),
            route=d.get("route"), relevant=tuple(d.get("relevant") or ()), answerable=bool(d.get("answerable", True)),
            answer_rows=tuple(map(tuple, d["answer_rows"])) if d.get("answer_rows") is not None else None,
            tags=tuple(d.get("tags") or ()), split=d.get("split"),
        ))
    return out


@dataclass
class Record:
    label: Label
    route: str | None
    status: str | None
    gap_reason: str | None
    ranked: list[str]
    attempts: int
    latency_ms: float
    leaked: list[str] = field(default_factory=list)
    attempts_keeping_constraints: int = 0
    sql_match: bool | None = None
    error: str | None = None


def record_for(label: Label, result: Any, latency_ms: float, can_read: Callable[[str], bool],
               rows_match: Callable[[Sequence, Sequence], bool] | None = None) -> Record:
    """One question's outcome (result is a LoopResult)."""
    shown: set[str] = {h.doc_id for h in result.context}
    for a in result.attempts:
        shown |= {h.doc_id for h in a.hits}
        if a.rows is not None:
            shown |= set(a.rows.doc_ids)
    leaked = sorted(d for d in shown if not d.startswith("table:") and not can_read(d))
    leaked += sorted(t.split(":", 1)[1] for t in label.tags if t.startswith("forbidden:") and t.split(":", 1)[1] in shown)
    kept = sum(1 for a in result.attempts if not missing_from_queries(
        result.constraints, a.plan.queries, date_filtered=a.plan.filters.date_from is not None or a.plan.filters.date_to is not None))
    sql_match = None
    if label.answer_rows is not None and rows_match is not None:
        sql_match = result.rows is not None and rows_match(label.answer_rows, result.rows.rows)
    return Record(label, result.decision.chosen, result.status, (result.gap or {}).get("reason"),
                  doc_ranking(result.context), len(result.attempts), latency_ms, sorted(set(leaked)), kept, sql_match)


def _gap_scores(records: Sequence[Record]) -> dict[str, float]:
    tp = sum(1 for r in records if r.status == "evidence_gap" and not r.label.answerable)
    fp = sum(1 for r in records if r.status == "evidence_gap" and r.label.answerable)
    fn = sum(1 for r in records if r.status != "evidence_gap" and not r.label.answerable)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"gap_precision": round(precision, 4), "gap_recall": round(recall, 4), "gap_f1": round(f1, 4)}


def summarize(records: Sequence[Record], k: int) -> dict[str, Any]:
    """The metrics of a set of records (see the module docstring)."""
    ok = [r for r in records if r.error is None]
    routed = [r for r in ok if r.label.route]
    ranked = [r for r in ok if r.label.answerable and r.label.relevant]
    sql = [r for r in ok if r.sql_match is not None]
    attempts = sum(r.attempts for r in ok)
    rel = lambda r: {d: 1.0 for d in r.label.relevant}  # noqa: E731
    return {
        "questions": len(records),
        "errors": len(records) - len(ok),
        "route_accuracy": round(mean(r.route == r.label.route for r in routed), 4) if routed else None,
        **_gap_scores(ok),
        "ndcg@10": round(mean(ndcg_at_k(r.ranked, rel(r), 10) for r in ranked), 4) if ranked else None,
        "recall@k": round(mean(recall_at_k(r.ranked, r.label.relevant, k) for r in ranked), 4) if ranked else None,
        "mrr": round(mean(reciprocal_rank(r.ranked, r.label.relevant) for r in ranked), 4) if ranked else None,
        "full_support@k": round(mean(all_found(r.ranked, r.label.relevant, k) for r in ranked), 4) if ranked else None,
        "sql_exact": round(mean(bool(r.sql_match) for r in sql), 4) if sql else None,
        "leakage": sum(len(r.leaked) for r in records),
        "constraint_preservation": round(sum(r.attempts_keeping_constraints for r in ok) / attempts, 4) if attempts else 1.0,
        "mean_attempts": round(attempts / len(ok), 3) if ok else 0.0,
        "latency_p50_ms": round(percentile([r.latency_ms for r in ok], 50), 2),
        "latency_p95_ms": round(percentile([r.latency_ms for r in ok], 95), 2),
        "k": k,
    }


def confusion(records: Iterable[Record]) -> dict[str, dict[str, int]]:
    """gold route -> predicted route -> count."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        if r.label.route and r.error is None:
            row = out.setdefault(r.label.route, {})
            row[r.route or "none"] = row.get(r.route or "none", 0) + 1
    return out


def breakdown(records: Sequence[Record], k: int) -> dict[str, dict[str, Any]]:
    """Metrics per labeled route and per tag."""
    by_route: dict[str, list[Record]] = {}
    by_tag: dict[str, list[Record]] = {}
    for r in records:
        by_route.setdefault(r.label.route or "unlabeled", []).append(r)
        for t in r.label.tags:
            if not t.startswith("forbidden"):
                by_tag.setdefault(t, []).append(r)
    return {"per_route": {name: summarize(rs, k) for name, rs in sorted(by_route.items())},
            "per_tag": {name: summarize(rs, k) for name, rs in sorted(by_tag.items())}}
