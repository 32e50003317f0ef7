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
    assert m["route_accuracy"] == 0.8
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
