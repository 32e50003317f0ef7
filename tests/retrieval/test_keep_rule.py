"""The rule that decides whether `quarry tune` keeps a fit (pure, over held-out outcomes)."""

from __future__ import annotations

from retrieval.keep_rule import MIN_QUESTIONS, HeldOut, judge


def _questions(answerable: int, false_before: int, false_after: int, unanswerable: int, caught_before: int,
               caught_after: int) -> list[HeldOut]:
    """Held-out outcomes with the given counts; the fit's changes land on the first questions."""
    out = [HeldOut(True, i < false_before, i < false_after) for i in range(answerable)]
    return out + [HeldOut(False, i < caught_before, i < caught_after) for i in range(unanswerable)]


def test_a_fit_worse_on_false_gaps_beyond_the_noise_is_refused_and_the_reason_names_the_figure():
    # the user's report: false gaps 4 -> 10 of 24 answerable held-out questions
    verdict = judge(_questions(24, 4, 10, 8, 5, 6))
    assert not verdict.keep
    assert [f.name for f in verdict.worse] == ["false_gaps"]
    assert "false gaps 4 -> 10 of 24" in verdict.reason and "worse" in verdict.reason
    figures = verdict.to_json()["figures"]
    assert figures["false_gaps"]["worse"] and figures["false_gaps"]["harm"] == 0.25
    assert figures["gaps_caught"]["better"] is False  # 5 -> 6 of 8 is within the noise


def test_one_more_false_gap_refuses_even_a_fit_that_catches_more_gaps():
    verdict = judge(_questions(24, 4, 5, 10, 2, 10))
    assert not verdict.keep and [f.name for f in verdict.worse] == ["false_gaps"]


def test_a_fit_that_catches_fewer_gaps_is_refused_and_the_reason_names_that_figure():
    verdict = judge(_questions(24, 6, 2, 10, 8, 6))
    assert not verdict.keep and [f.name for f in verdict.worse] == ["gaps_caught"]
    assert "gaps caught 8 -> 6 of 10" in verdict.reason


def test_a_tie_is_not_better():
    verdict = judge(_questions(24, 4, 4, 10, 5, 5))
    assert not verdict.keep and not verdict.worse
    assert "neither figure got better" in verdict.reason


def test_a_gain_of_one_question_is_within_the_noise():
    verdict = judge(_questions(24, 4, 3, 10, 5, 5))
    assert not verdict.keep and not verdict.worse


def test_three_better_and_none_worse_of_ten_is_within_the_noise_of_the_sign_test():
    verdict = judge(_questions(10, 3, 0, 10, 5, 5))
    false_gaps = verdict.figures[0]
    assert false_gaps.harm_upper < 0 and false_gaps.sign_p == 0.125  # the bootstrap alone would call it better
    assert not verdict.keep and not false_gaps.better


def test_a_figure_with_too_few_held_out_questions_refuses_even_a_clear_gain_on_the_other():
    verdict = judge(_questions(24, 8, 0, MIN_QUESTIONS - 1, 2, 2))
    assert not verdict.keep and not verdict.worse
    assert "too few held-out questions" in verdict.reason and f"{MIN_QUESTIONS - 1} unanswerable" in verdict.reason


def test_a_clear_improvement_is_kept():
    verdict = judge(_questions(24, 8, 2, 10, 5, 5))
    assert verdict.keep, verdict.reason
    assert verdict.to_json()["figures"]["false_gaps"]["better"] and verdict.to_json()["kept"]


def test_the_questions_that_change_both_ways_count_against_each_other():
    # 6 answerable questions newly answered, 5 newly called gaps: +1 net, no clear gain
    held = [HeldOut(True, True, False)] * 6 + [HeldOut(True, False, True)] * 5 + [HeldOut(True, False, False)] * 13
    verdict = judge(held + _questions(0, 0, 0, 10, 5, 5))
    assert not verdict.keep and verdict.figures[0].before == 6 and verdict.figures[0].after == 5


def test_nothing_held_out_refuses_the_fit():
    verdict = judge([])
    assert not verdict.keep and "no held-out questions" in verdict.reason


def test_the_judgement_is_deterministic():
    held = _questions(20, 6, 3, 6, 2, 4)
    assert judge(held) == judge(held)
