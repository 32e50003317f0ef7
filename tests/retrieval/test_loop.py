"""The loop: budgets, constraint-keeping rewrites, no repeats, deadlines and faults."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import date

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from retrieval.constraints import extract, missing_from_queries
from retrieval.errors import RetrievalTimeout, RetrievalUnavailable
from retrieval.grader import GraderConfig
from retrieval.loop import Budget, run_loop
from retrieval.policy import SignalGrader
from retrieval.types import Filters, Principal
from tests.conftest import PATIENCE_S, TablesProbe

NEVER_SUFFICIENT = GraderConfig(threshold=1.1)  # forces the loop through its rewrites
FRAGMENTS = ["INC-2077", "E4012", "SEC-210", "3.1.2", "/etc/auth/keys.yaml", '"tracking gateway"', '"signing keys"',
             "in June 2024", "before March 2025", "between January 2024 and March 2024", "outage", "release",
             "certificate", "ledger", "timeout", "how", "which", "fixed", "or", "and", "compare", "rotate", "budget",
             "Which took longer, INC-2077 or INC-2041?", "what is the leave policy and who approves expenses",
             "after  2023", "before\n2024", "since  March 2024", "until\tMay 2025", "from  June 2024  to  July 2024"]
SPACES = [" ", " ", "  ", "\n", " \t "]
QUESTIONS = st.lists(st.tuples(st.sampled_from(FRAGMENTS), st.sampled_from(SPACES)), min_size=1, max_size=7).map(
    lambda parts: "".join(f + sep for f, sep in parts).strip())
PRINCIPALS = [Principal("erin"), Principal("carol", ("security", "sre")), Principal("bob", ("finance",))]


class Slow:
    """A retriever that sleeps first, or (given a gate) waits until the test opens it."""

    def __init__(self, inner, seconds: float, gate: threading.Event | None = None) -> None:
        self.inner, self.seconds, self.name, self.gate = inner, seconds, inner.name, gate

    def search(self, *args):
        if self.gate is not None:
            self.gate.wait(timeout=PATIENCE_S)
        time.sleep(self.seconds)
        return self.inner.search(*args)


class Broken:
    def __init__(self, name: str) -> None:
        self.name = name

    def search(self, *args):
        raise RuntimeError("index file vanished")


def deps_with(engine, grader: GraderConfig | None = None, **changes):
    """The engine's loop dependencies with some replaced (a grader config becomes the built-in grader over it)."""
    if grader is not None:
        changes["policy"] = replace(engine.deps.policy, grader=SignalGrader(grader))
    return replace(engine.deps, **changes)


def dropped(constraints, queries, date_filtered: bool = False) -> list[str]:
    """The test's own oracle (not the loop's check): constraint texts no query carries,
    compared in lower case with whitespace collapsed; a date filter may carry the dates."""
    squash = lambda t: " ".join(t.lower().split())  # noqa: E731
    text = [squash(q) for q in queries]
    texts = [*constraints.identifiers, *constraints.phrases, *constraints.entities]
    texts += [] if date_filtered else [d.text for d in constraints.dates]
    return [t for t in texts if not any(squash(t) in q for q in text)]


@given(question=QUESTIONS)
@settings(max_examples=400, deadline=None)
def test_the_question_itself_keeps_every_constraint_extracted_from_it(question):
    """Constraints are read from the question as written (any spacing), so the first plan passes."""
    constraints = extract(question, date(2025, 11, 1), [])
    assert dropped(constraints, [question]) == []
    assert missing_from_queries(constraints, [question]) == []


def test_the_loops_check_reports_a_dropped_identifier_or_date():
    constraints = extract("what changed in INC-2077 in June 2024", date(2025, 11, 1), [])
    assert missing_from_queries(constraints, ["what changed in June 2024"]) == ["identifier:INC-2077"]
    assert missing_from_queries(constraints, ["what changed in INC-2077"]) == ["date:June 2024"]
    assert missing_from_queries(constraints, ["what changed in INC-2077"], date_filtered=True) == []


@given(
    question=QUESTIONS,
    principal=st.sampled_from(PRINCIPALS),
    attempts=st.integers(1, 6),
    k=st.integers(1, 10),
)
# Questions whose naive rewrites would drop a constraint (a split losing its date or an identifier).
@example(question="compare outage between January 2024 and March 2024", principal=PRINCIPALS[0], attempts=6, k=5)
@example(question="which release fixed 3.1.2 outage, INC-2077 or INC-2041?", principal=PRINCIPALS[0], attempts=6, k=5)
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_every_dispatched_query_keeps_constraints_within_budget_and_never_repeats(engine, question, principal, attempts, k):
    budget = Budget(max_attempts=attempts, deadline_ms=120_000, call_timeout_ms=60_000, k=k)  # no machine runs out
    result = run_loop(question, principal, budget, deps_with(engine, grader=NEVER_SUFFICIENT))
    assert 1 <= len(result.attempts) <= attempts
    keys = [a.plan.key() for a in result.attempts]
    assert len(set(keys)) == len(keys)
    for a in result.attempts:
        dated = a.plan.filters.date_from is not None or a.plan.filters.date_to is not None
        assert dropped(result.constraints, a.plan.queries, date_filtered=dated) == [], a.plan
        assert missing_from_queries(result.constraints, a.plan.queries, date_filtered=dated) == [], a.plan
        assert len(a.hits) <= k
    assert result.status == "evidence_gap"
    assert result.stop_reason in {"attempts_exhausted", "no_strategy_left"}
    if len(result.attempts) < attempts:
        assert result.stop_reason == "no_strategy_left"


class Ticking:
    """A clock that moves only when a retriever is called: time is simulated, never measured."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Costly:
    """A retriever whose every call takes `seconds` on the simulated clock; records when calls start."""

    def __init__(self, inner, clock: Ticking, seconds: float, starts: list) -> None:
        self.inner, self.clock, self.seconds, self.starts, self.name = inner, clock, seconds, starts, inner.name

    def search(self, *args):
        self.starts.append(self.clock.now)
        self.clock.now += self.seconds
        return self.inner.search(*args)


@pytest.mark.parametrize("deadline_ms", [150, 400, 900])
def test_deadline_is_honoured_with_slow_retrievers(engine, deadline_ms):
    """No retrieval call starts after the deadline, and running out of time is a typed gap."""
    clock, starts = Ticking(), []
    costly = {name: Costly(r, clock, 0.25, starts) for name, r in engine.deps.retrievers.items()}
    budget = Budget(max_attempts=6, deadline_ms=deadline_ms, call_timeout_ms=1000, k=5)
    result = run_loop("how do I rotate the signing keys after INC-9999 in June 2024", Principal("erin"), budget,
                      deps_with(engine, retrievers=costly, grader=NEVER_SUFFICIENT, clock=clock))
    assert starts and all(t < deadline_ms / 1000 for t in starts)
    assert result.stop_reason == "deadline" and result.gap.reason == "deadline_exceeded"
    assert len(result.attempts) <= -(-deadline_ms // 250)  # six 250 ms attempts would not fit


@pytest.mark.slow
def test_slow_first_table_profiles_hold_up_neither_their_questions_nor_anyone_else(demo_index, embedder):
    """The first link for a new access scope profiles its tables, which may take long. The
    question goes on without tables, and the build must not take threads other callers need."""
    from routes.service.view import open_view

    engine = open_view(demo_index, embedder, today=date(2025, 11, 1))
    question, regular = "how many incidents were opened in 2025", Principal("bob", ("finance",))
    newcomers = [Principal(f"newcomer-{i}", ("finance",)) for i in range(6)]  # more than the retrieval workers
    try:
        assert engine.deps.tables.link(question, regular.access_scope(), None)  # bob's tables are profiled
        gated = TablesProbe(engine.sql._backend, held=True)
        engine.sql._backend = gated
        for p in newcomers:
            result = engine.query(question, p, deadline_ms=4000)  # waits 2 s for the held profiles, then retrieves
            assert result.attempts and all(a.plan.route != "sql" and a.error is None for a in result.attempts)
        assert not any(engine.sql.profiled(p.access_scope()) for p in newcomers)  # no question waited for its build
        other = engine.query("What does error E4012 mean?", regular)  # retrieval threads are all free
        assert other.attempts and all(a.error is None for a in other.attempts)
        gated.release.set()
        for p in newcomers:
            assert engine.sql.profile_ready(p.access_scope(), 60.0)  # the builds complete for the questions after
        assert engine.deps.tables.link(question, newcomers[0].access_scope(), None, 0.0)
    finally:
        if isinstance(engine.sql._backend, TablesProbe):
            engine.sql._backend.release.set()
        engine.close()


def test_a_failing_retriever_is_recorded_and_the_loop_moves_on(engine):
    retrievers = dict(engine.deps.retrievers, hybrid=Broken("hybrid"))
    result = run_loop("how can I renew the key that signs authentication tokens", Principal("erin"),
                      Budget(max_attempts=3), deps_with(engine, retrievers=retrievers))
    first = result.attempts[0]
    assert first.plan.route == "hybrid" and first.error == "retrieval_unavailable" and first.hits == ()
    assert len(result.attempts) >= 2 and result.attempts[1].error is None


def test_when_every_attempt_fails_the_outcome_is_a_retryable_error_not_a_gap(engine):
    retrievers = {name: Broken(name) for name in engine.deps.retrievers}
    with pytest.raises(RetrievalUnavailable) as err:
        run_loop("carrier webhook retries", Principal("erin"), Budget(max_attempts=3), deps_with(engine, retrievers=retrievers))
    assert err.value.retryable and len(err.value.context["attempts"]) == 3  # the budget was spent and counted


def test_a_timed_out_call_counts_against_the_budget(engine):
    # bm25 hangs until the test ends; the next route gets a timeout far above what any machine
    # needs for it, so only the hung call can time out
    gate = threading.Event()
    retrievers = dict(engine.deps.retrievers, bm25=Slow(engine.deps.retrievers["bm25"], 0.0, gate))
    try:
        budget = Budget(max_attempts=2, deadline_ms=30000, call_timeout_ms=3000)
        result = run_loop("carrier webhook retries", Principal("erin"), budget, deps_with(engine, retrievers=retrievers))
    finally:
        gate.set()
    assert result.attempts[0].plan.route == "bm25" and result.attempts[0].error == "retrieval_timeout"
    assert len(result.attempts) == 2 and result.attempts[1].error is None


def test_all_calls_timing_out_is_a_retryable_timeout(engine):
    retrievers = {name: Slow(r, 0.5) for name, r in engine.deps.retrievers.items()}
    with pytest.raises(RetrievalTimeout) as err:
        run_loop("carrier webhook retries", Principal("erin"), Budget(max_attempts=2, deadline_ms=3000, call_timeout_ms=50),
                 deps_with(engine, retrievers=retrievers))
    assert err.value.code == "retrieval_timeout" and err.value.retryable


def test_sufficient_first_attempt_stops_the_loop(engine):
    result = run_loop("INC-2077", Principal("erin"), Budget(), engine.deps)
    assert result.status == "answer_context" and result.stop_reason == "sufficient" and len(result.attempts) == 1
    assert {h.doc_id for h in result.context} == {"m05", "m06"}


def test_identifier_that_no_readable_passage_contains_is_an_unmet_constraint(engine):
    result = run_loop("what was fixed in SEC-210", Principal("erin"), Budget(max_attempts=3), engine.deps)
    assert result.status == "evidence_gap"
    assert result.gap.reason in {"constraint_unmet", "no_authorized_evidence"}
    assert all(h.doc_id != "m11" for a in result.attempts for h in a.hits)  # the security-only finding never surfaces


ARGUMENT = ("Patients who can call family from a bedside screen report less anxiety, as the survey in Annex.2 shows. "
            'Opponents argue that screens disturb sleep and that the "quiet ward" policy should ban them at night.')


def test_a_long_argument_with_a_quote_and_a_footnote_marker_is_not_an_exact_lookup(trial_engine):
    result = trial_engine.query(ARGUMENT, Principal("erin"), k=8)
    assert result.constraints.identifiers == ()
    assert result.decision.chosen != "exact"
    assert len(result.context) == 8  # not a single literal match


def test_exact_evidence_for_a_question_that_is_not_a_lookup_is_filled_to_k(trial_engine):
    result = trial_engine.query("Why does the ward printer keep jamming in HIT-1042?", Principal("erin"), k=6)
    assert [a.plan.route for a in result.attempts][:1] == ["exact"]
    assert result.attempts[-1].plan.strategy == "fill" and result.stop_reason == "sufficient"
    assert result.status == "answer_context" and len(result.context) == 6
    assert result.context[0].doc_id == "hit-1042"  # the exact match keeps its place at the top
    # a lookup of the identifier itself is answered by its one passage
    lookup = trial_engine.query("HIT-1042", Principal("erin"), k=6)
    assert [a.plan.strategy for a in lookup.attempts] == ["initial"] and len(lookup.context) == 1


def test_a_month_in_the_question_puts_that_months_document_first(trial_engine):
    # three sets of minutes with the same title and nearly the same text, dated June, July, August
    # (the order of the context is the point here; whether it is sufficient is the grader's call)
    result = trial_engine.query("What did the facilities committee decide at the July 2025 meeting?", Principal("erin"))
    assert result.context[0].doc_id == "minutes-2025-07"
    later = trial_engine.query("What did the facilities committee review after July 2025?", Principal("erin"))
    assert later.context[0].doc_id == "minutes-2025-08"


def test_an_impossible_date_stops_the_question_with_invalid_request(trial_engine):
    from retrieval.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="2025-02-30"):
        trial_engine.query("What happened on 2025-02-30?", Principal("erin"))


def test_a_record_lookup_answers_with_the_row_and_the_document_it_links(trial_engine):
    result = trial_engine.query("What was decided on permit BP-2202?", Principal("erin"))
    assert result.status == "answer_context" and result.decision.chosen == "sql"
    assert dict(zip(result.rows.columns, result.rows.rows[0], strict=True))["status"] == "refused"
    assert [h.doc_id for h in result.context] == ["notice-bp-2202"]  # the notice says why
    # a linked document the caller may not read stays out of the context
    draft = trial_engine.query("What was decided on permit BP-2203?", Principal("erin"))
    assert draft.rows is not None and [h.doc_id for h in draft.context] == []
    planner = trial_engine.query("What was decided on permit BP-2203?", Principal("pia", ("planning",)))
    assert [h.doc_id for h in planner.context] == ["notice-bp-2203"]


def test_a_passage_naming_other_documents_never_makes_its_evidence_insufficient(trial_engine):
    # the badge policy answers the question and names three other documents by title
    result = trial_engine.query("Must staff wear their photo badge at all times on hospital premises?", Principal("erin"))
    first = result.attempts[0]
    assert first.hits[0].doc_id == "policy-staff-badges"
    assert first.grade.sufficient and not any(m.startswith("linked:") for m in first.grade.missing)
    assert result.status == "answer_context" and result.stop_reason == "sufficient"
    assert result.context[0].doc_id == "policy-staff-badges"
    # the documents it names are followed as an extension of sufficient evidence, at most once
    assert [a.plan.strategy for a in result.attempts][1:] in ([], ["follow_links"])


def test_a_document_the_question_names_but_the_set_lacks_is_still_missing_evidence():
    from datetime import date

    from retrieval.constraints import Constraints
    from retrieval.grader import GraderConfig, grade
    from retrieval.types import Hit

    hits = [Hit("a#0", "a", "the answer text", 1.0, ("dense",), 0, 15, signals=(("dense", 0.9), ("bm25", 9.0)))]
    easy = GraderConfig(bias=5.0)
    by_passage = grade("q", Constraints(), hits, easy, date(2025, 1, 1), linked=lambda: [("b", 0.5, False)])
    assert by_passage.sufficient and by_passage.links == ("b",)
    by_question = grade("q", Constraints(), hits, easy, date(2025, 1, 1), linked=lambda: [("b", 0.5, True)])
    assert not by_question.sufficient and by_question.missing == ("linked:b",)


class Counting:
    """A retriever that records every query it is sent."""

    def __init__(self, inner, sent: list) -> None:
        self.inner, self.sent, self.name = inner, sent, inner.name

    def search(self, query, *args):
        self.sent.append(query)
        return self.inner.search(query, *args)


def test_a_rewriter_that_drops_an_identifier_is_rejected_recorded_and_never_dispatched(engine):
    from tests.routes.policies.policy_plugins import DropsIdentifiers

    sent: list[str] = []
    retrievers = {name: Counting(r, sent) for name, r in engine.deps.retrievers.items()}
    policy = replace(engine.deps.policy, rewriter=DropsIdentifiers(), grader=SignalGrader(NEVER_SUFFICIENT))
    question = "why does the ledger export fail with E4012 after the upgrade"
    result = run_loop(question, Principal("erin"), Budget(max_attempts=3),
                      deps_with(engine, retrievers=retrievers, policy=policy))
    assert result.constraints.identifiers == ("E4012",)
    assert sent == [question]  # only the first plan ran
    dispatched, rejected = result.attempts[0], result.attempts[1:]
    assert dispatched.error is None and not dispatched.rejected
    assert rejected and all(a.rejected and a.error == "rejected_plan" and not a.hits for a in rejected)
    assert any("E4012" in p for p in rejected[0].rejected)
    assert rejected[0].to_json()["rejected"] == list(rejected[0].rejected)
    assert result.status == "evidence_gap" and result.stop_reason == "no_strategy_left"


def test_a_rewriter_whose_every_plan_is_rejected_still_ends_with_a_typed_gap(engine):
    from retrieval.rewrite import Plan
    from tests.routes.policies.policy_plugins import DropsIdentifiers

    class Careless(DropsIdentifiers):
        def first(self, ctx):
            return Plan("initial", "hybrid", ("ledger export",), ctx.base_filters)

    sent: list[str] = []
    retrievers = {name: Counting(r, sent) for name, r in engine.deps.retrievers.items()}
    policy = replace(engine.deps.policy, rewriter=Careless())
    result = run_loop("ledger export fails with E4012", Principal("erin"), Budget(max_attempts=3),
                      deps_with(engine, retrievers=retrievers, policy=policy))
    assert sent == [] and result.attempts and all(a.rejected for a in result.attempts)
    assert result.status == "evidence_gap" and result.gap.reason == "insufficient_evidence"
    assert "nothing was searched" in result.gap.detail


def test_a_plugged_reranker_sees_only_authorized_candidates_and_cannot_add_any(engine):
    from dataclasses import replace as dc_replace

    from retrieval.types import Hit

    seen: list[list[str]] = []

    class Inventive:
        def candidates(self, k):
            return 3 * k

        def rerank(self, question, hits, principal):
            seen.append([h.doc_id for h in hits])
            forged = Hit("secret#0", "secret", "forbidden text", 99.0, ("rerank",), 0, 14)
            return [forged, dc_replace(hits[-1], text="rewritten"), *hits, *hits]

    erin = Principal("erin")
    policy = replace(engine.deps.policy, reranker=Inventive())
    result = run_loop("carrier webhook retries", erin, Budget(max_attempts=1, k=3), deps_with(engine, policy=policy))
    readable = {h.doc_id for h in engine.retrievers["bm25"].search("carrier webhook retries", erin.access_scope(), 50, Filters())}
    assert seen and len(seen[0]) > 3 and set(seen[0]) <= readable  # more candidates, all readable
    context = result.attempts[0].hits
    assert len(context) == 3 and all(h.chunk_id != "secret#0" and h.text != "rewritten" for h in context)
    assert len({h.chunk_id for h in context}) == 3  # repeats dropped


def test_principals_with_the_same_groups_share_masks_covariances_and_table_profiles(demo_engine):
    chunks, signals, sql = demo_engine.snapshot.chunks, demo_engine.deps.signals, demo_engine.sql
    first, second = Principal("newcomer-a", ("finance", "sre")), Principal("newcomer-b", ("sre", "finance"))
    for question in ("What is the Q3 2025 budget for the payments platform?", "how many incidents were opened in 2025"):
        demo_engine.query(question, first, deadline_ms=30000)
    counts = (chunks.mask_builds, signals.background_builds, sql.profile_builds)
    assert sql.profiled(first.access_scope())
    for question in ("What is the Q3 2025 budget for the payments platform?", "how many incidents were opened in 2025"):
        demo_engine.query(question, second, deadline_ms=30000)
    assert (chunks.mask_builds, signals.background_builds, sql.profile_builds) == counts
    # Another scope builds its own: a combination of groups no other test asks as (the engine is
    # shared by the session, so a scope asked before, such as "public" alone, is cached already).
    third = Principal("newcomer-c", ("hr", "security", "finance"))
    assert all(key[0] != chunks.scope(third.access_scope()) for key in chunks._cache.keys())
    demo_engine.query("What is the Q3 2025 budget for the payments platform?", third, deadline_ms=30000)
    assert chunks.mask_builds > counts[0] and signals.background_builds > counts[1]


def test_an_unexpected_retriever_exception_is_logged_with_the_trace_id(engine, caplog):
    retrievers = dict(engine.deps.retrievers, hybrid=Broken("hybrid"))
    with caplog.at_level("ERROR", logger="quarry.loop"):
        result = run_loop("how can I renew the key that signs authentication tokens", Principal("erin"),
                          Budget(max_attempts=2), deps_with(engine, retrievers=retrievers))
    assert result.attempts[0].error == "retrieval_unavailable"
    logged = [r for r in caplog.records if result.trace_id in r.getMessage()]
    assert logged and "index file vanished" in (logged[0].exc_text or "")


def test_each_part_of_a_multi_part_question_is_judged_against_the_set_with_signals_for_that_part(trial_engine):
    """With a threshold no whole question reaches, the parts decide: a set that holds a passage
    for every part scores far above one that has nothing for its second part."""
    raw = GraderConfig(bias=-3.0, weights={"top_dense": 0.6, "dense_margin": 2.7, "top_coverage": 1.0, "top_bm25": 1.7,
                                           "qcov_dense": 3.5, "literal_share": 3.0}, threshold=0.99)  # reads raw cosines
    deps = deps_with(trial_engine, grader=raw)
    badge = "The badge reader at the east entrance stopped accepting staff cards."
    answered = run_loop(f"{badge} Per the visitor policy, when do visiting hours end?", Principal("erin"),
                        Budget(max_attempts=1, k=4), deps)
    unanswered = run_loop(f"{badge} What brand of coffee machine does the cafeteria use?", Principal("erin"),
                          Budget(max_attempts=1, k=4), deps)
    (a,), (b,) = answered.attempts, unanswered.attempts
    assert {"hit-1050", "policy-visitors"} <= {h.doc_id for h in a.hits}
    assert a.grade.features["parts"] == 3 and b.grade.features["parts"] == 2
    assert a.grade.features["part_min"] > b.grade.features["part_min"] + 0.3
    # each part is scored with its own signals: the cafeteria part's are not the whole question's
    scorer = trial_engine.deps.signals
    erin = Principal("erin").access_scope()
    part = scorer.annotate("What brand of coffee machine does the cafeteria use?", b.hits, erin, fresh=True)
    whole = scorer.annotate(unanswered.question, b.hits, erin)
    assert all(dict(p.signals)["dense"] < dict(w.signals)["dense"] for p, w in zip(part, whole, strict=True))
