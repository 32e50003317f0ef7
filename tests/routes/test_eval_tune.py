"""eval and tune round trips on a tiny labeled set over the mini corpus."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from routes.engine import TUNED_CONFIG, open_engine
from routes.evaluation import evaluate, fit_policies, load_label_file, save_policies, split_labels, write_report
from tests.conftest import ROOT

LABELS = [
    ("t1", "INC-2077", "erin", [], "exact", ["m05", "m06"], True, "train"),
    ("t2", "E4012", "erin", [], "exact", ["m01"], True, "test"),
    ("t3", "carrier webhook retries", "erin", [], "bm25", ["m15"], True, "train"),
    ("t4", "ledger connection pool", "erin", [], "bm25", ["m01"], True, "test"),
    ("t5", "How can I renew the key that signs authentication tokens?", "erin", [], "dense", ["m03"], True, "train"),
    ("t6", "How long may parents stay home with a new baby?", "erin", [], "dense", ["m14"], True, "test"),
    ("t7", "What is the Q3 budget for the payments platform?", "erin", [], "hybrid", [], False, "train"),
    ("t8", "What are the engineering salary bands?", "erin", [], "hybrid", [], False, "test"),
    ("t9", "What is the Q3 budget for the payments platform?", "bob", ["finance"], "hybrid", ["m04"], True, "train"),
    ("t10", "Which release fixed the tracking gateway certificate outage?", "erin", [], "hybrid", ["m05", "m06"], True, "test"),
    ("t11", "What did the penetration test find about session cookies?", "carol", ["security"], "hybrid", ["m11"], True, "train"),
    ("t12", "What did the penetration test find about session cookies?", "erin", [], "hybrid", [], False, "test"),
]


@pytest.fixture
def labels_file(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps({"id": i, "question": q, "principal": p, "groups": g, "route": r, "relevant": rel,
                                          "answerable": a, "tags": ["t"], "split": s})
                              for i, q, p, g, r, rel, a, s in LABELS) + "\n")
    return path


@pytest.fixture
def index_copy(mini_index, tmp_path):
    dst = tmp_path / "index"
    shutil.copytree(mini_index, dst)
    return dst


def test_eval_writes_metrics_report_and_plots(engine, labels_file, tmp_path):
    result = evaluate(engine, load_label_file(labels_file), k=8)
    assert result["questions"] == 12 and result["leakage"] == 0 and result["errors"] == 0
    for name in ("route_accuracy", "gap_precision", "gap_recall", "ndcg@10", "recall@k", "mrr", "mean_attempts",
                 "latency_p50_ms", "latency_p95_ms"):
        assert result[name] is not None
    paths = write_report(result, tmp_path / "report", "mini")
    assert {p.name for p in paths} == {"metrics.json", "report.md", "confusion.png", "quality_per_route.png", "latency.png"}
    assert all(p.stat().st_size > 100 for p in paths)


def test_tune_is_deterministic_and_the_index_loads_what_it_saved(index_copy, embedder, labels_file):
    train, _ = split_labels(load_label_file(labels_file))
    engine = open_engine(index_copy, embedder)
    try:
        a, notes_a = fit_policies(engine, train, seed=3)
        b, notes_b = fit_policies(engine, train, seed=3)
    finally:
        engine.close()
    assert a.router.to_json() == b.router.to_json() and a.grader.to_json() == b.grader.to_json()
    path = save_policies(index_copy, a, notes_a, seed=3)
    assert path == index_copy / TUNED_CONFIG
    reloaded = open_engine(index_copy, embedder)
    try:
        assert reloaded.policies.router.source.startswith("tuned") and reloaded.policies.grader.to_json() == a.grader.to_json()
        assert reloaded.policies.fusion.rrf_k == a.fusion.rrf_k
    finally:
        reloaded.close()


def test_eval_cli_fails_when_a_labeled_forbidden_document_is_returned(index_copy, tmp_path):
    labels = tmp_path / "leak.jsonl"
    # m05 is public: a label that calls it forbidden for erin makes the run count it as leaked.
    labels.write_text(json.dumps({"id": "x", "question": "INC-2077", "principal": "erin", "route": "exact",
                                  "relevant": [], "answerable": False, "tags": ["bait", "forbidden:m05"]}) + "\n")
    out = subprocess.run([sys.executable, "-m", "routes.cli", "eval", str(labels), "--index", str(index_copy)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "LEAKAGE" in out.stderr
    assert json.loads(out.stdout)["leakage"] == 1
