"""Scores into probabilities: Platt scaling and isotonic regression, fitted on labeled data.

A grader's raw score orders evidence sets but is not a probability: a class-balanced fit
over-predicts the rare class, a cross-encoder's sigmoid is over-confident. `p_sufficient`,
which callers see, is the raw score passed through one of these, fitted on labeled
questions (was the evidence sufficient?), so that of the sets given 0.8 about 80% were.
Both are plain NumPy and deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np

Method = Literal["identity", "platt", "isotonic"]


def logit(p: float, eps: float = 1e-6) -> float:
    """log(p / (1 - p)), with p clipped away from 0 and 1."""
    q = min(1.0 - eps, max(eps, float(p)))
    return math.log(q / (1.0 - q))


def sigmoid(z: float) -> float:
    """1 / (1 + e^-z), with z clipped to [-50, 50]."""
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


@dataclass(frozen=True)
class Calibration:
    """A monotone map from a raw score in [0, 1] to a probability.

    platt: sigmoid(a * logit(x) + b). isotonic: a step function through (xs, ys), linearly
    interpolated between breakpoints and flat beyond them. identity: the score itself.
    """

    method: Method = "identity"
    a: float = 1.0
    b: float = 0.0
    xs: tuple[float, ...] = ()
    ys: tuple[float, ...] = ()
    fitted_on: int = 0  # labeled examples behind the fit (0: not fitted)

    def __call__(self, score: float) -> float:
        if self.method == "platt":
            return sigmoid(self.a * logit(score) + self.b)
        if self.method == "isotonic" and self.xs:
            return float(np.interp(score, self.xs, self.ys))
        return float(min(1.0, max(0.0, score)))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "fitted_on": self.fitted_on}
        if self.method == "platt":
            out.update(a=round(self.a, 6), b=round(self.b, 6))
        if self.method == "isotonic":
            out.update(xs=[round(x, 6) for x in self.xs], ys=[round(y, 6) for y in self.ys])
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Calibration:
        if not data:
            return cls()
        method = data.get("method", "identity")
        if method not in ("identity", "platt", "isotonic"):
            raise ValueError(f"unknown calibration method {method!r}")
        return cls(method, float(data.get("a", 1.0)), float(data.get("b", 0.0)),
                   tuple(float(x) for x in data.get("xs", ())), tuple(float(y) for y in data.get("ys", ())),
                   int(data.get("fitted_on", 0)))


def fit_platt(scores: Sequence[float], labels: Sequence[bool], iterations: int = 100, ridge: float = 1e-3) -> Calibration:
    """Platt scaling on the scores' logits, with Platt's smoothed targets and a small ridge
    penalty toward the identity (a = 1, b = 0), so a small or perfectly separated sample
    still gives a finite, sensible map. Newton's method with step halving, deterministic."""
    x = np.asarray([logit(s) for s in scores], dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("Platt scaling needs both sufficient and insufficient examples")
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    lam = ridge * len(x)

    def loss(a: float, b: float) -> float:
        z = a * x + b
        return float(np.sum(np.logaddexp(0.0, z) - t * z) + 0.5 * lam * ((a - 1.0) ** 2 + b**2))

    a, b = 1.0, 0.0
    current = loss(a, b)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(a * x + b, -50, 50)))
        w = np.maximum(p * (1 - p), 1e-12)
        grad = np.array([np.sum((p - t) * x) + lam * (a - 1.0), np.sum(p - t) + lam * b])
        hess = np.array([[np.sum(w * x * x) + lam, np.sum(w * x)], [np.sum(w * x), np.sum(w) + lam]])
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-6:
            na, nb = a - scale * float(step[0]), b - scale * float(step[1])
            trial = loss(na, nb)
            if trial <= current:
                break
            scale /= 2
        else:
            break
        a, b, done = na, nb, current - trial < 1e-12
        current = trial
        if done:
            break
    return Calibration("platt", a, b, fitted_on=len(y))


def fit_isotonic(scores: Sequence[float], labels: Sequence[bool]) -> Calibration:
    """Isotonic regression by pool-adjacent-violators: the non-decreasing step function
    closest (least squares) to the labels, kept as one breakpoint per pooled block. Equal
    scores are pooled first, so the result does not depend on the order of tied examples."""
    if not len(scores):
        raise ValueError("isotonic calibration needs labeled examples")
    tied: dict[float, list[float]] = {}
    for x, y in zip(scores, labels, strict=True):
        tied.setdefault(float(x), []).append(float(y))
    blocks: list[list[float]] = []  # [sum of y, count, weighted mean x]
    for x in sorted(tied):
        ys = tied[x]
        blocks.append([sum(ys), float(len(ys)), x])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            s, c, mx = blocks.pop()
            prev = blocks[-1]
            prev[2] = (prev[2] * prev[1] + mx * c) / (prev[1] + c)
            prev[0] += s
            prev[1] += c
    return Calibration("isotonic", xs=tuple(float(b[2]) for b in blocks),
                       ys=tuple(float(b[0] / b[1]) for b in blocks), fitted_on=len(scores))


def fit(method: Method, scores: Sequence[float], labels: Sequence[bool]) -> Calibration:
    """The calibration `method` names, fitted on (score, sufficient) pairs."""
    if method == "platt":
        return fit_platt(scores, labels)
    if method == "isotonic":
        return fit_isotonic(scores, labels)
    return Calibration(fitted_on=len(scores))


def threshold_for_false_gaps(p: Sequence[float], sufficient: Sequence[bool], target: float,
                             already: int = 0, total: int | None = None) -> float:
    """The highest probability threshold that calls at most `target` of the sufficient
    examples gaps (a gap is p < threshold): the most gaps caught for that false-gap rate.
    `already` sufficient examples out of `total` (default: those in `p`) are gaps whatever
    the threshold (a cascade decided them); they use up the allowance first."""
    if not 0.0 <= target < 1.0:
        raise ValueError("the target false-gap rate must be in [0, 1)")
    positives = np.sort(np.asarray([v for v, y in zip(p, sufficient, strict=True) if y], dtype=np.float64))
    total = len(positives) + already if total is None else total
    if not total:
        raise ValueError("choosing a gap threshold needs sufficient examples")
    allowed = int(math.floor(target * total)) - already  # sufficient examples that may still fall below it
    if allowed < 0:
        return 0.0
    if allowed >= len(positives):
        return 1.0 if not len(positives) else float(np.nextafter(positives[-1], np.inf))
    return float(positives[allowed])
