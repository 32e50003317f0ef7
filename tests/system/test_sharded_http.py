"""A sharded index's front serves the same HTTP API, MCP endpoint and auth as one node: the
demo at 2 shards (in process; the Ray deployment behind the same front is checked in
tests/system/cluster_in_netns.py) behind a real uvicorn server, against a single node's real
server with the same keys."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import date

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from auth.config import IdentityConfig
from indexes.shards import build_shards, load_cluster
from indexes.snapshot_build import BuildOptions
from retrieval.shard import LocalShard
from routes.server.app import create_app
from routes.service.runtime import Runtime
from routes.service.settings import Settings
from routes.service.sharded import open_sharded
from routes.service.view import open_view
from tests.auth.jwt_keys import AUD, ISS, Keys
from tests.conftest import DEMO, LiveServer, assert_alike, stable_answer

pytestmark = pytest.mark.slow
TODAY = date(2025, 11, 1)
QUESTIONS = ("How do I refresh the token-signing secret for our login service?",
             "What is the Q3 2025 budget for the payments platform?",
             "how many incidents were sev1 in 2024?",
             "INC-2041")


def settings_for(index_dir, audit) -> Settings:
    return Settings(index_dir=index_dir, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64, audit_path=audit,
                    call_timeout_ms=60000, max_deadline_ms=60000, today=TODAY)


@pytest.fixture(scope="module")
def servers(demo_index, embedder, http_keys, tmp_path_factory):
    store, keys = http_keys
    folder = tmp_path_factory.mktemp("front")
    sharded = folder / "demo-2-shards"
    build_shards([DEMO / "docs", DEMO / "tables"], sharded, embedder, 2, BuildOptions(reuse_from=demo_index))
    one_settings, front_settings = settings_for(demo_index, folder / "one.duckdb"), settings_for(sharded, folder / "front.duckdb")
    single = open_view(demo_index, embedder, limits=one_settings.limits, today=TODAY)
    _, snapshots = load_cluster(sharded, embedder)
    runtime = Runtime(front_settings)
    fan_out = ThreadPoolExecutor(2)
    view = open_sharded(sharded, [LocalShard(s.chunks, s.bm25, s.dense, s.catalog) for s in snapshots], embedder,
                        runtime.resources, front_settings, fan_out)
    runtime.generations.install(view, owned=True)
    signer = Keys()  # end users' tokens too: the front takes them as one node does
    signer.add("k1")
    identity = IdentityConfig.model_validate({"issuers": [{"name": "corp", "issuer": ISS, "audience": [AUD],
                                                           "jwks_file": str(signer.write_jwks(folder / "jwks.json"))}]})
    with LiveServer(create_app(one_settings, engine=single, keys=store)) as one, \
            LiveServer(create_app(front_settings, keys=store, runtime=runtime, identity=identity)) as front:
        front.signer = signer
        yield one, front, keys
    fan_out.shutdown()
    single.close()
    for s in snapshots:
        s.close()


def call(server, method: str, path: str, key: str | None, body=None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, server.url + path, json=body, headers=headers, timeout=120)


def test_the_front_answers_queries_searches_documents_and_sql_as_the_single_node(servers):
    one, front, keys = servers
    statuses = set()
    for who in ("alice", "bob", "erin"):
        for question in QUESTIONS:
            body = {"question": question, "deadline_ms": 60000}
            want, got = call(one, "POST", "/v1/query", keys[who], body), call(front, "POST", "/v1/query", keys[who], body)
            assert (got.status_code, want.status_code) == (200, 200), got.text
            assert_alike(stable_answer(got.json()), stable_answer(want.json()), f"{who}: {question}")
            statuses.add(want.json()["status"])
        search = {"query": "token signing secret", "retriever": "hybrid", "k": 5}
        assert_alike(stable_answer(call(front, "POST", "/v1/search", keys[who], search).json()),
                     stable_answer(call(one, "POST", "/v1/search", keys[who], search).json()), f"{who}: search")
        for doc in ("faq-001", "note-finance-q3-2025-budget", "no-such-document"):  # readable, forbidden to some, missing
            want, got = call(one, "GET", f"/v1/documents/{doc}", keys[who]), call(front, "GET", f"/v1/documents/{doc}", keys[who])
            assert got.status_code == want.status_code, (who, doc)
            assert_alike(stable_answer(got.json()), stable_answer(want.json()), f"{who}: {doc}")
    assert statuses == {"answer_context", "evidence_gap"}
    sql = {"sql": "SELECT count(*) AS n FROM incidents"}
    rows = [call(server, "POST", "/v1/sql", keys["alice"], sql).json()["rows"] for server in (front, one)]
    assert rows[0] == rows[1] and rows[0]["data"] == [[120]]


def test_end_user_tokens_on_the_front_see_what_keys_with_the_same_groups_see_on_one_node(servers):
    one, front, keys = servers
    for who, groups in (("alice", ["sre"]), ("bob", ["finance"]), ("erin", [])):
        token = front.signer.sign("k1", sub=who, groups=groups, scope="query")
        for question in QUESTIONS[:2]:
            body = {"question": question, "deadline_ms": 60000}
            want, got = call(one, "POST", "/v1/query", keys[who], body), call(front, "POST", "/v1/query", token, body)
            assert (got.status_code, want.status_code) == (200, 200), got.text
            assert_alike(stable_answer(got.json()), stable_answer(want.json()), f"{who}: {question}")
        doc = call(front, "GET", "/v1/documents/note-finance-q3-2025-budget", token)
        assert doc.status_code == call(one, "GET", "/v1/documents/note-finance-q3-2025-budget", keys[who]).status_code
    expired = front.signer.sign("k1", sub="bob", groups=["finance"], exp=1)
    r = call(front, "POST", "/v1/search", expired, {"query": "budget", "retriever": "bm25"})
    assert r.status_code == 401 and r.json()["error"]["message"].startswith("token refused: expired")


def test_the_front_keeps_the_nodes_auth_errors_and_read_only_writes(servers):
    one, front, keys = servers
    for path, body in (("/v1/query", {"question": "x"}), ("/v1/search", {"query": "x", "retriever": "bm25"})):
        assert call(front, "POST", path, None, body).status_code == 401
        bad = {**body, "principal": "root"}  # authorization comes from the key, never the body
        assert call(front, "POST", path, keys["erin"], bad).status_code == call(one, "POST", path, keys["erin"], bad).status_code
    put = call(front, "PUT", "/v1/documents/new-doc", keys["alice"], {"text": "hello"})
    assert put.status_code in (403, 409) and put.json()["error"]["code"] in ("forbidden", "conflict"), put.text


def test_the_front_serves_mcp_and_names_its_shards_to_admins(servers):
    one, front, keys = servers

    async def context(url: str):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=120) as http:
            async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
                result = await client.call_tool("retrieve_context", {"question": QUESTIONS[0], "deadline_ms": 60000})
                return result.structured_content

    assert_alike(stable_answer(anyio.run(context, front.url)), stable_answer(anyio.run(context, one.url)), "mcp")
    ready = call(front, "GET", "/readyz", keys["ops"])
    assert ready.status_code == 200 and [s["shard"] for s in ready.json()["shards"]] == [0, 1], ready.text
    assert ready.json()["snapshot"].startswith("cluster-")
    assert "shards" not in call(one, "GET", "/readyz", keys["ops"]).json()
