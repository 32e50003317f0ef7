"""Dates named in a question resolve to ranges against a given today; dated passages rank first."""

from __future__ import annotations

from datetime import date

import pytest

from retrieval.dates import DateRange, dated_first, find_dates, in_ranges, written_periods
from retrieval.errors import InvalidRequest, RetrievalError
from retrieval.types import Hit

TODAY = date(2025, 11, 1)


def span(text: str, today: date = TODAY) -> tuple[date | None, date | None]:
    """The one range a phrase names, read strictly as a question is."""
    (r,) = find_dates(text, today, strict=True)
    return r.start, r.end


def hit(n: int, day: str | None) -> Hit:
    return Hit(f"c{n}", f"d{n}", f"passage {n}", 1.0, ("hybrid",), 0, 9, date=day)


def test_a_month_a_year_and_a_quarter_are_their_whole_periods():
    assert span("minutes of March 2025") == (date(2025, 3, 1), date(2025, 3, 31))
    assert span("minutes of February 2024") == (date(2024, 2, 1), date(2024, 2, 29))
    assert span("what changed in 2024") == (date(2024, 1, 1), date(2024, 12, 31))
    assert span("budget for Q3 2025") == (date(2025, 7, 1), date(2025, 9, 30))
    assert span("the third quarter of 2024") == (date(2024, 7, 1), date(2024, 9, 30))


def test_a_number_outside_1990_to_2099_is_not_a_year():
    assert find_dates("error 1850 in the log", TODAY) == []


def test_last_quarter_is_the_quarter_before_todays():
    assert span("incidents last quarter") == (date(2025, 7, 1), date(2025, 9, 30))
    assert span("incidents last quarter", date(2025, 2, 10)) == (date(2024, 10, 1), date(2024, 12, 31))


def test_this_period_ends_today_and_last_period_is_whole():
    assert span("changes this quarter") == (date(2025, 10, 1), TODAY)
    assert span("changes this year") == (date(2025, 1, 1), TODAY)
    assert span("changes last month") == (date(2025, 10, 1), date(2025, 10, 31))
    assert span("changes last month", date(2025, 1, 15)) == (date(2024, 12, 1), date(2024, 12, 31))
    assert span("changes last week") == (date(2025, 10, 20), date(2025, 10, 26))
    assert span("changes in the last 30 days") == (date(2025, 10, 2), TODAY)
    assert span("what broke yesterday") == (date(2025, 10, 31), date(2025, 10, 31))


def test_an_iso_day_and_a_written_day_are_that_day():
    assert span("what happened on 2025-03-14") == (date(2025, 3, 14), date(2025, 3, 14))
    assert span("logged 2025-03-14T09:30:00Z") == (date(2025, 3, 14), date(2025, 3, 14))
    assert span("what happened on 14 March 2025") == (date(2025, 3, 14), date(2025, 3, 14))
    assert span("what happened on the 14th of March 2025") == (date(2025, 3, 14), date(2025, 3, 14))
    assert span("what happened on March 14, 2025") == (date(2025, 3, 14), date(2025, 3, 14))


def test_before_excludes_its_period_and_until_includes_it():
    assert span("incidents before June 2025") == (None, date(2025, 5, 31))
    assert span("incidents until June 2025") == (None, date(2025, 6, 30))
    assert span("incidents before 2025-06-10") == (None, date(2025, 6, 9))


def test_after_excludes_its_period_and_since_includes_it():
    assert span("incidents after March 2025") == (date(2025, 4, 1), None)
    assert span("incidents since March 2025") == (date(2025, 3, 1), None)


def test_between_two_months_runs_from_the_first_day_of_one_to_the_last_of_the_other():
    assert span("between January 2024 and March 2024") == (date(2024, 1, 1), date(2024, 3, 31))
    assert span("incidents between January 2024 and March 2024") == (date(2024, 1, 1), date(2024, 3, 31))
    assert span("tickets from 2024-01-01 to 2024-01-31") == (date(2024, 1, 1), date(2024, 1, 31))


def test_an_operator_phrase_keeps_its_operator_in_the_text():
    (r,) = find_dates("incidents before June 2025", TODAY, strict=True)
    assert r.text == "before June 2025"
    (r,) = find_dates("between January 2024 and March 2024", TODAY, strict=True)
    assert r.text == "between January 2024 and March 2024"


def test_a_between_range_after_other_words_keeps_its_whole_phrase_as_text():
    for question, phrase in [
        ("incidents between January 2024 and March 2024", "between January 2024 and March 2024"),
        ("How many incidents did the ledger team record between January 2024 and March 2024?",
         "between January 2024 and March 2024"),
        ("tickets from 2024-01-01 to 2024-01-31", "from 2024-01-01 to 2024-01-31"),
    ]:
        (r,) = find_dates(question, TODAY, strict=True)
        assert r.text == phrase, question


def test_an_impossible_day_in_a_question_is_a_typed_error():
    for text in ("What happened on 2025-02-30?", "the 30 February 2025 outage", "tickets from February 30, 2025"):
        with pytest.raises(InvalidRequest, match="not a valid date") as caught:
            find_dates(text, TODAY, strict=True)
        assert isinstance(caught.value, RetrievalError)


def test_an_impossible_iso_day_in_a_passage_is_no_date():
    assert find_dates("logged 2025-02-30 by mistake", TODAY) == []


def test_an_impossible_written_day_in_a_passage_is_no_date():
    assert find_dates("logged 30 February 2025 by mistake", TODAY) == []
    assert find_dates("logged February 30, 2025 by mistake", TODAY) == []


def test_a_day_is_in_ranges_only_when_inside_every_range():
    ranges = find_dates("since March 2025 and before June 2025", TODAY, strict=True)
    assert in_ranges("2025-04-02", ranges)
    assert in_ranges("2025-03-01T08:00:00", ranges)
    assert not in_ranges("2025-06-01", ranges)
    assert not in_ranges("2025-02-28", ranges)


def test_an_undated_document_or_no_range_is_never_in_ranges():
    july = [DateRange(date(2025, 7, 1), date(2025, 7, 31), "July 2025")]
    assert not in_ranges(None, july)
    assert not in_ranges("2025-07-03", [])


def test_dated_first_puts_in_range_hits_first_each_group_in_retrieval_order():
    july = find_dates("the July 2025 meeting", TODAY)
    hits = [hit(0, "2025-06-12"), hit(1, "2025-07-10"), hit(2, None), hit(3, "2025-07-02"), hit(4, "2025-08-01")]
    assert [h.chunk_id for h in dated_first(hits, july)] == ["c1", "c3", "c0", "c2", "c4"]


def test_dated_first_leaves_the_order_alone_without_date_constraints():
    hits = [hit(0, "2025-06-12"), hit(1, "2025-07-10"), hit(2, None)]
    assert dated_first(hits, []) == hits


def test_dated_first_leaves_the_order_alone_when_no_hit_is_in_range():
    july = find_dates("the July 2025 meeting", TODAY)
    hits = [hit(0, "2025-06-12"), hit(1, None), hit(2, "2025-08-01")]
    assert dated_first(hits, july) == hits


def test_written_periods_are_the_calendar_periods_a_passage_writes_without_operators():
    assert written_periods("Prices rise on or after 2 December 2025; the Q3 2025 index and 2024 stay.") == (
        (date(2025, 12, 2), date(2025, 12, 2)), (date(2025, 7, 1), date(2025, 9, 30)), (date(2024, 1, 1), date(2024, 12, 31)))


def test_written_periods_leave_out_relative_words():
    assert written_periods("Last year and this month, as yesterday, in the past 30 days.") == ()


def test_a_range_holds_a_period_only_when_the_whole_period_lies_inside_it():
    april = DateRange(date(2025, 4, 1), date(2025, 4, 30), "April 2025")
    assert april.holds(date(2025, 4, 3), date(2025, 4, 3))
    assert not april.holds(date(2025, 1, 1), date(2025, 12, 31))  # "2025" overlaps April, it does not lie inside
    before = DateRange(None, date(2025, 5, 31), "before June 2025")
    assert before.holds(date(2025, 3, 1), date(2025, 3, 31)) and not before.holds(date(2025, 1, 1), date(2025, 12, 31))


def test_a_range_side_without_a_year_takes_it_from_the_other_side():
    assert span("incidents between 1 January and 30 June 2025") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("incidents between January 1 and June 30, 2025") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("How many incidents were opened between July and September 2025?") == (date(2025, 7, 1), date(2025, 9, 30))
    assert span("deploys from March to May 2025") == (date(2025, 3, 1), date(2025, 5, 31))
    assert span("deploys from Jan. to Mar. 2024") == (date(2024, 1, 1), date(2024, 3, 31))
    assert span("budget between Q1 and Q3 2025") == (date(2025, 1, 1), date(2025, 9, 30))
    assert span("tickets from January 2025 to March") == (date(2025, 1, 1), date(2025, 3, 31))  # written second, too
    assert span("tickets between 1 March 2024 and 15 April") == (date(2024, 3, 1), date(2024, 4, 15))


def test_a_bare_day_takes_the_month_and_year_of_the_other_side():
    assert span("outages from 3 to 17 March 2025") == (date(2025, 3, 3), date(2025, 3, 17))
    assert span("outages from 3-17 March 2025") == (date(2025, 3, 3), date(2025, 3, 17))
    assert span("outages between the 1st and the 15th of March 2025") == (date(2025, 3, 1), date(2025, 3, 15))


def test_a_side_that_would_run_the_range_backwards_moves_by_the_unit_it_borrowed():
    assert span("from November to February 2025") == (date(2024, 11, 1), date(2025, 2, 28))
    assert span("between Q4 and Q1 2025") == (date(2024, 10, 1), date(2025, 3, 31))
    assert span("from November 2024 to February") == (date(2024, 11, 1), date(2025, 2, 28))
    assert span("from 28 to 3 March 2025") == (date(2025, 2, 28), date(2025, 3, 3))


def test_a_range_phrase_with_a_side_without_a_year_keeps_its_whole_text():
    for question, phrase in [
        ("How many incidents were opened between July and September 2025?", "between July and September 2025"),
        ("outages from 3 to 17 March 2025, by team", "from 3 to 17 March 2025"),
        ("tickets from January 2025 to March, by team", "from January 2025 to March"),
    ]:
        (r,) = find_dates(question, TODAY, strict=True)
        assert r.text == phrase and r.text in question, question


def test_a_range_needs_a_year_on_one_side_and_a_bare_day_a_day_on_the_other():
    assert find_dates("logged between 1 January and 30 June?", TODAY, strict=True) == []
    assert find_dates("between Q1 and Q3", TODAY, strict=True) == []
    assert span("from 5 to 2025") == (date(2025, 1, 1), date(2025, 12, 31))  # a year gives a bare day no month
    # "from ... and" joins no range: these are two releases, the second of them dated
    assert span("the notes from the March and June 2025 releases") == (date(2025, 6, 1), date(2025, 6, 30))


def test_an_impossible_day_on_a_side_without_a_year_is_a_typed_error():
    with pytest.raises(InvalidRequest, match="not a valid date"):
        find_dates("between 30 February and 3 March 2025", TODAY, strict=True)
    assert [(r.start, r.end) for r in find_dates("between 30 February and 3 March 2025", TODAY)] == [
        (date(2025, 3, 3), date(2025, 3, 3))]


def test_a_half_is_its_six_months_not_its_whole_year():
    assert span("revenue in H1 2025") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("revenue in H2 2024") == (date(2024, 7, 1), date(2024, 12, 31))
    assert span("revenue in 1H 2025") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("revenue in the first half of 2025") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("revenue in the second half of 2024") == (date(2024, 7, 1), date(2024, 12, 31))
    assert span("revenue in the last half of 2024") == (date(2024, 7, 1), date(2024, 12, 31))
    assert span("revenue in the first half-year 2023") == (date(2023, 1, 1), date(2023, 6, 30))
    (r,) = find_dates("how many press repairs in H1 2025?", TODAY, strict=True)
    assert r.text == "H1 2025"


def test_a_half_named_relative_to_today():
    assert span("incidents in the first half of the year") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("incidents in the second half of last year") == (date(2024, 7, 1), date(2024, 12, 31))
    assert span("incidents this half") == (date(2025, 7, 1), TODAY)
    assert span("incidents last half-year") == (date(2025, 1, 1), date(2025, 6, 30))
    assert span("incidents last half-year", date(2025, 3, 2)) == (date(2024, 7, 1), date(2024, 12, 31))
    assert find_dates("what broke in the last half hour", TODAY, strict=True) == []


def test_open_ranges_name_one_side():
    assert span("incidents since April 2025") == (date(2025, 4, 1), None)
    assert span("incidents before 2025") == (None, date(2024, 12, 31))
    assert span("incidents after 30 June 2025") == (date(2025, 7, 1), None)
    assert span("incidents until March 2025") == (None, date(2025, 3, 31))
    assert span("incidents up to Q2 2025") == (None, date(2025, 6, 30))
    assert span("incidents before H2 2025") == (None, date(2025, 6, 30))
    assert span("incidents since the second half of 2024") == (date(2024, 7, 1), None)
    assert span("incidents before the 14th of March 2025") == (None, date(2025, 3, 13))


def test_a_range_reads_past_the_names_of_days_and_the_article_before_a_side():
    assert span("closed from Monday 24 November to Monday 1 December 2025") == (date(2025, 11, 24), date(2025, 12, 1))
    assert span("closed from Friday 19 December 2025 to Monday 5 January 2026") == (date(2025, 12, 19), date(2026, 1, 5))
    assert span("between the 1st of March 2025 and the 3rd of March 2025") == (date(2025, 3, 1), date(2025, 3, 3))
    assert span("due before Monday 3 March 2025") == (None, date(2025, 3, 2))
