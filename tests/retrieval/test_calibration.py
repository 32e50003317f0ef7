"""Platt scaling, isotonic regression and the false-gap threshold on data with known answers."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.calibration import Calibration, fit, fit_isotonic, fit_platt, logit, threshold_for_false_gaps


def _sample(n: int, a: float, b: float, seed: int = 3) -> tuple[list[float], list[bool]]:
    """Scores uniform in (0, 1); labels drawn with P(y) = sigmoid(a * logit(s) + b)."""
    rng = random.Random(seed)
    scores = [rng.uniform(0.01, 0.99) for _ in range(n)]
    labels = [rng.random() < 1 / (1 + math.exp(-(a * logit(s) + b))) for s in scores]
    return scores, labels


def test_platt_recovers_the_slope_and_offset_it_was_sampled_from():
    scores, labels = _sample(20_000, a=2.0, b=-1.0)
    cal = fit_platt(scores, labels)
    assert cal.method == "platt" and cal.fitted_on == 20_000
    assert cal.a == pytest.approx(2.0, abs=0.08) and cal.b == pytest.approx(-1.0, abs=0.08)
    assert cal(0.5) == pytest.approx(1 / (1 + math.exp(1.0)), abs=0.02)


def test_platt_on_separable_data_stays_finite():
    cal = fit_platt([0.1, 0.2, 0.8, 0.9], [False, False, True, True])
    assert math.isfinite(cal.a) and math.isfinite(cal.b)
    assert 0.0 < cal(0.1) < cal(0.9) < 1.0


def test_platt_needs_both_classes():
    with pytest.raises(ValueError, match="both"):
        fit_platt([0.2, 0.3], [True, True])


def test_isotonic_is_the_block_means_of_the_violators():
    cal = fit_isotonic([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [False, True, False, False, True, True])
    assert list(cal.ys) == pytest.approx([0.0, 1 / 3, 1.0])  # (0.2, 0.3, 0.4) pooled
    assert list(cal.xs) == pytest.approx([0.1, 0.3, 0.55])
    assert cal(0.0) == 0.0 and cal(1.0) == 1.0  # flat beyond the ends


def test_isotonic_pools_tied_scores_whatever_their_order():
    a = fit_isotonic([0.5, 0.5, 0.2], [False, True, False])
    b = fit_isotonic([0.5, 0.2, 0.5], [True, False, False])
    assert a == b and a.xs == (0.2, 0.5) and a.ys == (0.0, 0.5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 1.0]) | st.floats(0.0, 1.0), st.booleans()),
                min_size=1, max_size=60))
def test_isotonic_output_never_decreases(pairs):
    cal = fit_isotonic([s for s, _ in pairs], [y for _, y in pairs])
    grid = [i / 50 for i in range(51)]
    values = [cal(x) for x in grid]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:], strict=False))
    assert all(0.0 <= v <= 1.0 for v in values)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.booleans()), min_size=1, max_size=80),
       st.floats(0.0, 0.5))
def test_false_gap_threshold_keeps_the_rate_and_is_the_highest_that_does(pairs, target):
    if not any(y for _, y in pairs):
        return
    p = [s for s, _ in pairs]
    y = [t for _, t in pairs]
    t = threshold_for_false_gaps(p, y, target)
    positives = [s for s, lab in pairs if lab]
    assert sum(s < t for s in positives) <= target * len(positives)
    higher = [s for s in sorted(set(positives)) if s > t]
    if higher:  # the next candidate up would call too many sufficient examples gaps
        assert sum(s < higher[0] for s in positives) > target * len(positives)


def test_round_trip():
    for cal in (fit("platt", *_sample(500, 1.5, 0.3)), fit("isotonic", *_sample(500, 1.5, 0.3)), Calibration()):
        again = Calibration.from_json(cal.to_json())
        assert [again(x / 10) for x in range(11)] == pytest.approx([cal(x / 10) for x in range(11)], abs=1e-4)
    with pytest.raises(ValueError):
        Calibration.from_json({"method": "magic"})
