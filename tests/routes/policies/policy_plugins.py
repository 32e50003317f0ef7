"""Policies a deployment could plug in by settings, for the plug-in tests: their effect is
unmistakable (a fixed score, a reversed order), so a test can tell they ran."""

from __future__ import annotations

from dataclasses import replace

from retrieval.grader import Grade

STAMP = 0.4242


class StampGrader:
    """Calls any non-empty evidence sufficient, with a score no built-in grade produces."""

    def grade(self, evidence):
        if not evidence.hits:
            return Grade(False, "no_authorized_evidence", ("relevance",), 0.0)
        return Grade(True, None, (), STAMP)


class ReverseReranker:
    """Asks for twice the candidates and returns them worst first, scored by position."""

    def candidates(self, k):
        return 2 * k

    def rerank(self, question, hits, principal):
        return [replace(h, score=float(i)) for i, h in enumerate(reversed(hits))]


class DropsIdentifiers:
    """A rewriter that proposes the question without its identifiers: always rejected."""

    def first(self, ctx):
        from retrieval.rewrite import first_plan

        return first_plan(ctx)

    def next(self, ctx, history, tried):
        from retrieval.rewrite import Plan

        words = [w for w in ctx.question.split() if w.strip("?,.") not in ctx.constraints.identifiers]
        return Plan("expand", "hybrid", (" ".join(words),), ctx.base_filters, reason="drops the identifier")

    def extend(self, ctx, last, k, tried):
        return None


def make_grader(settings, engine):
    return StampGrader()


def make_reranker(settings, engine):
    return ReverseReranker()


def make_rewriter(settings, engine):
    return DropsIdentifiers()


def make_broken(settings, engine):
    raise RuntimeError("model file missing")


def make_nothing(settings, engine):
    return object()
