"""Fitting the untuned default across labeled domains (retrieval.tune.fit_domains_grader)."""

from __future__ import annotations

import random

import pytest

from retrieval.grader import relevance
from retrieval.tune import DomainRows, fit_domains_grader


def domain(name: str, n: int, shift: float, seed: int) -> DomainRows:
    """Sufficient sets score higher on z_top and coverage; `shift` moves the whole domain."""
    rng = random.Random(seed)
    rows, ys = [], []
    for i in range(n):
        y = i % 3 != 0
        rows.append({"z_top": rng.gauss(2.5 if y else 1.0, 0.8) + shift, "top_coverage": rng.uniform(0.4, 1.0) if y
                     else rng.uniform(0.0, 0.7), "literal_share": 0.0})
        ys.append(y)
    return DomainRows(name, rows, ys)


def weighted_false_gaps(config, domains) -> float:
    """Share of sufficient examples called gaps, each domain weighing the same."""
    shares = []
    for d in domains:
        suff = [r for r, y in zip(d.rows, d.sufficient, strict=True) if y]
        shares.append(sum(relevance(r, config) < config.threshold for r in suff) / len(suff))
    return sum(shares) / len(shares)


def test_the_threshold_calls_about_the_target_share_of_sufficient_examples_gaps():
    domains = [domain("a", 120, 0.0, 1), domain("b", 90, 0.5, 2), domain("c", 60, -0.3, 3)]
    for target in (0.05, 0.15, 0.3):
        config = fit_domains_grader(domains, target, features=("z_top", "top_coverage", "literal_share"))
        assert weighted_false_gaps(config, domains) == pytest.approx(target, abs=0.03)


def test_every_domain_weighs_the_same_however_many_questions_it_has():
    a, b = domain("a", 60, 0.0, 1), domain("b", 60, 1.0, 2)
    tripled = DomainRows("b", list(b.rows) * 3, list(b.sufficient) * 3)
    one = fit_domains_grader([a, b], 0.1, features=("z_top", "top_coverage"))
    three = fit_domains_grader([a, tripled], 0.1, features=("z_top", "top_coverage"))
    assert one.weights == pytest.approx(three.weights, abs=1e-3)
    assert one.threshold == pytest.approx(three.threshold, abs=1e-3)


def test_features_not_named_get_no_weight_and_a_domain_of_one_verdict_is_refused():
    config = fit_domains_grader([domain("a", 60, 0.0, 1)], 0.1, features=("z_top",))
    assert set(config.weights) == {"z_top"} and config.weights["z_top"] > 0
    with pytest.raises(ValueError):
        fit_domains_grader([DomainRows("x", [{"z_top": 1.0}] * 5, [True] * 5)], 0.1)
