"""Questions that ask for a list, read from their structure, and lists graded by how they were
gathered (retrieval/listing.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from retrieval.constraints import extract
from retrieval.dates import bare_month, stated_days
from retrieval.listing import SOURCE, construction_grade, gather, head_noun, listing_period, only_lists
from retrieval.rewrite import RewriteContext, first_plan
from retrieval.router import RouteDecision
from retrieval.types import NO_FILTERS, Filters, Hit, Listing

TODAY = date(2025, 11, 1)


def pure(question: str) -> bool:
    constraints = extract(question, TODAY)
    return only_lists(question, constraints, listing_period(question, constraints, TODAY))


@pytest.mark.parametrize("question", [
    "Which incidents happened in March 2025?", "List the incidents reported in March 2025",
    "Which meetings took place in Q2 2025?", "Show every change logged in March", "What changes were made in 2024?",
    "Show me all the outages of the first quarter of 2025", "Name each inspection carried out in June 2025",
    "Which permits have been issued since 1 September 2025?", "What inspections and audits were written up in May 2025?",
    "List the audit and inspection notes from Q3 2025.",
])
def test_a_question_that_asks_only_for_the_list_of_a_period_is_read_as_one(question):
    assert pure(question)


@pytest.mark.parametrize("question", [
    "Which releases changed the VAT rounding in Q3 2025?",  # a topic narrows it
    "What incidents affected the ledger in March 2025?",
    "Which incidents did INC-2041 follow in March 2025?",  # an identifier narrows it
    "What did the board decide in March 2025?",  # asks about something, not for things
    "Which dates in March 2025 are holidays?",  # asks for times
    "What was the overspend in Q3 2025?",
])
def test_a_question_narrowed_beyond_its_noun_and_period_is_no_pure_list(question):
    assert not pure(question)


def test_the_head_noun_is_a_plural_or_a_singular_after_every():
    assert head_noun("Which sev1 incidents happened in May?") == ("sev1", "incidents")
    assert head_noun("Show every change logged in March") == ("change",)
    assert head_noun("Show the change logged in March") is None
    assert head_noun("How many incidents happened in May 2025?") is None
    assert head_noun("What inspections and audits were written up?") == ("inspections", "audits")
    assert head_noun("List the audit and inspection notes from Q3") == ("audit", "inspection", "notes")
    assert head_noun("What did the audit find about the notes?") is None  # no plural joined to the question word


def test_a_list_since_a_date_runs_to_today_and_one_from_a_later_date_is_no_period():
    question = "Which permits have been issued since 1 September 2025?"
    period = listing_period(question, extract(question, TODAY), TODAY)
    assert (period.start, period.end) == (date(2025, 9, 1), TODAY)
    later = "Which permits have been issued since 1 December 2025?"
    assert listing_period(later, extract(later, TODAY), TODAY) is None
    assert listing_period(question, extract(question, TODAY), None) is None  # no today: no end to read


def test_a_month_without_its_year_is_the_latest_that_has_begun():
    assert (bare_month("Show every change logged in March", TODAY).start, bare_month("in December", TODAY).start) == \
        (date(2025, 3, 1), date(2024, 12, 1))
    assert bare_month("changes in March 2025", TODAY) is None and bare_month("in March or in May", TODAY) is None
    assert listing_period("A shopper bought it in March 2025", extract("in March 2025", TODAY), None).start == date(2025, 3, 1)
    assert listing_period("Show every change logged in March", extract("x", TODAY), None) is None  # no today: not read


def test_stated_days_are_full_calendar_days_outside_operators_and_ranges():
    assert stated_days("Incident report — 14 March 2025") == (date(2025, 3, 14),)
    assert stated_days("minutes of March 5, 2025 (2025-03-05)") == (date(2025, 3, 5),)
    for text in ("March 2025", "Q1 2025", "03/04/2025", "yesterday", "actions due before 3 May 2025",
                 "from 1 March 2025 to 3 March 2025", "from 1 to 3 March 2025", "between 1 January and 30 June 2025",
                 "30 February 2025"):
        assert stated_days(text) == (), text


def _hit(doc: str, n: int) -> Hit:
    return Hit(f"{doc}#{n}", doc, f"passage {n} of {doc}", 1.0 - n / 10, ("dense",), 0, 10)


def test_gather_keeps_each_documents_best_passage_in_order_and_counts_the_rest():
    hits = [_hit("a", 0), _hit("b", 1), _hit("a", 2), _hit("c", 3), _hit("d", 4)]
    shown, listing = gather(hits, 2, bound=10)
    assert [h.chunk_id for h in shown] == ["a#0", "b#1"]
    assert listing == Listing(4, 2, False) and not listing.complete
    shown, listing = gather(hits, 8, bound=5)
    assert len(shown) == 4 and listing.bound_reached and not listing.complete


def test_past_k_the_documents_whose_title_names_the_thing_listed_come_first():
    hits = [replace(_hit(d, i), title=t) for i, (d, t) in
            enumerate([("m", "Monthly report, June"), ("a", "Audit note 14"), ("p", "Policy"), ("b", "Audits: lab B")])]
    shown, listing = gather(hits, 2, bound=10, head=("audits",))
    assert [h.doc_id for h in shown] == ["a", "b"] and listing == Listing(4, 2, False)
    shown, _ = gather(hits, 8, bound=10, head=("audits",))
    assert [h.doc_id for h in shown] == ["m", "a", "p", "b"]  # all of them fit: the route's order


def test_a_construction_grade_says_complete_truncated_or_empty():
    whole = construction_grade(Listing(3, 3, False), "March 2025")
    assert (whole.sufficient, whole.source, whole.missing, whole.p_sufficient) == (True, SOURCE, (), 1.0)
    assert whole.to_json()["listing"] == {"complete": True, "documents": 3, "shown": 3, "bound_reached": False}
    assert construction_grade(Listing(10, 8, False), "Q1 2025").missing == ("listing:2_more_documents",)
    assert construction_grade(Listing(8, 8, True), "Q1 2025").missing == ("listing:bound_reached",)
    empty = construction_grade(Listing(0, 0, False), "July 2025")
    assert (empty.sufficient, empty.reason, empty.missing) == (False, "no_authorized_evidence", ("date:July 2025",))


def _ctx(question: str, chosen: str = "bm25", base: Filters = NO_FILTERS) -> RewriteContext:
    ranked = (chosen, *(r for r in ("hybrid", "dense", "bm25", "exact") if r != chosen))
    decision = RouteDecision(chosen, {r: 0.0 for r in ranked}, ranked, "test")
    return RewriteContext(question, extract(question, TODAY), decision, False, base, lambda hits, q: (), TODAY)


def test_a_list_question_is_planned_on_a_route_that_returns_every_readable_passage():
    plan = first_plan(_ctx("Which incidents happened in March 2025?"))
    assert (plan.strategy, plan.route, plan.listing) == ("listing", "hybrid", "March 2025")
    assert (plan.filters.date_from, plan.filters.date_to) == (date(2025, 3, 1), date(2025, 3, 31))
    assert first_plan(_ctx("Which incidents happened in March 2025?", chosen="exact")).listing is None
    topic = first_plan(_ctx("Which releases changed the VAT rounding in Q3 2025?"))
    assert (topic.strategy, topic.listing) == ("period", None)  # searched within the period, graded by relevance


def test_a_list_the_callers_filters_bound_is_a_listing_and_the_whole_corpus_is_not():
    bounded = first_plan(_ctx("Which incidents are there?", base=Filters(sources=("incidents",))))
    assert (bounded.strategy, bounded.listing, bounded.filters.sources) == ("listing", "", ("incidents",))
    assert first_plan(_ctx("Which incidents are there?")).strategy == "initial"
