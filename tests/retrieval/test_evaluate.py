"""Evaluation metrics against hand-computed examples, and label validation."""

from __future__ import annotations

import pytest

from retrieval.errors import InvalidRequest
from retrieval.evaluate import Label, Record, confusion, parse_labels, summarize


def rec(route_gold, route, status, answerable=True, relevant=(), ranked=(), attempts=1, ms=10.0, leaked=(), sql=None):
    label = Label(id=f"q{id(object())}", question="q", principal="erin", route=route_gold, relevant=tuple(relevant),
                  answerable=answerable)
    return Record(label, route, status, None if status == "answer_context" else "insufficient_evidence", list(ranked),
                  attempts, ms, list(leaked), attempts, sql)


def test_metrics_by_hand():
    records = [
        rec("exact", "exact", "answer_context", relevant=["a"], ranked=["a", "b"]),          # rr 1, ndcg 1
        rec("dense", "hybrid", "answer_context", relevant=["a", "c"], ranked=["b", "a"]),     # rr 1/2, recall 1/2
        rec("hybrid", "hybrid", "evidence_gap", answerable=False, attempts=3, ms=30.0),       # true gap
        rec("dense", "dense", "evidence_gap", relevant=["x"], ranked=["y"], attempts=2, ms=20.0),  # false gap, rr 0
        rec("bm25", "bm25", "answer_context", answerable=False, leaked=["secret"]),         # missed gap + a leak
    ]
    m = summarize(records, k=2)
    assert m["route_accuracy"] == 1.0 and m["route_accuracy_strict"] == 0.8  # hybrid answers a dense label
    assert m["gap_precision"] == 0.5 and m["gap_recall"] == 0.5 and m["gap_f1"] == 0.5
    assert m["mrr"] == pytest.approx(round((1 + 0.5 + 0) / 3, 4))
    assert m["recall@k"] == pytest.approx(round((1 + 0.5 + 0) / 3, 4))
    ndcg_second = (1 / 1.5849625) / (1 + 1 / 1.5849625)  # a at rank 2 of two relevant
    assert m["ndcg@10"] == pytest.approx(round((1 + ndcg_second + 0) / 3, 4), abs=1e-4)
    assert m["leakage"] == 1 and m["mean_attempts"] == pytest.approx(8 / 5)
    assert m["latency_p50_ms"] == 10.0
    assert confusion(records)["dense"] == {"hybrid": 1, "dense": 1}


def test_labels_are_validated_with_line_numbers():
    ok = parse_labels('{"id": "a", "question": "q", "principal": "erin", "route": "bm25", "relevant": ["d1"]}\n')
    assert ok[0].relevant == ("d1",) and ok[0].answerable
    with pytest.raises(InvalidRequest, match="labels:2: duplicate label id 'a'"):
        parse_labels('{"id": "a", "question": "q", "principal": "erin"}\n{"id": "a", "question": "q", "principal": "erin"}')
    with pytest.raises(InvalidRequest, match="labels:1: a label needs"):
        parse_labels('{"id": "a", "question": "q", "principal": "erin", "colour": 1}')
    with pytest.raises(InvalidRequest, match="labels:1: malformed JSON"):
        parse_labels('{"id": ')


def test_undefined_metrics_are_none_not_zero():
    # Every label answerable: gap precision, recall and F1 have no positive class to measure.
    records = [rec("bm25", "bm25", "evidence_gap", relevant=["a"], ranked=["a"]),
               rec("bm25", "bm25", "answer_context", relevant=["a"], ranked=["a"])]
    m = summarize(records, k=8)
    assert m["gap_precision"] is None and m["gap_recall"] is None and m["gap_f1"] is None
    # Unanswerable labels but no gap predicted: recall and F1 are 0, precision is undefined.
    m = summarize([rec("bm25", "bm25", "answer_context", answerable=False)], k=8)
    assert m["gap_precision"] is None and m["gap_recall"] == 0.0 and m["gap_f1"] == 0.0
    # Only errors: no latency, attempts or constraint figures to report.
    failed = Record(Label(id="e", question="q", principal="erin"), None, None, None, [], 0, 1.0, error="InvalidRequest")
    m = summarize([failed], k=8)
    assert m["mean_attempts"] is None and m["latency_p50_ms"] is None and m["constraint_preservation"] is None


def test_errored_questions_count_as_failures_in_every_figure():
    def failed(answerable=True, relevant=("a",)):
        label = Label(id=f"e{id(object())}", question="q" * 3000, principal="erin", route="bm25", relevant=tuple(relevant),
                      answerable=answerable)
        return Record(label, None, None, None, [], 0, 1.0, error="InvalidRequest", error_message="query is too long")

    good = rec("bm25", "bm25", "answer_context", relevant=["a"], ranked=["a"])
    true_gap = rec("bm25", "bm25", "evidence_gap", answerable=False)
    m = summarize([good, failed(), true_gap, failed(answerable=False, relevant=())], k=8)
    assert m["questions"] == 4 and m["errors"] == 2
    assert m["route_accuracy"] == 0.5          # an errored question chose no route
    assert m["ndcg@10"] == 0.5 and m["recall@k"] == 0.5 and m["mrr"] == 0.5  # and ranked nothing
    assert m["gap_recall"] == 0.5 and m["gap_precision"] == 1.0  # the errored unanswerable one is a missed gap
    assert m["mean_attempts"] == 1.0            # attempts and latency: over the questions that ran


def test_ndcg_self_removed_drops_the_questions_own_document():
    # ArguAna: the query is itself corpus document "a1"; its counter-argument "c1" is relevant.
    own = Label(id="a1", question="q", principal="r", relevant=("c1",), own_doc="a1")
    other = Label(id="a2", question="q", principal="r", relevant=("c2",), own_doc="a2")
    records = [Record(own, "hybrid", "answer_context", None, ["a1", "c1", "x"], 1, 1.0),
               Record(other, "hybrid", "answer_context", None, ["c2", "a2"], 1, 1.0)]
    m = summarize(records, k=10)
    assert m["ndcg@10"] == pytest.approx(round((1 / 1.5849625 + 1) / 2, 4), abs=1e-4)
    assert m["ndcg@10_self_removed"] == 1.0
    assert "ndcg@10_self_removed" not in summarize([rec("bm25", "bm25", "answer_context", relevant=["a"], ranked=["a"])], 8)


def test_wrong_questions_say_what_was_expected_and_what_came_back():
    from retrieval.evaluate import wrong_questions

    records = [
        rec("exact", "exact", "answer_context", relevant=["a"], ranked=["a"]),                      # right
        rec("exact", "bm25", "answer_context", relevant=["a", "b"], ranked=["a", "x", "b"], attempts=2),  # route, b past k
        rec("dense", "dense", "answer_context", answerable=False),                                  # missed gap
        rec("bm25", "bm25", "evidence_gap", relevant=["a"], ranked=["a"]),                          # false gap
        Record(Label(id="long", question="q" * 3000, principal="erin", route="bm25", relevant=("a",)), None, None, None,
               [], 0, 1.0, error="InvalidRequest", error_message="query is 3000 characters; the limit is 2000"),
    ]
    records[1] = Record(records[1].label, "bm25", "answer_context", None, ["a", "x", "b"], 2, 10.0,
                        trail=("first:bm25", "switch_route:exact"))
    wrong = wrong_questions(records, k=2)
    assert [w["id"] for w in wrong] == [r.label.id for r in records[1:]]
    assert wrong[0]["problems"] == ["route", "missing_documents"]
    assert wrong[0]["expected"] == {"route": "exact", "status": "answer_context", "relevant": ["a", "b"]}
    assert wrong[0]["got"]["route"] == "bm25" and wrong[0]["got"]["missing"] == ["b"] and wrong[0]["got"]["top"] == ["a", "x"]
    assert wrong[0]["attempts"] == 2 and wrong[0]["trail"] == ["first:bm25", "switch_route:exact"]
    assert wrong[1]["problems"] == ["missed_gap"] and wrong[2]["problems"] == ["false_gap"]
    assert wrong[3]["problems"] == ["error", "route", "missing_documents"]
    assert "the limit is 2000" in wrong[3]["got"]["error"]


def test_label_today_is_parsed_and_a_bad_date_names_the_line():
    from datetime import date

    line = '{"id": "%s", "question": "incidents last quarter", "principal": "erin", "today": %s}'
    labels = parse_labels(line % ("a", '"2024-04-15"') + "\n" + line % ("b", "null"))
    assert labels[0].today == date(2024, 4, 15) and labels[1].today is None
    for bad in ('"2024-13-01"', '"15/04/2024"', '"2024-W15-1"', "20240415"):
        with pytest.raises(InvalidRequest, match=r"labels:2: today must be an ISO date \(YYYY-MM-DD\)"):
            parse_labels(line % ("a", '"2024-04-15"') + "\n" + line % ("b", bad))


def test_a_hybrid_answer_to_a_question_labeled_dense_is_not_listed_as_a_wrong_route():
    from retrieval.evaluate import wrong_questions

    records = [rec("dense", "hybrid", "answer_context", relevant=["a"], ranked=["a"]),
               rec("exact", "hybrid", "answer_context", relevant=["a"], ranked=["a"])]
    wrong = wrong_questions(records, k=8)
    assert [w["problems"] for w in wrong] == [["route"]] and wrong[0]["expected"]["route"] == "exact"
