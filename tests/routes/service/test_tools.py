"""Tool argument schemas are generated from the models that check the calls, so what a schema
tells a model it may send is exactly what the call accepts: every bound it states is enforced,
and nothing it allows is refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from retrieval.limits import Limits
from routes.service.tools import Toolset

SPECS = tuple(Toolset(Limits(), feedback=lambda: None).specs.values())  # every tool, the feedback tool included


def _valid(prop: dict[str, Any]) -> Any:
    """The smallest value the schema accepts."""
    if "enum" in prop:
        return prop["enum"][0]
    kind = prop["type"]
    if kind == "string":
        return "2025-01-01" if "pattern" in prop else "a" * max(prop.get("minLength", 0), 1)
    if kind == "integer":
        return prop.get("minimum", 0)
    if kind == "array":
        return [_valid(prop["items"])] * prop.get("minItems", 0)
    return {}


def _call(spec, **override: Any) -> dict[str, Any]:
    schema = spec.input_schema()
    args = {name: _valid(schema["properties"][name]) for name in schema["required"]}
    return {**args, **override}


def _accepts(spec, args: dict[str, Any]) -> bool:
    try:
        spec.args.model_validate(args)
        return True
    except ValidationError:
        return False


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_what_a_schema_allows_is_accepted_and_what_it_bounds_is_refused(spec):
    schema = spec.input_schema()
    assert schema["additionalProperties"] is False
    assert _accepts(spec, _call(spec))
    for name, prop in schema["properties"].items():
        assert _accepts(spec, _call(spec, **{name: _valid(prop)})), (spec.name, name)
        kind = prop.get("type")
        if kind == "string" and "maxLength" in prop and "pattern" not in prop:
            assert not _accepts(spec, _call(spec, **{name: "a" * (prop["maxLength"] + 1)})), (spec.name, name)
        if kind == "integer" and "maximum" in prop:
            assert not _accepts(spec, _call(spec, **{name: prop["maximum"] + 1})), (spec.name, name)
        if kind == "array":
            item = _valid(prop["items"])
            assert not _accepts(spec, _call(spec, **{name: [item] * (prop["maxItems"] + 1)})), (spec.name, name)
            assert _accepts(spec, _call(spec, **{name: [item] * prop.get("minItems", 0)})), (spec.name, name)
            if prop.get("minItems"):
                assert not _accepts(spec, _call(spec, **{name: []})), (spec.name, name)
    assert not _accepts(spec, _call(spec, unexpected=1))


def test_an_acl_change_says_it_needs_one_entry_as_its_check_does():
    acl = next(s for s in SPECS if s.name == "set_document_acl").input_schema()["properties"]["acl"]
    assert acl["minItems"] == 1 and acl["description"].startswith("who may read it")
