"""Schemathesis against the app's own OpenAPI document, over the real server: no 5xx, and
every status and body returned is one the document declares (bounded run: 25 examples per
operation of valid data, and 25 of invalid data for each operation that takes a body or
query parameters)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.slow
def test_every_operation_honours_its_contract(live):
    schema = schemathesis.openapi.from_url(live.url + "/openapi.json")
    headers = {"Authorization": f"Bearer {live.keys['alice']}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /v1/query", "POST /v1/search", "POST /v1/sql", "GET /v1/documents/{doc_id}", "GET /healthz", "GET /readyz"}
    for op in operations:
        # Invalid data exists only for a body or query parameters (any string is a valid doc_id).
        takes_input = bool(len(op.body) or len(op.query))
        for mode in (schemathesis.GenerationMode.POSITIVE,) + ((schemathesis.GenerationMode.NEGATIVE,) if takes_input else ()):
            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
            def run(case):
                case.call_and_validate(base_url=live.url, headers=headers, checks=CHECKS, timeout=60)

            run()
