"""The answer-level model as grader and reranker, named by settings, on the real model:
what it changes, what it may never change, how it is tuned and how a damaged model fails."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from indexes.answer_model import AnswerModel, default_path
from retrieval.answer_level import AnswerGrader, AnswerReranker, passage_text
from retrieval.types import Filters, Principal
from routes.service.view import open_view
from routes.eval.evaluation import fit_policies, load_label_file, save_policies, split_labels
from routes.service.plugins import PluginError
from routes.service.settings import Settings
from tests.conftest import LiveServer
from tests.routes.eval.test_eval_tune import labels_file  # noqa: F401 - the fixture, reused
from routes.service.service import Service

ERIN, BOB = Principal("erin"), Principal("bob", ("finance",))
FIXED = "What did release 3.1.2 of the tracking gateway fix?"
BUDGET = "What is the Q3 budget for the payments platform?"


@pytest.fixture(scope="module")
def model():
    return AnswerModel.load()


@pytest.fixture(scope="module")
def answer_engine(mini_index, embedder, tmp_path_factory):
    index = tmp_path_factory.mktemp("answer") / "index"
    shutil.copytree(mini_index, index)  # its own catalog file
    eng = open_view(index, embedder, settings=Settings(grader="answer", reranker="answer", rerank_top_n=6))
    yield eng
    eng.close()


def test_answer_by_name_loads_one_model_for_both_policies(answer_engine):
    policy = answer_engine.policy
    assert isinstance(policy.grader, AnswerGrader) and isinstance(policy.reranker, AnswerReranker)
    assert policy.grader.scores is policy.reranker.scores is answer_engine.answer
    assert policy.reranker.candidates(4) == 6


def test_the_grade_is_the_models_and_the_context_is_in_its_order(answer_engine, model):
    result = answer_engine.query(FIXED, ERIN, k=4, max_attempts=1)
    grade = result.attempts[0].grade
    assert grade.source in ("answer", "answer (cascade: cheap grade)")
    assert 0.0 < grade.p_sufficient < 1.0
    assert result.attempts[0].to_json()["grade"]["p_sufficient"] == round(grade.p_sufficient, 4)
    pool = answer_engine.retrievers[result.attempts[0].plan.route].search(FIXED, ERIN.access_scope(), 6, Filters())
    probs = model.score(FIXED, [passage_text(h) for h in pool], batch_size=1)
    expected = [h.chunk_id for _, h in sorted(zip(probs, pool, strict=True), key=lambda t: -t[0])][:4]
    assert [h.chunk_id for h in result.context] == expected
    assert [round(h.score, 5) for h in result.context] == [round(float(p), 5) for p in sorted(probs, reverse=True)[:4]]


@pytest.fixture(scope="module")
def erins_own_engine(embedder, tmp_path_factory):
    """The same service over only the documents erin may read."""
    from indexes.snapshot_build import build_snapshot
    from tests.conftest import MINI

    root = tmp_path_factory.mktemp("erin-only")
    docs = [json.loads(line) for line in (MINI / "docs.jsonl").read_text().splitlines() if line.strip()]
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs if "public" in d.get("acl", [])))
    for extra in MINI.iterdir():
        if extra.name != "docs.jsonl":
            shutil.copy(extra, root / extra.name)
    index = tmp_path_factory.mktemp("erin-index")
    build_snapshot([root], index, embedder)
    eng = open_view(index, embedder, settings=Settings(grader="answer", reranker="answer", rerank_top_n=6))
    yield eng
    eng.close()


@pytest.mark.parametrize("question", [BUDGET, FIXED, "How do I refresh the secret that signs login tokens?",
                                      "What did the penetration test find about session cookies?"])
def test_forbidden_documents_change_no_grade_probability_or_order(answer_engine, erins_own_engine, question):
    full, own = answer_engine.query(question, ERIN, k=4), erins_own_engine.query(question, ERIN, k=4)
    assert full.status == own.status
    assert [h.chunk_id for h in full.context] == [h.chunk_id for h in own.context]
    assert [h.score for h in full.context] == pytest.approx([h.score for h in own.context], abs=1e-6)
    assert [a.grade.p_sufficient for a in full.attempts] == pytest.approx([a.grade.p_sufficient for a in own.attempts],
                                                                         abs=1e-6)


def test_the_index_records_the_model_it_was_built_beside(answer_engine):
    from indexes.tables import file_digest

    recorded = answer_engine.snapshot.manifest["answer_model"]
    assert recorded["sha256"] == file_digest(default_path() / "model.int8.onnx") == answer_engine.answer.scorer.checksum
    assert recorded["id"] == "quarry-answer-minilm-l6"


def test_a_damaged_model_stops_startup_with_one_line(mini_index, embedder, tmp_path):
    bad = tmp_path / "model"
    shutil.copytree(default_path(), bad)
    with (bad / "model.int8.onnx").open("r+b") as f:
        f.seek(4096)
        f.write(b"\x00" * 16)
    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    with pytest.raises(PluginError) as err:
        open_view(index, embedder, settings=Settings(grader="answer", answer_model_path=bad))
    assert "\n" not in str(err.value) and "QUARRY_GRADER" in str(err.value) and "sha256" in str(err.value)


def test_tune_fits_the_answer_grader_for_its_false_gap_target_and_serving_uses_it(mini_index, embedder, tmp_path,
                                                                                 labels_file):  # noqa: F811
    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    train, _ = split_labels(load_label_file(labels_file))
    base = open_view(index, embedder, settings=Settings(grader="answer"))
    try:
        policies, notes = fit_policies(Service.serving(base), train, seed=3, answer=base.answer, target_false_gap=0.2)
    finally:
        base.close()
    assert policies.answer.source.startswith("tuned") and policies.answer_model == base.answer.scorer.checksum
    assert notes["answer"]["target_false_gap"] == 0.2 and notes["answer"]["train_examples"] >= 4
    save_policies(index, policies, notes, seed=3)
    saved = json.loads((index / "tuned.json").read_text())["answer"]
    assert saved["model_sha256"] == base.answer.scorer.checksum
    served = open_view(index, embedder, settings=Settings(grader="answer"))
    overridden = open_view(index, embedder, settings=Settings(grader="answer", answer_threshold=1.0))
    try:
        assert served.policy.grader.config.threshold == pytest.approx(policies.answer.threshold, abs=1e-6)
        assert overridden.policy.grader.config.threshold == 1.0
        assert overridden.query(FIXED, ERIN, k=4, max_attempts=1).status == "evidence_gap"
    finally:
        served.close()
        overridden.close()


def test_p_sufficient_is_in_the_answer_over_http(mini_index, http_keys, tmp_path):
    from routes.server.app import create_app

    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    store, keys = http_keys
    settings = Settings(index_dir=index, grader="answer", rate_per_second=1000.0, burst=1000)
    with LiveServer(create_app(settings, keys=store)) as server:
        body = httpx.post(f"{server.url}/v1/query", json={"question": FIXED, "k": 4},
                          headers={"Authorization": f"Bearer {keys['erin']}"}, timeout=60).json()
    grade = body["attempts"][0]["grade"]
    assert grade["source"].startswith("answer") and 0.0 < grade["p_sufficient"] < 1.0


def test_tune_chooses_the_rerankers_candidates_and_prior_and_serving_uses_them(mini_index, embedder, tmp_path,
                                                                               labels_file):  # noqa: F811
    from routes.eval.tuning import RERANK_GRID

    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    train, _ = split_labels(load_label_file(labels_file))
    settings = Settings(reranker="answer")
    base = open_view(index, embedder, settings=settings)
    try:
        policies, notes = fit_policies(Service.serving(base), train, seed=3, rerank=base.answer, settings=settings)
    finally:
        base.close()
    chosen = (notes["rerank"]["top_n"], notes["rerank"]["rank_prior"])
    assert chosen in RERANK_GRID and notes["rerank"]["train_ndcg@10"] >= notes["rerank"]["train_ndcg@10_without"]
    assert (policies.rerank.top_n, policies.rerank.rank_prior) == chosen
    save_policies(index, policies, notes, seed=3)
    served = open_view(index, embedder, settings=settings)
    overridden = open_view(index, embedder, settings=Settings(reranker="answer", rerank_top_n=7, rerank_rank_prior=3.0))
    try:
        assert (served.policy.reranker.config.top_n, served.policy.reranker.config.rank_prior) == chosen
        assert (overridden.policy.reranker.config.top_n, overridden.policy.reranker.config.rank_prior) == (7, 3.0)
    finally:
        served.close()
        overridden.close()
