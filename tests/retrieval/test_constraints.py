"""Constraint extraction: what a question pins down, by rules."""

from __future__ import annotations

from datetime import date

from retrieval.constraints import extract, identifiers, is_lookup

TODAY = date(2025, 11, 1)


def test_a_word_run_into_a_footnote_marker_is_not_an_identifier():
    assert identifiers("as the survey in Annex.2 shows, and Protocol.2 of the act requires") == []
    assert identifiers("upgrade to 2.4.1, see INC-2041, E4012 and ledger.lock_timeout") == \
        ["2.4.1", "INC-2041", "E4012", "ledger.lock_timeout"]


def test_a_question_is_a_lookup_only_when_its_literal_items_are_most_of_it():
    for q in ("INC-2041", "Which release fixed INC-2041?", '"drain the connection pool"', "/E40[0-9]{2}/"):
        assert is_lookup(q, extract(q, TODAY)), q
    for q in ("Why does the ward printer keep jamming in HIT-1042?",
              'Opponents argue that screens disturb sleep and that the "quiet ward" policy should ban them at night.',
              "What is the leave policy?"):
        assert not is_lookup(q, extract(q, TODAY)), q
