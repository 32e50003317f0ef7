"""The MCP authorization flow end to end: the MCP SDK's own OAuth client (`OAuthClientProvider`)
meets the real server and the real OpenID Connect provider (tests/idp_provider.py) with nothing
but a user name and password. It is challenged by the server (401 naming the protected resource
metadata), discovers the provider from that metadata, registers itself, sends the user through
the provider's login form (authorization code with PKCE, the server's URL as `resource`), and
calls the tools with the token it got; the user then sees what an API key of the same principal
and groups sees. A token minted for another audience is refused.

The flow runs once per module (one provider, one server); the tests read what it recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from auth.config import IdentityConfig, IssuerConfig
from retrieval.types import Principal
from tests.conftest import PATIENCE_S, LiveServer, assert_alike, free_port, stable_answer
from tests.idp_provider import OTHER_RESOURCE, REDIRECT_URI, STANDARD_USERS, OidcProvider, standard_provider

BUDGET = "What is the Q3 2025 budget for the payments platform?"
FINANCE_DOC = "note-finance-q3-2025-budget"  # acl: [group:finance]
USER = "ana"  # groups group:finance and group:eng at the provider
ACCEPT = "application/json, text/event-stream"


class MemoryTokenStorage:
    """The SDK's TokenStorage protocol, in memory: the tokens and the registered client."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class User:
    """The person at the keyboard: the SDK's redirect handler opens the authorization URL in
    their "browser" (the provider's login form, filled in over HTTP), and its callback handler
    hands back the code and state the provider redirected to."""

    idp: OidcProvider
    login: str
    password: str
    authorization_urls: list[str] = field(default_factory=list)
    redirect: dict[str, str] = field(default_factory=dict)

    async def open(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        self.redirect = await anyio.to_thread.run_sync(self.idp.authorize, authorization_url, self.login, self.password)

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=self.redirect["code"], state=self.redirect.get("state"),
                                       iss=self.redirect.get("iss"))


@dataclass(frozen=True)
class Sent:
    """One request the SDK's HTTP client sent, and the status it got."""

    method: str
    url: str  # without its query
    status: int
    authorization: str | None
    body: bytes
    www_authenticate: str | None


@dataclass
class Run:
    idp: OidcProvider
    mcp_url: str
    live: LiveServer
    key: str  # an API key with the token user's principal, groups and scopes
    user: User
    storage: MemoryTokenStorage
    sent: list[Sent]
    tools: list[str]
    answer: Any  # retrieve_context's result through the token
    keyed: Any  # the same call through the API key
    keyed_tools: list[str]


def _query_free(url: httpx2.URL) -> str:
    return str(url.copy_with(query=None))


async def _with_oauth(mcp_url: str, user: User, storage: MemoryTokenStorage, sent: list[Sent]):
    async def record(response: httpx2.Response) -> None:
        request = response.request
        try:
            body = request.content
        except httpx2.RequestNotRead:  # pragma: no cover - the SDK sends bytes bodies
            body = b""
        sent.append(Sent(request.method, _query_free(request.url), response.status_code,
                         request.headers.get("authorization"), body, response.headers.get("www-authenticate")))

    oauth = OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(client_name="Quarry MCP test client", redirect_uris=[REDIRECT_URI],
                                            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=user.open, callback_handler=user.callback)
    async with httpx2.AsyncClient(auth=oauth, timeout=120, event_hooks={"response": [record]}) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            answer = await client.call_tool("retrieve_context", {"question": BUDGET})
    return tools, answer


async def _with_key(mcp_url: str, key: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            return tools, await client.call_tool("retrieve_context", {"question": BUDGET})


@pytest.fixture(scope="module")
def run(demo_engine, tmp_path_factory):
    from auth.keys import KeyStore
    from routes.server.app import create_app
    from routes.service.settings import Settings

    port = free_port()
    mcp_url = f"http://127.0.0.1:{port}/mcp"
    idp = standard_provider(tmp_path_factory.mktemp("idp"))
    idp.add_resource(mcp_url)  # starts it, with the server's URL as a resource it mints tokens for
    try:
        identity = IdentityConfig(
            issuers=(IssuerConfig(name="corp", issuer=idp.issuer, audience=(mcp_url,), discovery=True, group_prefix="group:"),),
            resource=mcp_url)
        store = KeyStore(tmp_path_factory.mktemp("keys") / "keys.json")
        groups = [g.removeprefix("group:") for g in STANDARD_USERS[USER]["groups"]]
        key = store.add(USER, groups, ["query", "sql"])[0]
        # The first question of an access scope waits at most half its deadline for the scope's
        # table profiles, and a cold one routes without tables (its route reason then says less):
        # build them first, so the two answers compared below differ only in who asked.
        assert demo_engine.sql.profile_ready(Principal(USER, tuple(groups)).access_scope(), PATIENCE_S)
        settings = Settings(index_dir=tmp_path_factory.mktemp("srv"), rate_per_second=1000.0, burst=1000,
                            max_concurrent_per_key=64)
        app = create_app(settings, engine=demo_engine, keys=store, identity=identity)
        with LiveServer(app, port=port) as live:
            user, storage, sent = User(idp, USER, STANDARD_USERS[USER]["password"]), MemoryTokenStorage(), []
            tools, answer = anyio.run(_with_oauth, mcp_url, user, storage, sent)
            keyed_tools, keyed = anyio.run(_with_key, mcp_url, key)
            yield Run(idp, mcp_url, live, key, user, storage, sent, tools, answer, keyed, keyed_tools)
    finally:
        idp.stop()


def _on_provider(run: Run, s: Sent) -> bool:
    return s.url.startswith(run.idp.issuer + "/")


def test_the_sdk_went_through_the_spec_flow_in_order(run):
    """401 -> the protected resource metadata the challenge names -> the provider's authorization
    server metadata (RFC 8414, which oidc-provider serves besides OpenID Connect discovery) ->
    dynamic client registration -> (the user's browser at the authorization endpoint, outside
    this client) -> the code exchange -> the MCP request again, now with the token."""
    steps = [(s.method, s.url, s.status) for s in run.sent]
    print("\n".join(f"{s.method} {s.url} -> {s.status} {_rpc_method(s)}" for s in run.sent))
    assert steps[:6] == [
        ("POST", run.mcp_url, 401),
        ("GET", run.live.url + "/.well-known/oauth-protected-resource/mcp", 200),
        ("GET", run.idp.issuer + "/.well-known/oauth-authorization-server", 200),
        ("POST", run.idp.metadata["registration_endpoint"], 201),
        ("POST", run.idp.metadata["token_endpoint"], 200),
        ("POST", run.mcp_url, 200),
    ]
    assert run.sent[0].body == run.sent[5].body  # the refused request, sent again with the token
    assert all((m, u, c) == ("POST", run.mcp_url, 200) for m, u, c in steps[6:])  # no second authorization
    assert [_rpc_method(s) for s in run.sent[6:]][-2:] == ["tools/list", "tools/call"]


def _rpc_method(s: Sent) -> str:
    try:
        return json.loads(s.body).get("method", "") if s.url.endswith("/mcp") and s.body else ""
    except ValueError:
        return ""


def test_the_first_request_is_challenged_with_the_metadata_url(run):
    first = run.sent[0]
    assert (first.url, first.status, first.authorization) == (run.mcp_url, 401, None)
    metadata_url = run.live.url + "/.well-known/oauth-protected-resource/mcp"
    assert first.www_authenticate is not None and first.www_authenticate.startswith("Bearer ")
    assert f'resource_metadata="{metadata_url}"' in first.www_authenticate
    assert "error=" not in first.www_authenticate  # no token was sent, so none was refused (RFC 6750 3.1)


def test_the_metadata_names_the_provider_as_authorization_server(run):
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        doc = httpx.get(run.live.url + path, timeout=30).json()
        assert doc["resource"] == run.mcp_url
        assert doc["authorization_servers"] == [run.idp.issuer]
        assert doc["bearer_methods_supported"] == ["header"]


def test_the_client_registered_itself_and_sent_pkce_and_the_resource(run):
    (url,) = run.user.authorization_urls
    assert url.startswith(run.idp.metadata["authorization_endpoint"] + "?")
    params = dict(httpx.URL(url).params)
    assert params["client_id"] == run.storage.client_info.client_id
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43
    assert params["resource"] == run.mcp_url
    # The resource metadata's scopes_supported, and offline_access (with the consent prompt it
    # needs) since the provider lists it and the client registered for refresh tokens (SEP-2207)
    assert (params["scope"], params["prompt"]) == ("query sql offline_access", "consent")
    assert run.storage.tokens.refresh_token
    assert run.user.redirect["iss"] == run.idp.issuer  # RFC 9207, which the SDK checks
    exchange = next(s for s in run.sent if s.url == run.idp.metadata["token_endpoint"])
    token_request = dict(httpx.QueryParams(exchange.body.decode()))
    assert token_request["resource"] == run.mcp_url and len(token_request["code_verifier"]) >= 43


def test_the_token_is_the_users_for_the_mcp_url(run):
    token = run.storage.tokens.access_token
    jwks = jwt.PyJWKSet.from_dict(httpx.get(run.idp.jwks_uri, timeout=30).json())
    claims = jwt.decode(token, jwks[jwt.get_unverified_header(token)["kid"]].key, algorithms=["RS256"],
                        audience=run.mcp_url, issuer=run.idp.issuer)
    assert claims["aud"] == run.mcp_url
    assert claims["sub"] == USER and claims["client_id"] == run.storage.client_info.client_id
    assert claims["scope"] == "query sql" and claims["groups"] == STANDARD_USERS[USER]["groups"]


def test_retrieve_context_answers_the_user(run):
    assert not run.answer.is_error
    out = run.answer.structured_content
    assert out["status"] == "answer_context", json.dumps(out)[:500]
    assert FINANCE_DOC in json.dumps(out)  # the user's finance group reaches the finance note


def test_the_user_sees_what_a_key_with_the_same_principal_and_groups_sees(run):
    assert run.tools == run.keyed_tools == ["get_document", "retrieve_context", "search", "sql_query", "submit_feedback"]
    assert not run.keyed.is_error
    assert_alike(stable_answer(run.answer.structured_content), stable_answer(run.keyed.structured_content))


def test_the_token_went_to_the_server_only(run):
    """The SDK sends the access token as a bearer to the MCP endpoint and nowhere else: not in
    any request to the provider (it only received it, at the token endpoint), nor in a URL."""
    token, refresh = run.storage.tokens.access_token, run.storage.tokens.refresh_token

    def carries(s: Sent, secret: str) -> bool:
        return secret in (s.authorization or "") or secret.encode() in s.body or secret in s.url

    carrying = [s for s in run.sent if carries(s, token)]
    assert carrying and all(s.url == run.mcp_url and s.authorization == f"Bearer {token}" for s in carrying)
    assert not any(carries(s, refresh) for s in run.sent)  # kept for later; nothing needed it yet
    assert not any(_on_provider(run, s) and s.authorization for s in run.sent)
    assert all(not s.authorization for s in run.sent if not _on_provider(run, s) and s.url != run.mcp_url)


def test_a_token_for_another_audience_is_refused(run):
    foreign = run.idp.user_token(USER, STANDARD_USERS[USER]["password"], OTHER_RESOURCE)
    assert jwt.decode(foreign, options={"verify_signature": False})["aud"] == OTHER_RESOURCE
    r = httpx.post(run.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30,
                   headers={"Authorization": f"Bearer {foreign}", "Accept": ACCEPT})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"
    assert r.json()["error"]["message"].startswith("token refused: wrong_audience")
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    assert f'resource_metadata="{run.live.url}/.well-known/oauth-protected-resource/mcp"' in challenge
