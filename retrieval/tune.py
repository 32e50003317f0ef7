"""Fitting router, grader and fusion parameters from labeled examples (deterministic).

- Router: multinomial logistic regression from route features to the labeled route. Its
  decision function is linear per class, so the fitted coefficients are exactly a
  RouterConfig (bias + weights per route); routes never labeled keep a score far below.
- Grader: logistic regression (class-balanced, regularisation chosen by cross-validation on
  the training rows) from evidence features to "this evidence answers the question".
- Fusion: the RRF (k, BM25 weight) pair with the best mean nDCG@10 on the training set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from retrieval.answer_level import AnswerConfig
from retrieval.calibration import fit_platt, logit, threshold_for_false_gaps
from retrieval.grader import GRADE_FEATURES, GraderConfig
from retrieval.registry import ROUTES
from retrieval.router import FEATURES, RouterConfig

UNSEEN_ROUTE_BIAS = -50.0


ROUTER_C = (1.0, 4.0, 10.0, 30.0)


def choose_router_c(rows: Sequence[Mapping[str, float]], routes: Sequence[str], seed: int = 0) -> float:
    """Regularisation by 5-fold cross-validated accuracy on the training labels only."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    x = np.array([[r.get(f, 0.0) for f in FEATURES] for r in rows])
    y = np.array(routes)
    counts = {r: list(routes).count(r) for r in set(routes)}
    folds = min(5, min(counts.values()))
    if len(counts) < 2 or folds < 2:
        return ROUTER_C[1]
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = {c: cross_val_score(LogisticRegression(C=c, max_iter=5000, random_state=seed, class_weight="balanced"),
                                 x, y, cv=cv).mean() for c in ROUTER_C}
    return max(ROUTER_C, key=lambda c: (round(scores[c], 6), -c))


def fit_router(rows: Sequence[Mapping[str, float]], routes: Sequence[str], seed: int = 0, c: float | None = None) -> RouterConfig:
    from sklearn.linear_model import LogisticRegression

    c = choose_router_c(rows, routes, seed) if c is None else c
    x = np.array([[r.get(f, 0.0) for f in FEATURES] for r in rows])
    y = np.array(routes)
    classes = sorted(set(routes))
    bias = {r: UNSEEN_ROUTE_BIAS for r in ROUTES}
    weights: dict[str, dict[str, float]] = {r: {} for r in ROUTES}
    if len(classes) == 1:
        bias[classes[0]] = 0.0
        return RouterConfig(bias, weights, source="tuned")
    model = LogisticRegression(C=c, max_iter=5000, random_state=seed, class_weight="balanced").fit(x, y)
    coef, intercept = model.coef_, model.intercept_
    if len(model.classes_) == 2:  # binary: sklearn keeps one row for the positive class
        coef, intercept = np.vstack([-coef[0] / 2, coef[0] / 2]), np.array([-intercept[0] / 2, intercept[0] / 2])
    for i, r in enumerate(model.classes_):
        bias[str(r)] = float(intercept[i])
        weights[str(r)] = {f: round(float(w), 6) for f, w in zip(FEATURES, coef[i], strict=True) if abs(w) > 1e-9}
    return RouterConfig(bias, weights, source=f"tuned (C={c:g})")


@dataclass(frozen=True)
class GraderFit:
    config: GraderConfig
    train_balanced_accuracy: float


GRADER_C = (0.01, 0.03, 0.1, 0.3, 1.0)


def choose_grader_c(x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """Regularisation by 5-fold cross-validated balanced accuracy on the training rows only."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    folds = min(5, int(y.sum()), int((~y).sum()))
    if folds < 2:
        return 1.0
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = {c: cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(
        C=c, max_iter=5000, random_state=seed, class_weight="balanced")), x, y, cv=cv, scoring="balanced_accuracy").mean()
        for c in GRADER_C}
    return max(GRADER_C, key=lambda c: (round(scores[c], 4), -c))


def fit_grader(rows: Sequence[Mapping[str, float]], sufficient: Sequence[bool], base: GraderConfig,
               seed: int = 0, c: float | None = None) -> GraderFit:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x = np.array([[r.get(f, 0.0) for f in GRADE_FEATURES] for r in rows])
    y = np.array(sufficient, dtype=bool)
    if y.all() or not y.any():
        return GraderFit(base, 0.5)
    c = choose_grader_c(x, y, seed) if c is None else c
    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=c, max_iter=5000, random_state=seed, class_weight="balanced").fit(scaler.transform(x), y)
    # Fold the scaling into the weights: w . (x - m) / s + b = (w / s) . x + (b - w . m / s)
    w = model.coef_[0] / scaler.scale_
    b = float(model.intercept_[0] - np.dot(w, scaler.mean_))
    probs = 1.0 / (1.0 + np.exp(-(x @ w + b)))
    pred = probs >= 0.5  # class weights are balanced, so 0.5 is the balanced-accuracy cut
    best = float(((pred & y).sum() / y.sum() + (~pred & ~y).sum() / (~y).sum()) / 2)
    best_threshold = 0.5
    weights = {f: round(float(v), 6) for f, v in zip(GRADE_FEATURES, w, strict=True)}
    config = GraderConfig(bias=round(b, 6), weights=weights, threshold=best_threshold, link_passages=base.link_passages,
                          source=f"tuned (C={c:g})", calibration=fit_platt(probs.tolist(), y.tolist()))
    return GraderFit(config, float(best))


# Signals whose scale does not depend on the corpus: shares of the question's terms, overlaps,
# and cosines in units of the scope's own spread (grader.py). Raw cosines and BM25 magnitudes
# move with the corpus and the model, so a weight fitted on them does not travel.
SCALE_FREE_FEATURES = ("z_top", "nqc", "z_spread", "top_coverage", "top_qcov", "agreement", "literal_share")


@dataclass(frozen=True)
class DomainRows:
    """One labeled domain's first attempts: evidence features and whether each was sufficient."""

    name: str
    rows: Sequence[Mapping[str, float]]
    sufficient: Sequence[bool]


def fit_domains_grader(domains: Sequence[DomainRows], target_false_gap: float = 0.10,
                       features: Sequence[str] = SCALE_FREE_FEATURES, c: float = 0.3, seed: int = 0,
                       base: GraderConfig = GraderConfig()) -> GraderConfig:
    """A grader meant for corpora it never saw, fitted across several labeled domains.

    Every domain weighs the same however many questions it has (and within a domain both
    verdicts weigh the same), so no corpus, nor the larger class, sets the fit alone; repeating
    a domain's rows changes nothing. Logistic regression on `features` standardized with those
    weights (the scaling folded back into the weights); the threshold is the score below which
    `target_false_gap` of the sufficient examples fall, weighted the same way; Platt calibration
    of the score into p_sufficient. Judge it leave-one-domain-out (benchmarks/domains.py):
    fitted on all domains but one, scored on that one."""
    from sklearn.linear_model import LogisticRegression

    used = [d for d in domains if len(d.rows)]
    x = np.array([[r.get(f, 0.0) for f in features] for d in used for r in d.rows], dtype=np.float64)
    y = np.array([bool(s) for d in used for s in d.sufficient])
    if not len(y) or y.all() or not y.any():
        raise ValueError("fitting a grader across domains needs sufficient and insufficient examples")
    weight = np.concatenate([
        np.where(suff, 50.0 / max(1, int(suff.sum())), 50.0 / max(1, int((~suff).sum())))
        for suff in (np.asarray(d.sufficient, dtype=bool) for d in used)])  # 100 per domain, 50 per verdict
    mean = np.average(x, axis=0, weights=weight)
    scale = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=weight))
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=5000, random_state=seed).fit((x - mean) / scale, y, sample_weight=weight)
    w = model.coef_[0] / scale
    b = float(model.intercept_[0] - np.dot(w, mean))
    scores = 1.0 / (1.0 + np.exp(-(x @ w + b)))
    order = np.argsort(scores[y], kind="stable")
    cumulative = np.cumsum(weight[y][order]) / weight[y].sum()
    at = min(int(np.searchsorted(cumulative, target_false_gap, side="right")), len(order) - 1)
    threshold = float(scores[y][order][at])
    weights = {f: round(float(v), 6) for f, v in zip(features, w, strict=True)}
    return GraderConfig(bias=round(b, 6), weights=weights, threshold=round(threshold, 6), link_passages=base.link_passages,
                        source=f"fitted on {len(used)} domains ({', '.join(d.name for d in used)})",
                        calibration=fit_platt(scores.tolist(), y.tolist()))


def cascade_band(cheap_p: Sequence[float], sufficient: Sequence[bool], tolerance: float = 0.02,
                 min_share: float = 0.05, min_examples: int = 20) -> tuple[float, float]:
    """(skip_below, skip_above): the cheap grader's calibrated probabilities outside which
    its verdict is trusted without the answer model (a gap below, sufficient above; the model
    runs for skip_below <= p <= skip_above). skip_above is the lowest cut with at most
    `tolerance` of the examples above it insufficient, skip_below the highest with at most
    `tolerance` below it sufficient; cuts fall midway between distinct scores, so tied
    examples are never split. A side with fewer than `min_share` of the examples, or fewer
    than `min_examples`, is not skipped (0.0 / 1.0: a small sample never cuts the model out),
    and neither is anything when the two sides would overlap."""
    p = np.asarray(cheap_p, dtype=np.float64)
    y = np.asarray(sufficient, dtype=bool)
    n = len(p)
    values = np.unique(p)
    if n == 0 or len(values) < 2:
        return 0.0, 1.0
    cuts = (values[:-1] + values[1:]) / 2
    need = max(min_share * n, min_examples)
    above, below = 1.0, 0.0
    for cut in cuts:  # from the lowest cut up: the largest region that qualifies
        tail = p > cut
        if tail.sum() >= need and (~y[tail]).sum() <= tolerance * tail.sum():
            above = float(cut)
            break
    for cut in cuts[::-1]:  # from the highest cut down
        head = p < cut
        if head.sum() >= need and y[head].sum() <= tolerance * head.sum():
            below = float(cut)
            break
    if below > above:
        return 0.0, 1.0
    return below, above


def fit_answer_grader(cheap: Sequence[float], answer: Sequence[float], sufficient: Sequence[bool],
                      cheap_calibration: GraderConfig, target_false_gap: float = 0.05, passages: int = 3,
                      seed: int = 0, cascade: bool = True, tolerance: float = 0.02) -> AnswerConfig:
    """The answer grader's combination, calibration, threshold and cascade, from labeled
    first attempts: `cheap` the signal grader's scores, `answer` the best answer probability
    over the top `passages`. A logistic regression (not class-balanced: its output is meant
    as a probability) on the two logits, Platt-calibrated, and the threshold that calls at
    most `target_false_gap` of the sufficient examples gaps."""
    from sklearn.linear_model import LogisticRegression

    y = np.array(sufficient, dtype=bool)
    if y.all() or not y.any():
        raise ValueError("fitting the answer grader needs both sufficient and insufficient examples")
    x = np.array([[logit(c), logit(a)] for c, a in zip(cheap, answer, strict=True)])
    model = LogisticRegression(C=1.0, max_iter=5000, random_state=seed).fit(x, y)
    config = AnswerConfig(passages=passages, bias=float(model.intercept_[0]), w_cheap=float(model.coef_[0][0]),
                          w_answer=float(model.coef_[0][1]))
    raw = [config.raw(c, a) for c, a in zip(cheap, answer, strict=True)]
    calibration = fit_platt(raw, y.tolist())
    p = [calibration(r) for r in raw]
    cheap_p = [cheap_calibration.calibration(c) for c in cheap]
    below, above = cascade_band(cheap_p, y.tolist(), tolerance) if cascade else (0.0, 1.0)
    # the threshold acts only inside the band; sufficient examples the band calls gaps count first
    inside = [below <= c <= above for c in cheap_p]
    forced = sum(1 for c, t in zip(cheap_p, y, strict=True) if t and c < below)
    threshold = threshold_for_false_gaps([q for q, i in zip(p, inside, strict=True) if i],
                                         [bool(t) for t, i in zip(y, inside, strict=True) if i], target_false_gap,
                                         already=forced, total=int(y.sum()))
    return replace(config, calibration=calibration, threshold=threshold, skip_below=below, skip_above=above,
                   target_false_gap=target_false_gap, source=f"tuned on {len(y)} examples")


def best_fusion(scores: Mapping[tuple[str, int, float], float]) -> tuple[str, int, float]:
    """(method, rrf_k, bm25 weight) with the best score; ties go to RRF (the default), then
    the larger k, then the weight nearest an even split (1.0 for RRF, 0.5 for z-score)."""
    return max(scores, key=lambda p: (round(scores[p], 6), p[0] == "rrf", p[1], -abs(p[2] - (1.0 if p[0] == "rrf" else 0.5))))
