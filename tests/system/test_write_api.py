"""Document writes over real HTTP: every route sees a put at once, a delete or a revocation
holds from the very next request, bad input changes nothing, retries apply once."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from retrieval.search import search
from retrieval.types import Filters, Principal
from tests.conftest import MINI, PATIENCE_S, LiveServer, wait_until

ROUTES = ("exact", "bm25", "dense", "hybrid")
NEW_TEXT = "The gorvane compressor manual: bleed the gorvane line before replacing the Q7 filter cartridge."


@pytest.fixture(scope="module")
def writable(tmp_path_factory, embedder):
    """A server that owns its index (so it writes to it), with a writer key."""
    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    root = tmp_path_factory.mktemp("writable")
    index = root / "index"
    build_snapshot([MINI], index, embedder)
    store = KeyStore(root / "keys.json")
    keys = {
        "wendy": store.add("wendy", ["content"], ["query", "write"])[0],
        "bob": store.add("bob", ["finance"], ["query"])[0],
        "erin": store.add("erin", [], ["query"])[0],
        "ops": store.add("prometheus", [], ["admin"])[0],
    }
    settings = Settings(index_dir=index, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64,
                        reload_interval_s=0.2, write_batch_max=5, write_max_body_bytes=20_000)
    app = create_app(settings, keys=store)
    with LiveServer(app) as server:
        server.keys, server.index, server.app, server.store = keys, index, app, store
        yield server


def _h(server, who: str, **extra: str) -> dict:
    return {"Authorization": f"Bearer {server.keys[who]}", **extra}


def _found(server, who: str, query: str) -> dict[str, list[str]]:
    """Doc ids per route (search) and in the loop's context (query)."""
    out = {}
    for route in ROUTES:
        r = httpx.post(server.url + "/v1/search", json={"retriever": route, "query": query, "k": 5},
                       headers=_h(server, who), timeout=60)
        assert r.status_code == 200, r.text
        out[route] = [h["doc_id"] for h in r.json()["hits"]]
    r = httpx.post(server.url + "/v1/query", json={"question": query}, headers=_h(server, who), timeout=60)
    assert r.status_code == 200, r.text
    out["loop"] = [c["doc_id"] for c in r.json()["context"]]
    return out


def _generation(server) -> int:
    r = httpx.get(server.url + "/readyz", headers=_h(server, "ops"), timeout=30)
    return r.json()["index_generation"]


def test_put_is_found_by_every_route_then_delete_hides_it_everywhere(writable):
    body = {"title": "Gorvane compressor", "text": NEW_TEXT, "source": "manuals", "date": "2026-11-30", "acl": ["public"]}
    r = httpx.put(writable.url + "/v1/documents/manual-gorvane", json=body, headers=_h(writable, "wendy"), timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "applied" and out["documents"] == [{"op": "put", "doc_id": "manual-gorvane"}]
    assert _generation(writable) == out["generation"]
    found = _found(writable, "erin", '"gorvane" compressor Q7 filter')
    assert all(ids and ids[0] == "manual-gorvane" for ids in found.values()), found
    dense = _found(writable, "erin", "how do I bleed the compressor line before a filter swap")["dense"]
    assert "manual-gorvane" in dense[:3]
    doc = httpx.get(writable.url + "/v1/documents/manual-gorvane", headers=_h(writable, "erin"), timeout=30).json()
    assert (doc["text"], doc["date"], doc["source"]) == (NEW_TEXT, "2026-11-30", "manuals")

    r = httpx.delete(writable.url + "/v1/documents/manual-gorvane", headers=_h(writable, "wendy"), timeout=60)
    assert r.status_code == 200 and r.json()["generation"] == out["generation"] + 1
    found = _found(writable, "erin", '"gorvane" compressor Q7 filter')
    assert not any("manual-gorvane" in ids for ids in found.values()), found
    assert httpx.get(writable.url + "/v1/documents/manual-gorvane", headers=_h(writable, "erin"), timeout=30).status_code == 404
    again = httpx.delete(writable.url + "/v1/documents/manual-gorvane", headers=_h(writable, "wendy"), timeout=30)
    assert again.status_code == 404


def test_acl_change_revokes_on_the_next_request_and_equals_a_fresh_build(writable, embedder, tmp_path):
    from indexes.snapshot_build import BuildOptions, build_snapshot
    from routes.service.view import open_view

    text = "Quarterly spend on the Halvorsen retrofit came to 412k, under the approved envelope."
    put = httpx.put(writable.url + "/v1/documents/fin-halvorsen", headers=_h(writable, "wendy"), timeout=60,
                    json={"title": "Halvorsen retrofit spend", "text": text, "acl": ["group:finance", "group:content"]})
    assert put.status_code == 200, put.text
    assert _found(writable, "bob", "Halvorsen retrofit spend")["bm25"][0] == "fin-halvorsen"
    r = httpx.patch(writable.url + "/v1/documents/fin-halvorsen/acl", json={"acl": ["group:board", "group:content"]},
                    headers=_h(writable, "wendy"), timeout=60)
    assert r.status_code == 200 and r.json()["documents"] == [{"op": "acl", "doc_id": "fin-halvorsen"}]
    after = _found(writable, "bob", "Halvorsen retrofit spend")  # the very next requests
    assert not any("fin-halvorsen" in ids for ids in after.values()), after
    assert httpx.get(writable.url + "/v1/documents/fin-halvorsen", headers=_h(writable, "bob"), timeout=30).status_code == 404

    # Differential: a fresh full build of the same final corpus answers bob the same way.
    corpus = tmp_path / "final"
    shutil.copytree(MINI, corpus)
    with (corpus / "docs.jsonl").open("a") as f:
        f.write(json.dumps({"id": "fin-halvorsen", "title": "Halvorsen retrofit spend", "text": text,
                            "acl": ["group:board", "group:content"]}) + "\n")
    fresh_dir = tmp_path / "fresh"
    build_snapshot([corpus], fresh_dir, embedder, BuildOptions(reuse_embeddings=False))
    fresh = open_view(fresh_dir, embedder)
    try:
        bob = Principal("bob", ("finance",))
        for q in ("Halvorsen retrofit spend", "ledger lock timeout", "rotate signing keys"):
            for route in ROUTES:
                expected = [h.doc_id for h in search(fresh.retrievers, route, q, bob, 5, Filters(), fresh.limits)]
                r = httpx.post(writable.url + "/v1/search", json={"retriever": route, "query": q, "k": 5},
                               headers=_h(writable, "bob"), timeout=60)
                assert [h["doc_id"] for h in r.json()["hits"]] == expected, (q, route)
            want = fresh.query(q, bob)
            r = httpx.post(writable.url + "/v1/query", json={"question": q}, headers=_h(writable, "bob"), timeout=60)
            got = r.json()
            assert (got["status"], [c["chunk_id"] for c in got["context"]]) == (want.status, [h.chunk_id for h in want.context])
    finally:
        fresh.close()


def test_bad_input_is_a_typed_error_and_changes_nothing(writable):
    before = _generation(writable)
    url = writable.url + "/v1/documents/"
    cases = [
        (httpx.put, "bad-1", {"text": "x", "colour": "red"}, "wendy", 422),  # unknown field
        (httpx.put, "bad-2", {"title": "no text"}, "wendy", 422),  # missing text
        (httpx.put, "bad-3", {"text": "   "}, "wendy", 400),  # blank text
        (httpx.put, "bad-4", {"text": "x", "acl": "public"}, "wendy", 422),  # acl not a list
        (httpx.put, "bad-5", {"text": "x", "acl": ["team sre"]}, "wendy", 400),  # not an ACL entry
        (httpx.put, "bad-6", {"text": "x", "date": "yesterday"}, "wendy", 400),
        (httpx.put, "bad-7", {"text": "x", "id": "other"}, "wendy", 400),  # body id differs from the path
        (httpx.put, "bad 8", {"text": "x"}, "wendy", 400),  # an id with a space
        (httpx.put, "bad-9", {"text": "y" * 30_000}, "wendy", 413),  # over write_max_body_bytes
        (httpx.put, "bad-10", {"text": "x", "acl": ["public"]}, "bob", 403),  # no write scope
    ]
    for send, doc_id, body, who, status in cases:
        r = send(url + doc_id, json=body, headers=_h(writable, who), timeout=30)
        assert r.status_code == status, (doc_id, r.status_code, r.text)
        assert set(r.json()["error"]) >= {"code", "message", "retryable"}
    batch = writable.url + "/v1/documents:batch"
    for body, status in [
        ({"operations": [{"op": "delete", "id": 7}]}, 422),  # id not a string
        ({"operations": [{"op": "put", "id": f"b{i}", "document": {"text": "x"}} for i in range(6)]}, 422),  # over N=5
        ({"operations": []}, 422),
        ({"operations": [{"op": "put", "id": "b1", "document": {"text": "fine", "acl": ["public"]}},
                         {"op": "delete", "id": "m02"}]}, 404),  # wendy cannot read m02: the whole batch fails
        ({"operations": [{"op": "put", "id": "b1", "document": {"text": "one"}},
                         {"op": "delete", "id": "b1"}]}, 400),  # one id twice
    ]:
        r = httpx.post(batch, json=body, headers=_h(writable, "wendy"), timeout=30)
        assert r.status_code == status, (body, r.text)
    # Deleting what the caller cannot read looks exactly like deleting what does not exist.
    hidden = httpx.delete(url + "m02", headers=_h(writable, "wendy"), timeout=30)
    missing = httpx.delete(url + "m02-nope", headers=_h(writable, "wendy"), timeout=30)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["code"] == missing.json()["error"]["code"]
    assert _generation(writable) == before
    assert httpx.get(url + "b1", headers=_h(writable, "erin"), timeout=30).status_code == 404
    with writable.app.state.quarry.service.runtime.generations.lease() as served:  # the hidden document is untouched
        assert served.engine.snapshot.catalog.document("m02") is not None


def test_a_batch_applies_whole_in_one_generation(writable):
    before = _generation(writable)
    ops = [{"op": "put", "id": "batch-a", "document": {"text": "Tarnwell valve torque is 40 Nm.", "acl": ["public"]}},
           {"op": "put", "id": "batch-b", "document": {"text": "Tarnwell seal kit part TW-88.", "acl": ["public"]}}]
    r = httpx.post(writable.url + "/v1/documents:batch", json={"operations": ops}, headers=_h(writable, "wendy"), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["generation"] == before + 1
    assert set(_found(writable, "erin", "Tarnwell")["bm25"][:2]) == {"batch-a", "batch-b"}


def test_an_idempotent_retry_applies_once(writable):
    before = _generation(writable)
    body = {"text": "Idempotent retries of the Pellwick intake form are applied once.", "acl": ["public"]}
    headers = _h(writable, "wendy", **{"Idempotency-Key": "retry-7f3a"})
    answers = [httpx.put(writable.url + "/v1/documents/pellwick", json=body, headers=headers, timeout=60) for _ in range(10)]
    assert [a.status_code for a in answers] == [200] * 10
    assert len({a.text for a in answers}) == 1 and answers[0].json()["generation"] == before + 1
    assert _generation(writable) == before + 1
    other = httpx.put(writable.url + "/v1/documents/pellwick", json={**body, "text": "changed"}, headers=headers, timeout=30)
    assert other.status_code == 409 and other.json()["error"]["code"] == "conflict"
    # Keys are the caller's own: another caller with the same key value is a new write.
    assert _generation(writable) == before + 1


def test_compaction_folds_the_changes_and_serving_goes_on(writable):
    put = httpx.put(writable.url + "/v1/documents/compact-me", json={"text": "Orrindale pump curve B.", "acl": ["public"]},
                    headers=_h(writable, "wendy"), timeout=60)
    assert put.status_code == 200
    generation = put.json()["generation"]
    assert httpx.post(writable.url + "/v1/admin/compact", headers=_h(writable, "wendy"), timeout=30).status_code == 403
    r = httpx.post(writable.url + "/v1/admin/compact", headers=_h(writable, "ops"), timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "compacted" and r.json()["generation"] == generation
    ready = httpx.get(writable.url + "/readyz", headers=_h(writable, "ops"), timeout=30).json()
    assert ready["snapshot"] == r.json()["snapshot"] and ready["live"] is None
    assert ready["index_generation"] == generation
    assert _found(writable, "erin", "Orrindale pump curve")["exact"][0] == "compact-me"
    manifest = json.loads((writable.index / "snapshots" / ready["snapshot"] / "manifest.json").read_text())
    assert manifest["wal_seq"] == generation
    next_put = httpx.put(writable.url + "/v1/documents/after-compact", json={"text": "Later.", "acl": ["public"]},
                         headers=_h(writable, "wendy"), timeout=60)
    assert next_put.json()["generation"] == generation + 1


def test_mcp_write_tools_are_listed_only_for_write_keys_and_apply_at_once(writable):
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session(who: str, fn):
        async with httpx2.AsyncClient(headers=_h(writable, who), timeout=120) as http:
            async with Client(streamable_http_client(writable.url + "/mcp", http_client=http)) as client:
                return await fn(client)

    async def names(client):
        return sorted(t.name for t in (await client.list_tools()).tools)

    async def write_then_find(client):
        put = await client.call_tool("upsert_document", {"doc_id": "mcp-note", "text": "Ferrowind ballast inspection "
                                                         "interval is 90 days.", "acl": ["public"]})
        found = await client.call_tool("search", {"query": "Ferrowind ballast", "retriever": "bm25", "k": 3})
        revoke = await client.call_tool("set_document_acl", {"doc_id": "mcp-note", "acl": ["group:content"]})
        return put, found, revoke

    async def forbidden(client):
        return await client.call_tool("upsert_document", {"doc_id": "x", "text": "y"})

    assert {"upsert_document", "delete_document", "set_document_acl"} <= set(anyio.run(session, "wendy", names))
    assert not {"upsert_document", "delete_document", "set_document_acl"} & set(anyio.run(session, "erin", names))
    put, found, revoke = anyio.run(session, "wendy", write_then_find)
    assert not put.is_error and put.structured_content["status"] == "applied", put
    assert found.structured_content["hits"][0]["doc_id"] == "mcp-note"
    assert not revoke.is_error
    assert "mcp-note" not in _found(writable, "erin", "Ferrowind ballast")["bm25"]
    denied = anyio.run(session, "erin", forbidden)
    assert denied.is_error and denied.structured_content["error"]["code"] == "access_denied"


def test_an_ingest_under_a_writing_server_replaces_the_corpus_and_numbering_goes_on(writable, embedder):
    from indexes.snapshot_build import build_snapshot

    put = httpx.put(writable.url + "/v1/documents/before-ingest", json={"text": "Quillmere sluice log.", "acl": ["public"]},
                    headers=_h(writable, "wendy"), timeout=60)
    generation = put.json()["generation"]
    manifest = build_snapshot([MINI], writable.index, embedder)  # what `quarry ingest` does beside the server
    assert manifest["wal_seq"] == generation
    wait_until(lambda: httpx.get(writable.url + "/readyz", headers=_h(writable, "ops"), timeout=PATIENCE_S).json()["snapshot"]
               == manifest["snapshot"], "the switch to the ingested snapshot", poll=0.1)
    assert httpx.get(writable.url + "/v1/documents/before-ingest", headers=_h(writable, "erin"), timeout=30).status_code == 404
    after = httpx.put(writable.url + "/v1/documents/after-ingest", json={"text": "Quillmere weir log.", "acl": ["public"]},
                      headers=_h(writable, "wendy"), timeout=60)
    assert after.json()["generation"] == generation + 1
    assert _found(writable, "erin", "Quillmere weir")["exact"] == ["after-ingest"]


def test_a_cli_write_beside_the_server_gets_its_conflict_at_once(writable, tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    doc = tmp_path / "one.jsonl"
    doc.write_text(json.dumps({"id": "cli-beside", "text": "Beside the server.", "acl": ["public"]}) + "\n")
    out = subprocess.run([sys.executable, "-m", "routes.cli.main", "upsert", str(doc), "--index", str(writable.index)],
                         cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE_S, env=os.environ)
    assert out.returncode == 2, out.stderr[-2000:]
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "conflict" and f"process {os.getpid()}" in error["message"]
    assert httpx.get(writable.url + "/v1/documents/cli-beside", headers=_h(writable, "erin"), timeout=30).status_code == 404


def test_a_second_server_on_the_index_serves_the_writers_changes_within_a_poll(writable):
    from routes.server.app import create_app
    from routes.service.settings import Settings

    settings = Settings(index_dir=writable.index, rate_per_second=1000.0, burst=1000, reload_interval_s=0.2)
    with LiveServer(create_app(settings, keys=writable.store)) as follower:
        follower.keys = writable.keys

        def visible() -> bool:
            r = httpx.get(follower.url + "/v1/documents/followed", headers=_h(follower, "erin"), timeout=30)
            return r.status_code == 200

        def wait_for(state: bool) -> float:
            return wait_until(lambda: visible() == state, f"the follower seeing the change (visible={state})")

        refused = httpx.put(follower.url + "/v1/documents/x", json={"text": "x", "acl": ["public"]},
                            headers=_h(follower, "wendy"), timeout=30)
        assert refused.status_code == 409 and "process" in refused.json()["error"]["message"]
        put = httpx.put(writable.url + "/v1/documents/followed", json={"text": "Followed note.", "acl": ["public"]},
                        headers=_h(writable, "wendy"), timeout=60)
        assert put.status_code == 200
        wait_for(True)
        revoke = httpx.patch(writable.url + "/v1/documents/followed/acl", json={"acl": ["group:content"]},
                             headers=_h(writable, "wendy"), timeout=60)
        assert revoke.status_code == 200
        wait_for(False)  # a revocation reaches the follower within its poll
        assert _found(follower, "erin", "Followed note")["bm25"] == _found(writable, "erin", "Followed note")["bm25"]


def test_a_put_of_a_document_the_key_cannot_read_is_404_and_changes_nothing(writable):
    """Replacing needs the right deleting needs: wendy cannot read m02, so her PUT of m02 is
    the same 404 as her DELETE of it (and of a missing id), by every path; she can still
    create a new id."""
    url = writable.url + "/v1/documents/"
    with writable.app.state.quarry.service.runtime.generations.lease() as served:
        before = served.engine.snapshot.catalog.document("m02")
    generation = _generation(writable)
    takeover = {"text": "Taken over.", "acl": ["group:content"]}
    put = httpx.put(url + "m02", json=takeover, headers=_h(writable, "wendy"), timeout=60)
    missing = httpx.delete(url + "m02-nope", headers=_h(writable, "wendy"), timeout=30)
    assert put.status_code == missing.status_code == 404 and put.json()["error"] == {
        **missing.json()["error"], "message": put.json()["error"]["message"]}
    batch = httpx.post(writable.url + "/v1/documents:batch", headers=_h(writable, "wendy"), timeout=60,
                       json={"operations": [{"op": "put", "id": "m02", "document": takeover}]})
    assert batch.status_code == 404
    with writable.app.state.quarry.service.runtime.generations.lease() as served:
        assert served.engine.snapshot.catalog.document("m02") == before
    assert _generation(writable) == generation
    created = httpx.put(url + "wendy-new-note", json={"text": "Fresh.", "acl": ["group:content"]},
                        headers=_h(writable, "wendy"), timeout=60)
    assert created.status_code == 200 and created.json()["generation"] == generation + 1


def test_keyword_acls_and_hidden_or_path_like_ids_are_refused_in_every_write_path(writable):
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    before = _generation(writable)
    url = writable.url + "/v1/documents/"
    wendy = _h(writable, "wendy")
    for word in ("everyone", "all", "Public", "nobody", "admin"):
        cases = [
            httpx.put(url + "kw-doc", json={"text": "x", "acl": ["group:content", word]}, headers=wendy, timeout=30),
            httpx.patch(url + "m01/acl", json={"acl": [word]}, headers=wendy, timeout=30),
            httpx.post(writable.url + "/v1/documents:batch", headers=wendy, timeout=30, json={"operations": [
                {"op": "put", "id": "kw-doc", "document": {"text": "x", "acl": [word]}}]}),
            httpx.post(writable.url + "/v1/documents:batch", headers=wendy, timeout=30, json={"operations": [
                {"op": "acl", "id": "m01", "acl": [word]}]}),
        ]
        for r in cases:
            assert r.status_code == 400 and "is not an ACL keyword" in r.json()["error"]["message"], (word, r.text)
    for raw in ("..%2Fadmin%2Freport", "a%2Fb", "%2E%2E", "%E2%80%AEabc", "a%00b", "a%E2%80%8Bb", "a%5Cb"):
        for r in (httpx.put(url + raw, json={"text": "x", "acl": ["public"]}, headers=wendy, timeout=30),
                  httpx.delete(url + raw, headers=wendy, timeout=30)):
            assert r.status_code == 400 and "invalid document id" in r.json()["error"]["message"], (raw, r.text)
    for bad_id in ("../admin/report", "\u202eabc", "a\u200bb", ".", "a\nb"):  # a newline in a URL path matches no route
        r = httpx.post(writable.url + "/v1/documents:batch", headers=wendy, timeout=30, json={"operations": [
            {"op": "put", "id": bad_id, "document": {"text": "x", "acl": ["public"]}}]})
        assert r.status_code == 400, (bad_id, r.text)

    async def tools(client):
        return [await client.call_tool("upsert_document", {"doc_id": "kw-tool", "text": "y", "acl": ["everyone"]}),
                await client.call_tool("set_document_acl", {"doc_id": "m01", "acl": ["world"]}),
                await client.call_tool("upsert_document", {"doc_id": "a\u202eb", "text": "y", "acl": ["public"]}),
                await client.call_tool("delete_document", {"doc_id": "../m01"})]

    async def session(fn):
        async with httpx2.AsyncClient(headers=wendy, timeout=120) as http:
            async with Client(streamable_http_client(writable.url + "/mcp", http_client=http)) as client:
                return await fn(client)

    for result in anyio.run(session, tools):
        assert result.is_error and result.structured_content["error"]["code"] == "invalid_arguments", result
    assert _generation(writable) == before


@pytest.fixture
def slow_writer(tmp_path, embedder):
    """A server whose embedder holds any document of more than 100 chunks until released (or
    60 s pass): a large write that is still embedding."""
    import threading

    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from routes.service.view import open_view
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    class HeldEmbedder:
        def __init__(self, inner) -> None:
            self.inner, self.big_started, self.release = inner, threading.Event(), threading.Event()

        def encode(self, texts):
            if len(texts) > 100:
                self.big_started.set()
                self.release.wait(60)
            return self.inner.encode(texts)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    index = tmp_path / "index"
    build_snapshot([MINI], index, embedder)
    store = KeyStore(tmp_path / "keys.json")
    keys = {"big": store.add("bulk-loader", ["content"], ["query", "write"])[0],
            "small": store.add("editor", ["content"], ["query", "write"])[0]}
    settings = Settings(index_dir=index, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64,
                        reload_interval_s=0, write_max_key_bytes=1_500_000)
    held = HeldEmbedder(embedder)
    engine = open_view(index, held, settings=settings)
    with LiveServer(create_app(settings, engine=engine, keys=store, own_engine=True)) as server:
        server.keys, server.embedder = keys, held
        try:
            yield server
        finally:
            held.release.set()


def test_a_large_put_embeds_outside_the_writers_lock_so_small_puts_of_another_key_go_first(slow_writer):
    """The 1 MiB document is still embedding (held) while another key's small puts are
    checked, embedded, logged and answered, one after another; the large one is answered
    once released, after them. While it is in flight, its key may not start another write of
    that size (429), and the other key is not limited by it."""
    import threading

    url = slow_writer.url + "/v1/documents/"
    big_text = " ".join(f"Section {i}: the Harrowgate pump station log records flow, pressure and valve state."
                        for i in range(12_000))[: 1024 * 1024 - 2000]
    answers: dict[str, httpx.Response] = {}

    def put_big() -> None:
        answers["big"] = httpx.put(url + "bulk-manual", json={"text": big_text, "acl": ["public"]},
                                   headers=_h(slow_writer, "big"), timeout=300)

    big = threading.Thread(target=put_big)
    big.start()
    try:
        assert slow_writer.embedder.big_started.wait(120), "the large write never started embedding"
        small = [httpx.put(url + f"note-{i}", json={"text": f"Short note {i} about the Harrowgate weir.", "acl": ["public"]},
                           headers=_h(slow_writer, "small"), timeout=120) for i in range(5)]
        assert "big" not in answers  # still held in embedding
        assert [r.status_code for r in small] == [200] * 5, [r.text for r in small]
        second = httpx.put(url + "bulk-manual-2", json={"text": big_text, "acl": ["public"]},
                           headers=_h(slow_writer, "big"), timeout=60)
        assert second.status_code == 429 and second.json()["error"]["code"] == "rate_limited"
    finally:
        slow_writer.embedder.release.set()
        big.join(300)
    assert answers["big"].status_code == 200, answers["big"].text
    generations = [r.json()["generation"] for r in small]
    assert generations == sorted(generations) and answers["big"].json()["generation"] > generations[-1]
    found = httpx.post(slow_writer.url + "/v1/search", json={"retriever": "exact", "query": '"Harrowgate pump station"',
                                                             "k": 3}, headers=_h(slow_writer, "small"), timeout=60)
    assert found.json()["hits"][0]["doc_id"] == "bulk-manual"


def _two_page_pdf(second_page: str) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Sluice handbook")
    pdf.set_font("Helvetica", size=12)
    for text in ("General notes on the Quenlar works and their opening hours.", second_page):
        pdf.add_page()
        pdf.multi_cell(170, 8, text)
    return bytes(pdf.output())


def test_a_pdf_put_is_found_with_its_page_and_keeps_it_through_replay_and_compaction(writable, embedder):
    from routes.service.view import open_view

    data = _two_page_pdf("The Quenlar sluice gate opens with override key ZK-4471 after the tide alarm.")
    r = httpx.put(writable.url + "/v1/documents/sluice-handbook", params=[("acl", "public"), ("acl", "group:content")],
                  content=data, headers=_h(writable, "wendy", **{"Content-Type": "application/pdf"}), timeout=60)
    assert r.status_code == 200, r.text
    hits = httpx.post(writable.url + "/v1/search", json={"retriever": "exact", "query": "ZK-4471", "k": 3},
                      headers=_h(writable, "erin"), timeout=60).json()["hits"]
    assert [(h["doc_id"], h["page"], h["section"]) for h in hits] == [("sluice-handbook", 2, [])]
    doc = httpx.get(writable.url + "/v1/documents/sluice-handbook", headers=_h(writable, "erin"), timeout=30).json()
    assert doc["title"] == "Sluice handbook" and [g["page"] for g in doc["regions"]] == [1, 2]
    replayed = open_view(writable.index, embedder)  # another process's view: the change replayed from the log
    try:
        hit = search(replayed.retrievers, "exact", "ZK-4471", Principal("erin", ()), 3, Filters(), replayed.limits)[0]
        assert (hit.doc_id, hit.page) == ("sluice-handbook", 2)
    finally:
        replayed.close()
    assert httpx.post(writable.url + "/v1/admin/compact", headers=_h(writable, "ops"), timeout=120).status_code == 200
    hits = httpx.post(writable.url + "/v1/search", json={"retriever": "bm25", "query": "Quenlar sluice override key", "k": 3},
                      headers=_h(writable, "erin"), timeout=60).json()["hits"]
    assert (hits[0]["doc_id"], hits[0]["page"]) == ("sluice-handbook", 2)


def test_a_bad_file_put_is_a_typed_error_and_changes_nothing(writable):
    before = _generation(writable)
    cases = [
        ({"Content-Type": "application/pdf"}, b"%PDF-1.7 not really", {}, 400, "corrupt"),
        ({"Content-Type": "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}, b"plain text", {},
         400, "not_docx"),
        ({"Content-Type": "text/html"}, b"<html><body><nav><a href='/'>Home</a></nav></body></html>", {}, 400,
         "no_body_text"),
        ({"Content-Type": "application/pdf"}, _two_page_pdf("Fine text."), {"acl": "everyone"}, 400, "everyone"),
        ({"Content-Type": "application/pdf"}, _two_page_pdf("Fine text."), {"metadata": "[1]"}, 400, "JSON object"),
        ({"Content-Type": "application/json"}, json.dumps({"text": "x"}).encode(), {"title": "t"}, 400, "file body"),
        ({"Content-Type": "application/msword"}, b"\xd0\xcf", {}, 400, "unsupported content type"),
        ({"Content-Type": "application/pdf"}, b"%PDF" + b"0" * 30_000, {}, 413, "exceeds"),
    ]
    for headers, body, params, status, words in cases:
        r = httpx.put(writable.url + "/v1/documents/bad-file", params=params, content=body,
                      headers=_h(writable, "wendy", **headers), timeout=60)
        assert r.status_code == status and words in r.json()["error"]["message"], (headers, r.text)
        assert r.json()["error"]["code"] in ("invalid_request", "payload_too_large")
    assert _generation(writable) == before
    assert httpx.get(writable.url + "/v1/documents/bad-file", headers=_h(writable, "wendy"), timeout=30).status_code == 404
