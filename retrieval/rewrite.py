"""What to try next when the evidence is not sufficient.

A plan is one attempt: a route, one query (or several sub-queries run concurrently) and
filters. Strategies, each applicable only in some states:

- decompose: a comparison or conjunction ("X or Y", "compare X and Y", two questions joined
  by "and") becomes sub-queries, one per part, that share the rest of the question;
- bridge: catalog entities (titles of other documents) named in the first-hop passages but
  not in the question are candidate second hops; they are ranked by dense similarity to the
  question and merged with the first hop (multi-hop questions);
- switch_route: the router's next-best route for the same question (exact first when an
  identifier or phrase is what is missing);
- date_filter: a date constraint becomes a document-date filter (a tightening, never a
  loosening); a question that lists the documents of a period ("Which incidents happened in
  March 2025?") starts with that filter (`first_plan`'s `period` plan), and if nothing dated
  in the period answers, the question as asked goes to the routes next (switch_route); a
  question that asks for nothing but that list is a `listing` plan instead, graded by how it
  was gathered (retrieval/listing.py);
- expand: add terms that recur in the top authorized passages (pseudo-relevance feedback);
- relax: drop words that matched nothing so far (constraint words are never dropped);
- fill: exact found the literal items of a question that is not a lookup (a long question
  quoting a phrase, say) in fewer than k passages; the router's best text route fills the
  rest of the context behind them (see `extend_plan`, which also follows the documents a
  sufficient set's top passage names: follow_links).

The order depends on why the last grade failed (see ORDER). Every plan is checked before dispatch: it
must keep every constraint (`missing_from_queries`) and its (route, normalised queries,
filters) key must not have been tried.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Callable, Iterator, Sequence

from retrieval.constraints import Constraints, is_lookup, missing_from_queries
from retrieval.dates import DateRange
from retrieval.grader import Grade
from retrieval.listing import lists_a_period, listing_period, only_lists
from retrieval.parts import split_question
from retrieval.registry import ENUMERATING_ROUTES, FUSES, ROW_ROUTES, TEXT_ROUTES, TOPIC_ROUTES
from retrieval.router import RouteDecision
from retrieval.text import STOPWORDS, content_terms, normalize, stem, term_set
from retrieval.types import Filters, Hit

# Expansion and relaxation fix recall (nothing, or not the required thing, was found). When
# on-topic passages were found but do not answer, rewording the query only finds them again,
# so for insufficient evidence the loop looks for more parts (decompose), the documents the
# evidence points to (bridge) or another kind of evidence (switch_route).
ORDER = {
    "constraint_unmet": ("switch_route", "date_filter", "decompose", "bridge", "expand", "relax"),
    "insufficient_evidence": ("decompose", "bridge", "switch_route"),
    "no_authorized_evidence": ("switch_route", "relax", "decompose", "expand", "bridge", "date_filter"),
}
MAX_BRIDGE_DOCS = 12
ONCE = frozenset({"decompose", "date_filter", "expand", "relax"})  # strategies worth one try each


PlanKey = tuple[str, tuple[str, ...], Filters]  # (route, normalized queries, filters): a repeat is not dispatched


@dataclass(frozen=True)
class Plan:
    strategy: str
    route: str
    queries: tuple[str, ...]
    filters: Filters = field(default_factory=Filters)
    merge_previous: bool = False  # bridge: the evidence is the previous set plus the new hits
    reason: str = ""
    # a list question's plan (retrieval/listing.py): every readable passage within the filters, graded by
    # that construction; the period's phrase ("" when the caller's filters alone bound it). None: any other plan
    listing: str | None = None

    def key(self) -> PlanKey:
        return (self.route, tuple(sorted(normalize(q) for q in self.queries)), self.filters)

    def query_text(self) -> str:
        return " || ".join(self.queries)


@dataclass(frozen=True)
class Tried:
    plan: Plan
    hits: tuple[Hit, ...]
    grade: Grade | None  # None when the attempt failed


BridgeFinder = Callable[[Sequence[Hit], str], tuple[str, ...]]


@dataclass(frozen=True)
class RewriteContext:
    question: str
    constraints: Constraints
    decision: RouteDecision
    sql_linked: bool
    base_filters: Filters
    bridge_docs: BridgeFinder
    today: date | None = None  # resolves a month a list question names without its year (None: not read)


def plan_problems(plan: Plan, constraints: Constraints, tried_keys: set[PlanKey]) -> list[str]:
    """Why a plan may not be dispatched (empty when it may)."""
    date_filtered = plan.filters.date_from is not None or plan.filters.date_to is not None
    problems = [f"drops {m}" for m in missing_from_queries(constraints, plan.queries, date_filtered=date_filtered)]
    if plan.key() in tried_keys:
        problems.append("repeats an earlier (route, query)")
    return problems


def next_plan(ctx: RewriteContext, history: Sequence[Tried], tried_keys: set[PlanKey]) -> Plan | None:
    """The first applicable, constraint-keeping, untried plan, in the order the last failure suggests."""
    last = next((t for t in reversed(history) if t.grade is not None), None)
    reason = last.grade.reason if last and last.grade and last.grade.reason else "no_authorized_evidence"
    used = {t.plan.strategy for t in history}
    for strategy in ORDER.get(reason, ORDER["insufficient_evidence"]):
        if strategy in ONCE and strategy in used:
            continue
        for plan in _STRATEGIES[strategy](ctx, history, last):
            if not plan_problems(plan, ctx.constraints, tried_keys):
                return plan
    return None


def first_plan(ctx: RewriteContext) -> Plan:
    """The question on the chosen route. A question that asks for nothing but the list of a
    period's documents ("Which incidents happened in March 2025?") gathers every readable one
    (`listing_plan`); one that lists a period's documents on some topic ("Which releases
    changed the VAT rounding in Q3 2025?") searches the documents dated in it."""
    listing = listing_plan(ctx)
    if listing is not None:
        return listing
    period = _period_filters(ctx)
    if period is not None and ctx.decision.chosen in TOPIC_ROUTES:
        return Plan("period", ctx.decision.chosen, (ctx.question,), period,
                    reason=f"{ctx.decision.reason}; lists the documents dated in the question's period")
    return Plan("initial", ctx.decision.chosen, (ctx.question,), ctx.base_filters, reason=ctx.decision.reason)


def listing_plan(ctx: RewriteContext) -> Plan | None:
    """The `listing` plan of a question that asks only for a list (retrieval/listing.py), on
    the best-ranked route that returns every readable passage within its filters; None for
    any other question, or one the router sends to a table or to exact search."""
    if ctx.decision.chosen not in TOPIC_ROUTES:
        return None
    period = listing_period(ctx.question, ctx.constraints, ctx.today)
    if not only_lists(ctx.question, ctx.constraints, period):
        return None
    if period is not None:
        filters = _dated((*ctx.constraints.dates, period), ctx.base_filters)
    else:  # no period: a list only the caller's own filters bound (the whole corpus is no list)
        filters = ctx.base_filters if ctx.base_filters != Filters() and not ctx.constraints.dates else None
    route = next((r for r in (ctx.decision.chosen, *ctx.decision.ranked) if r in ENUMERATING_ROUTES), None)
    if filters is None or route is None:
        return None
    return Plan("listing", route, (ctx.question,), filters, listing=period.text if period is not None else "",
                reason=f"{ctx.decision.reason}; asks for the list of every readable document "
                       + (f"dated {period.text}" if period is not None else "within the filters"))


def _period_filters(ctx: RewriteContext) -> Filters | None:
    """The caller's filters narrowed to the question's period, when it lists one (else None)."""
    if not lists_a_period(ctx.question, ctx.constraints):
        return None
    return _dated(ctx.constraints.dates, ctx.base_filters)


def _dated(dates: Sequence[DateRange], base: Filters) -> Filters | None:
    """`base` narrowed to every bounded range of `dates` (a tightening, never a loosening);
    None when nothing bounds it or the ranges exclude each other."""
    bounded = [d for d in dates if d.start or d.end]
    if not bounded:
        return None
    start = max(filter(None, (*(d.start for d in bounded), base.date_from)), default=None)
    end = min(filter(None, (*(d.end for d in bounded), base.date_to)), default=None)
    if start and end and start > end:
        return None
    return replace(base, date_from=start, date_to=end)


EXTENSIONS = frozenset({"fill", "follow_links"})  # attempts that extend sufficient evidence


def extend_plan(ctx: RewriteContext, last: Tried, k: int, tried_keys: set[PlanKey]) -> Plan | None:
    """After sufficient evidence, one attempt that extends it (never one that replaces it):

    - follow_links: its top passage names readable documents the set lacks (a multi-hop
      question's second hop); they are searched and merged into the last quarter of the
      context. Retrieved text only adds evidence this way: it never makes a set insufficient;
    - fill: exact evidence of fewer than k passages for a question that is not a lookup of its
      literal items; the router's best text route is merged behind those passages (exact
      passages hold the literal items, they rarely hold all the question asks about)."""
    links = last.grade.links if last.grade is not None else ()
    if links and not last.plan.merge_previous:
        filters = replace(ctx.base_filters, doc_ids=tuple(sorted(links[:MAX_BRIDGE_DOCS])) if ctx.base_filters.doc_ids is None
                          else tuple(sorted(set(links) & set(ctx.base_filters.doc_ids))))
        plan = Plan("follow_links", "dense", (ctx.question,), filters, merge_previous=True,
                    reason=f"second hop over {len(filters.doc_ids or ())} documents the top passage names")
        if filters.doc_ids and not plan_problems(plan, ctx.constraints, tried_keys):
            return plan
    if last.plan.route != "exact" or len(last.hits) >= k or is_lookup(ctx.question, ctx.constraints):
        return None
    route = next((r for r in ctx.decision.ranked if r in TOPIC_ROUTES), None)
    if route is None:
        return None
    plan = Plan("fill", route, (ctx.question,), ctx.base_filters, merge_previous=True,
                reason=f"exact found {len(last.hits)} of {k} passages for a question that is not a lookup")
    return None if plan_problems(plan, ctx.constraints, tried_keys) else plan


# -- strategies ---------------------------------------------------------------------------



def _switch_route(ctx: RewriteContext, history: Sequence[Tried], last: Tried | None) -> Iterator[Plan]:
    # a route tried on the question as asked (a period's date filter narrowed it: not as asked)
    same = [t for t in history if t.plan.queries == (ctx.question,) and t.plan.filters == ctx.base_filters]
    covered = {t.plan.route for t in same} | {r for t in same if t.grade is not None for r in FUSES.get(t.plan.route, ())}
    # exact search helps only to find literal items the evidence still lacks
    lacking = last is None or last.grade is None or any(m.startswith(("identifier:", "phrase:")) for m in last.grade.missing) \
        or not last.hits
    literal = lacking and bool(ctx.constraints.identifiers or ctx.constraints.phrases or ctx.question.strip().startswith("/"))
    ranked = [r for r in ctx.decision.ranked if r not in covered
              and (r in TOPIC_ROUTES or (r == "exact" and literal) or (r in ROW_ROUTES and ctx.sql_linked))]
    if last and last.grade and any(m.startswith(("identifier:", "phrase:")) for m in last.grade.missing) and "exact" in ranked:
        ranked.remove("exact")
        ranked.insert(0, "exact")
    for r in ranked:
        yield Plan("switch_route", r, (ctx.question,), ctx.base_filters, reason=f"next-best route {r}")


def _date_filter(ctx: RewriteContext, history: Sequence[Tried], last: Tried | None) -> Iterator[Plan]:
    filters = _dated(ctx.constraints.dates, ctx.base_filters)
    if filters is None:
        return
    route = last.plan.route if last and last.plan.route in TEXT_ROUTES else "hybrid"
    yield Plan("date_filter", route, (ctx.question,), filters, reason="documents dated inside the question's range")


def _decompose(ctx: RewriteContext, history: Sequence[Tried], last: Tried | None) -> Iterator[Plan]:
    parts = split_question(ctx.question)
    if len(parts) >= 2:
        yield Plan("decompose", "hybrid", parts, ctx.base_filters, reason=f"{len(parts)} sub-queries run concurrently")


def _bridge(ctx: RewriteContext, history: Sequence[Tried], last: Tried | None) -> Iterator[Plan]:
    first = next((t for t in history if t.grade is not None and t.hits), None)
    if first is None:
        return
    pending = [m.split(":", 1)[1] for m in (last.grade.missing if last and last.grade else ()) if m.startswith("linked:")]
    docs = tuple(pending) or ctx.bridge_docs(first.hits[:3], ctx.question)
    already = {h.doc_id for h in first.hits}
    docs = tuple(d for d in docs if d not in already)[:MAX_BRIDGE_DOCS]
    if not docs:
        return
    filters = replace(ctx.base_filters, doc_ids=tuple(sorted(docs)) if ctx.base_filters.doc_ids is None
                      else tuple(sorted(set(docs) & set(ctx.base_filters.doc_ids))))
    if not filters.doc_ids:
        return
    yield Plan("bridge", "dense", (ctx.question,), filters, merge_previous=True,
               reason=f"second hop over {len(filters.doc_ids)} documents named in the first-hop passages")


def _expand(ctx: RewriteContext, history: Sequence[Tried], last: Tried | None) -> Iterator[Plan]:
    if not last or not last.hits:
        return
    q_terms = {stem(t) for t in content_terms(ctx.question)}
    # Counted in reading order (not over a set, whose order follows PYTHONHASHSEED), so that
    # terms tied in count are taken in the order the top passages hold them, in every process.
    counts: Counter[str] = Counter()
    for h in last.hits[:3]:
        for t in dict.fromkeys(content_terms(h.text)):
            if stem(t) not in q_terms and not t.isdigit() and len(t) > 3 and t not in STOPWORDS:
                counts[t] += 1
    extra = [t for t, n in counts.most_common(5) if n >= 2]
    if extra:
        yield Plan("expand", "hybrid", (f"{ctx.question} {' '.join(extra)}",), ctx.base_filters,
                   reason=f"added terms shared by the top passages: {', '.join(extra)}")


def _relax(ctx: RewriteContext, history: Sequence[Tried], last: Tried | None) -> Iterator[Plan]:
    seen: set[str] = set()
    for t in history:
        for h in t.hits:
            seen |= term_set(f"{h.title or ''} {h.text}")
    keep_text = " ".join([*ctx.constraints.identifiers, *ctx.constraints.phrases, *ctx.constraints.entities,
                          *(d.text for d in ctx.constraints.dates)]).lower()
    terms = content_terms(ctx.question)
    kept = [t for t in terms if stem(t) in seen or t in keep_text]
    if not seen or len(kept) == len(terms) or not kept:
        return
    quoted = [f'"{p}"' for p in ctx.constraints.phrases]
    query = " ".join(dict.fromkeys([*quoted, *ctx.constraints.identifiers, *ctx.constraints.entities,
                                    *(d.text for d in ctx.constraints.dates), *kept]))
    yield Plan("relax", "hybrid", (query,), ctx.base_filters, reason="dropped words that matched no passage")


_STRATEGIES: dict[str, Callable[[RewriteContext, Sequence[Tried], Tried | None], Iterator[Plan]]] = {
    "switch_route": _switch_route,
    "date_filter": _date_filter,
    "decompose": _decompose,
    "bridge": _bridge,
    "expand": _expand,
    "relax": _relax,
}
