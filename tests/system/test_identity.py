"""End users identified by tokens from a real OpenID Connect provider (tests/idp_provider.py:
oidc-provider on 127.0.0.1), over a real server on the demo index.

The differential: for every user and every interface (HTTP query, search, SQL, documents,
function tools, MCP), what a token shows equals what an API key with the same principal and
groups shows, and so does an app acting for the user. Then each way a token must be refused,
key rotation at the provider, and a provider whose keys cannot be fetched."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import anyio
import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from auth.config import IdentityConfig
from auth.keys import KeyStore
from tests.conftest import DEMO, MINI, PATIENCE_S, LiveServer, assert_alike, counter, stable_answer, wait_until
from tests.idp_provider import APP_CLIENT, BARE_APP_CLIENT, OTHER_RESOURCE, RESOURCE, OidcProvider, standard_provider

pytestmark = pytest.mark.slow

# The demo corpus's groups, held by users of the provider as `group:<name>` claims.
USERS = {
    "alice": {"password": "pw-alice-1", "groups": ["group:sre"]},
    "bob": {"password": "pw-bob-2", "groups": ["group:finance"]},
    "carol": {"password": "pw-carol-3", "groups": ["group:security", "group:sre"]},
    "dave": {"password": "pw-dave-4", "groups": ["group:hr"]},
    "erin": {"password": "pw-erin-5", "groups": []},
}
APP_GROUPS = ["sre", "finance", "security"]  # the app's allowlist: dave (hr) is outside it
QUESTIONS = [q for q in map(json.loads, (DEMO / "questions.jsonl").read_text().splitlines()) if "bait" in q["tags"]][:4]
SQL_QUESTION = "How many deployments were rolled back?"


def provider(folder, users=USERS) -> OidcProvider:
    """The standard clients (tests/idp_provider.py) with the demo corpus's users."""
    folder.mkdir(parents=True, exist_ok=True)
    return standard_provider(folder, users=users)


def identity(idp: OidcProvider, **issuer: object) -> IdentityConfig:
    return IdentityConfig.model_validate({
        "issuers": [{"name": "corp", "issuer": idp.issuer, "audience": [RESOURCE], "discovery": True,
                     "group_prefix": "group:", "allowed_scopes": ["query", "sql"]} | issuer],
        "apps": [{"issuer": "corp", "subject": APP_CLIENT, "act_as": True, "groups": APP_GROUPS},
                 {"issuer": "corp", "subject": BARE_APP_CLIENT, "act_as": False}],
    })


def serve(demo_engine, tmp_path, ident: IdentityConfig, keys: KeyStore | None = None) -> LiveServer:
    from routes.server.app import create_app
    from routes.service.settings import Settings

    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = Settings(index_dir=tmp_path, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64)
    app = create_app(settings, engine=demo_engine, keys=keys, identity=ident)
    server = LiveServer(app)
    server.app = app
    return server


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    with provider(tmp_path_factory.mktemp("idp")) as p:
        yield p


@pytest.fixture(scope="module")
def site(idp, demo_engine, tmp_path_factory):
    """The server, a key per user with the same principal and groups, and each user's token."""
    store = KeyStore(tmp_path_factory.mktemp("keys") / "keys.json")
    keys = {u: store.add(u, [g.removeprefix("group:") for g in spec["groups"]], ["query", "sql"])[0] for u, spec in USERS.items()}
    tokens = {u: idp.user_token(u, spec["password"], RESOURCE, scope="openid query sql") for u, spec in USERS.items()}
    server = serve(demo_engine, tmp_path_factory.mktemp("srv"), identity(idp), store)
    with server:
        server.keys, server.tokens, server.store = keys, tokens, store
        for key in keys.values():  # a scope's first question profiles its tables, and routes without them
            httpx.post(server.url + "/v1/sql", json={"question": SQL_QUESTION}, headers=bearer(key), timeout=PATIENCE_S)
        server.app_token = idp.app_token(APP_CLIENT, RESOURCE, "query sql")
        yield server


def bearer(credential: str, user_token: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {credential}"}
    if user_token is not None:
        headers["X-Quarry-User-Token"] = user_token
    return headers


def everything_seen(url: str, headers: dict[str, str]) -> dict:
    """What one identity gets from every HTTP interface, without ids and timings."""
    seen: dict = {}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
        for q in QUESTIONS:
            r = http.post("/v1/query", json={"question": q["question"]})
            assert r.status_code == 200, r.text
            seen[f"query:{q['id']}"] = stable_answer(r.json())
            r = http.post("/v1/search", json={"query": q["question"], "retriever": "bm25", "k": 10})
            assert r.status_code == 200, r.text
            seen[f"search:{q['id']}"] = stable_answer(r.json())
        r = http.post("/v1/sql", json={"question": SQL_QUESTION})
        seen["sql"] = (r.status_code, stable_answer(r.json()))
        for line in (DEMO / "docs" / "faq.jsonl").read_text().splitlines()[:10]:
            doc_id = json.loads(line)["id"]
            r = http.get(f"/v1/documents/{doc_id}")
            seen[f"doc:{doc_id}"] = r.status_code
        r = http.post("/v1/tools/call", json={"call_id": "c1", "name": "retrieve_context",
                                              "arguments": {"question": QUESTIONS[0]["question"]}})
        assert r.status_code == 200, r.text
        seen["tool"] = stable_answer(r.json())
    return seen


async def mcp_seen(url: str, headers: dict[str, str]) -> dict:
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            result = await client.call_tool("retrieve_context", {"question": QUESTIONS[1]["question"]})
            return stable_answer(result.structured_content)


@pytest.mark.parametrize("user", sorted(USERS))
def test_a_token_user_sees_exactly_what_a_key_with_the_same_groups_sees(site, user) -> None:
    by_key = everything_seen(site.url, bearer(site.keys[user]))
    by_token = everything_seen(site.url, bearer(site.tokens[user]))
    assert_alike(by_key, by_token, user)
    assert_alike(anyio.run(mcp_seen, site.url, bearer(site.keys[user])), anyio.run(mcp_seen, site.url, bearer(site.tokens[user])))


@pytest.mark.parametrize("user", ["alice", "bob", "carol", "erin"])
def test_an_app_acting_for_a_user_sees_what_the_user_sees(site, user) -> None:
    by_key = everything_seen(site.url, bearer(site.keys[user]))
    by_app = everything_seen(site.url, bearer(site.app_token, site.tokens[user]))
    assert_alike(by_key, by_app, user)
    assert_alike(anyio.run(mcp_seen, site.url, bearer(site.keys[user])),
                 anyio.run(mcp_seen, site.url, bearer(site.app_token, site.tokens[user])))


def test_users_see_different_documents(site) -> None:
    """The differential above compares identities that see different things, not one view."""
    doc = {u: everything_seen(site.url, bearer(site.tokens[u])) for u in ("bob", "erin")}
    assert doc["bob"] != doc["erin"]


def test_an_app_acting_for_users_is_audited_under_both_identities(site) -> None:
    with httpx.Client(base_url=site.url, timeout=60) as http:
        r = http.post("/v1/search", json={"query": "ledger", "retriever": "bm25"},
                      headers=bearer(site.app_token, site.tokens["bob"]))
        assert r.status_code == 200
    audit = site.app.state.quarry.audit
    audit.flush()
    rows = [r for r in audit.rows(10_000) if r[4] == "/v1/search" and r[3] == "bob"]
    assert (rows[-1][2], rows[-1][-1]) == (f"jwt:corp:{APP_CLIENT}", APP_CLIENT)


# -- refusals ------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(idp: OidcProvider, **claims: object) -> str:
    """A token signed with the provider's own current key, with claims the provider would not
    issue (a lapsed or future window, another issuer): what only a time or a thief produces."""
    kid = idp.kids[0]
    now = int(time.time())
    body = {"iss": idp.issuer, "aud": RESOURCE, "sub": "bob", "groups": ["group:finance"], "scope": "query",
            "iat": now, "exp": now + 300} | claims
    return jwt.encode(body, idp.private_key_pem(kid), algorithm="RS256", headers={"kid": kid, "typ": "at+jwt"})


def _refusals(idp: OidcProvider, site: LiveServer, tmp_path: Path) -> dict[str, tuple[dict[str, str], int, str]]:
    now = int(time.time())
    good = site.tokens["bob"]
    header, body, sig = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    tampered = f"{header}.{_b64(json.dumps(claims | {'groups': ['group:sre']}).encode())}.{sig}"
    unsigned = f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode())}.{body}."
    public_pem = serialization.load_pem_private_key(idp.private_key_pem(idp.kids[0]), None).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    hs_header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": idp.kids[0]}).encode())
    hs_sig = _b64(hmac.new(public_pem, f"{hs_header}.{body}".encode(), hashlib.sha256).digest())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    unknown_kid = jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "k-unknown"})
    with provider(tmp_path / "other-idp") as other:
        foreign = other.user_token("bob", USERS["bob"]["password"], RESOURCE)
    return {
        "expired": (bearer(_signed(idp, iat=now - 4000, exp=now - 3600)), 401, "expired"),
        "not yet valid": (bearer(_signed(idp, nbf=now + 3600)), 401, "not_yet_valid"),
        "wrong issuer": (bearer(_signed(idp, iss="https://idp.elsewhere.test")), 401, "unknown_issuer"),
        "wrong audience": (bearer(idp.user_token("bob", USERS["bob"]["password"], OTHER_RESOURCE)), 401, "wrong_audience"),
        "alg none": (bearer(unsigned), 401, "algorithm_not_allowed"),
        "HS256 with the public key": (bearer(f"{hs_header}.{body}.{hs_sig}"), 401, "algorithm_not_allowed"),
        "unknown kid": (bearer(unknown_kid), 401, "unknown_key"),
        "over the size limit": (bearer(_signed(idp, pad="x" * 9000)), 401, "too_large"),
        "tampered payload": (bearer(tampered), 401, "bad_signature"),
        "app without act_as": (bearer(idp.app_token(BARE_APP_CLIENT, RESOURCE), good), 403, "act_as"),
        "app widening a user": (bearer(site.app_token, site.tokens["dave"]), 403, "outside"),
        "user token of an issuer not configured": (bearer(site.app_token, foreign), 401, "unknown_issuer"),
    }


@pytest.fixture(scope="module")
def refusals(idp, site, tmp_path_factory) -> dict[str, tuple[dict[str, str], int, str]]:
    return _refusals(idp, site, tmp_path_factory.mktemp("refusals"))


REFUSALS = ["expired", "not yet valid", "wrong issuer", "wrong audience", "alg none", "HS256 with the public key", "unknown kid",
            "over the size limit", "tampered payload", "app without act_as", "app widening a user",
            "user token of an issuer not configured"]


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refused_token_gets_its_status_and_no_answer(site, refusals, case) -> None:
    assert sorted(refusals) == sorted(REFUSALS)
    headers, status, reason = refusals[case]
    calls = (("/v1/query", {"question": QUESTIONS[0]["question"]}), ("/v1/search", {"query": "ledger", "retriever": "bm25"}),
             ("/v1/tools/call", {"call_id": "c", "name": "search", "arguments": {"query": "ledger"}}))
    for path, body in calls:
        r = httpx.post(site.url + path, json=body, headers=headers, timeout=60)
        assert r.status_code == status, (path, r.text)
        error = r.json()["error"]
        assert set(r.json()) == {"error"} and reason in error["message"], error
        if status == 401:
            assert 'error="invalid_token"' in r.headers["www-authenticate"]


def test_unknown_kids_refresh_the_keys_at_most_once_per_interval(idp, site) -> None:
    ops = site.store.add("prometheus", [], ["admin"])[0]

    def fetches() -> dict[str, float]:
        site.keys["ops"] = ops
        return counter(site, "quarry_identity_key_fetches", "outcome")

    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    before = fetches()
    for i in range(6):
        token = jwt.encode({"iss": idp.issuer, "aud": RESOURCE, "sub": "bob", "exp": int(time.time()) + 60}, stranger,
                           algorithm="RS256", headers={"kid": f"k-invented-{i}"})
        r = httpx.post(site.url + "/v1/search", json={"query": "ledger", "retriever": "bm25"}, headers=bearer(token), timeout=60)
        assert r.status_code == 401
    assert sum(fetches().values()) - sum(before.values()) <= 1  # the default interval is 30 s


# -- rotation and outages ------------------------------------------------------------------------


def search(url: str, credential: str, query: str = "deployment rollback") -> httpx.Response:
    return httpx.post(url + "/v1/search", json={"query": query, "retriever": "bm25", "k": 10}, headers=bearer(credential),
                      timeout=60)


def found(r: httpx.Response) -> set[str]:
    assert r.status_code == 200, r.text
    return {h["doc_id"] for h in r.json()["hits"]}


def test_rotation_at_the_provider_fails_no_request_and_a_revoked_group_is_lost_next_request(demo_engine, tmp_path) -> None:
    with provider(tmp_path / "idp", users={"bob": USERS["bob"] | {"groups": ["group:finance", "group:sre"]}}) as idp:
        with serve(demo_engine, tmp_path / "srv", identity(idp, refresh_interval_s=0)) as server:
            old = idp.user_token("bob", USERS["bob"]["password"], RESOURCE)
            wide = found(search(server.url, old))
            new_kid = idp.rotate_keys(keep_old=True)
            idp.users["bob"]["groups"] = ["group:finance"]  # sre revoked at the provider
            idp.restart()
            new = idp.user_token("bob", USERS["bob"]["password"], RESOURCE)
            assert jwt.get_unverified_header(new)["kid"] == new_kid
            for token in (old, new, new, old):  # the new kid is fetched on first sight; the old one still listed
                found(search(server.url, token))
            narrow = found(search(server.url, new))
            # the next request sees what a key with the remaining groups sees, and the sre documents are gone
            assert narrow == _seen_by_key(demo_engine, tmp_path / "narrow", "bob", ["finance"])
            assert narrow != wide and wide == _seen_by_key(demo_engine, tmp_path / "wide", "bob", ["finance", "sre"])


def _seen_by_key(demo_engine, tmp_path, principal: str, groups: list[str]) -> set[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = KeyStore(tmp_path / "keys.json")
    key = store.add(principal, groups, ["query"])[0]
    with serve(demo_engine, tmp_path / "srv", IdentityConfig(), store) as cmp:
        return found(search(cmp.url, key))


def test_a_provider_down_is_served_from_cached_keys_until_their_age_limit_then_503(demo_engine, tmp_path) -> None:
    with provider(tmp_path / "idp") as idp:
        token = idp.user_token("bob", USERS["bob"]["password"], RESOURCE)
        with serve(demo_engine, tmp_path / "srv", identity(idp, keys_max_age_s=8, refresh_interval_s=1)) as server:
            def ask() -> httpx.Response:
                return search(server.url, token, "ledger invoices")

            expected = ask().json()["hits"]
            idp.stop()
            outcomes: list[int] = []

            def answered_503() -> bool:
                r = ask()
                outcomes.append(r.status_code)
                if r.status_code == 200:  # cached keys: the same answer, never a partial one
                    assert r.json()["hits"] == expected
                return r.status_code == 503

            wait_until(answered_503, "a 503 once the cached keys are too old", poll=0.5)
            assert set(outcomes) <= {200, 503}
            r = ask()
            assert r.status_code == 503 and r.json()["error"]["retryable"] is True
            assert "retry" in r.json()["error"]["message"]
            idp.start()
            wait_until(lambda: ask().status_code == 200, "answers again once the keys can be read", poll=0.5)


def test_a_tokens_scopes_decide_its_writes(idp, embedder, tmp_path) -> None:
    """A provider grants `write` only where the identity file allows it, within the issuer's
    write prefixes; an app acting for a user writes only with a scope both hold."""
    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from routes.service.settings import Settings

    build_snapshot([MINI], tmp_path / "index", embedder)
    ident = identity(idp, allowed_scopes=["query", "write"], write_prefixes=["notes-"])
    app = create_app(Settings(index_dir=tmp_path / "index", reload_interval_s=0.2), identity=ident)
    writer = idp.user_token("bob", USERS["bob"]["password"], RESOURCE, scope="openid query write")
    reader = idp.user_token("bob", USERS["bob"]["password"], RESOURCE, scope="openid query")
    acting = idp.app_token(APP_CLIENT, RESOURCE, "query")
    body = {"title": "Quillon ledger note", "text": "The quillon ledger closes on the third working day.",
            "acl": ["group:finance"]}
    with LiveServer(app) as server:
        def put(doc_id: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.put(f"{server.url}/v1/documents/{doc_id}", json=body, headers=headers, timeout=60)

        assert put("notes-q1", bearer(reader)).status_code == 403  # no write scope in the token
        r = put("notes-q1", bearer(acting, writer))
        assert r.status_code == 403, r.text  # the app itself holds no write
        assert put("other-q1", bearer(writer)).status_code == 403  # outside the issuer's write prefixes
        r = put("notes-q1", bearer(writer))
        assert r.status_code in (200, 201), r.text
        wait_until(lambda: "notes-q1" in found(search(server.url, reader, "quillon ledger")), "the write to be served")


def test_the_client_and_both_retrievers_with_provider_tokens_see_what_keys_see(site) -> None:
    from pydantic import SecretStr

    from quarry_client import Quarry
    from quarry_client.langchain import QuarryRetriever as LangChainRetriever
    from quarry_client.llamaindex import QuarryRetriever as LlamaIndexRetriever

    question = QUESTIONS[0]["question"]
    for user in ("bob", "erin"):
        token = site.tokens[user]
        with Quarry(site.url, site.keys[user]) as by_key, Quarry(site.url, lambda token=token: token) as by_token, \
                Quarry(site.url, site.app_token) as app:
            want = stable_answer(by_key.query(question).model_dump())
            assert_alike(want, stable_answer(by_token.query(question).model_dump()), user)
            assert_alike(want, stable_answer(app.query(question, user_token=token).model_dump()), user)
        keyed = LangChainRetriever(base_url=site.url, api_key=SecretStr(site.keys[user])).invoke(question)
        acting = LangChainRetriever(base_url=site.url, token_provider=lambda: site.app_token).invoke(question, user_token=token)
        assert [d.id for d in acting] == [d.id for d in keyed]
        nodes = LlamaIndexRetriever(site.url, token_provider=lambda token=token: token).retrieve(question)
        assert [n.node.node_id for n in nodes] == [d.id for d in keyed]
