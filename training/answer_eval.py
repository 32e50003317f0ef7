"""Held-out figures for the answer model: pure functions of pairs and their probabilities.

- answerability: over (question, its own paragraph) pairs, can the model tell answerable
  from unanswerable questions on the same paragraph (SQuAD 2.0's hard case): ROC AUC,
  accuracy at 0.5, log loss, Brier score and expected calibration error (10 equal bins).
- retrieval: for each answerable question, its own paragraph against the same question's
  negatives (other paragraphs of its article, top BM25 paragraphs of other articles): AUC
  per negative kind and together, and whether the own paragraph ranks first (ties lose).
- scifact_ood (when given): SciFact test claims, cited abstracts vs top BM25 abstracts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score

from training.answer_data import Pair

RETRIEVAL_NEGATIVES = ("same_article", "bm25_other_article")


def heldout_metrics(pairs: Sequence[Pair], probs: np.ndarray) -> dict[str, dict[str, float]]:
    """The answerability, retrieval and overall figures for SQuAD held-out pairs."""
    probs = np.asarray(probs, dtype=np.float64)
    kinds = np.array([p.kind for p in pairs])
    labels = np.array([p.label for p in pairs])
    own = np.isin(kinds, ["own_answerable", "own_unanswerable"])
    out = {"answerability": _binary(labels[own], probs[own])}
    out["retrieval"] = _retrieval(pairs, probs)
    out["all_pairs"] = {"auc": _auc(labels, probs), "accuracy_at_0_5": _accuracy(labels, probs), "n": int(len(pairs))}
    return out


def scifact_metrics(pairs: Sequence[Pair], probs: np.ndarray) -> dict[str, float]:
    """AUC of cited vs BM25 abstracts, and the share of claims whose best cited abstract
    outscores every negative."""
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.array([p.label for p in pairs])
    best: dict[str, list[float]] = defaultdict(lambda: [-1.0, -1.0])
    for p, s in zip(pairs, probs, strict=True):
        slot = 0 if p.label else 1
        best[p.group][slot] = max(best[p.group][slot], float(s))
    top1 = [pos > neg for pos, neg in best.values() if pos >= 0 and neg >= 0]
    return {"auc": _auc(labels, probs), "top1": float(np.mean(top1)) if top1 else float("nan"),
            "claims": len(top1), "n": int(len(pairs))}


def agreement(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """How far two models' probabilities on the same pairs are apart (fp32 vs int8)."""
    d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return {"max_abs_diff": float(d.max()) if d.size else 0.0, "mean_abs_diff": float(d.mean()) if d.size else 0.0,
            "same_decision_at_0_5": float(np.mean((np.asarray(a) >= 0.5) == (np.asarray(b) >= 0.5))) if d.size else 1.0}


def _retrieval(pairs: Sequence[Pair], probs: np.ndarray) -> dict[str, float]:
    pos: dict[str, float] = {}
    negs: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for p, s in zip(pairs, probs, strict=True):
        if p.kind == "own_answerable":
            pos[p.group] = float(s)
        elif p.kind in RETRIEVAL_NEGATIVES:
            negs[p.group].append((p.kind, float(s)))
    out: dict[str, float] = {}
    for name, kinds in [(k, (k,)) for k in RETRIEVAL_NEGATIVES] + [("all_negatives", RETRIEVAL_NEGATIVES)]:
        ys, ss = [], []
        for g, s in pos.items():
            chosen = [v for k, v in negs[g] if k in kinds]
            if chosen:
                ys += [1] + [0] * len(chosen)
                ss += [s, *chosen]
        out[f"auc_vs_{name}"] = _auc(np.array(ys), np.array(ss))
    ranked = [(s, [v for _, v in negs[g]]) for g, s in pos.items() if negs[g]]
    out["top1"] = float(np.mean([s > max(n) for s, n in ranked])) if ranked else float("nan")
    out["mrr"] = float(np.mean([1.0 / (1 + sum(v >= s for v in n)) for s, n in ranked])) if ranked else float("nan")
    out["questions"] = len(ranked)
    out["candidates_per_question"] = float(np.mean([1 + len(n) for _, n in ranked])) if ranked else 0.0
    return out


def _binary(labels: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    eps = 1e-7
    clipped = np.clip(probs, eps, 1 - eps)
    return {
        "auc": _auc(labels, probs),
        "accuracy_at_0_5": _accuracy(labels, probs),
        "log_loss": float(-np.mean(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped))),
        "brier": float(np.mean((probs - labels) ** 2)),
        "ece_10_bins": _ece(labels, probs),
        "positives": int(labels.sum()), "negatives": int(len(labels) - labels.sum()),
    }


def _auc(labels: np.ndarray, probs: np.ndarray) -> float:
    if len(set(labels.tolist())) < 2:
        return float("nan")
    return float(roc_auc_score(labels, probs))


def _accuracy(labels: np.ndarray, probs: np.ndarray) -> float:
    return float(np.mean((probs >= 0.5) == (labels == 1))) if len(labels) else float("nan")


def _ece(labels: np.ndarray, probs: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error (Naeini et al., AAAI 2015) over equal-width bins."""
    idx = np.minimum((probs * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            total += sel.sum() / len(probs) * abs(probs[sel].mean() - labels[sel].mean())
    return float(total)
