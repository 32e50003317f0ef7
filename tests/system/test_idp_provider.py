"""The OpenID Connect provider the token tests sign in with (tests/idp_provider.py), checked on its
own: tokens from the real oidc-provider through the real flows, verified as a resource server
verifies them (PyJWT against the JWKS the provider publishes), so a later failure in the
service's token checks points at the service, not at this fixture."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import jwt
import pytest

from tests import idp_provider
from tests.idp_provider import (APP_CLIENT, BARE_APP_CLIENT, OTHER_RESOURCE, RESOURCE, STANDARD_USERS, WEB_CLIENT, OidcProvider,
                                ProviderRefused, standard_provider)


def verify(idp: OidcProvider, token: str, audience: str) -> dict:
    """The claims of `token` once its signature, issuer, audience and expiry check out against
    the keys the provider serves now."""
    jwks = jwt.PyJWKSet.from_dict(httpx.get(idp.jwks_uri, timeout=30).json())
    key = jwks[jwt.get_unverified_header(token)["kid"]]
    return jwt.decode(token, key.key, algorithms=["RS256"], audience=audience, issuer=idp.issuer)


def password(user: str) -> str:
    return STANDARD_USERS[user]["password"]


def test_discovery_names_the_endpoints_a_resource_server_and_an_mcp_client_need(oidc_provider):
    doc = httpx.get(oidc_provider.discovery_url, timeout=30).json()
    assert doc["issuer"] == oidc_provider.issuer
    assert doc["jwks_uri"] == oidc_provider.issuer + "/jwks"
    assert doc["registration_endpoint"].startswith(oidc_provider.issuer)
    assert "S256" in doc["code_challenge_methods_supported"]
    assert {"authorization_code", "client_credentials"} <= set(doc["grant_types_supported"])
    served = httpx.get(oidc_provider.jwks_uri, timeout=30).json()
    assert served == oidc_provider.public_jwks()
    assert all("d" not in key for key in served["keys"])


@pytest.mark.parametrize("user", sorted(STANDARD_USERS))
def test_a_user_token_from_the_code_flow_carries_the_users_groups_and_the_resource_scopes(oidc_provider, user):
    token = oidc_provider.user_token(user, password(user), RESOURCE, scope="openid query sql")
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "RS256", "typ": "at+jwt", "kid": oidc_provider.kids[0]}
    claims = verify(oidc_provider, token, RESOURCE)
    assert claims["sub"] == user and claims["client_id"] == WEB_CLIENT
    assert claims["aud"] == RESOURCE and claims["iss"] == oidc_provider.issuer
    assert claims["groups"] == STANDARD_USERS[user]["groups"]
    assert claims["scope"] == "query sql"  # openid is not a scope of the resource, so not in its token
    assert claims["exp"] - claims["iat"] == oidc_provider.access_token_ttl


def test_a_scope_the_resource_does_not_accept_is_left_out_of_the_token(oidc_provider):
    token = oidc_provider.user_token("bo", password("bo"), RESOURCE, scope="openid query admin")
    assert verify(oidc_provider, token, RESOURCE)["scope"] == "query"


def test_a_token_for_the_other_listed_resource_has_that_audience_only(oidc_provider):
    token = oidc_provider.user_token("ana", password("ana"), OTHER_RESOURCE)
    assert verify(oidc_provider, token, OTHER_RESOURCE)["aud"] == OTHER_RESOURCE
    with pytest.raises(jwt.InvalidAudienceError):
        verify(oidc_provider, token, RESOURCE)


@pytest.mark.parametrize("user, given", [("ana", "wrong"), ("ana", password("bo")), ("nobody", "x")])
def test_a_wrong_login_gets_a_401_page_and_no_token(oidc_provider, user, given):
    with pytest.raises(ProviderRefused) as refused:
        oidc_provider.user_token(user, given, RESOURCE)
    assert (refused.value.error, refused.value.status) == ("login_failed", 401)


def test_a_resource_not_listed_is_refused_for_users_and_apps(oidc_provider):
    with pytest.raises(ProviderRefused) as refused:
        oidc_provider.user_token("ana", password("ana"), "https://unlisted.test/api")
    assert refused.value.error == "invalid_target"
    with pytest.raises(ProviderRefused) as refused:
        oidc_provider.app_token(APP_CLIENT, "https://unlisted.test/api")
    assert (refused.value.error, refused.value.status) == ("invalid_target", 400)


def test_an_app_token_is_the_clients_own_with_its_groups(oidc_provider):
    claims = verify(oidc_provider, oidc_provider.app_token(APP_CLIENT, RESOURCE, "query sql"), RESOURCE)
    assert claims["sub"] == claims["client_id"] == APP_CLIENT
    assert (claims["aud"], claims["scope"], claims["groups"]) == (RESOURCE, "query sql", ["group:eng"])
    bare = verify(oidc_provider, oidc_provider.app_token(BARE_APP_CLIENT, RESOURCE), RESOURCE)
    assert bare["sub"] == BARE_APP_CLIENT and "groups" not in bare


def test_an_app_asking_for_no_known_scope_gets_a_token_without_scope(oidc_provider):
    """Not an error at the provider: a resource server must not read a missing scope as every scope."""
    claims = verify(oidc_provider, oidc_provider.app_token(APP_CLIENT, RESOURCE, "admin"), RESOURCE)
    assert "scope" not in claims


def test_the_web_client_may_not_use_client_credentials(oidc_provider):
    with pytest.raises(ProviderRefused) as refused:
        oidc_provider.app_token(WEB_CLIENT, RESOURCE)
    assert refused.value.status == 400


def test_a_dynamically_registered_public_client_gets_a_user_token_with_pkce(oidc_provider):
    registered = oidc_provider.register_client({
        "client_name": "An MCP client", "redirect_uris": ["http://127.0.0.1:33418/callback"],
        "token_endpoint_auth_method": "none", "grant_types": ["authorization_code"], "response_types": ["code"]})
    assert registered["client_id"] and "client_secret" not in registered
    token = oidc_provider.user_token("cy", password("cy"), RESOURCE, client_id=registered["client_id"])
    claims = verify(oidc_provider, token, RESOURCE)
    assert (claims["sub"], claims["client_id"], claims["groups"]) == ("cy", registered["client_id"], ["group:hr"])


def test_keys_rotate_on_the_same_issuer(tmp_path):
    """Its own provider: rotation restarts it, which the module's shared one must not see."""
    with standard_provider(tmp_path) as idp:
        old_kid, issuer = idp.kids[0], idp.issuer
        old_token = idp.user_token("ana", password("ana"), RESOURCE)

        new_kid = idp.rotate_keys(keep_old=True)
        assert idp.issuer == issuer
        assert [k["kid"] for k in httpx.get(idp.jwks_uri, timeout=30).json()["keys"]] == [new_kid, old_kid]
        new_token = idp.user_token("ana", password("ana"), RESOURCE)
        assert jwt.get_unverified_header(new_token)["kid"] == new_kid
        assert verify(idp, old_token, RESOURCE)["sub"] == verify(idp, new_token, RESOURCE)["sub"] == "ana"
        app_token = idp.app_token(APP_CLIENT, RESOURCE)
        assert jwt.get_unverified_header(app_token)["kid"] == new_kid

        newest_kid = idp.rotate_keys(keep_old=False)
        assert [k["kid"] for k in httpx.get(idp.jwks_uri, timeout=30).json()["keys"]] == [newest_kid]
        with pytest.raises(KeyError):
            verify(idp, new_token, RESOURCE)
        assert verify(idp, idp.app_token(APP_CLIENT, RESOURCE), RESOURCE)["sub"] == APP_CLIENT


def test_private_keys_are_at_hand_for_tests_that_forge_tokens(oidc_provider):
    """A token signed with the provider's own key verifies: the PEM is the key it signs with."""
    forged = jwt.encode({"sub": "ana", "aud": RESOURCE, "iss": oidc_provider.issuer, "exp": int(time.time()) + 60},
                        oidc_provider.private_key_pem(oidc_provider.kids[0]), algorithm="RS256",
                        headers={"kid": oidc_provider.kids[0]})
    assert verify(oidc_provider, forged, RESOURCE)["sub"] == "ana"


def test_without_node_the_provider_tests_skip(monkeypatch):
    monkeypatch.setattr(idp_provider.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="node is not on PATH"):
        idp_provider.require_node_provider()


def test_with_node_but_no_packages_the_provider_tests_fail_and_say_run_make_test(monkeypatch, tmp_path: Path):
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    (tmp_path / "package.json").write_text(json.dumps({"dependencies": {"oidc-provider": "9.13.3"}}))
    monkeypatch.setattr(idp_provider, "IDP_DIR", tmp_path)
    with pytest.raises(pytest.fail.Exception, match="run `make test`"):
        idp_provider.require_node_provider()
