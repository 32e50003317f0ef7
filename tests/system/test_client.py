"""The typed client against real uvicorn servers: every method, every error type, bounded
retries of retryable errors only, sync and async; token providers called before every try,
the one retry of an expired token, credentials never shown (the client against a server
that verifies tokens: test_client_tokens.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import quarry_client.errors as qe
from quarry_client import AsyncQuarry, Quarry
from tests.conftest import MINI, LiveServer

BUDGET = "What is the Q3 2025 budget for the payments platform?"
FINANCE_DOC = "note-finance-q3-2025-budget"


@pytest.fixture(scope="module")
def writable(tmp_path_factory, embedder):
    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    root = tmp_path_factory.mktemp("client-writable")
    build_snapshot([MINI], root / "index", embedder)
    store = KeyStore(root / "keys.json")
    keys = {"wendy": store.add("wendy", ["content"], ["query", "write"])[0],
            "slow": store.add("slow", [], ["query"])[0]}
    settings = Settings(index_dir=root / "index", rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64,
                        write_max_body_bytes=10_000)
    with LiveServer(create_app(settings, keys=store)) as server:
        server.keys = keys
        yield server


class Scripted:
    """A real HTTP server answering a fixed sequence of (status, body), counting requests and
    keeping their headers: the server side of the retry tests (the client is what they test)."""

    def __init__(self, answers: list[tuple[int, dict]], headers: dict[str, str] | None = None) -> None:
        self.answers, self.headers, self.requests = answers, headers or {}, 0
        self.seen: list[dict[str, str]] = []

        async def any_path(request: Request) -> JSONResponse:
            status, body = self.answers[min(self.requests, len(self.answers) - 1)]
            self.requests += 1
            self.seen.append(dict(request.headers))
            return JSONResponse(body, status_code=status, headers=self.headers)

        self.app = Starlette(routes=[Route("/{path:path}", any_path, methods=["GET", "POST", "PUT", "DELETE", "PATCH"])])

    def __enter__(self):
        self.server = LiveServer(self.app).__enter__()
        self.url = self.server.url
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)


def _error(code: str, retryable: bool) -> dict:
    return {"error": {"code": code, "message": f"scripted {code}", "retryable": retryable}}


def test_every_read_method_returns_typed_results(live):
    with Quarry(live.url, live.keys["bob"]) as bob, Quarry(live.url, live.keys["alice"]) as alice:
        answer = bob.query(BUDGET)
        assert answer.status == "answer_context" and not answer.is_gap
        assert answer.context[0].doc_id == FINANCE_DOC and answer.context[0].trust == "untrusted_evidence"
        assert answer.route.chosen and answer.attempts
        gap = alice.query(BUDGET)
        assert gap.is_gap and gap.gap is not None  # a result, not an exception
        said = bob.feedback(answer.trace_id, "answered", doc_ids=[FINANCE_DOC])
        assert (said.trace_id, said.verdict, said.doc_ids, said.replaced) == (answer.trace_id, "answered", [FINANCE_DOC], False)
        assert bob.feedback(answer.trace_id, "wrong_context").replaced
        with pytest.raises(qe.NotFound):  # another key's answer is not there to comment on
            alice.feedback(answer.trace_id, "answered")
        with pytest.raises(qe.InvalidRequest):  # a gap's verdict for an answer context
            bob.feedback(answer.trace_id, "wrong_gap")
        assert FINANCE_DOC not in {c.doc_id for c in gap.context}
        hits = alice.search("E4012", "exact", k=3)
        assert hits.retriever == "exact" and hits.hits and all(h.offsets.end > h.offsets.start for h in hits.hits)
        rows = alice.sql("SELECT count(*) AS n FROM incidents")
        assert rows.status == "rows" and rows.rows is not None and rows.rows.data == [[120]]
        translated = alice.sql(question="How many incidents were there?")
        assert translated.status in ("rows", "declined")
        doc = bob.document(FINANCE_DOC)
        assert doc.doc_id == FINANCE_DOC and doc.text
        names = {t["function"]["name"] for t in alice.tools()}
        assert {"retrieve_context", "search", "sql_query", "get_document"} <= names
        assert {t["name"] for t in alice.tools("anthropic")} == names
        call = alice.call_tool("search", {"query": "E4012", "retriever": "exact", "k": 2})
        assert call.error is None and call.result is not None and call.result["hits"]
        failed = alice.call_tool("search", {"query": "x", "retriever": "nope"})
        assert failed.result is None and failed.error is not None and failed.error.code == "invalid_arguments"


def test_every_error_code_is_its_own_exception(live):
    with Quarry(live.url, live.keys["bob"], max_retries=0) as bob, Quarry(live.url, live.keys["alice"]) as alice:
        with pytest.raises(qe.InvalidRequest) as bad:
            bob.query("x", k=10_000)
        assert bad.value.status == 422 and not bad.value.retryable
        with pytest.raises(qe.Forbidden):
            bob.sql("SELECT 1")  # no sql scope
        with pytest.raises(qe.NotFound):
            alice.document(FINANCE_DOC)  # not readable: the same as missing
        with pytest.raises(qe.NotFound):
            alice.document("no-such-document")
        with pytest.raises(qe.SqlRejected) as rejected:
            alice.sql("DROP TABLE incidents")
        assert isinstance(rejected.value, qe.InvalidRequest) and rejected.value.status == 400
        with pytest.raises(qe.PayloadTooLarge):
            bob.query("x" * 70_000)
    with Quarry(live.url, "qk_not-a-key", max_retries=0) as nobody, pytest.raises(qe.Unauthenticated):
        nobody.query("x")


def test_writes_and_their_errors(writable):
    with Quarry(writable.url, writable.keys["wendy"]) as q, Quarry(writable.url, writable.keys["slow"]) as reader:
        put = q.upsert("client-doc", "Harlan valve seats are lapped every 400 hours.", title="Harlan valves",
                       source="manuals", date="2026-11-01", metadata={"plant": "north"}, acl=["public"])
        assert put.status == "applied" and put.documents[0].doc_id == "client-doc"
        assert reader.search("Harlan valve seats", "bm25").hits[0].doc_id == "client-doc"
        again = q.upsert("client-doc", "Harlan valve seats are lapped every 400 hours.", title="Harlan valves",
                         source="manuals", date="2026-11-01", metadata={"plant": "north"}, acl=["public"],
                         idempotency_key="k-1")
        assert q.upsert("client-doc", "Harlan valve seats are lapped every 400 hours.", title="Harlan valves",
                        source="manuals", date="2026-11-01", metadata={"plant": "north"}, acl=["public"],
                        idempotency_key="k-1") == again  # replayed: the first answer, no new generation
        with pytest.raises(qe.Conflict):
            q.upsert("client-doc", "other text", acl=["public"], idempotency_key="k-1")
        acl = q.set_acl("client-doc", ["group:content"])
        assert acl.generation == again.generation + 1
        with pytest.raises(qe.NotFound):
            reader.document("client-doc")
        batch = q.batch([{"op": "put", "id": "client-b", "document": {"text": "Batch one.", "acl": ["public"]}},
                         {"op": "delete", "id": "client-doc"}])
        assert [d.op for d in batch.documents] == ["put", "delete"]
        assert q.delete("client-b").documents[0].op == "delete"
        with pytest.raises(qe.NotFound):
            q.delete("client-b")
        with pytest.raises(qe.PayloadTooLarge):
            q.upsert("big", "y" * 20_000)
        with pytest.raises(qe.InvalidRequest):
            q.upsert("bad id", "text")
        with pytest.raises(qe.Forbidden):
            reader.upsert("nope", "text", acl=["public"])


def test_retryable_errors_are_retried_within_the_bound_and_4xx_never():
    with Scripted([(503, _error("retrieval_unavailable", True))]) as srv:
        with Quarry(srv.url, "k", max_retries=2, backoff=0.01) as q, pytest.raises(qe.RetrievalUnavailable):
            q.search("x")
        assert srv.requests == 3  # the first try and two retries, no more
    with Scripted([(503, _error("retrieval_timeout", True)), (503, _error("retrieval_unavailable", True)),
                   (200, {"retriever": "bm25", "hits": [], "trace_id": "t"})]) as srv:
        with Quarry(srv.url, "k", max_retries=3, backoff=0.01) as q:
            assert q.search("x").hits == []
        assert srv.requests == 3
    for status, code in [(400, "invalid_request"), (404, "not_found"), (409, "conflict"), (500, "internal")]:
        with Scripted([(status, _error(code, False))]) as srv:
            with Quarry(srv.url, "k", max_retries=3, backoff=0.01) as q, pytest.raises(qe.QuarryError) as e:
                q.search("x")
            assert srv.requests == 1, code  # never retried
            assert e.value.code == code and e.value.status == status
            assert type(e.value) is {400: qe.InvalidRequest, 404: qe.NotFound, 409: qe.Conflict, 500: qe.ServerError}[status]
    with Scripted([(429, _error("rate_limited", True))], headers={"Retry-After": "0"}) as srv:
        with Quarry(srv.url, "k", max_retries=1) as q, pytest.raises(qe.RateLimited) as limited:
            q.search("x")
        assert srv.requests == 2 and limited.value.retry_after == 0.0


def test_a_real_rate_limit_carries_retry_after(tmp_path, demo_engine):
    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    store = KeyStore(tmp_path / "keys.json")
    key = store.add("rl", [], ["query"])[0]
    (tmp_path / "srv").mkdir()
    settings = Settings(index_dir=tmp_path / "srv", rate_per_second=0.001, burst=1)  # no token comes back during the test
    with LiveServer(create_app(settings, engine=demo_engine, keys=store)) as server:
        with Quarry(server.url, key, max_retries=0) as q:
            q.search("ledger", "bm25")
            with pytest.raises(qe.RateLimited) as limited:
                q.search("ledger", "bm25")
    assert limited.value.retry_after >= 1 and limited.value.status == 429


def test_no_answer_is_a_retried_transport_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with Quarry(f"http://127.0.0.1:{port}", "k", max_retries=1, backoff=0.01, timeout=2) as q:
        with pytest.raises(qe.TransportError) as e:
            q.query("x")
    assert e.value.retryable


def test_the_async_client_matches_the_sync_one(live, writable):
    async def run():
        async with AsyncQuarry(live.url, live.keys["bob"]) as bob, AsyncQuarry(live.url, live.keys["alice"]) as alice:
            answer, gap = await asyncio.gather(bob.query(BUDGET), alice.query(BUDGET))
            hits = await alice.search("E4012", "exact", k=3)
            rows = await alice.sql("SELECT count(*) AS n FROM incidents")
            doc = await bob.document(FINANCE_DOC)
            said = await alice.feedback(gap.trace_id, "wrong_gap")
            assert (said.verdict, said.doc_ids) == ("wrong_gap", None)
            tools = await alice.tools()
            call = await alice.call_tool("get_document", {"doc_id": "faq-001"})
            try:
                await alice.document(FINANCE_DOC)
                hidden = None
            except qe.NotFound as e:
                hidden = e
        async with AsyncQuarry(writable.url, writable.keys["wendy"]) as w:
            put = await w.upsert("async-doc", "Async Corvel gasket note.", acl=["public"])
            acl = await w.set_acl("async-doc", ["group:content"])
            batch = await w.batch([{"op": "put", "id": "async-b", "document": {"text": "B.", "acl": ["public"]}}])
            deleted = await w.delete("async-doc")
        return answer, gap, hits, rows, doc, tools, call, hidden, put, acl, batch, deleted

    answer, gap, hits, rows, doc, tools, call, hidden, put, acl, batch, deleted = asyncio.run(run())
    assert answer.context[0].doc_id == FINANCE_DOC and gap.is_gap
    assert hits.hits and rows.rows.data == [[120]] and doc.doc_id == FINANCE_DOC
    assert tools and call.result["doc_id"] == "faq-001" and isinstance(hidden, qe.NotFound)
    assert [put.generation + 1, put.generation + 2, put.generation + 3] == [acl.generation, batch.generation,
                                                                             deleted.generation]

    async def retries():
        with Scripted([(503, _error("retrieval_unavailable", True))]) as srv:
            async with AsyncQuarry(srv.url, "k", max_retries=2, backoff=0.01) as q:
                try:
                    await q.query("x")
                except qe.RetrievalUnavailable:
                    pass
            n_503 = srv.requests
        with Scripted([(403, _error("forbidden", False))]) as srv:
            async with AsyncQuarry(srv.url, "k", max_retries=2, backoff=0.01) as q:
                try:
                    await q.query("x")
                except qe.Forbidden:
                    pass
            n_403 = srv.requests
        return n_503, n_403

    assert asyncio.run(retries()) == (3, 1)


class Counter:
    """A token provider returning `t1`, `t2`, ... (or always `fixed`), counting its calls."""

    def __init__(self, prefix: str = "t", fixed: str | None = None) -> None:
        self.prefix, self.fixed, self.calls = prefix, fixed, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.fixed if self.fixed is not None else f"{self.prefix}{self.calls}"

    async def async_call(self) -> str:
        return self()


SEARCH_OK = (200, {"retriever": "bm25", "hits": [], "trace_id": "t"})
EXPIRED = {"WWW-Authenticate": 'Bearer resource_metadata="http://x/.well-known/oauth-protected-resource", '
                               'error="invalid_token", error_description="expired"'}


def test_token_providers_are_called_before_every_try_and_their_token_sent():
    with Scripted([(503, _error("retrieval_unavailable", True)), (429, _error("rate_limited", True)), SEARCH_OK],
                  headers={"Retry-After": "0"}) as srv:
        key, user = Counter("app"), Counter("user")
        with Quarry(srv.url, key, max_retries=3, backoff=0.01, user_token=user) as q:
            assert q.search("x").hits == []
        assert (key.calls, user.calls, srv.requests) == (3, 3, 3)
        assert [h["authorization"] for h in srv.seen] == ["Bearer app1", "Bearer app2", "Bearer app3"]
        assert [h["x-quarry-user-token"] for h in srv.seen] == ["user1", "user2", "user3"]
    with Scripted([SEARCH_OK]) as srv:
        with Quarry(srv.url, "static-key", user_token="default-user") as q:
            q.search("x")
            q.search("x", user_token="per-call")  # a per-call user wins over the client's
            q.search("x", user_token=Counter("u"))
        with Quarry(srv.url, "static-key") as q:
            q.search("x")  # no user token: no header
        assert [h.get("x-quarry-user-token") for h in srv.seen] == ["default-user", "per-call", "u1", None]
        assert {h["authorization"] for h in srv.seen} == {"Bearer static-key"}

    async def run():
        with Scripted([(503, _error("retrieval_unavailable", True)), SEARCH_OK]) as srv:
            key, user = Counter("app"), Counter("user")
            async with AsyncQuarry(srv.url, key.async_call, backoff=0.01) as q:  # an async provider
                await q.search("x", user_token=user)  # a sync one, per call
            return key.calls, user.calls, [(h["authorization"], h["x-quarry-user-token"]) for h in srv.seen]

    assert asyncio.run(run()) == (2, 2, [("Bearer app1", "user1"), ("Bearer app2", "user2")])


def test_an_expired_token_is_retried_once_only_when_its_provider_gives_another():
    refused = (401, _error("unauthenticated", False))
    with Scripted([refused], headers=EXPIRED) as srv:
        with Quarry(srv.url, "a-static-token", max_retries=3) as q, pytest.raises(qe.Unauthenticated) as e:
            q.query("x")
        assert srv.requests == 1 and e.value.token_expired  # a string cannot be refreshed
    with Scripted([refused], headers=EXPIRED) as srv:
        provider = Counter()
        with Quarry(srv.url, provider, max_retries=3) as q, pytest.raises(qe.Unauthenticated):
            q.query("x")
        assert srv.requests == 2 and provider.calls == 2  # one retry with the new token, never more
    with Scripted([refused], headers=EXPIRED) as srv:
        same = Counter(fixed="the-same-token")
        with Quarry(srv.url, same, max_retries=3) as q, pytest.raises(qe.Unauthenticated):
            q.query("x")
        assert srv.requests == 1 and same.calls == 2  # asked again, gave the refused token: no retry
    with Scripted([refused, SEARCH_OK], headers=EXPIRED) as srv:
        user = Counter("user")
        with Quarry(srv.url, "app-key", max_retries=0, user_token=user) as q:
            assert q.search("x").hits == []  # the user's token expired: the retry is not one of max_retries
        assert [h["x-quarry-user-token"] for h in srv.seen] == ["user1", "user2"]
    with Scripted([refused], headers={"WWW-Authenticate": 'Bearer error="invalid_token", '
                                                         'error_description="bad_signature"'}) as srv:
        with Quarry(srv.url, Counter(), max_retries=3) as q, pytest.raises(qe.Unauthenticated) as e:
            q.query("x")
        assert srv.requests == 1 and not e.value.token_expired  # any other 401 is never retried

    async def run():
        with Scripted([refused], headers=EXPIRED) as srv:
            provider = Counter()
            async with AsyncQuarry(srv.url, provider.async_call) as q:
                try:
                    await q.query("x")
                except qe.Unauthenticated:
                    pass
            return srv.requests, provider.calls

    assert asyncio.run(run()) == (2, 2)


def test_credentials_never_show_in_reprs_or_errors():
    secret, user_secret = "qk_abcdef0123_secretpart", "eyJhbGciOi.user.secret"
    with Scripted([(401, _error("unauthenticated", False))], headers=EXPIRED) as srv:
        with Quarry(srv.url, secret, user_token=user_secret, max_retries=0) as q, pytest.raises(qe.Unauthenticated) as e:
            q.query("x")
        shown = " ".join([repr(q), str(q._http.headers), repr(e.value), str(e.value), repr(e.value.body)])
        assert secret not in shown and user_secret not in shown
        assert repr(q) == f"Quarry({srv.url!r}, api_key=<hidden>, user_token=<hidden>)"
        assert repr(AsyncQuarry(srv.url, Counter())) == f"AsyncQuarry({srv.url!r}, api_key=<provider>, user_token=None)"
    with pytest.raises(TypeError):
        Quarry("http://127.0.0.1:1", None)  # type: ignore[arg-type]
