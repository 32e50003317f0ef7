"""How well can relevance signals tell sufficient evidence from the rest? (demo labels)

    .venv/bin/python benchmarks/grader_signals.py

For every labeled demo question that is not a SQL question, the first attempt on its routed
text retriever (k = 8, hand-set policies) is scored: positive when the question is
answerable and a relevant document is among the hits. For each grader signal, and for two
candidate signals the grader does not use, prints the AUC, then the balanced accuracy of a
class-balanced logistic regression under 5-fold cross-validation, and the ceiling that
logistic regression puts on the demo gap F1 (positive: the question is not answerable; the
threshold on its cross-validated probabilities picked after the fact, so an upper bound).
Candidate signals:

- sentence_cosine: best cosine between the question and one sentence of the top 3 passages
  (sentences embedded on the fly);
- soft_coverage: idf-weighted mean over the question's words of the best cosine to a word
  of the passage (words embedded alone), best of the top 3 passages.

Writes benchmarks/results/grader_signals.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import math
import re
from datetime import date

import numpy as np

from benchmarks.common import ROOT, build_or_reuse, machine, make_embedder, write_json
from retrieval.grader import GRADE_FEATURES, evidence_features
from retrieval.text import content_terms
from routes.cli.demo import DEMO_SOURCES
from routes.service.view import open_view
from routes.service.tuned import Policies
from routes.eval.evaluation import first_attempt_evidence, load_label_file
from routes.service.service import Service

SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def auc(scores: list[float], labels: list[bool]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def cross_validated(x: np.ndarray, y: np.ndarray, method: str, seed: int = 0) -> np.ndarray:
    """Out-of-fold outputs (`predict` or `predict_proba`) of a class-balanced logistic
    regression on standardised signals, 5 stratified folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=2000))
    return cross_val_predict(model, x, y, cv=StratifiedKFold(5, shuffle=True, random_state=seed), method=method)


def cv_balanced_accuracy(x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    pred = cross_validated(x, y, "predict", seed)
    return float((np.mean(pred[y]) + np.mean(~pred[~y])) / 2)


def gap_f1_ceiling(x: np.ndarray, answerable: np.ndarray, seed: int = 0) -> float:
    """Best gap F1 over every threshold on cross-validated probabilities of "answerable"."""
    probs = cross_validated(x, answerable, "predict_proba", seed)[:, 1]
    best = 0.0
    for threshold in np.unique(probs):
        gap = probs < threshold
        tp, fp, fn = int((gap & ~answerable).sum()), int((gap & answerable).sum()), int((~gap & ~answerable).sum())
        best = max(best, 2 * tp / max(1, 2 * tp + fp + fn))
    return best


def main() -> None:
    embedder = make_embedder().load()
    index, _ = build_or_reuse("demo", DEMO_SOURCES, embedder)
    engine = open_view(index, embedder, today=date(2025, 11, 1), policies=Policies())
    texts = engine.snapshot.chunks.texts
    df: dict[str, int] = {}
    for t in texts:
        for w in set(content_terms(t)):
            df[w] = df.get(w, 0) + 1
    word_vectors: dict[str, np.ndarray] = {}

    def vectors(words: list[str]) -> np.ndarray:
        todo = [w for w in words if w not in word_vectors]
        if todo:
            word_vectors.update(zip(todo, embedder.encode(todo), strict=True))
        return np.vstack([word_vectors[w] for w in words])

    rows, labels, answerable = [], [], []
    for lb in load_label_file(ROOT / "eval_data" / "demo" / "questions.jsonl"):
        if lb.route == "sql" or lb.answer_rows is not None:
            continue
        constraints, hits = first_attempt_evidence(Service.serving(engine), lb.question, lb.principal_obj())
        if not hits:
            continue
        row = evidence_features(lb.question, hits, constraints)
        q = embedder.encode_query(lb.question)[0]
        q_words = [w for w in content_terms(lb.question) if len(w) > 2]
        weights = np.asarray([math.log(1 + (len(texts) - df.get(w, 0) + 0.5) / (df.get(w, 0) + 0.5)) for w in q_words])
        row["sentence_cosine"], row["soft_coverage"] = 0.0, 0.0
        for h in hits[:3]:
            sentences = [s.strip() for s in SENTENCE.split(h.text) if len(s.strip()) > 15]
            if sentences:
                row["sentence_cosine"] = max(row["sentence_cosine"], float((embedder.encode(sentences) @ q).max()))
            p_words = [w for w in content_terms(f"{h.title or ''} {h.text}") if len(w) > 2]
            if q_words and p_words:
                best = (vectors(q_words) @ vectors(p_words).T).max(axis=1)
                row["soft_coverage"] = max(row["soft_coverage"], float((best * weights).sum() / weights.sum()))
        rows.append(row)
        labels.append(lb.answerable and bool(set(lb.relevant) & {h.doc_id for h in hits}))
        answerable.append(lb.answerable)
    engine.close()

    y = np.asarray(labels)
    names = [*GRADE_FEATURES, "sentence_cosine", "soft_coverage"]
    aucs = {n: round(auc([r[n] for r in rows], labels), 3) for n in names}
    matrix = lambda cols: np.asarray([[r[c] for c in cols] for r in rows])  # noqa: E731
    cv = {"grader signals": round(cv_balanced_accuracy(matrix(GRADE_FEATURES), y), 3),
          "grader signals + candidates": round(cv_balanced_accuracy(matrix(names), y), 3)}
    print(f"{len(rows)} questions, {int(y.sum())} with sufficient evidence on the first attempt")
    for n in sorted(names, key=lambda n: -aucs[n]):
        print(f"  AUC {aucs[n]:.3f}  {n}")
    ans = np.asarray(answerable)
    ceiling = {"grader signals": round(gap_f1_ceiling(matrix(GRADE_FEATURES), ans), 3),
               "grader signals + candidates": round(gap_f1_ceiling(matrix(names), ans), 3)}
    for k, v in cv.items():
        print(f"  cross-validated balanced accuracy, {k}: {v:.3f}; gap F1 at the best threshold "
              f"({int((~ans).sum())} unanswerable questions): {ceiling[k]:.3f}")
    write_json("grader_signals", {"machine": machine(), "questions": len(rows), "sufficient": int(y.sum()),
                                  "unanswerable": int((~ans).sum()), "auc": aucs, "cv_balanced_accuracy": cv,
                                  "cv_gap_f1_at_best_threshold": ceiling})


if __name__ == "__main__":
    main()
