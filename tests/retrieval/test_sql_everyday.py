"""Table questions in everyday words: verbs of recording, relation words, a table's container,
money and units in words, plural values, and the aliases a sidecar gives. A made-up ferry
operator's delay records (none of the words the translator's rules were written from). Pure:
tables and profiles are values here; the ingest of a sidecar's aliases is in
tests/indexes/test_tables.py."""

from __future__ import annotations

import re
from datetime import date

from retrieval.sql.meaning import ColumnMeaning
from retrieval.sql.plan import Decline
from retrieval.sql.schema import ColumnInfo, ColumnProfile, TableInfo
from retrieval.sql.translate import Translation, Translator

TODAY = date(2025, 11, 1)
DELAYS = TableInfo("delays", (ColumnInfo("delay_id", "VARCHAR"), ColumnInfo("vessel", "VARCHAR"),
                              ColumnInfo("cause", "VARCHAR"), ColumnInfo("resolved_on", "DATE"),
                              ColumnInfo("cost_nok", "DOUBLE"), ColumnInfo("delay_minutes", "BIGINT"),
                              ColumnInfo("logged_on", "DATE"), ColumnInfo("severity", "VARCHAR"),
                              ColumnInfo("status", "VARCHAR"), ColumnInfo("route_type", "VARCHAR"),
                              ColumnInfo("passengers_affected", "BIGINT")), ("public",), id_column="delay_id")
PROFILES = {("delays", "delay_id"): ColumnProfile((), ("DL-",)), ("delays", "vessel"): ColumnProfile(("skarv", "ternen")),
            ("delays", "cause"): ColumnProfile(("engine", "fog", "crew", "ramp fault")),
            ("delays", "cost_nok"): ColumnProfile(decimals=2), ("delays", "severity"): ColumnProfile(("low", "high")),
            ("delays", "status"): ColumnProfile(("open", "in review", "closed")),
            ("delays", "route_type"): ColumnProfile(("island hop", "fjord crossing"))}
# The same records as a team named them: a register with terse column names, and the sidecar's
# description and aliases saying what they hold.
REGISTER = TableInfo("dly_reg", (ColumnInfo("ref", "VARCHAR"), ColumnInfo("ship", "VARCHAR"),
                                 ColumnInfo("amt", "DOUBLE", "compensation paid to passengers", ("compensation",)),
                                 ColumnInfo("d1", "DATE", "", ("date raised",))),
                     ("public",), id_column="ref", aliases=("delay register",))
REGISTER_PROFILES = {("dly_reg", "ref"): ColumnProfile((), ("DR-",)), ("dly_reg", "ship"): ColumnProfile(("skarv", "ternen"))}


def sql(question: str, table: TableInfo = DELAYS, profiles=None, meaning: ColumnMeaning | None = None) -> str:
    out = Translator([table], PROFILES if profiles is None else profiles, TODAY, meaning).translate(question)
    assert isinstance(out, Translation), (question, out)
    return out.sql


def test_a_verb_of_recording_means_the_rows_and_the_date_they_were_recorded_on():
    for verb in ("logged", "reported", "raised", "recorded", "filed"):
        q = sql(f"How many delays were {verb} in March 2025?")
        assert q.startswith("SELECT count(*)") and '"logged_on"' in q and "2025-03-01" in q and "2025-03-31" in q, (verb, q)
        assert "resolved_on" not in q


def test_relation_words_and_the_records_container_say_which_records_not_which_column():
    for question in ("How many delays concerning fog were raised?", "How many entries in the delay log concern fog?",
                     "How many delays regarding fog are there?"):
        q = sql(question)
        assert q.startswith("SELECT count(*)") and "\"cause\" = 'fog'" in q, (question, q)


def test_a_plural_names_a_singular_value():
    assert "\"cause\" = 'engine'" in sql("How many delays were down to engines?")


def test_money_and_units_in_words_name_the_column_that_carries_them():
    q = sql("How much did we spend in kroner on engine delays?")
    assert 'sum(CAST("cost_nok"' in q and "\"cause\" = 'engine'" in q
    assert 'sum("delay_minutes")' in sql("How many minutes were lost to fog in total?")
    assert 'sum("delay_minutes")' in sql("How many minutes were lost to fog?")  # a quantity counted is added up
    assert 'sum("delay_minutes")' in sql("How many minutes of delay did fog rack up in 2025?")  # accumulating verbs
    assert sql("How many delay minutes did DL-0042 have?").startswith('SELECT "delay_minutes"')  # one record: read
    assert 'avg("delay_minutes")' in sql("How long was the average delay for Skarv?")


def test_one_record_asked_how_much_is_read_not_summed():
    q = sql("How much did DL-0042 cost?")
    assert q.startswith('SELECT "cost_nok"') and "sum(" not in q


def test_the_sidecar_aliases_link_a_terse_table_and_its_columns():
    q = sql("How much compensation was paid in total from the delay register?", REGISTER, REGISTER_PROFILES)
    assert 'sum("amt")' in q
    q = sql("How many entries in the delay register were raised in 2025?", REGISTER, REGISTER_PROFILES)
    assert '"d1"' in q and "2025-01-01" in q


def test_words_nothing_explains_still_decline():
    out = Translator([DELAYS], PROFILES, TODAY).translate("How many delays were caused by seagulls?")
    assert isinstance(out, Decline) and "seagulls" in out.unlinked and out.table == "delays"
    out = Translator([DELAYS], PROFILES, TODAY).translate("What was the weather when delays were logged?")
    assert isinstance(out, Decline) and "weather" in out.unlinked
    # a column's word with a verb the table does not record: no count of `passengers_affected`
    out = Translator([DELAYS], PROFILES, TODAY).translate("How many passengers did Skarv receive in 2025?")
    assert isinstance(out, Decline) and "receive" in out.unlinked and out.aggregate


def test_two_values_of_one_column_are_either_not_both():
    q = sql("How many delays are open or in review?")
    assert "\"status\" IN ('open', 'in review')" in q and "AND \"status\"" not in q


def test_which_group_had_the_most_and_how_many_or_how_much():
    q = sql("Which vessel logged the most delays in 2025, and how many?")
    assert 'GROUP BY "vessel"' in q and "count(*)" in q and "LIMIT 1" in q
    q = sql("Which vessel have we spent the most on in kroner, and how much?")
    assert 'GROUP BY "vessel"' in q and 'sum(CAST("cost_nok"' in q and "LIMIT 1" in q


def test_the_most_of_a_measure_ranks_the_records_by_it():
    q = sql("Which three delays affected the most passengers?")
    assert 'ORDER BY "passengers_affected" DESC' in q and "LIMIT 3" in q


def test_money_asked_of_many_records_is_their_sum_and_of_one_record_its_value():
    assert 'sum(CAST("cost_nok"' in sql("What have high severity delays cost us since 1 July 2025?")
    assert "sum(" not in sql("What did DL-0042 cost?")


def test_kinds_break_downs_plural_and_hyphenated_values_and_the_noun_a_value_describes():
    assert 'GROUP BY "route_type"' in sql("How many delays of each type were raised in 2025?")
    assert 'GROUP BY "vessel"' in sql("Break down the number of delays logged for each vessel in 2025.")
    assert "\"cause\" = 'ramp fault'" in sql("How many ramp faults delayed us?")
    assert "\"severity\" = 'high'" in sql("How many high-severity delays were logged in 2025?")
    assert "\"route_type\" = 'island hop'" in sql("How many island hop delays involved skarv vessels?")


def test_a_word_that_means_the_records_is_their_noun_and_a_word_that_does_not_still_declines(embedder):
    meaning = ColumnMeaning(embedder.encode_query)
    faults = TableInfo("defects", DELAYS.columns, ("public",), id_column="delay_id")
    profiles = {("defects", c): p for (_, c), p in PROFILES.items()}
    assert sql("How many faults concerning fog were logged?", faults, profiles, meaning).startswith("SELECT count(*)")
    out = Translator([faults], profiles, TODAY, meaning).translate("How many bolts concerning fog were logged?")
    assert isinstance(out, Decline) and out.unlinked == ("bolts",)


def test_a_distinctive_word_of_a_longer_value_links_it_and_a_shared_one_links_each():
    assert "\"route_type\" = 'island hop'" in sql("How many delays on island routes were logged?")
    assert "\"cause\" = 'ramp fault'" in sql("How many ramp delays were there?")
    profiles = {**PROFILES, ("delays", "route_type"): ColumnProfile(("island hop", "island shuttle", "fjord crossing"))}
    assert "\"route_type\" IN ('island hop', 'island shuttle')" in sql("How many island delays were logged?", profiles=profiles)


def test_a_word_of_values_of_two_columns_or_the_noun_after_a_value_is_not_read_as_a_value():
    profiles = {**PROFILES, ("delays", "vessel"): ColumnProfile(("skarv", "ternen", "fjord star"))}
    out = Translator([DELAYS], profiles, TODAY).translate("How many fjord delays were logged?")
    assert isinstance(out, Decline) and "fjord" in out.unlinked  # a vessel and a route type
    out = Translator([DELAYS], PROFILES, TODAY).translate("How many engine crossing problems were logged?")
    assert isinstance(out, Decline) and "crossing" in out.unlinked  # the noun "engine" describes, not "fjord crossing"


def test_a_rate_per_period_names_its_column_and_a_pronoun_is_no_value():
    table = TableInfo("deals", (ColumnInfo("deal_id", "VARCHAR"), ColumnInfo("department", "VARCHAR"),
                                ColumnInfo("annual_value_eur", "DOUBLE")), ("public",), id_column="deal_id")
    profiles = {("deals", "deal_id"): ColumnProfile((), ("DE-",)), ("deals", "department"): ColumnProfile(("it", "sales"))}
    q = sql("What is DE-0007 worth a year?", table, profiles)
    assert q.startswith('SELECT "annual_value_eur"') and "department" not in q.split("WHERE")[1]  # "it" is no department
    assert 'sum("annual_value_eur")' in sql("What is our total yearly value of sales deals?", table, profiles)


def test_a_word_of_a_title_is_no_value():
    """A column with phrases in it (titles) is not a column of labels: "budget" in a ticket's
    title "Budget line for the retest" does not make a question about budgets a list of tickets."""
    profiles = {**PROFILES, ("delays", "vessel"): ColumnProfile(("skarv", "budget line for the retest"))}
    out = Translator([DELAYS], profiles, TODAY).translate("What is the fog budget for delays?")
    assert isinstance(out, Decline) and "budget" in out.unlinked


def test_a_value_written_in_other_forms_of_its_words_is_the_value_and_counts_records_not_a_column():
    profiles = {**PROFILES, ("delays", "cause"): ColumnProfile(("engine", "fog", "crew", "ramp fault", "passenger injured"))}
    q = sql("How many passenger injuries were logged in 2025?", profiles=profiles)
    # "passenger" writes the value, not the number column `passengers_affected`: the records are counted
    assert q.startswith("SELECT count(*)") and "\"cause\" = 'passenger injured'" in q and "passengers_affected" not in q
    q = sql("How many passengers were affected by passenger injuries?", profiles=profiles)
    assert 'sum("passengers_affected")' in q and "\"cause\" = 'passenger injured'" in q  # the plural asks the column
    # a word of another root is no form of the value's word: declined, never a guess
    assert isinstance(Translator([DELAYS], profiles, TODAY).translate("How many passenger injections were logged?"), Decline)


def test_a_word_that_names_a_column_only_by_its_crude_root_is_still_read_as_a_value_word():
    table = TableInfo("delays", (*DELAYS.columns, ColumnInfo("sailed_km", "DOUBLE")), ("public",), id_column="delay_id")
    profiles = {**PROFILES, ("delays", "cause"): ColumnProfile(("engine", "fog", "crew", "traveller complaint"))}
    # "travellers" shares its root with "travelled", a distance word of `sailed_km`; the value writes it whole
    q = sql("How many delays were down to complaints from travellers?", table, profiles)
    assert q.startswith("SELECT count(*)") and "\"cause\" = 'traveller complaint'" in q and "sailed_km" not in q
    assert 'sum("sailed_km")' in sql("How far was travelled in total on the island hop?", table, profiles)


def test_a_plural_that_names_a_column_groups_by_it_even_when_a_value_of_another_column_writes_it():
    table = TableInfo("delays", (*DELAYS.columns, ColumnInfo("service", "VARCHAR")), ("public",), id_column="delay_id")
    profiles = {**PROFILES, ("delays", "service"): ColumnProfile(("early", "late", "night")),
                ("delays", "cause"): ColumnProfile(("engine", "fog", "service vehicle fault"))}
    q = sql("Which two services had the most delays?", table, profiles)
    assert 'GROUP BY "service"' in q and "service vehicle fault" not in q


def test_a_record_named_by_a_noun_and_its_number_links_to_the_one_column_of_numbers_that_long():
    table = TableInfo("delays", (*DELAYS.columns, ColumnInfo("berth", "VARCHAR"), ColumnInfo("ticket_ref", "VARCHAR")),
                      ("public",), id_column="delay_id")
    profiles = {**PROFILES, ("delays", "berth"): ColumnProfile(digits=3), ("delays", "ticket_ref"): ColumnProfile(digits=6)}
    q = sql("How many delays were logged at pier 112 in 2025?", table, profiles)
    assert q.startswith("SELECT count(*)") and "\"berth\" = '112'" in q and "2025-01-01" in q
    assert "\"ticket_ref\" = '448120'" in sql("Which delay was raised for complaint 448120?", table, profiles)
    decline = Translator([table], profiles, TODAY).translate
    # a number that names no labelled record, or is labelled by another column, is not read by its shape
    assert isinstance(decline("How many delays were logged at vessel 112?"), Decline)
    for question in ("How many delays in 2025?", "Which delays cost more than 500 kroner?"):
        assert "berth" not in sql(question, table, profiles), question
    assert isinstance(decline("How many delays were logged at pier 11?"), Decline)  # fewer digits than any column's


def test_a_number_of_records_by_a_measure_is_ranked_by_it_not_by_date():
    for question in ("What are the top 10 delays by cost?", "List 10 delays by cost in kroner.",
                     "Show the top 10 delays by kroner."):
        q = sql(question)
        assert 'ORDER BY "cost_nok" DESC' in q and "LIMIT 10" in q and "logged_on" not in q, (question, q)
    assert 'ORDER BY "delay_minutes" DESC' in sql("Show 3 delays by minutes of delay.")
    latest = sql("Show the 5 latest delays.")  # a date's superlative stays the date's
    assert re.search(r'ORDER BY "(logged|resolved)_on" DESC', latest) and "cost_nok" not in latest
