"""What the question asks must be in the evidence: a qualifier of the question's noun phrase
that no passage of the context carries, while a readable chunk writes the phrase, makes the
context insufficient. Attested over the caller's readable chunks alone, so a phrase only a
forbidden document writes changes nothing the caller sees."""

from __future__ import annotations

import json

import pytest

from retrieval.grader import Grade
from retrieval.limits import Limits
from retrieval.qualifiers import Qualifier, held, noun_phrases, qualifiers, unmet_qualifiers
from retrieval.types import Filters, Hit, Principal


def hit(n: int, text: str, **kw) -> Hit:
    return Hit(f"c{n}", f"d{n}", text, 1.0, ("hybrid",), 0, len(text), **kw)


def pairs(question: str) -> list[tuple[str, str, str]]:
    return [(q.modifier, q.head, q.phrase) for q in qualifiers(question)]


# -- reading the question ---------------------------------------------------------------------

def test_a_modifier_of_a_noun_phrase_qualifies_its_head():
    assert pairs("What is the tip height of turbine T3?") == [("tip", "height", "tip height")]
    assert pairs("What tip height does T3 have?") == [("tip", "height", "tip height")]


def test_each_modifier_of_a_longer_phrase_qualifies_the_rest_of_it():
    assert pairs("What is the design population equivalent of the works?") == [
        ("design", "equivalent", "design population equivalent"), ("population", "equivalent", "population equivalent")]


def test_a_month_or_a_site_written_as_a_modifier_is_a_qualifier():
    assert pairs("What were the April figures for the Leeds depot?") == [
        ("April", "figures", "April figures"), ("Leeds", "depot", "Leeds depot")]


def test_quantifiers_and_ordinals_open_a_phrase_and_qualify_nothing():
    assert pairs("How many fire hydrants are there?") == [("fire", "hydrants", "fire hydrants")]
    assert pairs("How many days a year may I work from another country?") == []
    assert pairs("Who approved the first release?") == []


def test_numbers_identifiers_dates_and_quotes_break_a_phrase():
    assert noun_phrases("What did the April 2025 sales report say?") == []
    assert noun_phrases("What did the T3 blade inspection find?") == []
    assert noun_phrases('What does the "tip height" rule say?') == []


def test_a_run_that_a_number_or_a_possessive_leaves_open_is_no_phrase():
    assert noun_phrases("What is the rated power 3600 kW?") == []
    assert noun_phrases("What did the wind farm's owner say?") == []


# -- judging a context --------------------------------------------------------------------------

TIP = Qualifier("tip", "height", "tip height")


def test_a_context_with_the_head_and_without_the_modifier_misses_the_qualifier():
    assert unmet_qualifiers([TIP], [hit(0, "Turbine T3: hub height 95 m."), hit(1, "Noise stays under 43 dB.")]) == [TIP]


def test_a_modifier_any_passage_carries_meets_the_qualifier():
    hits = [hit(0, "Turbine T3: hub height 95 m."), hit(1, "Blade tips are inspected yearly.")]
    assert unmet_qualifiers([TIP], hits) == []  # plural-folded: "tips" holds "tip"


def test_a_modifier_is_held_by_its_root():
    fixing = Qualifier("fixing", "release", "fixing release")
    assert unmet_qualifiers([fixing], [hit(0, "Release 1.16.2 fixes the heap setting.")]) == []


def test_a_modifier_in_a_title_or_metadata_meets_the_qualifier():
    assert unmet_qualifiers([TIP], [hit(0, "Turbine T3: 155 m, hub 95 m.", title="Tip height register")]) == []
    assert unmet_qualifiers([TIP], [hit(0, "Turbine T3: height 155 m.", meta="tip")]) == []


def test_a_context_without_the_head_is_left_to_relevance():
    assert unmet_qualifiers([TIP], [hit(0, "Turbine T3 stands on Carrow Hill.")]) == []


def test_a_sufficient_grade_missing_an_attested_qualifier_becomes_constraint_unmet():
    hits = [hit(0, "Turbine T3: hub height 95 m.")]
    asked: list[str] = []

    def attested(phrase: str) -> bool:
        asked.append(phrase)
        return True

    g = held(Grade(True, None, score=0.9, p_sufficient=0.8), [TIP, Qualifier("hub", "height", "hub height")], hits, attested)
    assert (g.sufficient, g.reason, g.missing, g.p_sufficient, g.score) == (False, "constraint_unmet",
                                                                            ("qualifier:tip height",), 0.0, 0.9)
    assert asked == ["tip height"]  # the corpus is asked only about what the context misses


def test_a_phrase_no_readable_chunk_writes_requires_nothing():
    g = Grade(True, None, score=0.9)
    assert held(g, [TIP], [hit(0, "Turbine T3: hub height 95 m.")], lambda phrase: False) is g


def test_an_insufficient_grade_is_left_as_it_is_and_the_corpus_is_not_asked():
    g = Grade(False, "insufficient_evidence", ("relevance",))

    def attested(phrase: str) -> bool:
        raise AssertionError("asked")

    assert held(g, [TIP], [hit(0, "Turbine T3: hub height 95 m.")], attested) is g


# -- in the loop, over a real index ---------------------------------------------------------------

DOCS = [
    {"id": "t3-spec", "title": "Turbine T3 specification", "acl": ["public"],
     "text": "Turbine T3 stands on Carrow Hill. Its hub height is 95 m and its rotor diameter is 120 m; rated power 3.6 MW."},
    {"id": "t7-spec", "title": "Turbine T7 specification", "acl": ["group:engineering"],
     "text": "Turbine T7 stands on Brenlow Moor. Its tip height is 155 m, with a hub height of 95 m and a rotor "
             "diameter of 120 m."},
    {"id": "access", "title": "Site access", "acl": ["public"],
     "text": "Visitors to Carrow Hill sign in at the gate office and wear a helmet beyond the fence."},
    {"id": "noise", "title": "Noise limits", "acl": ["public"],
     "text": "Night-time noise at the nearest houses must stay under 43 dB; the turbines slow down after 23:00."},
]
ERIN, ADA = Principal("erin"), Principal("ada", ("engineering",))
TIP_T3 = "What is the tip height of turbine T3?"
# The caller narrows the search to the T3 sheet and the noise limits: the context can never
# hold the T7 sheet, which (for a reader of it) writes "tip height".
NARROWED = Filters(doc_ids=("t3-spec", "noise"))


@pytest.fixture(scope="module")
def engines(tmp_path_factory, embedder):
    """The corpus, and the same corpus without the engineering-only T7 sheet, each with a
    grader that passes every set on relevance, so that only the loop's checks make a gap."""
    from indexes.snapshot_build import build_snapshot
    from retrieval.grader import GraderConfig
    from routes.service.tuned import Policies
    from routes.service.view import open_view

    root = tmp_path_factory.mktemp("qualifiers")
    out = {}
    for name, docs in (("all", DOCS), ("readable", [d for d in DOCS if d["id"] != "t7-spec"])):
        (root / name).mkdir()
        (root / name / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
        build_snapshot([root / name], root / f"index-{name}", embedder)
        out[name] = open_view(root / f"index-{name}", embedder, Limits(default_deadline_ms=30000),
                              policies=Policies(grader=GraderConfig(threshold=0.0)))
    yield out
    for engine in out.values():
        engine.close()


def test_a_context_without_a_qualifier_the_readable_corpus_writes_is_a_gap(engines):
    result = engines["all"].query(TIP_T3, ADA, filters=NARROWED)
    assert result.status == "evidence_gap" and result.gap.reason == "constraint_unmet"
    assert result.gap.missing == ("qualifier:tip height",)
    assert all(a.grade.missing == ("qualifier:tip height",) for a in result.attempts if a.grade is not None)


def test_the_qualifier_the_context_carries_is_answered(engines):
    result = engines["all"].query("What is the hub height of turbine T3?", ADA, filters=NARROWED)
    assert result.status == "answer_context" and result.context[0].doc_id == "t3-spec"


def test_a_qualifier_is_judged_on_the_whole_context(engines):
    result = engines["all"].query(TIP_T3, ADA)  # the T7 sheet, in the context, carries "tip"
    assert result.status == "answer_context" and "t7-spec" in {h.doc_id for h in result.context}


def test_a_phrase_only_a_forbidden_document_writes_changes_nothing_the_caller_sees(engines):
    def seen(result):
        return (result.status, result.gap, [(a.plan.route, a.plan.query_text(), [h.chunk_id for h in a.hits],
                                             a.grade.reason if a.grade else None, a.grade.missing if a.grade else None)
                                            for a in result.attempts])

    with_it = engines["all"].query(TIP_T3, ERIN, filters=NARROWED)
    assert with_it.status == "answer_context"
    assert seen(with_it) == seen(engines["readable"].query(TIP_T3, ERIN, filters=NARROWED))
