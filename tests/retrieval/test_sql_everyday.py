"""Table questions in everyday words: verbs of recording, relation words, a table's container,
money and units in words, plural values, and the aliases a sidecar gives. A made-up ferry
operator's delay records (none of the words the translator's rules were written from). Pure:
tables and profiles are values here; the ingest of a sidecar's aliases is in
tests/indexes/test_tables.py."""

from __future__ import annotations

from datetime import date

from retrieval.sql.plan import Decline
from retrieval.sql.schema import ColumnInfo, ColumnProfile, TableInfo
from retrieval.sql.translate import Translation, Translator

TODAY = date(2025, 11, 1)
DELAYS = TableInfo("delays", (ColumnInfo("delay_id", "VARCHAR"), ColumnInfo("vessel", "VARCHAR"),
                              ColumnInfo("cause", "VARCHAR"), ColumnInfo("resolved_on", "DATE"),
                              ColumnInfo("cost_nok", "DOUBLE"), ColumnInfo("delay_minutes", "BIGINT"),
                              ColumnInfo("logged_on", "DATE")), ("public",), id_column="delay_id")
PROFILES = {("delays", "delay_id"): ColumnProfile((), ("DL-",)), ("delays", "vessel"): ColumnProfile(("skarv", "ternen")),
            ("delays", "cause"): ColumnProfile(("engine", "fog", "crew")), ("delays", "cost_nok"): ColumnProfile(decimals=2)}
# The same records as a team named them: a register with terse column names, and the sidecar's
# description and aliases saying what they hold.
REGISTER = TableInfo("dly_reg", (ColumnInfo("ref", "VARCHAR"), ColumnInfo("ship", "VARCHAR"),
                                 ColumnInfo("amt", "DOUBLE", "compensation paid to passengers", ("compensation",)),
                                 ColumnInfo("d1", "DATE", "", ("date raised",))),
                     ("public",), id_column="ref", aliases=("delay register",))
REGISTER_PROFILES = {("dly_reg", "ref"): ColumnProfile((), ("DR-",)), ("dly_reg", "ship"): ColumnProfile(("skarv", "ternen"))}


def sql(question: str, table: TableInfo = DELAYS, profiles=None) -> str:
    out = Translator([table], PROFILES if profiles is None else profiles, TODAY).translate(question)
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
