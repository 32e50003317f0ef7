"""Text helpers of the pure core: which words a question writes as names."""

from __future__ import annotations

from retrieval.text import name_words, record_numbers


def test_a_capitalised_word_inside_a_sentence_is_a_name():
    assert name_words("What are the opening hours of the Brackenfold depot?") == ["Brackenfold"]
    assert name_words("Why was Tamsin Okoro moved to the Vell team?") == ["Tamsin", "Okoro", "Vell"]


def test_a_word_that_starts_a_sentence_or_follows_a_colon_is_not_a_name():
    assert name_words("Refunds: Who approves them? Managers do.") == []


def test_a_possessive_is_dropped_and_acronyms_count():
    assert name_words("Does Orlen's audit cover the SIEM retention?") == ["Orlen", "SIEM"]


def test_stopwords_months_days_and_first_person_forms_are_not_names():
    assert name_words("If I'm off on Monday in March, who signs it?") == []


def test_quoted_phrases_identifiers_and_numbers_are_left_to_their_own_rules():
    assert name_words('Which release of "Grey Heron" fixed KX-204 in 2025?') == []


def test_title_case_or_shouting_names_nothing():
    assert name_words("What Is The Refund Policy For Power Drills?") == []
    assert name_words("WHAT IS THE REFUND POLICY FOR DRILLS?") == []


def test_a_number_a_thing_is_named_by_is_a_name_and_an_amount_a_date_or_a_limit_is_not():
    assert name_words("What caused the fire on coach 4406 in October?") == ["4406"]
    assert name_words("WHICH PART FAILED IN ROOM 101?") == ["101"]  # casing names nothing, a number still does
    assert record_numbers("Did Kiln 7 or bay 12 run over 500 hours in March 2025, the top 100, 3.5 or 1,200 or 20%?") == []
