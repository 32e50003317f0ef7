"""Rewrites: which plan comes next after each kind of failure, and no plan loosens the question."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.constraints import Constraints, extract
from retrieval.grader import Grade
from retrieval.rewrite import (
    ONCE,
    ORDER,
    Plan,
    RewriteContext,
    Tried,
    extend_plan,
    first_plan,
    next_plan,
    plan_problems,
    split_question,
)
from retrieval.router import RouteDecision
from retrieval.types import NO_FILTERS, Filters, Hit

TODAY = date(2025, 11, 1)
RANKED = ("hybrid", "dense", "bm25", "exact", "sql")
COMPARISON = "Which took longer in March 2025, INC-2077 or INC-2041?"
# First-hop passages: "ledger" and "replica" recur (expansion terms); "took" and "longer" never appear (relaxable).
HITS = (
    Hit("a#0", "inc-2077", "INC-2077: ledger replica failover stalled the ledger", 1.0, ("hybrid",), 0, 52),
    Hit("b#0", "inc-2041", "INC-2041: ledger replica lag", 1.0, ("hybrid",), 0, 28),
    Hit("c#0", "runbook", "ledger replica runbook", 1.0, ("hybrid",), 0, 22),
)


def context(question: str = COMPARISON, entities: tuple[str, ...] = (), ranked: tuple[str, ...] = RANKED,
            sql_linked: bool = True, base: Filters = NO_FILTERS,
            bridge: tuple[str, ...] = ("postmortem-2077",)) -> RewriteContext:
    decision = RouteDecision(ranked[0], {r: float(-i) for i, r in enumerate(ranked)}, ranked, f"{ranked[0]}: test")
    return RewriteContext(question, extract(question, TODAY, entities), decision, sql_linked, base,
                          lambda hits, q: bridge)


def failed(reason: str, missing: tuple[str, ...]) -> Grade:
    return Grade(False, reason, missing)


def run(ctx: RewriteContext, reason: str, missing: tuple[str, ...], history: list[Tried] | None = None) -> list[Plan]:
    """Every plan next_plan yields, each attempt graded with the same failure, until it has none."""
    history = history if history is not None else [Tried(first_plan(ctx), HITS, failed(reason, missing))]
    tried = {t.plan.key() for t in history}
    plans = []
    while (plan := next_plan(ctx, history, tried)) is not None:
        assert len(plans) < 30, plans
        plans.append(plan)
        tried.add(plan.key())
        history.append(Tried(plan, HITS, failed(reason, missing)))
    return plans


def strategies(plans: list[Plan]) -> list[str]:
    return list(dict.fromkeys(p.strategy for p in plans))


def kept(constraints: Constraints, plan: Plan) -> bool:
    """The test's own oracle: each constraint's text is in some query (case and spacing aside),
    and a date may instead be carried by a date filter."""
    squash = lambda t: " ".join(t.lower().split())
    queries = [squash(q) for q in plan.queries]
    dated = plan.filters.date_from is not None or plan.filters.date_to is not None
    texts = [*constraints.identifiers, *constraints.phrases, *constraints.entities,
             *([] if dated else [d.text for d in constraints.dates])]
    return all(any(squash(t) in q for q in queries) for t in texts)


# -- plan_problems ------------------------------------------------------------------------


def test_a_plan_that_drops_an_identifier_is_reported():
    c = extract("Which release fixed INC-2041?", TODAY)
    assert plan_problems(Plan("x", "hybrid", ("Which release fixed the outage?",)), c, set()) == \
        ["drops identifier:INC-2041"]


def test_a_plan_that_drops_a_phrase_or_an_entity_is_reported():
    c = extract('Does the Ledger Service runbook say "drain the pool"?', TODAY, ["Ledger Service"])
    assert plan_problems(Plan("x", "hybrid", ("ledger runbook drain pool",)), c, set()) == \
        ["drops phrase:drain the pool", "drops entity:Ledger Service"]


def test_a_plan_that_drops_a_date_is_reported_unless_a_date_filter_carries_it():
    c = extract("What changed in INC-2077 in June 2024?", TODAY)
    plan = Plan("x", "hybrid", ("What changed in INC-2077?",))
    assert plan_problems(plan, c, set()) == ["drops date:June 2024"]
    assert plan_problems(Plan("x", "hybrid", plan.queries, Filters(date_from=date(2024, 6, 1))), c, set()) == []
    assert plan_problems(Plan("x", "hybrid", plan.queries, Filters(date_to=date(2024, 6, 30))), c, set()) == []


def test_constraints_kept_across_sub_queries_or_in_other_casing_and_spacing_are_kept():
    c = extract('Which took longer, INC-2077 or INC-2041, under "quiet  ward" rules?', TODAY)
    plan = Plan("x", "hybrid", ("inc-2077 took longer QUIET WARD", "inc-2041 took longer"))
    assert plan_problems(plan, c, set()) == []


def test_a_plan_repeating_an_earlier_route_query_and_filters_is_reported():
    c = extract("Which release fixed INC-2041?", TODAY)
    tried = {Plan("initial", "hybrid", ("Which release fixed INC-2041?",)).key()}
    assert plan_problems(Plan("x", "hybrid", ("which  release FIXED inc-2041?",)), c, tried) == \
        ["repeats an earlier (route, query)"]
    assert plan_problems(Plan("x", "exact", ("Which release fixed INC-2041?",)), c, tried) == []
    narrower = Plan("x", "hybrid", ("Which release fixed INC-2041?",), Filters(sources=("wiki",)))
    assert plan_problems(narrower, c, tried) == []


def test_sub_queries_in_another_order_repeat_the_same_plan():
    c = extract("Which took longer, INC-2077 or INC-2041?", TODAY)
    tried = {Plan("decompose", "hybrid", ("INC-2077 took longer", "INC-2041 took longer")).key()}
    assert plan_problems(Plan("decompose", "hybrid", ("INC-2041 took longer", "INC-2077 took longer")), c, tried) == \
        ["repeats an earlier (route, query)"]


def test_a_plan_that_widens_a_between_range_to_its_year_is_reported():
    c = extract("How many incidents did the ledger team record between January 2024 and March 2024?", TODAY)
    assert plan_problems(Plan("x", "hybrid", ("ledger team incidents 2024",)), c, set()) != []


# -- next_plan ----------------------------------------------------------------------------


def test_after_a_constraint_unmet_grade_the_strategies_come_in_their_order():
    plans = run(context(), "constraint_unmet", ("identifier:INC-2041",))
    assert strategies(plans) == list(ORDER["constraint_unmet"])


def test_after_insufficient_evidence_the_strategies_come_in_their_order():
    plans = run(context(), "insufficient_evidence", ("relevance",))
    assert strategies(plans) == list(ORDER["insufficient_evidence"])


def test_after_no_authorized_evidence_the_strategies_come_in_their_order():
    ctx = context()
    plans = run(ctx, "no_authorized_evidence", tuple(ctx.constraints.labels()))
    assert strategies(plans) == list(ORDER["no_authorized_evidence"])


def test_a_missing_identifier_sends_the_question_to_exact_before_a_better_ranked_route():
    ctx = context(ranked=("hybrid", "sql", "dense", "bm25", "exact"))
    plans = run(ctx, "constraint_unmet", ("identifier:INC-2041",))
    assert [(p.strategy, p.route, p.queries) for p in plans[:2]] == \
        [("switch_route", "exact", (COMPARISON,)), ("switch_route", "sql", (COMPARISON,))]


def test_insufficient_evidence_never_switches_to_exact_when_the_literal_items_were_found():
    plans = run(context(), "insufficient_evidence", ("relevance",))
    assert [p.route for p in plans if p.strategy == "switch_route"] == ["sql"]


def test_switch_route_skips_routes_hybrid_already_covers_and_sql_without_a_linked_table():
    plans = run(context(sql_linked=False), "constraint_unmet", ("identifier:INC-2041",))
    assert [p.route for p in plans if p.strategy == "switch_route"] == ["exact"]


def test_each_once_strategy_is_used_at_most_once_and_switch_route_more():
    ctx = context()
    for reason, missing in (("constraint_unmet", ("identifier:INC-2041",)),
                            ("no_authorized_evidence", tuple(ctx.constraints.labels()))):
        used = [p.strategy for p in run(ctx, reason, missing)]
        assert all(used.count(s) <= 1 for s in ONCE), used
        assert used.count("switch_route") == 2, used


def test_a_once_strategy_used_before_is_not_used_again_even_with_a_new_plan():
    ctx = context()
    earlier = Plan("decompose", "hybrid", ("INC-2077 duration", "INC-2041 duration in March 2025"))
    history = [Tried(first_plan(ctx), HITS, failed("insufficient_evidence", ("relevance",))),
               Tried(earlier, HITS, failed("insufficient_evidence", ("relevance",)))]
    assert strategies(run(ctx, "insufficient_evidence", ("relevance",), history)) == ["bridge", "switch_route"]


def test_after_an_attempt_that_failed_the_routes_it_fuses_are_still_tried():
    ctx = context()
    plan = next_plan(ctx, [Tried(first_plan(ctx), (), None)], {first_plan(ctx).key()})
    assert (plan.strategy, plan.route) == ("switch_route", "dense")


def test_the_date_filter_tightens_the_callers_filter_and_never_loosens_it():
    ctx = context(base=Filters(date_from=date(2025, 3, 10), sources=("wiki",)))
    (plan,) = [p for p in run(ctx, "constraint_unmet", ("date:March 2025",)) if p.strategy == "date_filter"]
    assert plan.filters == Filters(sources=("wiki",), date_from=date(2025, 3, 10), date_to=date(2025, 3, 31))


def test_a_bridge_searches_only_documents_the_first_hop_lacks():
    ctx = context(bridge=("inc-2077", "postmortem-2077", "postmortem-2041"))
    (plan,) = [p for p in run(ctx, "insufficient_evidence", ("relevance",)) if p.strategy == "bridge"]
    assert plan.filters.doc_ids == ("postmortem-2041", "postmortem-2077") and plan.merge_previous


def test_a_bridge_follows_the_documents_the_grade_says_are_missing_first():
    ctx = context(bridge=("postmortem-2077",))
    (plan,) = [p for p in run(ctx, "insufficient_evidence", ("linked:incident-log",)) if p.strategy == "bridge"]
    assert plan.filters.doc_ids == ("incident-log",)


def test_expand_adds_terms_the_top_passages_share_to_the_whole_question():
    (plan,) = [p for p in run(context(), "constraint_unmet", ("identifier:INC-2041",)) if p.strategy == "expand"]
    (query,) = plan.queries
    assert query.startswith(f"{COMPARISON} ") and set(query[len(COMPARISON):].split()) == {"ledger", "replica"}


def test_relax_drops_words_no_passage_matched_and_keeps_every_constraint():
    question = 'Which "replica lag" runbook took longer for INC-2041 in March 2025?'
    ctx = context(question)
    (plan,) = [p for p in run(ctx, "constraint_unmet", ("phrase:replica lag",)) if p.strategy == "relax"]
    (query,) = plan.queries
    assert '"replica lag"' in query and "INC-2041" in query and "March 2025" in query
    assert "took" not in query and "longer" not in query and "runbook" in query


def test_relax_proposes_nothing_when_every_word_matched_a_passage():
    ctx = context("ledger replica failover for INC-2041")
    assert "relax" not in strategies(run(ctx, "no_authorized_evidence", ("identifier:INC-2041",)))


# -- split_question -----------------------------------------------------------------------


def test_a_comparison_of_two_identifiers_splits_into_one_query_each_sharing_the_rest():
    assert split_question("Which took longer, INC-2077 or INC-2041?") == \
        ("INC-2077 took longer", "INC-2041 took longer")


def test_compare_x_and_y_splits_into_one_query_per_item():
    a, b = split_question("Compare INC-2077 and INC-2041")
    assert "INC-2077" in a and "INC-2041" not in a
    assert "INC-2041" in b and "INC-2077" not in b


def test_the_parts_of_a_comparison_differ_only_in_the_item_compared():
    for question in ("Compare INC-2077 and INC-2041", "What is the difference between INC-2077 and INC-2041?",
                     "Which was longer: INC-2077 or INC-2041?"):
        a, b = split_question(question)
        assert a.replace("INC-2077", "X") == b.replace("INC-2041", "X"), (question, a, b)


def test_the_parts_of_a_comparison_keep_a_dotted_identifier_from_the_shared_part():
    a, b = split_question("Which release fixed 3.1.2, INC-2077 or INC-2041?")
    assert "3.1.2" in a and "3.1.2" in b


def test_two_questions_joined_by_and_split_into_both():
    assert split_question("What caused the ledger outage in June and how was the ledger lock timeout fixed?") == \
        ("What caused the ledger outage in June", "how was the ledger lock timeout fixed?")


def test_a_single_question_does_not_split():
    for question in ("What is the leave policy?", "How do nurses swap a night shift with a colleague?",
                     "salt and pepper", "What changed in INC-2077 and when was it fixed?"):
        assert split_question(question) == (), question


def test_decompose_runs_the_parts_concurrently_on_hybrid():
    (plan,) = [p for p in run(context(), "insufficient_evidence", ("relevance",)) if p.strategy == "decompose"]
    assert plan.route == "hybrid"
    assert plan.queries == ("INC-2077 took longer in March 2025", "INC-2041 took longer in March 2025")


# -- extend_plan --------------------------------------------------------------------------


def sufficient(links: tuple[str, ...] = ()) -> Grade:
    return Grade(True, None, (), 0.9, links=links)


def test_extend_follows_the_links_of_a_sufficient_set():
    ctx = context()
    plan = extend_plan(ctx, Tried(first_plan(ctx), HITS, sufficient(("replica-runbook", "postmortem-2077"))), 5,
                       {first_plan(ctx).key()})
    assert (plan.strategy, plan.route, plan.queries, plan.merge_previous) == \
        ("follow_links", "dense", (COMPARISON,), True)
    assert plan.filters.doc_ids == ("postmortem-2077", "replica-runbook")


def test_extend_follows_links_only_inside_the_callers_documents():
    ctx = context(base=Filters(doc_ids=("replica-runbook", "inc-2077")))
    plan = extend_plan(ctx, Tried(first_plan(ctx), HITS, sufficient(("replica-runbook", "postmortem-2077"))), 5, set())
    assert plan.filters.doc_ids == ("replica-runbook",)
    ctx = context(base=Filters(doc_ids=("inc-2077",)))
    assert extend_plan(ctx, Tried(first_plan(ctx), HITS, sufficient(("replica-runbook",))), 5, set()) is None


def test_extend_does_not_follow_links_from_evidence_that_already_merged_a_hop():
    ctx = context()
    bridge = Plan("bridge", "dense", (COMPARISON,), Filters(doc_ids=("inc-2041",)), merge_previous=True)
    assert extend_plan(ctx, Tried(bridge, HITS, sufficient(("replica-runbook",))), 5, set()) is None


QUOTING = 'Opponents argue that screens disturb sleep and that the "quiet ward" policy should ban them at night.'


def test_extend_fills_behind_too_few_exact_passages_for_a_question_that_is_not_a_lookup():
    ctx = context(QUOTING, ranked=("exact", "bm25", "hybrid", "dense"))
    exact = Plan("initial", "exact", (QUOTING,))
    plan = extend_plan(ctx, Tried(exact, HITS[:2], sufficient()), 5, {exact.key()})
    assert (plan.strategy, plan.route, plan.queries, plan.merge_previous) == ("fill", "bm25", (QUOTING,), True)


def test_extend_does_not_fill_when_exact_found_k_passages_or_another_route_answered():
    ctx = context(QUOTING, ranked=("exact", "hybrid"))
    assert extend_plan(ctx, Tried(Plan("initial", "exact", (QUOTING,)), HITS, sufficient()), 3, set()) is None
    assert extend_plan(ctx, Tried(Plan("initial", "hybrid", (QUOTING,)), HITS[:1], sufficient()), 5, set()) is None


def test_extend_proposes_nothing_for_a_lookup():
    question = "Which release fixed INC-2041?"
    ctx = context(question, ranked=("exact", "hybrid"))
    assert extend_plan(ctx, Tried(Plan("initial", "exact", (question,)), HITS[:1], sufficient()), 5, set()) is None


# -- no plan loosens the question ---------------------------------------------------------

SUBJECTS = ("Which took longer", "What caused the ledger outage", "Compare the runbooks", "Who approved the fix")
ITEMS = ("INC-2077", "INC-2041", "LEDGER_LOCK_TIMEOUT", "3.1.2", '"quiet ward"', "Ledger Service")
DATES = ("", " in March 2025", " before June 2025", " between January 2024 and March 2024", " last quarter")
FORMS = ("{s}{d}, {a} or {b}?", "{s} {a} and {b}{d}", "{s} for {a}{d} and how was {b} fixed?", "{s} {a}{d}")
REASONS = st.sampled_from([("constraint_unmet", ("identifier:INC-2077",)), ("insufficient_evidence", ("relevance",)),
                           ("no_authorized_evidence", ()), ("insufficient_evidence", ("linked:incident-log",))])


@given(subject=st.sampled_from(SUBJECTS), items=st.lists(st.sampled_from(ITEMS), min_size=2, max_size=2, unique=True),
       when=st.sampled_from(DATES), form=st.sampled_from(FORMS), reasons=st.lists(REASONS, min_size=1, max_size=8))
@settings(max_examples=80)
def test_no_plan_next_or_extend_yields_drops_a_constraint_or_repeats(subject, items, when, form, reasons):
    question = form.format(s=subject, a=items[0], b=items[1], d=when)
    ctx = context(question, entities=("Ledger Service",) if "Ledger Service" in question else ())
    first = first_plan(ctx)
    assert kept(ctx.constraints, first)
    history, tried = [], {first.key()}
    plan: Plan | None = first
    for reason, missing in reasons:
        history.append(Tried(plan, HITS, failed(reason, missing)))
        extension = extend_plan(ctx, Tried(plan, HITS[:1], sufficient(("replica-runbook",))), 5, tried)
        plan = next_plan(ctx, history, tried)
        for p in (extension, plan):
            if p is not None:
                assert kept(ctx.constraints, p), (question, p)
                assert p.key() not in tried, (question, p)
        if plan is None:
            break
        tried.add(plan.key())
