"""The parts of a multi-part question (retrieval/parts.py), read from the question alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.parts import MAX_PARTS, question_parts
from retrieval.text import content_terms


def test_two_sentences_are_two_parts():
    assert question_parts("The badge reader at the east entrance stopped accepting cards. "
                          "Which supplier replaced its power supply?") == \
        ("The badge reader at the east entrance stopped accepting cards.", "Which supplier replaced its power supply?")


def test_a_leading_context_clause_is_apart_from_the_question_it_leads_into():
    assert question_parts("After the March 2025 flood at the Brackwater pumping station, how long did the overflow spill?") == \
        ("After the March 2025 flood at the Brackwater pumping station", "how long did the overflow spill?")
    assert question_parts("In the audit of the pharmacy cabinet logs, at what time were overrides most frequent?") == \
        ("In the audit of the pharmacy cabinet logs", "at what time were overrides most frequent?")


def test_the_items_of_a_comparison_are_parts():
    assert question_parts("Which took longer to repair, the Harbor Lab chiller fault or the North Clinic boiler leak?") == \
        ("the Harbor Lab chiller fault took longer to repair", "the North Clinic boiler leak took longer to repair")


def test_a_question_of_one_part_has_no_parts():
    for question in ("What is the visitor policy?", "When do visiting hours end at the main reception?",
                     "Why was the Harbor Lab annex refused by the planning board in May 2025?",
                     "Per the runbook, how long?",  # a clause too short to be a question of its own
                     "e.g. What does error E4012 mean?", "HIT-1042 label printer jams"):
        assert question_parts(question) == (), question


def test_a_short_sentence_stays_with_its_neighbour_and_is_not_read_as_a_comparison():
    question = ("My notes mention a project whose first phase shipped after the double-assignment incident. "
                "Which release and version was that?")
    assert question_parts(question) == ()


def test_a_pasted_passage_of_many_sentences_is_judged_whole():
    sentence = "The badge reader at the east entrance stopped accepting staff cards."
    assert len(question_parts(" ".join([sentence] * MAX_PARTS))) == MAX_PARTS
    assert question_parts(" ".join([sentence] * (MAX_PARTS + 1))) == ()


def test_a_comparison_whose_items_are_too_short_to_stand_alone_stays_whole():
    assert question_parts("On which day and at what time was BWN-25-02 lifted?") == ()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("abc XYZ,.?;!and which or after 2025 how"), max_size=160))
def test_there_are_never_one_part_and_never_a_part_too_short_to_stand_alone(question):
    parts = question_parts(question)
    assert len(parts) != 1
    for part in parts:
        assert len(content_terms(part)) >= 3
