"""Whether a tuned fit is kept: judged on held-out questions against the policies in use.

A fit is judged on two figures, each over the held-out questions it is defined on:

- **false gaps**: answerable questions that ended as an evidence gap (lower is better);
- **gaps caught**: unanswerable questions that ended as an evidence gap (higher is better).

Each held-out question is run twice, with the policies in use and with the fit, so the two
runs are paired. For each figure the *harm* of the fit is the mean over its questions of
(fit worse on this question) - (fit better on this question): the change in the false-gap
rate, or the drop in the share of gaps caught. Its noise is measured by a paired bootstrap:
`RESAMPLES` (1,000) resamples with replacement of that figure's questions, drawn with a fixed
seed (so a run is deterministic), the harm recomputed on each; the upper bound of the one-sided
`CONFIDENCE` (90%) interval is the 90th percentile of those harms (numpy's "higher" quantile,
never interpolated below an observed value).

The rule (strict; a fit has to earn its place):

1. **No figure is worse**: for both figures the observed harm is <= 0. One more false gap or
   one fewer gap caught refuses the fit, however small the held-out split.
2. **Each figure has at least `MIN_QUESTIONS` (10) held-out questions**: on fewer, one question
   moves a figure by more than 10 points and a harm the split happens not to show goes unseen
   (measured: fits kept on 2, 5 and 6 held-out questions of a figure doubled or tripled the
   false gaps on the rest of their domain; benchmarks/tuning.py --curve).
3. **At least one figure is better beyond the noise**: its harm's bootstrap upper bound is < 0
   (in at least 90% of resamples the fit is better on it) *and* the exact one-sided sign test
   on the questions that changed (better vs worse, each 1/2 under no effect) gives p < 0.10;
   a bootstrap of a few changed questions understates their noise (3 better and none worse
   of 10 passes it, p = 0.125 by the sign test). An exact tie is not better.

With no held-out question at all nothing can be judged and the fit is refused.

Why this rule: with a few dozen labels a refitted grader mostly follows noise, and a fit
that trades false gaps for gaps caught (or moves one by a question or two) cannot be told
from chance on a split that small; the shipped defaults were fitted across many domains, so
when in doubt, they stay. A non-inferiority margin on each figure would be the looser
alternative; with 30 held-out questions its interval is wider than any margin worth having,
so it would refuse the same fits while being harder to read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

RESAMPLES = 1000
CONFIDENCE = 0.90
SEED = 0
MIN_QUESTIONS = 10  # held-out questions each figure needs before the fit can be judged on it

Figure = Literal["false_gaps", "gaps_caught"]


@dataclass(frozen=True)
class HeldOut:
    """One held-out question's outcome under the policies in use and under the fit."""

    answerable: bool
    gap_before: bool
    gap_after: bool


@dataclass(frozen=True)
class FigureVerdict:
    """One figure of the judgement: counts before and after over `questions`, the observed
    harm (positive: the fit is worse) and the upper bound of its one-sided interval."""

    name: Figure
    questions: int
    before: int
    after: int
    harm: float
    harm_upper: float
    improved: int = 0  # questions on which the fit is better
    worsened: int = 0  # ... and worse

    @property
    def worse(self) -> bool:
        return self.harm > 0

    @property
    def sign_p(self) -> float:
        """One-sided exact sign test: P(at least `improved` of the changed questions better) when
        better and worse are equally likely."""
        n = self.improved + self.worsened
        return sum(math.comb(n, i) for i in range(self.improved, n + 1)) / 2 ** n if n else 1.0

    @property
    def better(self) -> bool:
        return self.questions >= MIN_QUESTIONS and self.harm_upper < 0 and self.sign_p < 1 - CONFIDENCE

    def describe(self) -> str:
        what = "answerable questions called gaps" if self.name == "false_gaps" else "unanswerable questions caught as gaps"
        return (f"{self.name.replace('_', ' ')} {self.before} -> {self.after} of {self.questions} held-out {what} "
                f"(harm {self.harm:+.3f}, {CONFIDENCE:.0%} upper bound {self.harm_upper:+.3f})")

    def to_json(self) -> dict[str, Any]:
        return {"questions": self.questions, "before": self.before, "after": self.after, "harm": round(self.harm, 4),
                "harm_upper": round(self.harm_upper, 4), "improved": self.improved, "worsened": self.worsened,
                "sign_p": round(self.sign_p, 4), "worse": self.worse, "better": self.better}


@dataclass(frozen=True)
class Verdict:
    """Whether the fit is kept, each figure's judgement, and the reason in words."""

    keep: bool
    figures: tuple[FigureVerdict, ...]
    reason: str

    @property
    def worse(self) -> tuple[FigureVerdict, ...]:
        return tuple(f for f in self.figures if f.worse)

    def to_json(self) -> dict[str, Any]:
        return {"kept": self.keep, "reason": self.reason, "rule": RULE,
                "figures": {f.name: f.to_json() for f in self.figures}}


RULE = (f"kept only if neither false gaps nor gaps caught is worse on the held-out split, each has at least "
        f"{MIN_QUESTIONS} held-out questions, and at least one is better beyond the noise (the upper bound of a one-sided "
        f"{CONFIDENCE:.0%} paired-bootstrap interval of its harm, {RESAMPLES} resamples, is below 0 and the exact sign "
        f"test on the questions that changed gives p < {1 - CONFIDENCE:.2f})")


def _figure(name: Figure, harms: np.ndarray, before: int, after: int, resamples: int, confidence: float,
            rng: np.random.Generator) -> FigureVerdict:
    n = len(harms)
    if n == 0:
        return FigureVerdict(name, 0, 0, 0, 0.0, 0.0)
    draws = rng.integers(0, n, size=(resamples, n))
    means = harms[draws].mean(axis=1)
    upper = float(np.quantile(means, confidence, method="higher"))
    return FigureVerdict(name, n, before, after, float(harms.mean()), upper, int((harms < 0).sum()), int((harms > 0).sum()))


def judge(held_out: Sequence[HeldOut], resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
          seed: int = SEED) -> Verdict:
    """Keep the fit or not, by the rule in the module docstring (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    answerable = [q for q in held_out if q.answerable]
    unanswerable = [q for q in held_out if not q.answerable]
    # harm per question: +1 where the fit is worse on it, -1 where it is better
    false_gaps = np.array([int(q.gap_after) - int(q.gap_before) for q in answerable], dtype=np.float64)
    missed = np.array([int(q.gap_before) - int(q.gap_after) for q in unanswerable], dtype=np.float64)
    figures = (
        _figure("false_gaps", false_gaps, sum(q.gap_before for q in answerable), sum(q.gap_after for q in answerable),
                resamples, confidence, rng),
        _figure("gaps_caught", missed, sum(q.gap_before for q in unanswerable), sum(q.gap_after for q in unanswerable),
                resamples, confidence, rng))
    worse = [f for f in figures if f.worse]
    if not held_out:
        return Verdict(False, figures, "no held-out questions to judge the fit by (label some with \"split\": \"test\")")
    if worse:
        return Verdict(False, figures, "the fit would have made things worse: " + "; ".join(f.describe() for f in worse))
    few = [f for f in figures if f.questions < MIN_QUESTIONS]
    if few:
        return Verdict(False, figures, "too few held-out questions to show the fit is no worse: " + "; ".join(
            f"{f.questions} {'answerable' if f.name == 'false_gaps' else 'unanswerable'} (at least {MIN_QUESTIONS} needed)"
            for f in few))
    better = [f for f in figures if f.better]
    if not better:
        return Verdict(False, figures, f"neither figure got better beyond the noise of {len(held_out)} held-out questions: "
                       + "; ".join(f.describe() for f in figures if f.questions))
    return Verdict(True, figures, "better beyond the noise: " + "; ".join(f.describe() for f in better)
                   + (" and no figure worse" if len(better) < 2 else ""))
