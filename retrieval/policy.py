"""The loop's replaceable parts: router, grader, rewriter and reranker, as small interfaces.

The loop (retrieval/loop.py) calls only these; the defaults below are Quarry's own feature
router, signal grader, strategy rewriter and a reranker that keeps the retriever's order. A
deployment swaps any of them by settings (`QUARRY_GRADER=mypkg.judge:make_grader`), so a
model-driven policy needs no change to the loop. Whatever a rewriter proposes, the loop
checks before dispatch that the plan keeps every constraint of the question and was not tried
before: that check is the safety boundary, and it does not trust the rewriter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Callable, Protocol, Sequence, runtime_checkable

from retrieval.constraints import Constraints
from retrieval.grader import Grade, GraderConfig, grade
from retrieval.rewrite import Plan, PlanKey, RewriteContext, Tried, extend_plan, first_plan, next_plan
from retrieval.router import RouteDecision, RouterConfig, features, route
from retrieval.types import Hit, Principal

# (doc id, best chunk's cosine to the question, named by the question itself)
LinkedDoc = tuple[str, float, bool]


@dataclass(frozen=True)
class RouteInputs:
    """What a router may read about a question: never retrieved text."""

    question: str
    constraints: Constraints
    sql_linked: bool  # a readable table answers it with a confident translation
    term_stats: tuple[int, int, int] | None = None  # (terms, known terms, rare terms) over readable chunks


@dataclass(frozen=True)
class Evidence:
    """One attempt's evidence as the grader sees it."""

    question: str
    constraints: Constraints
    hits: Sequence[Hit]
    today: date
    rows_sql: str | None = None  # the statement, when the hits are rows of a confident translation
    linked: Callable[[Sequence[Hit]], Sequence[LinkedDoc]] = lambda hits: ()  # documents the passages name
    # the same hits with their signals computed against another text (a part of the question); None: not offered
    rescore: Callable[[str], Sequence[Hit]] | None = None
    # seconds left before the question's deadline (a grader that calls out must end by then); None: no deadline
    time_left: Callable[[], float] | None = None


@runtime_checkable
class Router(Protocol):
    def route(self, inputs: RouteInputs, available: Sequence[str]) -> RouteDecision:
        """Rank the available routes for a question; `chosen` is tried first."""
        ...


@runtime_checkable
class Grader(Protocol):
    def grade(self, evidence: Evidence) -> Grade:
        """Is this evidence sufficient? A gap names its reason and what is missing."""
        ...


@runtime_checkable
class Rewriter(Protocol):
    def first(self, ctx: RewriteContext) -> Plan:
        """The first attempt's plan (normally the question on the chosen route)."""
        ...

    def next(self, ctx: RewriteContext, history: Sequence[Tried], tried: set[PlanKey]) -> Plan | None:
        """The next plan after an insufficient attempt, or None when nothing is left to try."""
        ...

    def extend(self, ctx: RewriteContext, last: Tried, k: int, tried: set[PlanKey]) -> Plan | None:
        """One attempt that adds to sufficient evidence (a second hop, a fill), or None."""
        ...


@runtime_checkable
class Reranker(Protocol):
    def candidates(self, k: int) -> int:
        """How many authorized candidates to ask the retriever for, to return k."""
        ...

    def rerank(self, question: str, hits: Sequence[Hit], principal: Principal) -> list[Hit]:
        """The candidates rescored, best first. They are already authorized; a reranker
        only reorders or drops them (the loop keeps only hits it was given)."""
        ...


class FeatureRouter:
    """Quarry's router: a linear score per route over the question's surface features."""

    def __init__(self, config: RouterConfig = RouterConfig()) -> None:
        self.config = config

    def route(self, inputs: RouteInputs, available: Sequence[str]) -> RouteDecision:
        return route(features(inputs.question, inputs.constraints, inputs.sql_linked, inputs.term_stats),
                     self.config, available)


class SignalGrader:
    """Quarry's grader: hard constraints, then a logistic score over retrieval signals."""

    def __init__(self, config: GraderConfig = GraderConfig()) -> None:
        self.config = config

    def grade(self, evidence: Evidence) -> Grade:
        top = list(evidence.hits[: self.config.link_passages])
        return grade(evidence.question, evidence.constraints, evidence.hits, self.config, evidence.today,
                     rows_sql=evidence.rows_sql, linked=lambda: evidence.linked(top), rescore=evidence.rescore)


class StrategyRewriter:
    """Quarry's rewriter: the strategies of retrieval/rewrite.py in the order a failure suggests."""

    def first(self, ctx: RewriteContext) -> Plan:
        return first_plan(ctx)

    def next(self, ctx: RewriteContext, history: Sequence[Tried], tried: set[PlanKey]) -> Plan | None:
        return next_plan(ctx, history, tried)

    def extend(self, ctx: RewriteContext, last: Tried, k: int, tried: set[PlanKey]) -> Plan | None:
        return extend_plan(ctx, last, k, tried)


class KeepOrder:
    """No reranking: the retriever's own order (the default until an answer-level model ships)."""

    def candidates(self, k: int) -> int:
        return k

    def rerank(self, question: str, hits: Sequence[Hit], principal: Principal) -> list[Hit]:
        return list(hits)


@dataclass(frozen=True)
class Policy:
    """The collaborators one loop uses."""

    router: Router = field(default_factory=FeatureRouter)
    grader: Grader = field(default_factory=SignalGrader)
    rewriter: Rewriter = field(default_factory=StrategyRewriter)
    reranker: Reranker = field(default_factory=KeepOrder)
