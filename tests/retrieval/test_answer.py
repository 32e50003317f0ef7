"""The answer JSON the core renders is what the client's wire models accept: every status, gap
reason and stop reason the core can produce, so the core and the client cannot drift."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from quarry_client.models import Answer

from retrieval.answer import gap_json, result_json
from retrieval.constraints import Constraints
from retrieval.loop import LoopResult
from retrieval.router import RouteDecision
from retrieval.types import Gap, GapReason, Hit, Status, StopReason


def wire_values(model, *path: str) -> set[str]:
    """The values a Literal field of the client's models accepts (`Answer.gap.reason`, say)."""
    for name in path[:-1]:
        model = next(a for a in get_args(model.model_fields[name].annotation) if a is not type(None))
    return set(get_args(model.model_fields[path[-1]].annotation))


def test_core_and_client_name_the_same_statuses_gap_reasons_and_stop_reasons():
    assert set(get_args(Status)) == wire_values(Answer, "status")
    assert set(get_args(GapReason)) == wire_values(Answer, "gap", "reason")
    assert set(get_args(StopReason)) == wire_values(Answer, "stop_reason")


def _result(status: Status, gap: Gap | None, stop: StopReason) -> LoopResult:
    hit = Hit("d1#0", "d1", "text", 0.5, ("bm25",), 0, 4, signals=(("bm25", 0.5),))
    decision = RouteDecision("bm25", {"bm25": 1.0}, ("bm25",), "test")
    return LoopResult("q", status, (hit,), None, gap, Constraints(identifiers=("INC-1",)), decision, [], stop, "t" * 32, 1.0)


@pytest.mark.parametrize("stop", get_args(StopReason))
@pytest.mark.parametrize("reason", get_args(GapReason))
def test_every_gap_reason_and_stop_reason_renders_an_answer_the_client_parses(reason, stop):
    gap = Gap(reason, ("identifier:INC-1",), "why", True)
    parsed = Answer.model_validate(result_json(_result("evidence_gap", gap, stop)))
    assert parsed.is_gap and parsed.gap is not None and parsed.gap.reason == reason and parsed.stop_reason == stop
    assert parsed.gap.model_dump() == gap_json(gap)


def test_an_answer_context_has_no_gap_and_the_client_parses_it():
    parsed = Answer.model_validate(result_json(_result("answer_context", None, "sufficient")))
    assert parsed.status == "answer_context" and parsed.gap is None and not parsed.is_gap


def test_a_gap_renders_with_the_wire_field_order_and_lists():
    gap = Gap("constraint_unmet", ("entity:Ravensholt", "date:2024"), "no authorized evidence satisfies: ...", False)
    assert json.dumps(gap_json(gap)) == ('{"reason": "constraint_unmet", "missing": ["entity:Ravensholt", "date:2024"], '
                                         '"detail": "no authorized evidence satisfies: ...", "partial_context": false}')
    assert gap_json(None) is None

