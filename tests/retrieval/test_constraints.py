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


def test_an_impossible_date_in_a_question_is_a_typed_invalid_request():
    import pytest

    from retrieval.errors import InvalidRequest

    for q in ("What happened on 2025-02-30?", "tickets from February 30, 2025", "the 31 April 2024 outage"):
        with pytest.raises(InvalidRequest, match="not a valid date"):
            extract(q, TODAY)
    # passages are read leniently: an odd date in ingested text is no error
    from retrieval.dates import dates_in

    assert dates_in("logged 2025-02-30 by mistake", TODAY) == ()


def test_relative_dates_resolve_against_the_given_today():
    (last_quarter,) = extract("incidents last quarter", date(2025, 2, 10)).dates
    assert (last_quarter.start, last_quarter.end) == (date(2024, 10, 1), date(2024, 12, 31))
    (this_week,) = extract("changes this week", date(2025, 11, 5)).dates
    assert (this_week.start, this_week.end) == (date(2025, 11, 3), date(2025, 11, 5))


def test_a_word_written_with_a_number_is_prose_not_an_identifier():
    assert identifiers("Can I bring my 12-year-old along into the glazing room?") == []
    assert identifiers("a 24-hour watch and a 3-day course, as in2014 and since mid-2024 or pre-2020") == []
    # codes stay codes, whatever their case or separators
    assert identifiers("INC-2041, CVE-2024-3094, R01-2291, covid-19, gpt-4, 10-K, 4-PBA, fy2024, x86-64") == \
        ["INC-2041", "CVE-2024-3094", "R01-2291", "covid-19", "gpt-4", "10-K", "4-PBA", "fy2024", "x86-64"]
    assert extract("Can I bring my 12-year-old along?", TODAY).is_empty()


def test_a_quoted_title_leaves_out_the_sentence_punctuation_it_swallowed():
    q = 'Which came first, "Rebel Without a Cause," or the album "Old and in the Way?"'
    assert extract(q, TODAY).phrases == ("Rebel Without a Cause", "Old and in the Way")
    assert extract('Who sang "Stop!" in "Help."', TODAY).phrases == ("Stop", "Help")
    assert extract('what does "?" mean', TODAY).phrases == ()


def test_a_word_written_with_a_number_that_the_catalog_knows_stays_a_constraint_as_an_entity():
    import numpy as np

    from retrieval.entities import EntityIndex

    shifts = EntityIndex.build([(0, "24-hour"), (1, "12-hour")])  # short metadata values of two documents
    question = "Who works the 24-hour rota?"
    found = shifts.find(question, np.array([True, False]), identifiers(question))
    assert extract(question, TODAY, found) == extract("", TODAY, ["24-hour"])  # an entity, not an identifier
    assert shifts.find("Who works the 12-hour rota?", np.array([True, False]), identifiers(question)) == []  # not readable


def test_a_half_of_a_year_before_a_year_is_a_date_not_an_identifier():
    for q, start, end in (("incidents opened in H1 2025", date(2025, 1, 1), date(2025, 6, 30)),
                          ("revenue for 2H 2024", date(2024, 7, 1), date(2024, 12, 31)),
                          ("tickets between H1 and H2 2025", date(2025, 1, 1), date(2025, 12, 31))):
        constraints = extract(q, TODAY)
        assert constraints.identifiers == () and [(d.start, d.end) for d in constraints.dates] == [(start, end)], q
    assert identifiers("the H2 database settings") == ["H2"]  # alone, it may name a thing
