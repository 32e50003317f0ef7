"""Scoring loop results against labeled questions: pure functions over values.

A label (JSONL, DESIGN.md): `{id, question, principal, groups?, route, relevant, answerable,
answer_rows?, tags, split?, today?}`; `today` (ISO date) is the date that the question's
relative dates ("last quarter") refer to. Metrics:

- route_accuracy: the first route chosen answers the labeled route: the same route, or hybrid
  for a question labeled bm25 or dense (hybrid fuses both and is the default text route);
  route_accuracy_strict: the same route only (the confusion matrix is strict too);
- gap_precision / gap_recall / gap_f1: positive = the label is not answerable, predicted
  positive = the answer is an evidence gap; false_gap_rate: answerable labels that ended as
  an evidence gap;
- ndcg@10, recall@k, mrr, full_support@k: over answerable labels with relevant documents,
  on the document ranking of the returned context;
- sql_exact: labeled result rows equal the returned rows (extra columns allowed);
- leakage: returned documents the asking principal may not read (context, every attempt's
  hits, rows' documents); must be 0;
- constraint_preservation: share of dispatched attempts whose queries keep every constraint;
- ndcg@10_self_removed: nDCG@10 with each question's own document taken out of its ranking,
  as BEIR (`ignore_identical_ids`) and MTEB score ArguAna; only when some label has one;
- mean_attempts, latency_p50_ms / latency_p95_ms.

A question whose run raised an error (too long for the request limit, say) counts in every
quality figure as a failure: a wrong route, an empty ranking, a missed gap, wrong rows; it
has no latency or attempts. A metric with nothing to measure (gap precision when no label is
unanswerable) is None, not 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from retrieval.constraints import missing_from_queries
from retrieval.errors import InvalidRequest
from retrieval.metrics import all_found, doc_ranking, mean, ndcg_at_k, percentile, reciprocal_rank, recall_at_k
from retrieval.registry import route_agrees
from retrieval.types import GapReason, Principal, Status

if TYPE_CHECKING:
    from retrieval.loop import LoopResult

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
    answer_rows: tuple[tuple[Any, ...], ...] | None = None
    tags: tuple[str, ...] = ()
    split: str | None = None
    today: date | None = None  # what relative dates in the question refer to
    own_doc: str | None = None  # the corpus document that is the question itself (BEIR ArguAna)

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
            raise InvalidRequest(
                f"{origin}:{n}: a label needs id, question, principal and only the fields {sorted(LABEL_FIELDS)}")
        if d["id"] in seen:
            raise InvalidRequest(f"{origin}:{n}: duplicate label id {d['id']!r}")
        seen.add(d["id"])
        try:
            today = _label_date(d.get("today"))
        except ValueError:
            raise InvalidRequest(f"{origin}:{n}: today must be an ISO date (YYYY-MM-DD), got {d['today']!r}") from None
        out.append(Label(
            id=str(d["id"]), question=d["question"], principal=d["principal"], groups=tuple(d.get("groups") or ()),
            route=d.get("route"), relevant=tuple(d.get("relevant") or ()), answerable=bool(d.get("answerable", True)),
            answer_rows=tuple(map(tuple, d["answer_rows"])) if d.get("answer_rows") is not None else None,
            tags=tuple(d.get("tags") or ()), split=d.get("split"), today=today,
        ))
    return out


def _label_date(value: object) -> date | None:
    """None when absent, else the date; ValueError when it is not a YYYY-MM-DD calendar date."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError(value)
    return date.fromisoformat(value)


@dataclass
class Record:
    label: Label
    route: str | None
    status: Status | None  # None when the question's run raised
    gap_reason: GapReason | None
    ranked: list[str]
    attempts: int
    latency_ms: float
    leaked: list[str] = field(default_factory=list)
    attempts_keeping_constraints: int = 0
    sql_match: bool | None = None
    error: str | None = None  # error class name, when the question's run raised
    error_message: str | None = None
    trail: tuple[str, ...] = ()  # "strategy:route" of each attempt


def error_record(label: Label, error: Exception, latency_ms: float) -> Record:
    """A question whose run raised: scored as a failure in every quality figure."""
    message = error.message if isinstance(error, InvalidRequest) else str(error)
    return Record(label, None, None, None, [], 0, latency_ms, sql_match=False if label.answer_rows is not None else None,
                  error=type(error).__name__, error_message=message[:300])


def record_for(label: Label, result: LoopResult, latency_ms: float, can_read: Callable[[str], bool],
               rows_match: Callable[[Sequence[Sequence[Any]], Sequence[Sequence[Any]]], bool] | None = None) -> Record:
    """One question's outcome."""
    shown: set[str] = {h.doc_id for h in result.context}
    for a in result.attempts:
        shown |= {h.doc_id for h in a.hits}
        if a.rows is not None:
            shown |= set(a.rows.doc_ids)
    leaked = sorted(d for d in shown if not d.startswith("table:") and not can_read(d))
    leaked += sorted(t.split(":", 1)[1] for t in label.tags if t.startswith("forbidden:") and t.split(":", 1)[1] in shown)
    kept = sum(1 for a in result.attempts if not missing_from_queries(
        result.constraints, a.plan.queries,
        date_filtered=a.plan.filters.date_from is not None or a.plan.filters.date_to is not None))
    sql_match = None
    if label.answer_rows is not None and rows_match is not None:
        sql_match = result.rows is not None and rows_match(label.answer_rows, result.rows.rows)
    return Record(label, result.decision.chosen, result.status, result.gap.reason if result.gap else None,
                  doc_ranking(result.context), len(result.attempts), latency_ms, sorted(set(leaked)), kept, sql_match,
                  trail=tuple(f"{a.plan.strategy}:{a.plan.route}" for a in result.attempts))


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _gap_scores(records: Sequence[Record]) -> dict[str, float | None]:
    """Positive class: unanswerable. Without unanswerable labels every gap score but the
    false-gap rate (answerable labels that ended as gaps) is undefined (None); precision is
    also undefined when no gap was predicted."""
    tp = sum(1 for r in records if r.status == "evidence_gap" and not r.label.answerable)
    fp = sum(1 for r in records if r.status == "evidence_gap" and r.label.answerable)
    fn = sum(1 for r in records if r.status != "evidence_gap" and not r.label.answerable)
    false_gaps = {"false_gap_rate": _ratio(fp, sum(1 for r in records if r.label.answerable))}
    if tp + fn == 0:
        return {"gap_precision": None, "gap_recall": None, "gap_f1": None, **false_gaps}
    return {"gap_precision": _ratio(tp, tp + fp), "gap_recall": _ratio(tp, tp + fn), "gap_f1": _ratio(2 * tp, 2 * tp + fp + fn),
            **false_gaps}


def gap_balance(summary: dict[str, Any]) -> float | None:
    """The mean of gap recall and the share of answerable questions answered (1 - false-gap
    rate): how well a run separates the two, whatever their proportions; with no unanswerable
    label, the answered share alone. None when neither is defined."""
    answered = None if summary.get("false_gap_rate") is None else 1.0 - float(summary["false_gap_rate"])
    recall = None if summary.get("gap_recall") is None else float(summary["gap_recall"])
    if recall is None:
        return answered
    return recall if answered is None else (recall + answered) / 2


def summarize(records: Sequence[Record], k: int) -> dict[str, Any]:
    """The metrics of a set of records (see the module docstring)."""
    ok = [r for r in records if r.error is None]
    routed = [(r.label.route, r.route) for r in records if r.label.route]  # (labeled, chosen)
    ranked = [r for r in records if r.label.answerable and r.label.relevant]
    sql = [r for r in records if r.sql_match is not None]
    attempts = sum(r.attempts for r in ok)

    def rel(r: Record) -> dict[str, float]:
        return {d: 1.0 for d in r.label.relevant}

    own = [r for r in ranked if r.label.own_doc]
    self_removed = {"ndcg@10_self_removed": round(mean(
        ndcg_at_k([d for d in r.ranked if d != r.label.own_doc], rel(r), 10) for r in ranked), 4)} if own else {}
    return {
        "questions": len(records),
        "errors": len(records) - len(ok),
        "route_accuracy": round(mean(route_agrees(labeled, chosen) for labeled, chosen in routed), 4) if routed else None,
        "route_accuracy_strict": round(mean(chosen == labeled for labeled, chosen in routed), 4) if routed else None,
        **_gap_scores(records),
        "ndcg@10": round(mean(ndcg_at_k(r.ranked, rel(r), 10) for r in ranked), 4) if ranked else None,
        **self_removed,
        "recall@k": round(mean(recall_at_k(r.ranked, r.label.relevant, k) for r in ranked), 4) if ranked else None,
        "mrr": round(mean(reciprocal_rank(r.ranked, r.label.relevant) for r in ranked), 4) if ranked else None,
        "full_support@k": round(mean(all_found(r.ranked, r.label.relevant, k) for r in ranked), 4) if ranked else None,
        "sql_exact": round(mean(bool(r.sql_match) for r in sql), 4) if sql else None,
        "leakage": sum(len(r.leaked) for r in records),
        "constraint_preservation": _ratio(sum(r.attempts_keeping_constraints for r in ok), attempts),
        "mean_attempts": round(attempts / len(ok), 3) if ok else None,
        "latency_p50_ms": round(percentile([r.latency_ms for r in ok], 50), 2) if ok else None,
        "latency_p95_ms": round(percentile([r.latency_ms for r in ok], 95), 2) if ok else None,
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
    """Metrics per labeled route, per chosen route (the router's first choice) and per tag."""
    by_route: dict[str, list[Record]] = {}
    by_chosen: dict[str, list[Record]] = {}
    by_tag: dict[str, list[Record]] = {}
    for r in records:
        by_route.setdefault(r.label.route or "unlabeled", []).append(r)
        by_chosen.setdefault(r.route or "none", []).append(r)
        for t in r.label.tags:
            if not t.startswith("forbidden"):
                by_tag.setdefault(t, []).append(r)
    return {"per_route": {name: summarize(rs, k) for name, rs in sorted(by_route.items())},
            "per_chosen_route": {name: summarize(rs, k) for name, rs in sorted(by_chosen.items())},
            "per_tag": {name: summarize(rs, k) for name, rs in sorted(by_tag.items())}}


def wrong_questions(records: Iterable[Record], k: int) -> list[dict[str, Any]]:
    """Every question that failed some check, with what was expected and what came back.

    Problems: `error` (the run raised), `route` (the first route does not answer the labeled one, see
    route_agrees),
    `false_gap` / `missed_gap` (status is not what `answerable` says), `missing_documents`
    (a relevant document is not in the top k), `sql_rows` (rows differ), `leak`."""
    out = []
    for r in records:
        lb = r.label
        expected_status = "answer_context" if lb.answerable else "evidence_gap"
        missing = [d for d in lb.relevant if d not in r.ranked[:k]] if lb.answerable else []
        problems = [name for name, bad in (
            ("error", r.error is not None),
            ("route", lb.route is not None and not route_agrees(lb.route, r.route)),
            ("false_gap", r.error is None and lb.answerable and r.status == "evidence_gap"),
            ("missed_gap", r.error is None and not lb.answerable and r.status != "evidence_gap"),
            ("missing_documents", bool(missing)),
            ("sql_rows", r.sql_match is False),
            ("leak", bool(r.leaked)),
        ) if bad]
        if not problems:
            continue
        got: dict[str, Any] = {"route": r.route, "status": r.status, "gap_reason": r.gap_reason, "top": r.ranked[:k],
                               "missing": missing}
        if r.error is not None:
            got["error"] = f"{r.error}: {r.error_message}"
        if r.leaked:
            got["leaked"] = r.leaked
        out.append({"id": lb.id, "question": lb.question, "principal": lb.principal, "problems": problems,
                    "expected": {"route": lb.route, "status": expected_status, "relevant": list(lb.relevant)},
                    "got": got, "attempts": r.attempts, "trail": list(r.trail)})
    return out


# The headline figures of a summary, in the order reports and the console show them.
TOP = ("route_accuracy", "gap_precision", "gap_recall", "gap_f1", "false_gap_rate", "leakage", "ndcg@10",
       "ndcg@10_self_removed", "recall@k", "mrr", "full_support@k", "sql_exact", "constraint_preservation", "mean_attempts",
       "latency_p50_ms", "latency_p95_ms", "wrong_questions")


def plot_grouping(result: dict[str, Any]) -> tuple[str, str]:
    """(breakdown key, wording) of the per-route plots: the labeled route when the labels
    name one, else the route the router chose (BEIR folders carry no route labels)."""
    labeled = [name for name in result.get("per_route") or {} if name != "unlabeled"]
    return ("per_route", "labeled route") if labeled else ("per_chosen_route", "chosen route")
