"""A question about a name that no document the caller may read mentions ends as a gap at
once: no evidence can meet it. Judged on the caller's readable chunks alone, so a name only a
forbidden document holds is absent exactly as it would be without that document."""

from __future__ import annotations

import json

import pytest

from retrieval.limits import Limits
from retrieval.types import Principal

DOCS = [
    {"id": "hours", "title": "Store hours", "acl": ["public"],
     "text": "The Kettering Road store opens at 08:00 and closes at 20:00, Monday to Saturday. It is closed on Sundays."},
    {"id": "returns", "title": "Returns", "acl": ["public"],
     "text": "Customers may return unused goods within 30 days with a receipt; refunds go back to the card used."},
    {"id": "parking", "title": "Staff parking", "acl": ["public"],
     "text": "Staff park in the rear yard of each store; the front car park is for customers."},
    {"id": "closure", "title": "Closure plan", "acl": ["group:exec"],
     "text": "The Ravensholt store closes on 31 March 2026. Its opening hours until then stay 09:00 to 18:00."},
    {"id": "till-204", "title": "Till fault", "acl": ["public"],
     "text": "Till 204 at the Kettering Road store kept rejecting contactless cards; its card reader was replaced."},
    {"id": "till-318", "title": "Till fault", "acl": ["group:exec"],
     "text": "Till 318 at the Kettering Road store froze at every refund; its main board was replaced."},
]
ERIN, EXEC = Principal("erin"), Principal("ada", ("exec",))
QUESTION = "What are the opening hours of the Ravensholt store?"


@pytest.fixture(scope="module")
def engines(tmp_path_factory, embedder):
    """The corpus, and the same corpus without the forbidden document."""
    from indexes.snapshot_build import build_snapshot
    from routes.service.view import open_view

    root = tmp_path_factory.mktemp("absent-names")
    out = {}
    for name, docs in (("all", DOCS), ("readable", [d for d in DOCS if "group:exec" not in d["acl"]])):
        (root / name).mkdir()
        (root / name / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
        build_snapshot([root / name], root / f"index-{name}", embedder)
        out[name] = open_view(root / f"index-{name}", embedder, Limits(default_deadline_ms=30000))
    yield out
    for engine in out.values():
        engine.close()


def test_a_name_no_readable_document_holds_is_an_unmet_entity_after_one_attempt(engines):
    result = engines["all"].query(QUESTION, ERIN)
    assert result.status == "evidence_gap" and result.gap.reason == "constraint_unmet"
    assert "entity:Ravensholt" in result.gap.missing and "Ravensholt" in result.constraints.entities
    assert len(result.attempts) == 1 and result.stop_reason == "no_strategy_left"


def test_a_name_only_a_forbidden_document_holds_changes_nothing_the_caller_sees(engines):
    def seen(result):
        return (result.status, result.gap, result.constraints.to_json(), result.stop_reason,
                [(a.plan.route, a.plan.query_text(), [h.chunk_id for h in a.hits]) for a in result.attempts])

    assert seen(engines["all"].query(QUESTION, ERIN)) == seen(engines["readable"].query(QUESTION, ERIN))


def test_a_reader_of_the_document_that_names_it_gets_no_such_constraint(engines):
    result = engines["all"].query(QUESTION, EXEC)
    assert "Ravensholt" not in result.constraints.entities
    assert "closure" in {h.doc_id for h in result.context}


def test_names_the_readable_documents_hold_are_not_constraints(engines):
    result = engines["all"].query("What are the opening hours of the Kettering Road store?", ERIN)
    assert not {"Kettering", "Road"} & set(result.constraints.entities)
    assert result.context[0].doc_id == "hours"


def test_a_number_the_question_names_a_thing_by_is_a_name_too(engines):
    """"till 318": a context about till 204 does not answer it, and only a forbidden document
    mentions till 318."""
    question = "What was replaced on till 318?"
    result = engines["all"].query(question, ERIN)
    assert result.status == "evidence_gap" and "entity:318" in result.gap.missing
    assert result.stop_reason == "no_strategy_left"
    assert engines["all"].query(question, EXEC).status == "answer_context"
    assert engines["all"].query("What was replaced on till 204?", ERIN).status == "answer_context"


@pytest.mark.parametrize("question", ["What was replaced on till 318?", "What was replaced on till 204?"])
def test_a_number_only_a_forbidden_document_holds_changes_nothing_the_caller_sees(engines, question):
    def seen(result):
        return (result.status, result.gap, result.constraints.to_json(), result.stop_reason,
                [(a.plan.route, a.plan.query_text(), [h.doc_id for h in a.hits]) for a in result.attempts])

    assert seen(engines["all"].query(question, ERIN)) == seen(engines["readable"].query(question, ERIN))
