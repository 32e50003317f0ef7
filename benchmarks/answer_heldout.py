"""Answer models side by side on the held-out SQuAD 2.0 articles, including the cases recipe
2 trains for and recipe 1 never saw.

    .venv/bin/python benchmarks/answer_heldout.py --models indexes/models/answer-minilm-l6,var/answer-train2/model

For each model folder (int8, through `AnswerModel`, one pair per run) on the 7 held-out
articles (never trained on by either recipe):
- answerability AUC: answerable vs unanswerable questions on their own paragraph;
- answer removed: an answerable question with its own paragraph vs the same paragraph with
  the sentences holding the answer cut out (same topic and words, no answer);
- reworded: the answerable question with up to two words replaced by sentence-encoder
  neighbours (as recipe 2 rewords; the table is built from the held-out articles' own words
  here, so no substitute comes from training) vs its same-article negatives;
- SciFact test claims (out of domain): cited vs top-3 BM25 abstracts;
- first attempts (what the grader decides on): the demo questions (both splits) and the
  waterworks set, one loop attempt at k = 8 under the signal grader, constraints met; AUC for
  "a relevant document is among the hits" of the best probability over the top 3 passages,
  next to the signal grader's own score (the same for every model).

Writes benchmarks/results/answer_heldout.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import random
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from benchmarks.common import DATASETS, write_json
from indexes.answer_model import AnswerModel
from indexes.embedder import Embedder
from retrieval.answer_level import AnswerScores
from retrieval.grader import GraderConfig
from routes.policies.answer_policy import ModelScorer
from routes.eval.tuning import answer_examples
from routes.service.service import Service
from training import answer_data as data


def _auc(pos: list[float], neg: list[float]) -> float:
    return round(float(roc_auc_score([1] * len(pos) + [0] * len(neg), pos + neg)), 4)


def probe_sets(seed: int = 7) -> dict[str, tuple[list[data.Pair], list[data.Pair]]]:
    """(positives, negatives) per probe, the same for every model."""
    squad = data.load_squad(DATASETS / "squad2" / "dev-v2.0.json", DATASETS / "squad2" / "train-v2.0-partial.json")
    held = set(data.heldout_titles(squad))
    questions = [q for q in squad.questions if squad.paragraphs[q.pid].title in held]
    answerable = [q for q in questions if q.answerable]
    own = [data._own(squad, q, "own_answerable") for q in answerable]
    unanswerable = [data._own(squad, q, "own_unanswerable") for q in questions if not q.answerable]
    removed = data._answer_removed(squad, answerable)
    kept = {p.group for p in removed}
    texts = [p.text for p in squad.paragraphs if p.title in held] + [q.text for q in questions]
    words = data.vocabulary(texts)
    synonyms = data.synonym_table(words, Embedder().load().encode(words))
    rng = random.Random(seed)
    reworded = [r for r in (data.paraphrased(p, synonyms, rng) for p in own) if r.kind.endswith("+para")]
    others = data._same_article(squad, answerable, [p for p in squad.paragraphs if p.title in held], random.Random(seed), 2)
    groups = {p.group for p in reworded}
    return {
        "answerability": (own, unanswerable),
        "answer_removed": ([p for p in own if p.group in kept], removed),
        "reworded_vs_same_article": (reworded, [p for p in others if p.group in groups]),
        "scifact_ood": tuple(  # type: ignore[dict-item]
            [p for p in data.scifact_test_pairs(DATASETS / "scifact") if p.label == want] for want in (1, 0)),
    }


def first_attempts() -> dict[str, Any]:
    """GradeRows of the demo and waterworks first attempts (the same for every model)."""
    from datetime import date

    from benchmarks.common import ROOT, build_or_reuse, make_embedder
    from routes.cli.demo import DEMO_SOURCES
    from routes.service.view import open_view
    from routes.service.tuned import Policies
    from routes.eval.evaluation import load_label_file
    from routes.eval.tuning import grade_rows

    embedder = make_embedder()
    found = lambda lb, docs: lb.answerable and bool(set(lb.relevant) & set(docs))  # noqa: E731
    out = {}
    for name, sources, labels, today in (
            ("demo", DEMO_SOURCES, ROOT / "eval_data/demo/questions.jsonl", date(2025, 11, 1)),
            ("waterworks", [ROOT / "eval_data/waterworks/docs"], ROOT / "eval_data/waterworks/questions.jsonl", None)):
        index, _ = build_or_reuse(name, sources, embedder)
        engine = open_view(index, embedder, today=today, policies=Policies())
        out[name] = grade_rows(Service.serving(engine), load_label_file(labels), found)
        engine.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="comma-separated model folders")
    args = ap.parse_args()
    sets = probe_sets()
    attempts = first_attempts()
    print({name: (len(pos), len(neg)) for name, (pos, neg) in sets.items()}, flush=True)
    out: dict[str, Any] = {"sets": {name: {"positives": len(pos), "negatives": len(neg)} for name, (pos, neg) in sets.items()},
                           "models": {}}
    for folder in args.models.split(","):
        model = AnswerModel.load(Path(folder))
        row = {}
        for name, (pos, neg) in sets.items():
            scores = model.score_pairs([p.question for p in pos + neg], [p.passage for p in pos + neg], batch_size=1)
            row[name] = _auc(scores[: len(pos)].tolist(), scores[len(pos):].tolist())
        answer = AnswerScores(ModelScorer(model))
        for name, rows in attempts.items():
            cheap, best, ys = answer_examples(rows, GraderConfig(), answer, 3)
            row[f"{name}_first_attempts"] = round(float(roc_auc_score(ys, best)), 4)
            out.setdefault("signal_grader", {})[f"{name}_first_attempts"] = round(float(roc_auc_score(ys, cheap)), 4)
            out["sets"][f"{name}_first_attempts"] = {"sufficient": int(sum(ys)), "insufficient": int(len(ys) - sum(ys))}
        out["models"][folder] = {"sha256": model.checksum, "auc": row}
        print(folder, row, flush=True)
    write_json("answer_heldout", out)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
