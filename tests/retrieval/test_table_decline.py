"""A question about a table whose SQL translation is declined: which table it is about, how
much of it the table explains, and when passages may still answer it (retrieval/sql/about.py,
retrieval/table_decline.py). Pure: tables and profiles are values here; the engine-level
behaviour is in tests/routes/service/test_declined_tables.py."""

from __future__ import annotations

from datetime import date

from retrieval.grader import Grade
from retrieval.sql.about import mostly_about, terms_of
from retrieval.sql.plan import Decline
from retrieval.sql.schema import ColumnInfo, ColumnProfile, TableInfo
from retrieval.sql.translate import Translation, Translator
from retrieval.table_decline import checked, decline_json, labels, required, unheld
from retrieval.types import Hit

TODAY = date(2025, 11, 1)
REPAIRS = TableInfo("repairs", (ColumnInfo("repair_id", "VARCHAR"), ColumnInfo("machine", "VARCHAR"),
                                ColumnInfo("status", "VARCHAR"), ColumnInfo("cost_eur", "DOUBLE"),
                                ColumnInfo("reported_on", "DATE")), ("group:workshop",), id_column="repair_id")
LOANS = TableInfo("loans", (ColumnInfo("loan_id", "VARCHAR"), ColumnInfo("branch", "VARCHAR"),
                            ColumnInfo("fine_usd", "DOUBLE")), ("public",), id_column="loan_id")
PROFILES = {("repairs", "repair_id"): ColumnProfile((), ("RP-",)),
            ("repairs", "machine"): ColumnProfile(("kiln", "lathe", "press")),
            ("repairs", "status"): ColumnProfile(("closed", "open")), ("repairs", "cost_eur"): ColumnProfile(decimals=2),
            ("loans", "loan_id"): ColumnProfile((), ("LN-",)), ("loans", "branch"): ColumnProfile(("harbour", "riverside"))}
FAULT_LOG = Decline("could not link every word of the question to the schema", ("fault", "log"), "repairs", ("repairs",))


def translate(question: str, tables=(REPAIRS, LOANS)) -> Translation | Decline:
    return Translator(list(tables), PROFILES, TODAY).translate(question)


def hit(text: str, title: str = "Machine care") -> Hit:
    return Hit("c1", "d1", text, 1.0, ("hybrid",), 0, len(text), title=title)


def test_a_decline_names_the_table_the_question_names_by_noun_row_key_or_column():
    for question, words in (("Which repairs had a fault log?", {"fault"}),
                            ("Which warranty claim was raised about RP-1004?", {"warranty", "claim"}),
                            ("Which lathe cost figures were logged in euros?", {"figures"})):
        out = translate(question)
        assert isinstance(out, Decline) and out.table == "repairs", (question, out)
        assert words <= set(out.unlinked), (question, out.unlinked)
        assert not set(out.unlinked) & set(out.explained), out


def test_a_question_that_only_shares_a_value_with_a_table_is_not_about_it():
    out = translate("Can children come into the kiln room?")
    assert isinstance(out, Decline) and out.table is None and out.explained == ()


def test_a_table_the_caller_cannot_read_is_never_named():
    """The translator sees only the readable tables: a question about an unreadable one gets
    the decline a question about no table gets."""
    out = translate("Which repairs had a fault log?", tables=(LOANS,))
    assert out == Decline("no readable table matches the question")
    assert translate("Which repairs had a fault log?", tables=()) == out


def test_questions_the_translator_handles_are_still_translated():
    assert isinstance(translate("How many lathe repairs are open?"), Translation)
    assert isinstance(translate("What is the status of RP-1007?"), Translation)


def test_an_identifier_no_column_holds_is_left_with_every_other_unlinked_word():
    out = translate("How many press repairs needed spare part PX-77?")
    assert isinstance(out, Decline) and out.reason.startswith("identifier PX-77")
    assert out.unlinked[0] == "PX-77" and {"spare", "part"} <= set(out.unlinked)  # the translator's word first, as written


def test_a_half_year_and_a_range_with_a_yearless_side_are_dates():
    for question, (start, end) in (("How many press repairs were logged in H1 2025?", ("2025-01-01", "2025-06-30")),
                                   ("How many press repairs were logged between July and September 2025?",
                                    ("2025-07-01", "2025-09-30"))):
        out = translate(question)
        assert isinstance(out, Translation) and start in out.sql and end in out.sql, (question, out)
    # with no year on either side the range is not read: its words stay unlinked
    out = translate("How many press repairs were logged between 1 January and 30 June?")
    assert isinstance(out, Decline) and {"between", "january", "june"} <= set(out.unlinked)


def test_a_short_term_or_a_table_that_explains_most_of_the_question_requires_its_words():
    assert required(FAULT_LOG) == ("fault", "log")  # one explained word, one two-word term left
    assert mostly_about(("cost", "press", "repairs"), ("euros",))
    # a date the translator could not place is one term: "logged" and the date
    assert terms_of(("between", "january", "june", "logged")) == 2
    assert mostly_about(("repairs",), ("between", "january", "june", "logged"))
    # mostly about something else that mentions the table: the grade decides
    long = Decline("could not link every word", ("batch", "commander", "friday", "payout", "stalled"), "incidents",
                   ("incidents",))
    assert not mostly_about(long.explained, long.unlinked) and required(long) == ()
    assert required(Decline("no readable table matches the question", ("fault", "log"))) == ()  # about no table


def test_required_words_are_held_by_their_stem_or_root_and_an_identifier_as_a_whole_token():
    assert unheld(FAULT_LOG, [hit("The press stopped; a technician booked the repair.")]) == ("fault", "log")
    assert unheld(FAULT_LOG, [hit("Faults are written in the log book."), hit("unrelated")]) == ()
    h1 = Decline("identifier H1 does not match any column of repairs", ("H1",), "repairs", ("press", "repairs"))
    assert unheld(h1, [hit("Plans for H12 and 2025.")]) == ("H1",)
    assert unheld(h1, [hit("Repairs planned in H1 2025.")]) == ()


def test_a_sufficient_grade_of_passages_missing_the_words_becomes_constraint_unmet():
    good = Grade(True, None, (), 0.7, {"z_top": 2.0}, p_sufficient=0.65)
    refused = checked(good, FAULT_LOG, [hit("Oil the grinder weekly.")])
    assert (refused.sufficient, refused.reason, refused.p_sufficient) == (False, "constraint_unmet", 0.0)
    assert refused.missing == labels(FAULT_LOG) == ("table:repairs", "unlinked:fault", "unlinked:log")
    assert refused.score == good.score  # the relevance it had stays visible in the trace
    assert checked(good, FAULT_LOG, [hit("The fault log lists every stop.")]) is good
    assert checked(good, None, [hit("Oil the grinder weekly.")]) is good
    weak = Grade(False, "insufficient_evidence", ("relevance",), 0.2)
    assert checked(weak, FAULT_LOG, [hit("Oil the grinder weekly.")]) is weak


def test_the_decline_renders_its_table_words_and_labels():
    assert decline_json(FAULT_LOG) == {"table": "repairs", "reason": FAULT_LOG.reason, "unlinked": ["fault", "log"],
                                       "missing": ["table:repairs", "unlinked:fault", "unlinked:log"]}
    assert decline_json(Decline("no readable table matches the question")) == {
        "table": None, "reason": "no readable table matches the question", "unlinked": []}


def test_a_declined_question_that_asks_for_a_figure_is_never_answered_by_passages_that_share_its_words():
    figure = translate("How many lathe repairs needed a spare part in 2025?")
    listing = translate("Which lathe repairs needed a spare part?")
    assert isinstance(figure, Decline) and figure.aggregate and isinstance(listing, Decline) and not listing.aggregate
    passages = [hit("A lathe repair that needed a spare part waits for it.")]  # holds every unlinked word
    sufficient = Grade(True, None, score=0.9, p_sufficient=0.9)
    assert checked(sufficient, listing, passages) == sufficient
    refused = checked(sufficient, figure, passages)
    assert not refused.sufficient and refused.reason == "constraint_unmet" and refused.missing[0] == "table:repairs"
    assert translate("What is the average repair cost in euros of the press?").__class__ is Translation
    negated = translate("How many lathe repairs are not closed, by status?")  # only a stopword left: about the table
    assert isinstance(negated, Decline) and negated.aggregate and not checked(sufficient, negated, passages).sufficient
