"""Grading an evidence set: hard constraints first, then calibrated relevance, then named documents."""

from __future__ import annotations

import json
from datetime import date

from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.constraints import extract
from retrieval.grader import GRADE_FEATURES, GraderConfig, grade, relevance
from retrieval.policy import Evidence, SignalGrader
from retrieval.types import Hit

TODAY = date(2025, 11, 1)
CONFIG = GraderConfig()
# Signals of a passage on topic: a cosine far above the scope's background, most of the
# question's terms, a good BM25 score.
STRONG = (("bm25", 12.0), ("dense", 0.82), ("qcov", 0.9), ("tcov", 0.9), ("bg_mean", 0.1), ("bg_sd", 0.1))


def hit(n: int, text: str, signals: tuple[tuple[str, float], ...] = STRONG, doc: str | None = None, **kw) -> Hit:
    return Hit(f"c{n}", doc or f"d{n}", text, 1.0, ("hybrid",), 0, len(text), signals=signals, **kw)


def graded(question: str, hits: list[Hit], entities: tuple[str, ...] = (), **kw):
    return grade(question, extract(question, TODAY, entities), hits, CONFIG, TODAY, **kw)


def test_no_hits_is_no_authorized_evidence_and_every_constraint_is_missing():
    g = graded("Which release fixed INC-2041 in March 2025?", [])
    assert (g.sufficient, g.reason) == (False, "no_authorized_evidence")
    assert g.missing == ("identifier:INC-2041", "date:March 2025")


def test_on_topic_passages_that_meet_every_constraint_are_sufficient():
    g = graded("Why did the ledger outage take four hours?",
               [hit(0, "The ledger outage took four hours because the replica lagged.")])
    assert (g.sufficient, g.reason, g.missing) == (True, None, ())
    assert g.score >= CONFIG.threshold


def test_an_identifier_no_passage_carries_is_constraint_unmet():
    g = graded("Which release fixed INC-2041?", [hit(0, "Release 4.2 fixed the ledger lock timeout.")])
    assert (g.sufficient, g.reason, g.missing) == (False, "constraint_unmet", ("identifier:INC-2041",))


def test_an_identifier_is_met_only_as_a_whole_token():
    g = graded("Which release fixed INC-2041?", [hit(0, "Release 4.2 fixed INC-20411 and INC-204.")])
    assert g.missing == ("identifier:INC-2041",)
    g = graded("Which release fixed INC-2041?", [hit(0, "Release 4.2 fixed inc-2041.")])
    assert g.sufficient


def test_an_identifier_only_the_title_or_metadata_carries_is_met():
    text = "Release 4.2 fixed the ledger lock timeout."
    by_title = graded("Which release fixed INC-2041?", [hit(0, text, title="INC-2041: ledger lock timeout")])
    by_meta = graded("Which release fixed INC-2041?", [hit(0, text, meta="INC-2041 sev2 ledger")])
    assert by_title.sufficient and by_title.missing == ()
    assert by_meta.sufficient and by_meta.missing == ()


def test_a_constraint_is_met_by_the_set_not_by_one_passage():
    g = graded("Which took longer, INC-2077 or INC-2041?",
               [hit(0, "INC-2077 took four hours to resolve."), hit(1, "INC-2041 took two hours to resolve.")])
    assert g.sufficient


def test_each_missing_identifier_is_named():
    g = graded("Which took longer, INC-2077 or INC-2041?", [hit(0, "The outage took four hours to resolve.")])
    assert g.reason == "constraint_unmet"
    assert g.missing == ("identifier:INC-2077", "identifier:INC-2041")


def test_a_quoted_phrase_no_passage_contains_is_constraint_unmet():
    question = 'What does the "quiet ward" policy say about screens?'
    unmet = graded(question, [hit(0, "The ward policy says screens go off at night.")])
    met = graded(question, [hit(0, "The Quiet  Ward policy says screens go off at night.")])
    assert (unmet.reason, unmet.missing) == ("constraint_unmet", ("phrase:quiet ward",))
    assert met.sufficient


def test_an_entity_no_passage_names_is_constraint_unmet():
    question = "Who owns the Ledger Service runbook?"
    unmet = graded(question, [hit(0, "The runbook is owned by the payments team.")], entities=("Ledger Service",))
    met = graded(question, [hit(0, "The ledger service runbook is owned by payments.")], entities=("Ledger Service",))
    assert (unmet.reason, unmet.missing) == ("constraint_unmet", ("entity:Ledger Service",))
    assert met.sufficient


def test_a_date_is_met_by_a_document_dated_inside_the_range():
    question = "What did the July 2025 facilities minutes decide?"
    july = graded(question, [hit(0, "The facilities minutes decided to repaint.", date="2025-07-10")])
    june = graded(question, [hit(0, "The facilities minutes decided to repaint.", date="2025-06-10")])
    assert july.sufficient
    assert (june.reason, june.missing) == ("constraint_unmet", ("date:July 2025",))


def test_a_date_is_met_by_a_date_written_inside_the_range():
    question = "What did the July 2025 facilities minutes decide?"
    written = graded(question, [hit(0, "Minutes of 3 July 2025: the facilities meeting decided to repaint.")])
    elsewhere = graded(question, [hit(0, "Minutes of 3 June 2025: the facilities meeting decided to repaint.")])
    assert written.sufficient
    assert elsewhere.missing == ("date:July 2025",)


def test_an_open_date_range_is_met_by_a_written_date_on_its_side():
    question = "Which facilities minutes decided to repaint before June 2025?"
    assert graded(question, [hit(0, "Minutes of 3 March 2025: the facilities meeting decided to repaint.")]).sufficient
    assert graded(question, [hit(0, "Minutes of 3 July 2025: the facilities meeting decided to repaint.")]).missing == \
        ("date:before June 2025",)


def test_a_coarser_date_a_passage_writes_does_not_meet_a_finer_range():
    question = "What were the April 2025 sales figures for the Leeds depot?"
    march = graded(question, [hit(0, "Leeds depot sales figures for March 2025: 1,240 units; the 2025 target stands.")])
    april = graded(question, [hit(0, "Leeds depot sales figures for 3 April 2025: 1,310 units.")])
    assert (march.reason, march.missing) == ("constraint_unmet", ("date:April 2025",))  # "2025" only overlaps April
    assert april.sufficient


def test_a_day_a_passage_writes_under_an_operator_is_still_a_day_it_writes():
    question = "How much did the Leeds depot prices rise in December 2025?"
    assert graded(question, [hit(0, "Leeds depot prices rise by 4% on or after 2 December 2025.")]).sufficient


def test_a_relative_date_in_a_passage_meets_no_range():
    question = "Why did the Leeds depot change its rota in 2024?"
    g = graded(question, [hit(0, "Last year the Leeds depot changed its rota to cover the night shift.")])
    assert g.missing == ("date:2024",)  # "last year" is relative to when the passage was written


def test_a_score_under_the_threshold_is_insufficient_relevance():
    g = graded("Why did the ledger outage take four hours?", [hit(0, "The cafeteria opens at noon.", signals=())])
    assert (g.sufficient, g.reason, g.missing) == (False, "insufficient_evidence", ("relevance",))
    assert g.score < CONFIG.threshold


def test_an_unmet_constraint_is_reported_before_low_relevance():
    g = graded("Which release fixed INC-2041?", [hit(0, "The cafeteria opens at noon.", signals=())])
    assert g.reason == "constraint_unmet"


# -- multi-part questions: each part judged against the set ---------------------------------

TWO_PARTS = ("The badge reader at the east entrance stopped accepting staff cards. "
             "Per the visitor policy, when do visiting hours end?")
WEAK = (("bm25", 1.0), ("dense", 0.2), ("qcov", 0.2), ("tcov", 0.2))


class Rescorer:
    """Signals of the set against each part, as the loop's HitScorer gives them; records
    what it was asked."""

    def __init__(self, by_part: dict[str, tuple[tuple[str, float], ...]]) -> None:
        self.by_part = by_part
        self.asked: list[str] = []

    def __call__(self, part: str) -> list[Hit]:
        self.asked.append(part)
        signals = next(v for k, v in self.by_part.items() if k in part)
        return [hit(0, "The badge reader was reset.", signals), hit(1, "Visiting hours end at 8 pm.", signals)]


def test_a_multi_part_question_whose_every_part_the_set_answers_is_sufficient():
    hits = [hit(0, "The badge reader was reset.", WEAK), hit(1, "Visiting hours end at 8 pm.", WEAK)]
    assert not graded(TWO_PARTS, hits).sufficient  # judged whole, no passage holds most of it
    rescore = Rescorer({"badge reader": STRONG, "visitor policy": STRONG, "visiting hours": STRONG})
    g = graded(TWO_PARTS, hits, rescore=rescore)
    assert g.sufficient and g.score >= CONFIG.threshold
    assert g.features["parts"] == 3 and g.features["part_min"] == g.score
    assert rescore.asked == ["The badge reader at the east entrance stopped accepting staff cards.",
                             "Per the visitor policy", "when do visiting hours end?"]


def test_a_multi_part_question_is_only_as_answered_as_its_weakest_part():
    hits = [hit(0, "The badge reader was reset.", WEAK), hit(1, "Visiting hours end at 8 pm.", WEAK)]
    whole = graded(TWO_PARTS, hits)
    g = graded(TWO_PARTS, hits, rescore=Rescorer({"badge reader": STRONG, "visitor policy": STRONG,
                                                   "visiting hours": WEAK}))
    assert (g.sufficient, g.reason, g.missing) == (False, "insufficient_evidence", ("relevance",))
    assert g.features["part_min"] < CONFIG.threshold
    assert g.score == max(whole.score, g.features["part_min"])


def test_parts_are_not_scored_when_the_whole_question_passes_or_has_one_part_or_a_constraint_is_unmet():
    rescore = Rescorer({"": STRONG})
    assert graded(TWO_PARTS, [hit(0, "The badge reader was reset; visiting hours end at 8 pm.")], rescore=rescore).sufficient
    g = graded("Why did the ledger outage take four hours?", [hit(0, "The cafeteria opens at noon.", WEAK)],
               rescore=rescore)
    assert not g.sufficient and "parts" not in g.features
    g = graded("Which release fixed INC-2041? Per the visitor policy, when do visiting hours end?",
               [hit(0, "Visiting hours end at 8 pm.", WEAK)], rescore=rescore)
    assert g.reason == "constraint_unmet"
    assert rescore.asked == []


def test_rows_of_a_confident_translation_are_sufficient_whatever_their_signals():
    question = "How many incidents did LEDGER_DB have in March 2025?"
    sql = ("SELECT count(*) FROM incidents WHERE service = 'LEDGER_DB' "
           "AND opened >= '2025-03-01' AND opened <= '2025-03-31'")
    g = graded(question, [hit(0, "count: 4", signals=(), doc="table:incidents")], rows_sql=sql)
    assert (g.sufficient, g.reason, g.missing, g.score) == (True, None, (), 1.0)


def test_rows_whose_rows_and_statement_lack_an_identifier_are_constraint_unmet():
    question = "How many incidents did LEDGER_DB have in March 2025?"
    sql = "SELECT count(*) FROM incidents WHERE opened >= '2025-03-01' AND opened <= '2025-03-31'"
    g = graded(question, [hit(0, "count: 4", signals=(), doc="table:incidents")], rows_sql=sql)
    assert (g.sufficient, g.reason, g.missing) == (False, "constraint_unmet", ("identifier:LEDGER_DB",))


def test_no_rows_from_a_translation_is_no_authorized_evidence():
    g = graded("How many incidents in March 2025?", [], rows_sql="SELECT count(*) FROM incidents")
    assert g.reason == "no_authorized_evidence"


def test_a_document_the_question_names_that_the_set_lacks_makes_it_insufficient():
    g = graded("Why did the ledger outage take four hours?",
               [hit(0, "The ledger outage took four hours because the replica lagged.")],
               linked=lambda: [("postmortem-ledger", 0.7, True)])
    assert (g.sufficient, g.reason, g.missing) == (False, "insufficient_evidence", ("linked:postmortem-ledger",))


def test_a_document_only_a_passage_names_is_a_link_to_follow_not_a_gap():
    g = graded("Why did the ledger outage take four hours?",
               [hit(0, "The ledger outage took four hours; see the replica runbook.")],
               linked=lambda: [("replica-runbook", 0.2, False), ("postmortem-ledger", 0.6, False)])
    assert (g.sufficient, g.reason, g.missing) == (True, None, ())
    assert g.links == ("replica-runbook", "postmortem-ledger")


def test_a_named_document_the_set_holds_is_neither_missing_nor_a_link():
    g = graded("Why did the ledger outage take four hours?",
               [hit(0, "The ledger outage took four hours because the replica lagged.", doc="postmortem-ledger")],
               linked=lambda: [("postmortem-ledger", 0.9, True), ("replica-runbook", 0.3, False)])
    assert g.sufficient and g.links == ("replica-runbook",)


def test_linked_documents_are_asked_for_only_when_the_set_passes_everything_else():
    asked = []

    def linked():
        asked.append(True)
        return [("postmortem-ledger", 0.7, True)]

    graded("Which release fixed INC-2041?", [hit(0, "Release 4.2 fixed the lock timeout.")], linked=linked)
    graded("Why did the ledger outage take four hours?", [hit(0, "The cafeteria opens.", signals=())], linked=linked)
    assert asked == []


def test_the_signal_grader_shows_the_linker_only_the_top_passages():
    seen = []
    hits = [hit(0, "The ledger outage took four hours."), hit(1, "The replica lagged for hours.")]
    question = "Why did the ledger outage take four hours?"
    evidence = Evidence(question, extract(question, TODAY), hits, TODAY,
                        linked=lambda top: seen.append([h.chunk_id for h in top]) or ())
    assert SignalGrader().grade(evidence).sufficient
    assert seen == [["c0"]]
    SignalGrader(GraderConfig(link_passages=2)).grade(evidence)
    assert seen[-1] == ["c0", "c1"]


def test_the_signal_grader_gives_the_same_verdict_as_grade():
    question = "Which release fixed INC-2041?"
    hits = [hit(0, "Release 4.2 fixed the lock timeout.")]
    evidence = Evidence(question, extract(question, TODAY), hits, TODAY)
    assert SignalGrader().grade(evidence) == grade(question, extract(question, TODAY), hits, CONFIG, TODAY)


POSITIVE = [f for f in GRADE_FEATURES if CONFIG.weights.get(f, 0.0) > 0]
FEATURE_VALUES = st.fixed_dictionaries({f: st.floats(0.0, 1.0) for f in GRADE_FEATURES})


@given(features=FEATURE_VALUES, feature=st.sampled_from(POSITIVE), step=st.floats(0.01, 1.0))
@settings(max_examples=100)
def test_relevance_never_falls_when_a_positively_weighted_feature_rises(features, feature, step):
    higher = {**features, feature: features[feature] + step}
    assert relevance(higher, CONFIG) >= relevance(features, CONFIG)


def test_relevance_rises_strictly_in_each_positively_weighted_feature_away_from_saturation():
    assert POSITIVE  # the defaults weight some features
    base = dict.fromkeys(GRADE_FEATURES, 0.2)
    for f in POSITIVE:
        assert relevance({**base, f: 0.5}, CONFIG) > relevance(base, CONFIG), f


def test_relevance_ignores_features_without_a_weight():
    base = dict.fromkeys(GRADE_FEATURES, 0.2)
    for f in (f for f in GRADE_FEATURES if CONFIG.weights.get(f, 0.0) == 0.0):
        assert relevance({**base, f: 0.9}, CONFIG) == relevance(base, CONFIG), f
    assert 0.0 < relevance(base, CONFIG) < 1.0


def test_a_grader_config_survives_a_json_round_trip():
    for config in (GraderConfig(), GraderConfig(bias=-1.25, weights={"top_dense": 2.0, "nqc": -0.5}, threshold=0.7,
                                                link_passages=3, source="tuned")):
        assert GraderConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


def test_a_grader_config_file_without_optional_keys_still_loads():
    config = GraderConfig.from_json({"bias": -2, "weights": {"top_dense": 1}})
    assert (config.bias, dict(config.weights), config.link_passages, config.source) == \
        (-2.0, {"top_dense": 1}, 1, "file")
