"""The bounded query loop: route, retrieve, grade, rewrite, until sufficient or out of budget.

A small explicit state machine. One attempt is one retrieval call (a decomposed plan's
sub-queries run concurrently and count as one attempt). Before each attempt the loop checks
the budget (attempts, deadline) and the plan (constraints kept, not tried before). Each
call gets `min(call timeout, time left)`; a timed-out or failing call is recorded as such.
If no attempt succeeded, the outcome is a retryable error, never "no evidence".

The router, grader and rewriter are plain functions and configs passed in, so a
model-driven policy can replace any of them without touching this loop.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import Executor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Callable, Mapping, Sequence

from retrieval.constraints import Constraints, extract
from retrieval.dates import dated_first
from retrieval.errors import RetrievalError, RetrievalTimeout, RetrievalUnavailable
from retrieval.fusion import rrf
from retrieval.grader import Grade, GraderConfig, grade
from retrieval.retrievers import Retriever
from retrieval.rewrite import EXTENSIONS, Plan, RewriteContext, Tried, extend_plan, first_plan, next_plan, plan_is_allowed
from retrieval.router import RouteDecision, RouterConfig, features, route
from retrieval.types import Filters, Hit, Principal

StopReason = str  # "sufficient" | "attempts_exhausted" | "deadline" | "no_strategy_left"


@dataclass(frozen=True)
class Budget:
    max_attempts: int = 3
    deadline_ms: int = 2000
    call_timeout_ms: int = 1500
    k: int = 8


@dataclass(frozen=True)
class LoopDeps:
    """Everything the loop calls, built once at startup."""

    retrievers: Mapping[str, Retriever]
    router: RouterConfig
    grader: GraderConfig
    executor: Executor
    annotate: Callable[[str, Sequence[Hit], Principal], list[Hit]]
    find_entities: Callable[[str, Principal], list[str]]
    bridge_docs: Callable[[Sequence[Hit], str, Principal], tuple[str, ...]]
    linked_docs: Callable[[Sequence[Hit], str, Principal], list[tuple[str, float, bool]]]  # (doc, cosine, named by the question)
    sql_linked: Callable[[str, Principal, float | None], bool]  # (question, principal, seconds it may take)
    sql_rows: Callable[[str, Principal], Any] | None = None  # question -> SqlResult | Decline
    sql_readable: Callable[[Principal], bool] = lambda principal: True  # may the caller read any table?
    term_stats: Callable[[str, Principal], tuple[int, int, int]] | None = None
    today: Callable[[], date] = date.today
    clock: Callable[[], float] = time.monotonic


@dataclass
class Attempt:
    n: int
    plan: Plan
    hits: tuple[Hit, ...]
    grade: Grade | None
    ms: float
    error: str | None = None
    rows: Any = None

    def to_json(self) -> dict:
        out = {"n": self.n, "route": self.plan.route, "strategy": self.plan.strategy, "query": self.plan.query_text(),
               "hits": len(self.hits), "grade": self.grade.to_json() if self.grade else None, "ms": round(self.ms, 2)}
        if self.plan.filters != Filters():
            f = self.plan.filters
            out["filters"] = {k: (v.isoformat() if hasattr(v, "isoformat") else list(v) if isinstance(v, tuple) else v)
                              for k, v in (("sources", f.sources), ("date_from", f.date_from), ("date_to", f.date_to),
                                           ("doc_ids", f.doc_ids)) if v is not None}
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class LoopResult:
    question: str
    status: str  # "answer_context" | "evidence_gap"
    context: tuple[Hit, ...]
    rows: Any
    gap: dict | None
    constraints: Constraints
    decision: RouteDecision
    attempts: list[Attempt]
    stop_reason: StopReason
    trace_id: str
    elapsed_ms: float
    loop_overhead_ms: float = 0.0
    extra: dict = field(default_factory=dict)


def _evidence(plan: Plan, new_hits: list[Hit], previous: Tried | None, k: int) -> list[Hit]:
    """What an attempt's grade judges: its own hits, or for a bridge the first hop plus them."""
    if plan.merge_previous and previous is not None:
        first = list(previous.hits)
        keep = max(1, k - max(1, k // 4))  # the second hop takes the last quarter of the context
        kept_ids = {f.chunk_id for f in first[:keep]}
        merged = first[:keep] + [h for h in new_hits if h.chunk_id not in kept_ids]
        merged += [h for h in first[keep:] if h.chunk_id not in {m.chunk_id for m in merged}]
        return merged[:k]
    return new_hits[:k]


def run_loop(question: str, principal: Principal, budget: Budget, deps: LoopDeps, filters: Filters = Filters()) -> LoopResult:
    """Answer one question for one principal within the budget (see module docstring)."""
    clock = deps.clock
    started = clock()
    deadline = started + budget.deadline_ms / 1000.0
    in_calls = 0.0
    today = deps.today()

    entities = deps.find_entities(question, principal)
    constraints = extract(question, today, entities)
    # Tables answer questions about records, not documents: a call narrowed by document
    # filters (sources, dates, ids) stays on the text routes. A caller who can read no table
    # sees routing exactly as if the index had none.
    sql_open = deps.sql_rows is not None and filters == Filters() and deps.sql_readable(principal)
    available = [r for r in deps.retrievers if r != "sql"] + (["sql"] if sql_open else [])
    # A first link for a new access scope profiles its tables: it gets half the time left.
    linked = sql_open and deps.sql_linked(question, principal, max(0.0, deadline - clock()) / 2)
    stats = deps.term_stats(question, principal) if deps.term_stats else None
    decision = route(features(question, constraints, linked, stats), deps.router, available)
    if decision.chosen == "sql" and not linked:
        decision = RouteDecision(decision.ranked[1], decision.scores, decision.ranked[1:], decision.reason)
    ctx = RewriteContext(question, constraints, decision, linked, filters,
                         lambda hits, q: deps.bridge_docs(hits, q, principal))

    attempts: list[Attempt] = []
    history: list[Tried] = []
    tried: set[tuple] = set()
    plan: Plan | None = first_plan(ctx)
    stop: StopReason = "no_strategy_left"
    while True:
        if plan is None:
            stop = "no_strategy_left"
            break
        if len(attempts) >= budget.max_attempts:
            stop = "attempts_exhausted"
            break
        remaining = deadline - clock()
        if remaining <= 0.001:
            stop = "deadline"
            break
        problems = plan_is_allowed(plan, constraints, tried)
        if problems:  # never dispatch a plan that loosens the question or repeats itself
            raise AssertionError(f"rewriter proposed a forbidden plan: {problems}")
        tried.add(plan.key())
        t0 = clock()
        hits, rows, error = _dispatch(plan, principal, budget, deps, min(budget.call_timeout_ms / 1000.0, remaining))
        in_calls += clock() - t0
        # a bridge extends the first hop; an extension (fill, follow_links) the attempt it follows
        previous = history[-1] if plan.strategy in EXTENSIONS else next((t for t in history if t.grade is not None and t.hits), None)
        verdict: Grade | None = None
        if error is None:
            evidence = _evidence(plan, hits, previous, budget.k)
            if rows is None and not plan.merge_previous:
                evidence = dated_first(evidence, constraints.dates)
            if rows is None:
                evidence = deps.annotate(question, evidence, principal)
            follow = rows is None and not plan.merge_previous
            top = evidence[: deps.grader.link_passages]
            verdict = grade(question, constraints, evidence, deps.grader, today,
                            rows_sql=rows.sql if rows is not None else None,
                            linked=lambda: deps.linked_docs(top, question, principal) if follow else ())
            hits = evidence
        attempts.append(Attempt(len(attempts) + 1, plan, tuple(hits), verdict, (clock() - t0) * 1000, error, rows))
        history.append(Tried(plan, tuple(hits), verdict))
        if plan.strategy in EXTENSIONS:  # the attempt it extended was sufficient already
            stop = "sufficient"
            break
        if verdict is not None and verdict.sufficient:
            stop = "sufficient"
            plan = extend_plan(ctx, history[-1], budget.k, tried)
            if plan is None or len(attempts) >= budget.max_attempts or deadline - clock() <= 0.001:
                break
            continue
        if error == "retrieval_timeout" and deadline - clock() <= 0.001:
            stop = "deadline"
            break
        plan = next_plan(ctx, history, tried)

    elapsed = (clock() - started) * 1000
    return _result(question, constraints, decision, attempts, stop, elapsed, elapsed - in_calls * 1000)


def _dispatch(plan: Plan, principal: Principal, budget: Budget, deps: LoopDeps, timeout_s: float) -> tuple[list[Hit], Any, str | None]:
    """Run the plan's call(s) with a timeout; returns (hits, rows or None, error code or None)."""
    if plan.route == "sql":
        future = deps.executor.submit(deps.sql_rows, plan.queries[0], principal)
        try:
            out = future.result(timeout=timeout_s)
        except FutureTimeout:
            return [], None, "retrieval_timeout"
        except RetrievalError as e:
            return [], None, e.code
        except Exception:  # noqa: BLE001 - a broken retriever is recorded, not raised
            return [], None, "retrieval_unavailable"
        from retrieval.retrievers.sql import SqlResult, rows_as_hits

        if not isinstance(out, SqlResult):
            return [], None, None  # declined: no rows, graded as no evidence
        return rows_as_hits(out, budget.k) + _linked_passages(plan, out.doc_ids, principal, budget, deps), out, None
    retriever = deps.retrievers[plan.route]
    futures = [deps.executor.submit(retriever.search, q, principal, budget.k, plan.filters) for q in plan.queries]
    results: dict[str, list[Hit]] = {}
    errors: list[str] = []
    end = time.monotonic() + timeout_s
    for q, f in zip(plan.queries, futures):
        try:
            results[q] = f.result(timeout=max(0.0, end - time.monotonic()))
        except FutureTimeout:
            errors.append("retrieval_timeout")
        except RetrievalError as e:
            errors.append(e.code)
        except Exception:  # noqa: BLE001
            errors.append("retrieval_unavailable")
    if not results:
        return [], None, errors[0] if errors else "retrieval_unavailable"
    if len(plan.queries) == 1:
        return results[plan.queries[0]], None, None
    return rrf(results, limit=budget.k), None, None


def _linked_passages(plan: Plan, doc_ids: Sequence[str], principal: Principal, budget: Budget, deps: LoopDeps) -> list[Hit]:
    """Passages of the documents the rows link (a permit's notice, an incident's report), the
    most similar to the question first: often what a question about a record asks is written
    there. Searched like any text, so only documents the caller may read come back."""
    dense = deps.retrievers.get("dense")
    if not doc_ids or dense is None:
        return []
    try:
        return dense.search(plan.queries[0], principal, budget.k, Filters(doc_ids=tuple(doc_ids)))
    except RetrievalError:
        return []  # the rows answer on their own


def _result(question: str, constraints: Constraints, decision: RouteDecision, attempts: list[Attempt], stop: StopReason,
            elapsed_ms: float, overhead_ms: float) -> LoopResult:
    trace_id = uuid.uuid4().hex
    succeeded = [a for a in attempts if a.error is None]
    if attempts and not succeeded:
        codes = {a.error for a in attempts}
        cls = RetrievalTimeout if codes == {"retrieval_timeout"} else RetrievalUnavailable
        raise cls(f"no retrieval attempt succeeded ({', '.join(sorted(c for c in codes if c))}); retry later",
                  attempts=[a.to_json() for a in attempts])
    final = next((a for a in reversed(succeeded) if a.grade and a.grade.sufficient), None)
    if final is not None:
        return LoopResult(question, "answer_context", _passages(final), _rows(final), None,
                          constraints, decision, attempts, stop, trace_id, elapsed_ms, overhead_ms)
    # Best partial evidence: fewest unmet constraints, then the earliest attempt (the router's
    # own choice). Relevance scores are not compared across routes: a dense-only set always
    # looks closer to the question than a fused one, without being better evidence.
    best = min((a for a in succeeded if a.hits), key=lambda a: (_unmet(a), a.n), default=None) or \
        (succeeded[0] if succeeded else None)
    if stop == "deadline":
        reason = "deadline_exceeded"
    elif all(not a.hits for a in succeeded):
        reason = "no_authorized_evidence"
    elif best is not None and best.grade is not None and best.grade.reason == "constraint_unmet":
        reason = "constraint_unmet"
    else:
        reason = "insufficient_evidence"
    missing = list(best.grade.missing) if best and best.grade else list(constraints.labels())
    detail = {
        "no_authorized_evidence": "no passage or row the caller may read matched the question",
        "constraint_unmet": "no authorized evidence satisfies: " + ", ".join(missing),
        "insufficient_evidence": "the best authorized evidence did not pass the relevance threshold",
        "deadline_exceeded": "the deadline ran out before sufficient evidence was found",
    }[reason]
    partial = _passages(best) if best is not None else ()
    gap = {"reason": reason, "missing": missing, "detail": detail, "partial_context": bool(partial)}
    return LoopResult(question, "evidence_gap", partial, _rows(best) if best else None, gap, constraints, decision,
                      attempts, stop, trace_id, elapsed_ms, overhead_ms)


def _passages(attempt: Attempt) -> tuple[Hit, ...]:
    """The context of an attempt: its passages (rows travel in `rows`, not as context)."""
    return attempt.hits if attempt.rows is None else tuple(h for h in attempt.hits if "sql" not in h.retrievers)


def _unmet(attempt: Attempt) -> int:
    if attempt.grade is None:
        return 1 << 30
    return sum(1 for m in attempt.grade.missing if not m.startswith(("relevance", "linked:")))


def _rows(attempt: Attempt | None) -> Any:
    return attempt.rows if attempt is not None and attempt.rows is not None else None
