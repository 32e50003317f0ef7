"""eval and tune round trips on a tiny labeled set over the mini corpus."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import date

import pytest

from routes.service.view import open_view
from routes.service.tuned import TUNED_CONFIG, TUNED_REFUSED, Policies
from routes.eval.evaluation import (evaluate, fit_policies, load_label_file, question_features, save_policies, split_labels,
                               write_report)
from tests.conftest import PATIENCE_S, ROOT
from routes.service.service import Service

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
    result = evaluate(Service.serving(engine), load_label_file(labels_file), k=8)
    assert result["questions"] == 12 and result["leakage"] == 0 and result["errors"] == 0
    for name in ("route_accuracy", "gap_precision", "gap_recall", "ndcg@10", "recall@k", "mrr", "mean_attempts",
                 "latency_p50_ms", "latency_p95_ms"):
        assert result[name] is not None
    paths = write_report(result, tmp_path / "report", "mini")
    assert {p.name for p in paths} == {"metrics.json", "report.md", "confusion.png", "quality_per_route.png", "latency.png"}
    assert all(p.stat().st_size > 100 for p in paths)


def test_tune_is_deterministic_and_the_index_loads_what_it_saved(index_copy, embedder, labels_file):
    train, _ = split_labels(load_label_file(labels_file))
    engine = open_view(index_copy, embedder)
    try:
        a, notes_a = fit_policies(Service.serving(engine), train, seed=3)
        b, notes_b = fit_policies(Service.serving(engine), train, seed=3)
    finally:
        engine.close()
    assert a.router.to_json() == b.router.to_json() and a.grader.to_json() == b.grader.to_json()
    path = save_policies(index_copy, a, notes_a, seed=3)
    assert path == index_copy / TUNED_CONFIG
    reloaded = open_view(index_copy, embedder)
    try:
        assert reloaded.policies.router.source.startswith("tuned") and reloaded.policies.grader.to_json() == a.grader.to_json()
        assert reloaded.policies.fusion == a.fusion and notes_a["fusion"]["method"] == a.fusion.method
        assert reloaded.retrievers["hybrid"].params == a.fusion  # the hybrid route fuses as tuned
    finally:
        reloaded.close()


def test_tuning_chooses_among_fusion_methods_and_prefers_the_default_on_a_tie():
    from retrieval.tune import best_fusion
    from routes.eval.tuning import DEFAULT_FUSION, FUSION_GRID, fusion_params

    assert {m for m, _, _ in FUSION_GRID} == {"rrf", "zscore"} and DEFAULT_FUSION in FUSION_GRID
    assert best_fusion({("rrf", 60, 1.0): 0.70, ("zscore", 60, 0.6): 0.73}) == ("zscore", 60, 0.6)
    assert best_fusion({("rrf", 60, 1.0): 0.73, ("zscore", 60, 0.5): 0.73}) == ("rrf", 60, 1.0)
    assert best_fusion({("zscore", 60, 0.4): 0.73, ("zscore", 60, 0.5): 0.73}) == ("zscore", 60, 0.5)
    z = fusion_params("zscore", 60, 0.6)
    assert z.method == "zscore" and z.weights == {"bm25": 0.6, "dense": 0.4}
    assert fusion_params("rrf", 30, 1.25).weights == {"bm25": 1.25, "dense": 1.0}


@pytest.mark.slow
def test_eval_cli_fails_when_a_labeled_forbidden_document_is_returned(index_copy, tmp_path, quarry_in_process):
    labels = tmp_path / "leak.jsonl"
    # m05 is public: a label that calls it forbidden for erin makes the run count it as leaked.
    labels.write_text(json.dumps({"id": "x", "question": "INC-2077", "principal": "erin", "route": "exact",
                                  "relevant": [], "answerable": False, "tags": ["bait", "forbidden:m05"]}) + "\n")
    out = quarry_in_process("eval", labels, "--index", index_copy)
    assert out.returncode == 1 and "LEAKAGE" in out.stderr
    assert json.loads(out.stdout)["leakage"] == 1


def _cli(*args, env=None, timeout=PATIENCE_S):
    """`quarry ARGS` as its own process, through `python -m routes.cli.main` (the tests that are
    about the command rather than its process run it in-process: the quarry_in_process fixture)."""
    return subprocess.run([sys.executable, "-m", "routes.cli.main", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


# A tiny ArguAna-shaped BEIR folder: each query is itself a corpus document (same id), and the
# relevant document is its counter-argument.
BEIR_DOCS = {
    "a1": "Zoos protect endangered species by breeding them in captivity and returning them to the wild.",
    "c1": "Captive breeding in zoos rarely returns endangered species to the wild; most never leave captivity.",
    "a2": "School uniforms reduce bullying because pupils cannot be singled out for their clothes.",
    "c2": "Uniforms do not stop bullying at school; pupils single each other out for many reasons beyond clothes.",
    "a3": "Nuclear power is the safest low carbon source of electricity per unit of energy produced.",
    "c3": "Nuclear electricity is not the safest low carbon source once waste storage and accidents are counted.",
}


@pytest.fixture(scope="module")
def beir_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("arguana-mini")
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in BEIR_DOCS.items()))
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"a{n}", "text": BEIR_DOCS[f"a{n}"]}) + "\n" for n in (1, 2, 3)))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"a{n}\tc{n}\t1\n" for n in (1, 2, 3)))
    return root


@pytest.fixture(scope="module")
def beir_run(beir_folder, tmp_path_factory):
    """`quarry eval BEIR --index DIR` with DIR not yet built (the stderr is a pipe, not a TTY)."""
    work = tmp_path_factory.mktemp("arguana-run")
    out = _cli("eval", beir_folder, "--index", work / "index", "--report", work / "report")
    return out, work


@pytest.mark.slow
def test_eval_cli_builds_a_missing_index_for_a_beir_folder(beir_run):
    out, work = beir_run
    assert out.returncode == 0, out.stderr
    assert (work / "index" / "CURRENT").is_file() and json.loads(out.stdout)["questions"] == 3


@pytest.mark.slow
def test_eval_cli_shows_progress_for_ingest_embedding_and_questions_on_stderr(beir_run):
    out, _ = beir_run
    # tqdm bars with counts and elapsed<remaining (the ETA), even when stderr is not a terminal.
    assert re.search(r"embed: 100%.*\b6/6 \[\d\d:\d\d<\d\d:\d\d", out.stderr), out.stderr
    assert re.search(r"questions: 100%.*\b3/3 \[\d\d:\d\d<\d\d:\d\d", out.stderr), out.stderr


@pytest.mark.slow
def test_eval_reports_ndcg_with_the_questions_own_document_removed(beir_run):
    figures = json.loads(beir_run[0].stdout)
    # Each query finds itself first and its counter-argument second (MRR 1/2); with its own
    # document removed, the counter-argument is first.
    assert figures["mrr"] == 0.5 and figures["ndcg@10"] == round(1 / math.log2(3), 4)
    assert figures["ndcg@10_self_removed"] == 1.0


@pytest.mark.slow
def test_eval_cli_exits_2_with_one_line_error_when_the_index_of_a_labels_file_is_missing(labels_file, tmp_path):
    out = _cli("eval", labels_file, "--index", tmp_path / "no-such-index", "--no-progress")
    assert out.returncode == 2, out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "invalid_request" and "holds no index snapshot" in error["message"] and "\n" not in error["message"]
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_eval_cli_counts_overlong_questions_as_errors_and_follows_the_query_limit_setting(index_copy, labels_file, tmp_path,
                                                                                          quarry_in_process):
    long_question = "Which release fixed INC-2077? " + "Please explain the certificate chain in detail. " * 50
    labels = tmp_path / "long.jsonl"
    labels.write_text(labels_file.read_text() + json.dumps({
        "id": "long", "question": long_question, "principal": "erin", "route": "exact", "relevant": ["m05"],
        "answerable": True, "tags": ["t"]}) + "\n")
    assert len(long_question) > 2000  # the default max_query_chars
    out = quarry_in_process("eval", labels, "--index", index_copy, "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "%|" not in out.stderr  # --no-progress: no bars
    figures = json.loads(out.stdout)
    assert figures["questions"] == 13 and figures["errors"] == 1
    assert figures["error_kinds"]["InvalidRequest"]["count"] == 1
    assert re.search(r"ERRORS: 1 of 13 questions raised InvalidRequest \(question is \d+ characters; the limit is 2000\)",
                     out.stderr)
    assert re.search(r"^  long: error, route, missing_documents; .*the limit is 2000", out.stderr, re.M)  # the failure list
    raised = quarry_in_process("eval", labels, "--index", index_copy, "--no-progress", env={"QUARRY_MAX_QUERY_CHARS": "5000"})
    assert raised.returncode == 0 and json.loads(raised.stdout)["errors"] == 0, raised.stderr
    # The errored question counted as a miss: it scored below the run that answered it.
    assert figures["recall@k"] < json.loads(raised.stdout)["recall@k"]


def test_eval_report_lists_every_wrong_question(engine, labels_file, tmp_path):
    labels = tmp_path / "with-wrong.jsonl"  # a label no answer can meet: the list is never empty
    labels.write_text(labels_file.read_text() + json.dumps({
        "id": "tz-unmeetable", "question": "carrier webhook retries", "principal": "erin", "route": "exact",
        "relevant": ["no-such-doc"], "answerable": True, "tags": ["t"]}) + "\n")
    result = evaluate(Service.serving(engine), load_label_file(labels), k=8)
    records_wrong = [w["id"] for w in result["wrong"]]
    assert result["wrong_questions"] == len(records_wrong) > 0
    report = (tmp_path / "r" / "report.md")
    write_report(result, tmp_path / "r", "mini")
    text = report.read_text()
    assert f"## Wrong questions ({len(records_wrong)})" in text
    rows = [line for line in text.splitlines() if line.startswith("| t")]
    wrong_rows = [r for r in rows if r.count("|") == 7]
    assert [r.split(" | ")[0][2:] for r in wrong_rows] == records_wrong
    for w, row in zip(result["wrong"], wrong_rows, strict=True):
        assert ", ".join(w["problems"]) in row and f"route {w['expected']['route']}" in row and f"{w['attempts']} (" in row


def test_plots_say_whether_they_group_by_labeled_or_chosen_route(engine, labels_file, tmp_path):
    from PIL import Image

    labeled = load_label_file(labels_file)
    unlabeled = [replace(lb, route=None) for lb in labeled]
    for labels, wording in ((labeled, "labeled route"), (unlabeled, "chosen route")):
        paths = {p.name: p for p in write_report(evaluate(Service.serving(engine), labels, k=8), tmp_path / wording, "mini")}
        assert Image.open(paths["quality_per_route.png"]).text["Title"] == f"Quality per {wording}"
        assert Image.open(paths["latency.png"]).text["Title"] == f"Latency per {wording}"
        assert f"group questions by **{wording}**" in paths["report.md"].read_text()


@pytest.mark.slow
def test_tune_cli_warns_on_a_small_training_set_and_refuses_a_fit_that_is_not_better(index_copy, labels_file):
    previous = save_policies(index_copy, Policies(), {"run": "previous"}, seed=1).read_text()
    out = _cli("tune", labels_file, "--index", index_copy, "--no-progress")  # the tune command as its own process
    assert out.returncode == 0, out.stderr
    assert re.search(r"WARNING: only 6 training questions \(fewer than 50\)", out.stderr)
    report = json.loads(out.stdout)
    assert report["notes"]["warnings"]
    # 4 answerable and 2 unanswerable held-out questions cannot show a fit is no worse
    assert report["kept"] is False and report["saved"] is None
    assert report["judgement"]["reason"].startswith("too few held-out questions to show the fit is no worse: 4 answerable")
    assert "held-out judgement: fit REFUSED" in out.stderr
    assert (index_copy / TUNED_CONFIG).read_text() == previous and not (index_copy / "tuned.json.bak").exists()
    refused = json.loads((index_copy / TUNED_REFUSED).read_text())
    assert refused["kept"] is False and refused["notes"]["warnings"]


@pytest.fixture(scope="module")
def dated_tables_index(tmp_path_factory, embedder):
    from indexes.snapshot_build import BuildOptions, build_snapshot

    root = tmp_path_factory.mktemp("dated-tables")
    (root / "incidents.csv").write_text("incident_id,title,service,severity,opened_at\n" + "".join(
        f"INC-{i},{t},{s},{sev},{d}\n" for i, (t, s, sev, d) in enumerate([
            ("Gateway down", "gateway", "sev1", "2023-01-10"), ("Ledger slow", "ledger", "sev2", "2023-02-20"),
            ("Gateway slow", "gateway", "sev3", "2023-05-03"), ("Notify broken", "notify", "sev2", "2023-07-15"),
            ("Notify slow", "notify", "sev3", "2023-08-01"), ("Ledger down", "ledger", "sev1", "2023-08-30")])))
    index = tmp_path_factory.mktemp("dated-index")
    build_snapshot([root], index, embedder, BuildOptions(default_acl=("public",)))
    return index


def test_labeled_today_resolves_the_questions_relative_dates_in_eval(dated_tables_index, embedder, tmp_path):
    question = "How many incidents were opened last quarter?"
    labels = tmp_path / "dated.jsonl"
    labels.write_text("".join(json.dumps({"id": i, "question": question, "principal": "erin", "route": "sql", "relevant": [],
                                          "answer_rows": rows, "today": today}) + "\n"
                              for i, rows, today in (("q1", [[2]], "2023-04-15"), ("q2", [[3]], "2023-10-02"))))
    engine = open_view(dated_tables_index, embedder, today=date(2026, 1, 5))  # an engine date that fits neither label
    try:
        result = evaluate(Service.serving(engine), load_label_file(labels), k=8)
    finally:
        engine.close()
    assert result["sql_exact"] == 1.0 and result["errors"] == 0, result["wrong"]


def test_tune_features_resolve_relative_dates_against_the_labels_today(dated_tables_index, embedder):
    from retrieval.types import Principal

    engine = open_view(dated_tables_index, embedder, today=date(2026, 1, 5))
    try:
        service = Service.serving(engine)
        constraints, _ = question_features(service, "incidents opened last quarter", Principal("erin"), date(2023, 4, 15))
        default, _ = question_features(service, "incidents opened last quarter", Principal("erin"))
    finally:
        engine.close()
    assert [(d.start, d.end) for d in constraints.dates] == [(date(2023, 1, 1), date(2023, 3, 31))]
    assert [(d.start, d.end) for d in default.dates] == [(date(2025, 10, 1), date(2025, 12, 31))]


def test_gap_balance_is_the_mean_of_gap_recall_and_the_answered_share():
    from retrieval.evaluate import gap_balance

    assert gap_balance({"gap_recall": 0.8, "false_gap_rate": 0.2}) == pytest.approx(0.8)
    assert gap_balance({"gap_recall": None, "false_gap_rate": 0.25}) == pytest.approx(0.75)
    assert gap_balance({}) is None


@pytest.mark.slow
def test_tune_refuses_a_fit_worse_on_the_held_out_split_and_serve_keeps_the_policies_in_use(index_copy, embedder, tmp_path,
                                                                                              quarry_in_process):
    """A few training labels that say the opposite of the truth (every answerable question
    marked unanswerable and the other way round) fit a grader that calls answerable held-out
    questions gaps: tune refuses the whole fit, says which figure would have got worse and by
    how much, and leaves tuned.json (what serve loads) exactly as it was."""
    from tests.conftest import MINI

    public = [d["id"] for d in map(json.loads, (MINI / "docs.jsonl").read_text().splitlines()) if d.get("acl") == ["public"]]
    flipped = tmp_path / "flipped.jsonl"
    flipped.write_text("\n".join(json.dumps({
        "id": i, "question": q, "principal": p, "groups": g, "route": r,
        "relevant": ([] if a else public) if s == "train" else rel,
        "answerable": (not a) if s == "train" else a, "tags": ["t"], "split": s}) for i, q, p, g, r, rel, a, s in LABELS) + "\n")
    in_use = Policies(fusion=replace(Policies().fusion, rrf_k=30))  # a previous run's policies, not the defaults
    previous = save_policies(index_copy, in_use, {"run": "previous"}, seed=1).read_text()
    out = quarry_in_process("tune", flipped, "--index", index_copy, "--no-progress")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["kept"] is False and report["saved"] is None
    figures = report["judgement"]["figures"]
    assert figures["false_gaps"]["worse"] and figures["false_gaps"]["after"] > figures["false_gaps"]["before"]
    fg = figures["false_gaps"]
    assert f"false gaps {fg['before']} -> {fg['after']} of 4" in report["judgement"]["reason"]
    assert report["after"]["false_gap_rate"] > report["before"]["false_gap_rate"]
    assert re.search(r"false gaps +0 +4 +4 .* worse", out.stderr), out.stderr
    assert (index_copy / TUNED_CONFIG).read_text() == previous
    served = open_view(index_copy, embedder)
    try:
        assert served.policies == in_use
    finally:
        served.close()


def test_serve_refuses_a_tuned_json_marked_not_kept(index_copy, embedder):
    from retrieval.errors import SnapshotError
    from retrieval.keep_rule import HeldOut, judge
    from routes.eval.tuning import save_refused

    refused = judge([HeldOut(True, False, True)] * 3 + [HeldOut(True, False, False)] * 5)
    path = save_refused(index_copy, Policies(), {}, seed=1, verdict=refused)
    assert not (index_copy / TUNED_CONFIG).exists()
    with pytest.raises(ValueError):
        save_policies(index_copy, Policies(), {}, seed=1, verdict=refused)
    assert not (index_copy / TUNED_CONFIG).exists()
    served = open_view(index_copy, embedder)  # tuned.refused.json is never loaded
    try:
        assert served.policies == Policies(fusion=served.policies.fusion) and served.policies.router.source != "tuned"
    finally:
        served.close()
    shutil.copyfile(path, index_copy / TUNED_CONFIG)  # copied over by hand
    with pytest.raises(SnapshotError, match="refused"):
        open_view(index_copy, embedder)


def test_a_kept_fit_is_saved_marked_kept_and_loaded(index_copy, embedder):
    from retrieval.keep_rule import HeldOut, judge

    kept = judge([HeldOut(True, True, False)] * 6 + [HeldOut(True, False, False)] * 18 + [HeldOut(False, True, True)] * 10)
    assert kept.keep
    tuned = Policies(fusion=replace(Policies().fusion, rrf_k=10))
    data = json.loads(save_policies(index_copy, tuned, {}, seed=1, verdict=kept).read_text())
    assert data["kept"] is True and data["judgement"]["figures"]["false_gaps"]["better"]
    served = open_view(index_copy, embedder)
    try:
        assert served.policies.fusion.rrf_k == 10
    finally:
        served.close()


def test_a_reports_title_names_the_labels_as_people_know_them_not_by_absolute_path(tmp_path):
    from routes.eval.reports import report_title

    inside = tmp_path / "eval_data" / "demo" / "questions.jsonl"
    assert report_title(str(inside), cwd=tmp_path) == "Quarry evaluation of eval_data/demo/questions.jsonl"
    assert report_title("/srv/labels/hospital/questions.jsonl", cwd=tmp_path) == "Quarry evaluation of hospital/questions.jsonl"
    assert report_title("eval_data/demo/questions.jsonl") == "Quarry evaluation of eval_data/demo/questions.jsonl"
