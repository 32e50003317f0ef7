"""Routing: every route can be chosen, and hybrid is the default text route."""

from __future__ import annotations

from datetime import date

from retrieval.constraints import extract
from retrieval.registry import ROUTES, route_agrees
from retrieval.router import RouterConfig, features, route
from retrieval.tune import fit_router

TODAY = date(2025, 11, 1)
TEXT = ("exact", "bm25", "dense", "hybrid")


def chosen(question: str, config: RouterConfig = RouterConfig(), available=TEXT) -> str:
    return route(features(question, extract(question, TODAY), False), config, available).chosen


def test_the_defaults_send_questions_to_hybrid_keyword_lists_to_bm25_and_identifiers_to_exact():
    assert chosen("How do nurses swap a night shift with a colleague?") == "hybrid"
    assert chosen("badge reader east entrance") == "bm25"
    assert chosen("HIT-1042") == "exact"


def test_a_fitted_router_chooses_bm25_and_dense_where_the_labels_do():
    labeled = [("printer jam ward", "bm25"), ("pharmacy cabinet override log", "bm25"), ("visitor badge hours", "bm25"),
               ("Why might a patient feel calmer when they can see their family every evening?", "dense"),
               ("What helps people sleep better when they stay on a noisy shared ward at night?", "dense"),
               ("How can someone get into the building if their card is not accepted at the door?", "dense"),
               ("What is HIT-1042 about?", "exact"), ("Was BP-2201 approved?", "exact"),
               ("Compare the June and July facilities minutes", "hybrid"),
               ("Which archive does radiology use and when?", "hybrid")]
    rows = [features(q, extract(q, TODAY), False) for q, _ in labeled]
    config = fit_router(rows, [r for _, r in labeled], seed=0, c=10.0)
    picks = {r: chosen(q, config) for q, r in labeled}
    assert picks["bm25"] == "bm25" and picks["dense"] == "dense"
    assert {chosen(q, config) for q, r in labeled if r == "dense"} == {"dense"}


def test_hybrid_answers_a_question_labeled_bm25_or_dense_and_nothing_else_does():
    assert route_agrees("bm25", "hybrid") and route_agrees("dense", "hybrid") and route_agrees("hybrid", "hybrid")
    assert not route_agrees("hybrid", "bm25") and not route_agrees("exact", "hybrid") and not route_agrees("sql", "hybrid")
    assert not route_agrees("bm25", None)
    assert all(route_agrees(r, r) for r in ROUTES)
