"""The bounded query loop: route, retrieve, grade, rewrite, until sufficient or out of budget.

A small explicit state machine. One attempt is one retrieval call (a decomposed plan's
sub-queries run concurrently and count as one attempt). Before each attempt the loop checks
the budget (attempts, deadline) and the plan (constraints kept, not tried before). Each
call gets `min(call timeout, time left)`; a timed-out or failing call is recorded as such.
If no attempt succeeded, the outcome is a retryable error, never "no evidence".

The loop takes the caller's `Principal` and turns it into its `AccessScope` once: every
retriever, signal and linker below it receives that scope (a plain value, so a retriever may
run in another process) and enforces it itself. Only the reranker, a policy, still receives
the principal; it reorders hits that were already authorized.

The router, grader, rewriter and reranker are the collaborators of `deps.policy`
(retrieval/policy.py), so any of them can be replaced without touching this loop. The check
of a plan before dispatch stays here: a plan that drops or alters a constraint, or repeats
one tried before, is recorded as rejected and never dispatched, whoever proposed it.

A `listing` plan (a question that asks only for the list of a period's documents,
retrieval/listing.py) is graded by how it was gathered, not by the grader policy: its route
is asked for up to `Budget.list_bound` passages, no reranker reorders or drops them, and its
verdict ends the loop (the whole list, or nothing readable in the period).
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Callable, Mapping, Sequence

from retrieval.calls import CallScope
from retrieval.constraints import Constraints, extract
from retrieval.dates import dated_first
from retrieval.question_scope import question_scope
from retrieval.errors import InvalidRequest, RetrievalError, RetrievalTimeout, RetrievalUnavailable
from retrieval.fusion import rrf
from retrieval.grader import Grade
from retrieval.limits import Limits, check_k
from retrieval.linking import Linker, TableLinker
from retrieval.listing import construction_grade, gather, head_noun, of_kind
from retrieval.policy import Evidence, Policy, RouteInputs
from retrieval.qualifiers import Qualifier, held, qualifiers
from retrieval.registry import ROW_ROUTES
from retrieval.retrievers import Retrieved, Retriever
from retrieval.rewrite import EXTENSIONS, Plan, PlanKey, RewriteContext, Tried, plan_problems
from retrieval.router import RouteDecision
from retrieval.signals import Signals
from retrieval.sql.translate import Decline, Translation
from retrieval.table_decline import checked, labels, sentence
from retrieval.types import AccessScope, Filters, Gap, GapReason, Hit, Listing, Principal, Status, StopReason

log = logging.getLogger("quarry.loop")


@dataclass(frozen=True)
class Budget:
    max_attempts: int = 3
    deadline_ms: int = 2000
    call_timeout_ms: int = 1500
    k: int = 8
    list_bound: int = 500  # passages a list question's plan gathers at most (retrieval/listing.py)

    @classmethod
    def checked(cls, limits: Limits, k: int | None, max_attempts: int | None, deadline_ms: int | None) -> Budget:
        """A caller's budget (None: the default) within the server's caps, or InvalidRequest."""
        attempts = limits.default_attempts if max_attempts is None else max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= limits.max_attempts:
            raise InvalidRequest(f"max_attempts must be an integer from 1 to {limits.max_attempts}")
        deadline = limits.default_deadline_ms if deadline_ms is None else deadline_ms
        if isinstance(deadline, bool) or not isinstance(deadline, int) or not 1 <= deadline <= limits.max_deadline_ms:
            raise InvalidRequest(f"deadline_ms must be an integer from 1 to {limits.max_deadline_ms}")
        return cls(attempts, deadline, min(limits.call_timeout_ms, deadline), check_k(k, limits),
                   limits.list_max_passages)


@dataclass(frozen=True)
class LoopDeps:
    """Everything the loop calls, built once at startup (see routes/service/view.py)."""

    retrievers: Mapping[str, Retriever]  # the text routes by name
    policy: Policy
    linker: Linker
    signals: Signals  # the same BM25 and dense signals on every hit, and routing's term statistics
    calls: CallScope
    tables: TableLinker | None = None  # None when the index has no tables
    today: Callable[[], date] = date.today
    clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class Understood:
    """A question read before any retrieval: its constraints, the router's inputs and
    decision, and the translation of a table that answers it. Evaluation and tuning read
    questions through this same step."""

    constraints: Constraints
    inputs: RouteInputs
    decision: RouteDecision
    translation: Translation | None
    absent: tuple[str, ...] = ()  # names the question gives that no readable chunk holds (entity constraints)
    declined: Decline | None = None  # the question is about a readable table, but translating it was declined
    qualifiers: tuple[Qualifier, ...] = ()  # modifiers of its noun phrases a context must carry (retrieval/qualifiers.py)


@dataclass
class Attempt:
    n: int
    plan: Plan
    hits: tuple[Hit, ...]
    grade: Grade | None
    ms: float
    error: str | None = None
    rows: Any = None
    rejected: tuple[str, ...] = ()  # why the plan was refused before dispatch (it never ran)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": self.n, "route": self.plan.route, "strategy": self.plan.strategy, "query": self.plan.query_text(),
            "hits": len(self.hits), "grade": self.grade.to_json() if self.grade else None, "ms": round(self.ms, 2)}
        if self.plan.filters != Filters():
            f = self.plan.filters
            out["filters"] = {k: (v.isoformat() if hasattr(v, "isoformat") else list(v) if isinstance(v, tuple) else v)
                              for k, v in (("sources", f.sources), ("date_from", f.date_from), ("date_to", f.date_to),
                                           ("doc_ids", f.doc_ids)) if v is not None}
        if self.error:
            out["error"] = self.error
        if self.rejected:
            out["rejected"] = list(self.rejected)
        return out


@dataclass
class LoopResult:
    question: str
    status: Status
    context: tuple[Hit, ...]
    rows: Any
    gap: Gap | None  # None when the status is answer_context
    constraints: Constraints
    decision: RouteDecision
    attempts: list[Attempt]
    stop_reason: StopReason
    trace_id: str
    elapsed_ms: float
    loop_overhead_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    declined: Decline | None = None  # the table the question is about, and why translating it was declined
    listing: Listing | None = None  # a list question's: what its plan gathered, and whether the context holds all of it


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


def understand(question: str, principal: Principal, deps: LoopDeps, filters: Filters = Filters(),
               today: date | None = None, table_seconds: float | None = None) -> Understood:
    """Read the question: constraints, term statistics, table link, route. `table_seconds`
    bounds how long a new access scope's table profiles may be waited for (None: as long as
    they take)."""
    return _understand(question, principal.access_scope(), deps, filters, today, table_seconds)


def _understand(question: str, access: AccessScope, deps: LoopDeps, filters: Filters, today: date | None,
                table_seconds: float | None) -> Understood:
    today = today or deps.today()
    linked = deps.linker.entities(question, access)
    constraints = extract(question, today, linked)
    # Tables answer questions about records, not documents: a call narrowed by document
    # filters (sources, dates, ids) stays on the text routes. A caller who can read no table
    # sees routing exactly as if the index had none.
    tables = deps.tables if deps.tables is not None and filters == Filters() and deps.tables.readable(access) else None
    available = [r for r in deps.retrievers if r not in ROW_ROUTES] + (list(ROW_ROUTES) if tables else [])
    link = tables.link(question, access, today, table_seconds) if tables else None
    translation = link if isinstance(link, Translation) else None
    declined = link if isinstance(link, Decline) else None
    inputs = RouteInputs(question, constraints, translation is not None, deps.signals.term_stats(question, access))
    decision = deps.policy.router.route(inputs, available)
    if decision.chosen in ROW_ROUTES and translation is None:
        rest = tuple(r for r in decision.ranked if r not in ROW_ROUTES)
        decision = RouteDecision(rest[0], decision.scores, rest, decision.reason)
    if declined is not None:  # the trace says why the table the question is about was not queried
        decision = replace(decision, reason=f"{decision.reason}; sql not used: {sentence(declined)}")
    # A name no readable chunk holds is a constraint no evidence can meet: the question is about
    # something the caller's documents never mention (a value its table translation uses is
    # known: "bus 2214" may be in rows alone). Routing reads the question as before.
    known = (*linked, translation.sql) if translation is not None else tuple(linked)
    absent = tuple(deps.signals.absent_names(question, access, known))
    if absent:
        constraints = replace(constraints, entities=(*constraints.entities, *absent))
    return Understood(constraints, inputs, decision, translation, absent, declined, qualifiers(question))


def run_loop(question: str, principal: Principal, budget: Budget, deps: LoopDeps, filters: Filters = Filters(),
             today: date | None = None) -> LoopResult:
    """Answer one question for one principal within the budget (see module docstring);
    `today` resolves the question's relative dates (default: `deps.today()`). Every call made
    for it, on any thread, is bounded by its deadline (retrieval/question_scope.py)."""
    with question_scope(budget.deadline_ms / 1000.0):
        return _run_loop(question, principal, budget, deps, filters, today)


def _run_loop(question: str, principal: Principal, budget: Budget, deps: LoopDeps, filters: Filters,
              today: date | None) -> LoopResult:
    clock, policy = deps.clock, deps.policy
    started = clock()
    trace_id = uuid.uuid4().hex
    deadline = started + budget.deadline_ms / 1000.0
    in_calls = 0.0
    today = today or deps.today()
    access = principal.access_scope()  # what every retriever, signal and linker below receives
    # A first link for a new access scope profiles its tables: it gets half the time left.
    read = _understand(question, access, deps, filters, today, max(0.0, deadline - clock()) / 2)
    constraints, decision = read.constraints, read.decision
    ctx = RewriteContext(question, constraints, decision, read.translation is not None, filters,
                         lambda hits, q: deps.linker.bridge_docs(hits, q, access), today)

    attempts: list[Attempt] = []
    history: list[Tried] = []
    tried: set[PlanKey] = set()
    refused: set[PlanKey] = set()
    attested = _attester(deps, access, lambda: min(budget.call_timeout_ms / 1000.0, deadline - clock()), trace_id)
    plan: Plan | None = policy.rewriter.first(ctx)
    stop: StopReason = "no_strategy_left"
    while True:
        dispatched = sum(1 for a in attempts if not a.rejected)
        if plan is None:
            stop = "no_strategy_left"
            break
        if dispatched >= budget.max_attempts:
            stop = "attempts_exhausted"
            break
        remaining = deadline - clock()
        if remaining <= 0.001:
            stop = "deadline"
            break
        problems = plan_problems(plan, constraints, tried)
        if problems:  # never dispatch a plan that loosens the question or repeats itself
            attempts.append(Attempt(len(attempts) + 1, plan, (), None, 0.0, "rejected_plan", rejected=tuple(problems)))
            if plan.key() in refused or len(refused) >= budget.max_attempts:  # a rewriter that insists gets no more turns
                stop = "no_strategy_left"
                break
            refused.add(plan.key())
            plan = policy.rewriter.next(ctx, history, tried)
            continue
        tried.add(plan.key())
        t0 = clock()
        hits, rows, error = _dispatch(plan, question, principal, access, budget, deps, read.translation,
                                      min(budget.call_timeout_ms / 1000.0, remaining), trace_id)
        in_calls += clock() - t0
        # a bridge extends the first hop; an extension (fill, follow_links) the attempt it follows
        previous = (history[-1] if plan.strategy in EXTENSIONS
                    else next((t for t in history if t.grade is not None and t.hits), None))
        verdict: Grade | None = None
        if error is None and plan.listing is not None:  # graded by how it was gathered, not by relevance
            head = head_noun(question) or ()
            hits, listing = gather(hits, budget.k, budget.list_bound, head)
            if hits and not any(of_kind(h, head) for h in hits) and _kind_elsewhere(plan, head, access, budget, deps):
                hits, listing = [], Listing(0, 0, bound_reached=False)  # the collection it names has none in the period
            verdict = construction_grade(listing, plan.listing)
        elif error is None:
            evidence = _evidence(plan, hits, previous, budget.k)
            if rows is None and not plan.merge_previous:
                evidence = dated_first(evidence, constraints.dates)
            rescore = None
            if rows is None:
                rescore = _rescorer(deps, evidence, access)
                evidence = deps.signals.annotate(question, evidence, access)
            follow = rows is None and not plan.merge_previous
            verdict = policy.grader.grade(Evidence(
                question, constraints, evidence, today, rows_sql=rows.sql if rows is not None else None,
                linked=(lambda top: deps.linker.linked_docs(top, question, access)) if follow else (lambda top: ()),
                rescore=rescore, time_left=lambda: deadline - clock()))
            if rows is None:  # passages must hold what a declined table could not link, and the question's qualifiers
                verdict = checked(verdict, read.declined, evidence)
                verdict = held(verdict, read.qualifiers, evidence, attested)
            hits = evidence
        attempts.append(Attempt(len(attempts) + 1, plan, tuple(hits), verdict, (clock() - t0) * 1000, error, rows))
        history.append(Tried(plan, tuple(hits), verdict))
        if plan.strategy in EXTENSIONS:  # the attempt it extended was sufficient already
            stop = "sufficient"
            break
        if plan.listing is not None and verdict is not None:  # the whole list, or nothing readable in the period
            stop = "sufficient" if verdict.sufficient else "no_strategy_left"
            break
        if verdict is not None and verdict.missing and set(verdict.missing) <= {f"entity:{n}" for n in read.absent}:
            stop = "no_strategy_left"  # no rewrite finds a name that no readable document holds
            break
        if verdict is not None and verdict.sufficient:
            stop = "sufficient"
            plan = policy.rewriter.extend(ctx, history[-1], budget.k, tried)
            if plan is None or dispatched + 1 >= budget.max_attempts or deadline - clock() <= 0.001:
                break
            continue
        if error == "retrieval_timeout" and deadline - clock() <= 0.001:
            stop = "deadline"
            break
        plan = policy.rewriter.next(ctx, history, tried)

    elapsed = (clock() - started) * 1000
    return _result(question, constraints, decision, attempts, stop, elapsed, elapsed - in_calls * 1000, trace_id,
                   read.declined)


def _attester(deps: LoopDeps, access: AccessScope, time_left: Callable[[], float], trace_id: str) -> Callable[[str], bool]:
    """Does a chunk the caller may read write this phrase? Asked of the exact route with the
    caller's scope (so a forbidden document attests nothing), once per phrase and question,
    within the call timeout and the time left; without an exact route, or when the scan
    fails or runs out of time, nothing is attested and no qualifier is required."""
    exact = deps.retrievers.get("exact")
    known: dict[str, bool] = {}

    def attested(phrase: str) -> bool:
        if phrase not in known:
            found, error = (None, "no_route") if exact is None else _wait(
                deps, _submit(deps, exact.search, f'"{phrase}"', access, 1, Filters()), max(0.0, time_left()), "exact",
                trace_id)
            known[phrase] = error is None and bool(found)
        return known[phrase]
    return attested


def _rescorer(deps: LoopDeps, hits: Sequence[Hit], access: AccessScope) -> Callable[[str], Sequence[Hit]]:
    """The set scored against another text (a part of the question), for the grader."""
    return lambda text: deps.signals.annotate(text, hits, access, fresh=True)


def _wait(deps: LoopDeps, future: Future[Any], timeout_s: float, what: str, trace_id: str) -> tuple[Any, str | None]:
    """The call's result, or (None, error code): a call not done in time is abandoned (see
    retrieval/calls.py); an unexpected exception is logged with the trace id, never raised."""
    try:
        return future.result(timeout=timeout_s), None
    except FutureTimeout:
        deps.calls.abandon(future)
        return None, "retrieval_timeout"
    except RetrievalError as e:
        return None, e.code
    except Exception:  # noqa: BLE001 - a broken retriever is recorded, not raised
        log.exception("retriever %s failed (trace %s)", what, trace_id)
        return None, "retrieval_unavailable"


def _submit(deps: LoopDeps, fn: Callable[..., Any], *args: Any) -> Future[Any]:
    try:
        return deps.calls.submit(fn, *args)
    except RetrievalError as e:  # every worker is held by calls that timed out
        failed: Future[Any] = Future()
        failed.set_exception(e)
        return failed


def _dispatch(plan: Plan, question: str, principal: Principal, access: AccessScope, budget: Budget, deps: LoopDeps,
              translation: Translation | None, timeout_s: float, trace_id: str) -> tuple[list[Hit], Any, str | None]:
    """Run the plan's call(s) with a timeout; returns (hits, rows or None, error code or None).
    Retrievers get the access scope; the reranker, a policy, the principal; the SQL route,
    also the principal's id, as the owner its statement slots are shared by."""
    if plan.route in ROW_ROUTES:
        if translation is None or deps.tables is None:
            return [], None, None  # not linked: no rows, graded as no evidence
        out, error = _wait(deps, _submit(deps, deps.tables.sql.retrieve, translation, plan.queries[0], access, budget.k,
                                         principal.id), timeout_s, plan.route, trace_id)
        if error is not None or not isinstance(out, Retrieved):
            return [], None, error
        return out.hits + _linked_passages(plan, out.rows.doc_ids, access, budget, deps), out.rows, None
    retriever = deps.retrievers[plan.route]
    reranker = deps.policy.reranker
    # a list asks for the bound and keeps the route's order: no policy may drop a document from it
    depth = budget.list_bound if plan.listing is not None else max(budget.k, reranker.candidates(budget.k))
    futures = [_submit(deps, retriever.search, q, access, depth, plan.filters) for q in plan.queries]
    results: dict[str, list[Hit]] = {}
    errors: list[str] = []
    end = time.monotonic() + timeout_s
    for q, f in zip(plan.queries, futures, strict=True):
        found, error = _wait(deps, f, max(0.0, end - time.monotonic()), plan.route, trace_id)
        if error is None:
            results[q] = found
        else:
            errors.append(error)
    if not results:
        return [], None, errors[0] if errors else "retrieval_unavailable"
    hits = results[plan.queries[0]] if len(plan.queries) == 1 else rrf(results, limit=depth)
    if plan.listing is not None:
        return hits, None, None
    return _reranked(question, hits, principal, deps)[: budget.k], None, None


def _reranked(question: str, hits: list[Hit], principal: Principal, deps: LoopDeps) -> list[Hit]:
    """The reranker's order over exactly the candidates it was given: a hit it invents or
    repeats is dropped, so no reranker can add a passage the retriever did not authorize."""
    ranked = deps.policy.reranker.rerank(question, hits, principal)
    if len(ranked) == len(hits) and all(a is b for a, b in zip(ranked, hits, strict=True)):
        return hits  # the retriever's own order, untouched
    given = {h.chunk_id: h for h in hits}
    out: dict[str, Hit] = {}
    for h in ranked:
        if h.chunk_id in given and h.chunk_id not in out:
            kept = given[h.chunk_id]
            out[h.chunk_id] = kept if h.score == kept.score else replace(kept, score=h.score)  # rescored, never rewritten
    return list(out.values())


def _kind_elsewhere(plan: Plan, head: Sequence[str], access: AccessScope, budget: Budget, deps: LoopDeps) -> bool:
    """Whether the caller reads, outside the list's period, documents of a collection its head
    noun names ("incidents"): then a period holding none of them lists nothing. Searched
    like any text, with the caller's own filters but not the period, so only readable
    documents count."""
    if not head:
        return False
    unbounded = Filters(sources=plan.filters.sources, doc_ids=plan.filters.doc_ids)
    try:
        found = deps.retrievers[plan.route].search(" ".join(head), access, 4 * budget.k, unbounded)
    except RetrievalError:
        return False  # the period's documents are listed as gathered
    return any(of_kind(h, head) for h in found)


def _linked_passages(plan: Plan, doc_ids: Sequence[str], access: AccessScope, budget: Budget, deps: LoopDeps) -> list[Hit]:
    """Passages of the documents the rows link (a permit's notice, an incident's report), the
    most similar to the question first: often what a question about a record asks is written
    there. Searched like any text, so only documents the caller may read come back."""
    dense = deps.retrievers.get("dense")
    if not doc_ids or dense is None:
        return []
    try:
        return dense.search(plan.queries[0], access, budget.k, Filters(doc_ids=tuple(doc_ids)))
    except RetrievalError:
        return []  # the rows answer on their own


def _result(question: str, constraints: Constraints, decision: RouteDecision, attempts: list[Attempt], stop: StopReason,
            elapsed_ms: float, overhead_ms: float, trace_id: str, declined: Decline | None = None) -> LoopResult:
    dispatched = [a for a in attempts if not a.rejected]
    succeeded = [a for a in dispatched if a.error is None]
    if dispatched and not succeeded:
        codes = {a.error for a in dispatched}
        cls = RetrievalTimeout if codes == {"retrieval_timeout"} else RetrievalUnavailable
        raise cls(f"no retrieval attempt succeeded ({', '.join(sorted(c for c in codes if c))}); retry later",
                  attempts=[a.to_json() for a in attempts])
    final = next((a for a in reversed(succeeded) if a.grade and a.grade.sufficient), None)
    if final is not None:
        return LoopResult(question, "answer_context", _passages(final), _rows(final), None,
                          constraints, decision, attempts, stop, trace_id, elapsed_ms, overhead_ms, declined=declined,
                          listing=final.grade.listing if final.grade else None)
    # Best partial evidence: fewest unmet constraints, then the earliest attempt (the router's
    # own choice). Relevance scores are not compared across routes: a dense-only set always
    # looks closer to the question than a fused one, without being better evidence.
    best = min((a for a in succeeded if a.hits), key=lambda a: (_unmet(a), a.n), default=None) or \
        (succeeded[0] if succeeded else None)
    reason: GapReason
    if stop == "deadline":
        reason = "deadline_exceeded"
    elif not dispatched:
        reason = "insufficient_evidence"
    elif all(not a.hits for a in succeeded):
        reason = "no_authorized_evidence"
    elif best is not None and best.grade is not None and best.grade.reason == "constraint_unmet":
        reason = "constraint_unmet"
    else:
        reason = "insufficient_evidence"
    missing = list(best.grade.missing) if best and best.grade else list(constraints.labels())
    if declined is not None:  # the gap names the table the question is about and the words it could not link
        missing = list(dict.fromkeys([*missing, *labels(declined)]))
    details: dict[GapReason, str] = {
        "no_authorized_evidence": "no passage or row the caller may read matched the question",
        "constraint_unmet": "no authorized evidence satisfies: " + ", ".join(missing),
        "insufficient_evidence": "the best authorized evidence did not pass the relevance threshold" if dispatched
                                 else "no plan kept the question's constraints, so nothing was searched",
        "deadline_exceeded": "the deadline ran out before sufficient evidence was found",
    }
    listed = best.grade.listing if best is not None and best.grade is not None else None
    if listed is not None and best is not None and reason == "no_authorized_evidence":
        details[reason] = (f"no document the caller may read is dated {best.plan.listing}" if best.plan.listing
                           else "no document the caller may read is within the filters")
    partial = _passages(best) if best is not None else ()
    detail = details[reason] + (f"; {sentence(declined)}" if declined is not None else "")
    gap = Gap(reason, tuple(missing), detail, bool(partial))
    return LoopResult(question, "evidence_gap", partial, _rows(best) if best else None, gap, constraints, decision,
                      attempts, stop, trace_id, elapsed_ms, overhead_ms, declined=declined, listing=listed)


def _passages(attempt: Attempt) -> tuple[Hit, ...]:
    """The context of an attempt: its passages (rows travel in `rows`, not as context)."""
    return attempt.hits if attempt.rows is None else tuple(h for h in attempt.hits if "sql" not in h.retrievers)


def _unmet(attempt: Attempt) -> int:
    if attempt.grade is None:
        return 1 << 30
    return sum(1 for m in attempt.grade.missing if not m.startswith(("relevance", "linked:")))


def _rows(attempt: Attempt | None) -> Any:
    return attempt.rows if attempt is not None and attempt.rows is not None else None
