"""`quarry tune --feedback`: feedback rows become labeled questions beside a labels file, and
the keep rule judges the fit on both."""

from __future__ import annotations

import json
import shutil

import pytest

from retrieval.errors import InvalidRequest
from retrieval.evaluate import Label
from retrieval.types import Principal
from routes.eval.feedback_labels import feedback_label, feedback_labels, feedback_split, with_feedback
from routes.eval.tuning import grade_rows
from routes.service.audit import AuditLog, AuditRecord
from routes.service.feedback import FeedbackRow
from routes.service.service import Service
from tests.routes.eval.test_eval_tune import LABELS


def row(verdict: str, doc_ids=None, question: str | None = "Who approves travel?", answer_docs=("m05", "m06"),
        trace: str = "t1") -> FeedbackRow:
    return FeedbackRow("erin", ("ops",), trace, verdict, doc_ids, question, answer_docs)


def test_each_verdict_becomes_the_label_it_means():
    answered = feedback_label(row("answered"))
    assert answered is not None and answered.answerable and answered.relevant == ("m05", "m06")
    assert (answered.question, answered.principal, answered.groups) == ("Who approves travel?", "erin", ("ops",))
    assert answered.route is None and answered.tags == ("feedback", "feedback:answered")
    assert feedback_label(row("answered", ("m01",))).relevant == ("m01",)  # the documents named win over the context's
    wrong = feedback_label(row("wrong_context"))
    assert not wrong.answerable and wrong.relevant == ()
    assert feedback_label(row("wrong_context", ("m01",))) == Label(
        "feedback-t1", "Who approves travel?", "erin", ("ops",), None, ("m01",), True,
        tags=("feedback", "feedback:wrong_context"), split=feedback_split("t1"))
    gap = feedback_label(row("wrong_gap"))
    assert gap.answerable and gap.relevant == ()
    assert feedback_label(row("wrong_gap", ("m14",))).relevant == ("m14",)


def test_rows_without_question_text_are_counted_and_left_out():
    labels, summary = feedback_labels([row("answered", question=None), row("wrong_gap", trace="t2")])
    assert [lb.id for lb in labels] == ["feedback-t2"]
    assert summary | {"train": 0, "test": 0} == {"rows": 2, "labels": 1, "without_question": 1,
                                                   "verdicts": {"answered": 1, "wrong_gap": 1}, "train": 0, "test": 0}


def test_the_split_is_fixed_by_the_trace_id_and_about_even():
    splits = [feedback_split(f"{i:032x}") for i in range(400)]
    assert splits == [feedback_split(f"{i:032x}") for i in range(400)]
    assert 160 <= splits.count("test") <= 240 and set(splits) == {"train", "test"}


def audit_with_feedback(path, rows) -> None:
    """An audit database holding each (principal, groups, trace, question, outcome, context docs, verdict, named docs)."""
    log = AuditLog(path, keep_questions=True)
    try:
        for principal, _, trace, question, outcome, docs, _, _ in rows:
            log.record(AuditRecord(trace, "/v1/query", 200, principal=principal, outcome=outcome, route="hybrid",
                                   attempts=1, stop_reason="sufficient", question=question, doc_ids=docs))
        log.flush()
        for principal, groups, trace, _, _, _, verdict, named in rows:
            log.feedback.save(Principal(principal, groups), trace, verdict, named)
    finally:
        log.close()


def test_feedback_is_added_to_the_labels_file_and_a_clashing_id_is_refused(tmp_path):
    path = tmp_path / "audit.duckdb"
    audit_with_feedback(path, [("erin", (), "a1", "INC-2077", "answer_context", ("m05",), "answered", None),
                               ("erin", (), "a2", "salary bands", "answer_context", ("m02",), "wrong_context", None)])
    file_labels = [Label("t1", "INC-2077", "erin", split="train")]
    combined, summary = with_feedback(file_labels, path)
    assert [lb.id for lb in combined] == ["t1", "feedback-a1", "feedback-a2"]
    assert summary["labels"] == 2 and summary["audit"] == str(path)
    held_out, _ = with_feedback(file_labels, path, "test")
    assert [lb.id for lb in held_out[1:]] == [f"feedback-{t}" for t in ("a1", "a2") if feedback_split(t) == "test"]
    with pytest.raises(InvalidRequest, match="feedback-a1"):
        with_feedback([Label("feedback-a1", "x", "erin")], path)


def test_an_answerable_question_without_documents_trains_no_grader_row(engine):
    labels = [Label("named", "E4012", "erin", relevant=("m01",)), Label("unnamed", "E4012", "erin"),
              Label("no", "What are the engineering salary bands?", "erin", answerable=False)]
    g = grade_rows(Service.serving(engine), labels, lambda lb, docs: lb.answerable and bool(set(lb.relevant) & set(docs)))
    assert len(g.rows) == 2 and g.sufficient == [True, False]


# (principal, groups, trace, question, audited outcome, context docs, verdict, named docs) over the mini corpus
FEEDBACK = [
    ("erin", (), "fb-01", "INC-2077", "answer_context", ("m05", "m06"), "answered", None),
    ("erin", (), "fb-02", "What are the engineering salary bands?", "answer_context", ("m12",), "wrong_context", None),
    ("erin", (), "fb-03", "ledger lock timeout E4012", "gap:insufficient_evidence", (), "wrong_gap", ("m01",)),
    ("carol", ("security",), "fb-04", "session cookie findings", "answer_context", ("m11",), "answered", None),
    ("erin", (), "fb-05", "How long is parental leave?", "gap:insufficient_evidence", (), "wrong_gap", None),
    ("erin", (), "fb-06", "What is the Q3 payments budget?", "answer_context", ("m15",), "wrong_context", None),
]


@pytest.mark.slow
def test_tune_cli_learns_from_feedback_and_judges_the_fit_on_its_held_out_part_too(mini_index, tmp_path, quarry_in_process):
    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": i, "question": q, "principal": p, "groups": g, "route": r, "relevant": rel,
                                          "answerable": a, "split": s}) + "\n" for i, q, p, g, r, rel, a, s in LABELS))
    audit_with_feedback(index / "audit.duckdb", FEEDBACK)
    log = AuditLog(index / "audit.duckdb", keep_questions=False)  # an answer audited without its question text
    try:
        log.record(AuditRecord("fb-07", "/v1/query", 200, principal="bob", outcome="answer_context", stop_reason="sufficient",
                               question="Q3 budget"))
        log.flush()
        log.feedback.save(Principal("bob", ("finance",)), "fb-07", "answered", None)
    finally:
        log.close()
    out = quarry_in_process("tune", labels, "--index", index, "--feedback", "--no-progress")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    test = [fb for fb in FEEDBACK if feedback_split(fb[2]) == "test"]
    assert report["feedback"] | {"audit": None} == {
        "rows": 7, "labels": 6, "without_question": 1, "verdicts": {"answered": 3, "wrong_context": 2, "wrong_gap": 2},
        "train": 6 - len(test), "test": len(test), "audit": None}
    assert "1 feedback rows were left out" in out.stderr and "6 labeled questions from 7 feedback rows" in out.stderr
    answerable = sum(1 for fb in test if fb[6] != "wrong_context")
    figures = report["judgement"]["figures"]
    assert figures["false_gaps"]["questions"] == 4 + answerable  # the labels file holds 4 answerable held-out questions
    assert figures["gaps_caught"]["questions"] == 2 + len(test) - answerable
    assert report["kept"] is False  # still far too few held-out questions: the keep rule decides, as without feedback
