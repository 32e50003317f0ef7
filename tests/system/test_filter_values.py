"""Filter values are bounded like the ids they name, on every interface that takes them."""

from __future__ import annotations

import anyio
import httpx

from tests.system.test_mcp import _http_session

LONG, LIMIT = "x" * 257, "x" * 256


def test_a_filter_value_longer_than_any_id_is_refused_over_http_and_the_limit_is_accepted(live):
    headers = {"Authorization": f"Bearer {live.keys['erin']}"}
    for name in ("sources", "doc_ids"):
        refused = httpx.post(f"{live.url}/v1/search", headers=headers, timeout=30,
                             json={"query": "webhook", "retriever": "bm25", "filters": {name: [LONG]}})
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_request"
        taken = httpx.post(f"{live.url}/v1/search", headers=headers, timeout=30,
                           json={"query": "webhook", "retriever": "bm25", "filters": {name: [LIMIT]}})
        assert taken.status_code == 200 and taken.json()["hits"] == []


def test_a_tool_refuses_the_filter_value_its_schema_refuses(live):
    async def run(client):
        schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}["search"]
        long = await client.call_tool("search", {"query": "webhook", "retriever": "bm25", "filters": {"sources": [LONG]}})
        ok = await client.call_tool("search", {"query": "webhook", "retriever": "bm25", "filters": {"sources": [LIMIT]}})
        return schema, long, ok

    schema, long, ok = anyio.run(_http_session, live.url, live.keys["erin"], run)
    filters = schema["properties"]["filters"]
    items = (filters.get("properties") or schema.get("$defs", {}).get("filters", {}).get("properties", {}))["sources"]["items"]
    assert items["maxLength"] == 256
    assert long.is_error and not ok.is_error
