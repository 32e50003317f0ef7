"""The client and both retrievers against a real server that verifies tokens (an issuer whose
keys are in a file): a token sees exactly what a key of the same principal and groups sees; a
token provider is called per request and its new token used on the next; an app acting for
its users (`user_token`) gives each user their own view, interleaved on one client, in
threads and in tasks; an expired token is `Unauthenticated` after at most the one documented
retry."""

from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar

import httpx
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from pydantic import SecretStr, ValidationError

import quarry_client.errors as qe
from quarry_client import AsyncQuarry, Quarry
from quarry_client.langchain import QuarryRetriever as LangChainRetriever
from quarry_client.llamaindex import QuarryRetriever as LlamaIndexRetriever
from tests.auth.jwt_keys import AUD, ISS, Keys
from tests.conftest import MINI, LiveServer, assert_alike, stable_answer

# The mini corpus's readers: personal notes (m07 alice, m16 bob), group documents (finance,
# sre, security) and public ones. dave's hr group is outside what the apps may act for.
GROUPS = {"alice": ["sre"], "bob": ["finance"], "carol": ["security", "sre"], "erin": []}
ALLOWLIST = ["sre", "finance", "security"]
QUESTIONS = ["What is the Q3 budget for the payments platform?", "What did Alice do in her first week of onboarding?",
             "What did the 2025 penetration test find?", "Why did the routing engine leak memory?",
             "When does the settlement batch run?", "What does E4012 LEDGER_LOCK_TIMEOUT mean?",
             "What is in Bob's forecast draft?"]
BUDGET = QUESTIONS[0]


class Provider:
    """A token provider whose token the test changes, counting its calls."""

    def __init__(self, token: str) -> None:
        self.token, self.calls = token, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.token

    async def async_call(self) -> str:
        await asyncio.sleep(0)
        return self()


class Recorder(BaseCallbackHandler):
    """Everything a retriever run tells its callbacks, as text."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_retriever_start(self, serialized, query, **kwargs) -> None:
        self.seen.append(repr((serialized, query, kwargs)))

    def on_retriever_end(self, documents, **kwargs) -> None:
        self.seen.append(repr((documents, kwargs)))


class Counting(httpx.HTTPTransport):
    """The real transport, keeping the Authorization and user-token headers of each request."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str | None, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.headers.get("authorization"), request.headers.get("x-quarry-user-token")))
        return super().handle_request(request)


@pytest.fixture(scope="module")
def idp():
    keys = Keys()
    keys.add("k1")
    return keys


def token(idp: Keys, sub: str, **claims: object) -> str:
    """`sub`'s token: the groups GROUPS gives it (none for an app), scopes query and sql."""
    return idp.sign("k1", **({"sub": sub, "groups": GROUPS.get(sub, []), "scope": "query sql"} | claims))


@pytest.fixture(scope="module")
def server(tmp_path_factory, engine, idp):
    """One server over the mini index: a key per user, an app key and an app token (`rag-bot`)
    with `act_as` and the group allowlist, a key without it."""
    from auth.config import IdentityConfig
    from auth.keys import KeyStore
    from routes.server.app import create_app
    from routes.service.settings import Settings

    root = tmp_path_factory.mktemp("client-tokens")
    store = KeyStore(root / "keys.json")
    keys = {user: store.add(user, groups, ["query", "sql"])[0] for user, groups in GROUPS.items()}
    keys["app"], app = store.add("rag-app", [], ["query", "sql"])
    keys["plain"] = store.add("plain-app", [], ["query", "sql"])[0]
    identity = IdentityConfig.model_validate({
        "issuers": [{"name": "corp", "issuer": ISS, "audience": [AUD], "jwks_file": str(idp.write_jwks(root / "jwks.json"))}],
        "apps": [{"key_id": app.key_id, "act_as": True, "groups": ALLOWLIST},
                 {"issuer": "corp", "subject": "rag-bot", "act_as": True, "groups": ALLOWLIST}]})
    (root / "srv").mkdir()
    settings = Settings(index_dir=root / "srv", rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64)
    with LiveServer(create_app(settings, engine=engine, keys=store, identity=identity)) as live:
        live.keys = keys
        yield live


def view(answer) -> dict:
    return stable_answer(answer.model_dump(mode="json"))


def doc_ids(answer) -> list[str]:
    """What the retrievers return for an answer: its passages' documents, none for a gap."""
    return [] if answer.is_gap else [c.doc_id for c in answer.context]


@pytest.fixture(scope="module")
def by_key(server):
    """Each user's answers to QUESTIONS, asked with the user's own key."""
    out = {}
    for user in GROUPS:
        with Quarry(server.url, server.keys[user]) as q:
            for question in QUESTIONS:
                out[user, question] = q.query(question)
    return out


@pytest.fixture(scope="module")
def readable():
    """The mini documents each user may read, from their ACLs."""
    from indexes.corpus import load_documents
    from retrieval.types import Principal

    docs = [ld.doc for ld in load_documents([MINI])]
    return {user: {d.id for d in docs if Principal(user, tuple(groups)).can_read(d.acl)} for user, groups in GROUPS.items()}


def test_a_token_sees_exactly_what_a_key_of_the_same_principal_sees(server, idp, by_key, readable):
    bot = token(idp, "rag-bot")
    for user in GROUPS:
        tok = token(idp, user)
        with Quarry(server.url, tok) as own, Quarry(server.url, server.keys["app"]) as app, \
                Quarry(server.url, bot, user_token=tok) as app_by_token:
            for question in QUESTIONS:
                expected = view(by_key[user, question])
                assert_alike(view(own.query(question)), expected, f"{user} own token: {question}")
                assert_alike(view(app.query(question, user_token=tok)), expected, f"{user} via app key: {question}")
                assert_alike(view(app_by_token.query(question)), expected, f"{user} via app token: {question}")
                assert {c.doc_id for c in by_key[user, question].context} <= readable[user]
            assert [h.doc_id for h in own.search("budget forecast", "bm25").hits] == \
                   [h.doc_id for h in app.search("budget forecast", "bm25", user_token=tok).hits]
    views = {user: {d for q in QUESTIONS for d in doc_ids(by_key[user, q])} for user in GROUPS}
    assert "m04" in views["bob"] and "m04" not in views["alice"]  # the differential compares different views
    assert "m07" in views["alice"] and "m11" in views["carol"] and "m16" in views["bob"]
    assert len({frozenset(v) for v in views.values()}) == len(GROUPS)


def test_documents_sql_and_feedback_run_as_the_user(server, idp, by_key):
    alice, bob = token(idp, "alice"), token(idp, "bob")
    with Quarry(server.url, server.keys["app"]) as app:
        assert app.document("m07", user_token=alice).doc_id == "m07"
        with pytest.raises(qe.NotFound):
            app.document("m07", user_token=bob)
        with pytest.raises(qe.NotFound):
            app.document("m04")  # the app itself holds no group and is no one's user
        answer = app.query(BUDGET, user_token=bob)
        assert app.feedback(answer.trace_id, "answered", doc_ids=["m04"], user_token=bob).verdict == "answered"
        with pytest.raises(qe.NotFound):  # bob's answer is not alice's to comment on
            app.feedback(answer.trace_id, "answered", user_token=alice)
        names = {t["function"]["name"] for t in app.tools(user_token=bob)}
        assert "retrieve_context" in names
        call = app.call_tool("get_document", {"doc_id": "m16"}, user_token=bob)
        assert call.error is None and call.result is not None and call.result["doc_id"] == "m16"
        with pytest.raises(qe.Forbidden):  # dave's hr group is outside the app's allowlist
            app.query(BUDGET, user_token=token(idp, "dave", groups=["hr"]))
    with Quarry(server.url, server.keys["plain"]) as plain, pytest.raises(qe.Forbidden):
        plain.query(BUDGET, user_token=bob)  # no act_as right


def test_a_token_provider_is_called_per_request_and_a_new_token_used_on_the_next(server, idp):
    provider = Provider(token(idp, "alice"))
    with Quarry(server.url, provider) as q:
        assert q.document("m07").doc_id == "m07"
        with pytest.raises(qe.NotFound):
            q.document("m16")
        assert provider.calls == 2
        provider.token = token(idp, "bob")
        assert q.document("m16").doc_id == "m16"
        assert "m04" in doc_ids(q.query(BUDGET))
        assert provider.calls == 4
    user = Provider(token(idp, "carol"))
    with Quarry(server.url, server.keys["app"], user_token=user) as app:
        assert app.document("m11").doc_id == "m11"
        user.token = token(idp, "erin")
        with pytest.raises(qe.NotFound):
            app.document("m11")
        assert user.calls == 2

    async def run():
        app_token, user_token = Provider(token(idp, "rag-bot")), Provider(token(idp, "bob"))
        async with AsyncQuarry(server.url, app_token.async_call, user_token=user_token.async_call) as q:
            first = await q.document("m16")
            user_token.token = token(idp, "alice")
            try:
                await q.document("m16")
                second = "seen"
            except qe.NotFound:
                second = "hidden"
        return first.doc_id, second, app_token.calls, user_token.calls

    assert asyncio.run(run()) == ("m16", "hidden", 2, 2)


def test_one_app_client_serves_interleaved_users_without_sharing_what_they_see(server, idp, by_key, readable):
    tokens = {user: token(idp, user) for user in GROUPS}
    jobs = [(user, question) for question in QUESTIONS for user in GROUPS] * 2
    with Quarry(server.url, server.keys["app"]) as app, ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda job: app.query(job[1], user_token=tokens[job[0]]), jobs))
    for (user, question), answer in zip(jobs, answers, strict=True):
        assert doc_ids(answer) == doc_ids(by_key[user, question]), (user, question)
        assert {c.doc_id for c in answer.context} <= readable[user], (user, question)

    async def run():
        bot = Provider(token(idp, "rag-bot"))
        async with AsyncQuarry(server.url, bot.async_call) as app:
            return await asyncio.gather(*(app.query(q, user_token=Provider(tokens[u]).async_call) for u, q in jobs))

    for (user, question), answer in zip(jobs, asyncio.run(run()), strict=True):
        assert doc_ids(answer) == doc_ids(by_key[user, question]), (user, question)


def test_langchain_with_token_providers_returns_the_users_documents_only(server, idp, by_key, readable):
    tokens = {user: token(idp, user) for user in GROUPS}
    bot = Provider(token(idp, "rag-bot"))
    retriever = LangChainRetriever(base_url=server.url, token_provider=bot)
    for user in GROUPS:
        for question in QUESTIONS:
            ids = [d.metadata["doc_id"] for d in retriever.invoke(question, user_token=tokens[user])]
            assert ids == doc_ids(by_key[user, question]), (user, question)
            assert set(ids) <= readable[user]
    assert bot.calls == len(GROUPS) * len(QUESTIONS)  # one request per call, the provider called for each
    callbacks = Recorder()
    retriever.invoke(BUDGET, user_token=tokens["bob"], config={"callbacks": [callbacks]})
    assert callbacks.seen and not any(tokens["bob"] in seen or bot.token in seen for seen in callbacks.seen)
    assert [d.metadata["doc_id"] for d in asyncio.run(retriever.ainvoke(BUDGET, user_token=tokens["bob"]))] == \
           doc_ids(by_key["bob", BUDGET])

    current: ContextVar[str] = ContextVar("current_user_token")
    by_context = LangChainRetriever(base_url=server.url, api_key=SecretStr(server.keys["app"]),
                                    user_token_provider=current.get)

    def as_user(user: str, question: str, per_call: str | None = None) -> list[str]:
        current.set(tokens[user])
        kwargs = {"user_token": per_call} if per_call else {}
        return [d.metadata["doc_id"] for d in by_context.invoke(question, **kwargs)]

    for user in GROUPS:
        assert contextvars.copy_context().run(as_user, user, BUDGET) == doc_ids(by_key[user, BUDGET])
    # a per-call token wins over the provider
    assert contextvars.copy_context().run(as_user, "alice", BUDGET, tokens["bob"]) == doc_ids(by_key["bob", BUDGET])

    async def in_tasks():
        async def one(user: str) -> list[str]:
            current.set(tokens[user])
            return [d.metadata["doc_id"] for d in await by_context.ainvoke(BUDGET)]
        return await asyncio.gather(*(one(u) for u in GROUPS))

    assert asyncio.run(in_tasks()) == [doc_ids(by_key[u, BUDGET]) for u in GROUPS]
    with pytest.raises(ValidationError, match="exactly one"):
        LangChainRetriever(base_url=server.url)
    with pytest.raises(ValidationError, match="exactly one"):
        LangChainRetriever(base_url=server.url, api_key=SecretStr("k"), token_provider=bot)
    assert server.keys["app"] not in repr(by_context) and tokens["bob"] not in repr(by_context)


def test_llamaindex_with_token_providers_returns_the_users_documents_only(server, idp, by_key, readable):
    tokens = {user: token(idp, user) for user in GROUPS}
    current: ContextVar[str] = ContextVar("current_user_token")
    retriever = LlamaIndexRetriever(server.url, token_provider=Provider(token(idp, "rag-bot")),
                                    user_token_provider=current.get)

    def as_user(user: str) -> dict[str, list[str]]:
        current.set(tokens[user])
        return {q: [n.node.metadata["doc_id"] for n in retriever.retrieve(q)] for q in QUESTIONS}

    for user in GROUPS:
        seen = contextvars.copy_context().run(as_user, user)
        for question, ids in seen.items():
            assert ids == doc_ids(by_key[user, question]), (user, question)
            assert set(ids) <= readable[user]

    async def in_tasks():
        async def one(user: str) -> list[str]:
            current.set(tokens[user])
            return [n.node.metadata["doc_id"] for n in await retriever.aretrieve(BUDGET)]
        return await asyncio.gather(*(one(u) for u in GROUPS))

    assert asyncio.run(in_tasks()) == [doc_ids(by_key[u, BUDGET]) for u in GROUPS]
    with pytest.raises(LookupError):  # no user set: the request fails instead of running as the app
        contextvars.Context().run(retriever.retrieve, BUDGET)
    with pytest.raises(ValueError, match="exactly one"):
        LlamaIndexRetriever(server.url)
    with pytest.raises(ValueError, match="exactly one"):
        LlamaIndexRetriever(server.url, "k", token_provider=lambda: "t")


def test_an_expired_token_is_unauthenticated_after_at_most_one_retry(server, idp):
    expired = token(idp, "alice", exp=int(time.time()) - 3600)
    wire = Counting()
    with Quarry(server.url, expired, max_retries=3, transport=wire) as q, pytest.raises(qe.Unauthenticated) as e:
        q.query(BUDGET)
    assert e.value.status == 401 and e.value.token_expired and len(wire.sent) == 1  # a string: not retried
    assert expired not in repr(e.value) and expired not in str(e.value)

    same, wire = Provider(expired), Counting()
    with Quarry(server.url, same, max_retries=3, transport=wire) as q, pytest.raises(qe.Unauthenticated):
        q.query(BUDGET)
    assert (same.calls, len(wire.sent)) == (2, 1)  # the provider gave the refused token again: no retry

    class Stale(Provider):  # a new token each call, every one expired
        def __call__(self) -> str:
            self.calls += 1
            return token(idp, "alice", exp=int(time.time()) - 3600, jti=str(self.calls))

    stale, wire = Stale(""), Counting()
    with Quarry(server.url, stale, max_retries=3, transport=wire) as q, pytest.raises(qe.Unauthenticated) as e:
        q.query(BUDGET)
    assert (stale.calls, len(wire.sent)) == (2, 2) and e.value.token_expired  # one retry, never more

    class Refreshing(Provider):  # expired first, then refreshed
        def __call__(self) -> str:
            token_now = super().__call__()
            self.token = token(idp, "bob")
            return token_now

    refreshing, wire = Refreshing(expired), Counting()
    with Quarry(server.url, refreshing, max_retries=0, transport=wire) as q:
        assert "m04" in doc_ids(q.query(BUDGET))  # bob's view, after one retry
    assert len(wire.sent) == 2 and wire.sent[1][0] == f"Bearer {token(idp, 'bob')}"

    user, wire = Refreshing(token(idp, "bob", exp=int(time.time()) - 3600)), Counting()
    with Quarry(server.url, server.keys["app"], user_token=user, transport=wire) as app:
        assert "m04" in doc_ids(app.query(BUDGET))  # an expired user token from a provider: the same one retry
    assert len(wire.sent) == 2

    wire = Counting()
    forged = Keys()
    forged.add("k1")
    with Quarry(server.url, Provider(forged.sign("k1", sub="alice")), max_retries=3, transport=wire) as q, \
            pytest.raises(qe.Unauthenticated) as e:
        q.query(BUDGET)
    assert len(wire.sent) == 1 and not e.value.token_expired  # any other refused token: never retried
