"""A real OpenID Connect provider for the tests: panva's oidc-provider (tests/idp/provider.mjs) in
a Node process on 127.0.0.1, configured here with its users, clients, resources and RSA signing
keys, so the service's token checks meet tokens as a provider issues them, never tokens a test
assembled to pass.

    with standard_provider(folder) as idp:
        token = idp.user_token("ana", STANDARD_USERS["ana"]["password"], RESOURCE)
        # or, for an authorization request some client built: the redirect's {code, state, iss}
        redirect = idp.authorize(authorization_url, "ana", STANDARD_USERS["ana"]["password"])

Tests take a started one from the `oidc_provider` fixture (tests/conftest.py: one per test module,
shared by its tests); a test that restarts it (rotate_keys, add_resource) starts its own.

Needs `node` (tests that use it skip without) and tests/idp/node_modules, which `make test`
installs (tests fail, not skip, without it: a skip would hide a broken CI)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import PATIENCE_S, free_port, wait_until

IDP_DIR = Path(__file__).resolve().parent / "idp"
SCRIPT = IDP_DIR / "provider.mjs"

# Audiences: tokens are minted for one of these (RFC 8707 resource indicators) and carry it as
# `aud`; OTHER_RESOURCE is a second, valid audience that is not the service's.
RESOURCE = "https://quarry.test/api"
OTHER_RESOURCE = "https://elsewhere.test/api"
RESOURCE_SCOPE = "query sql write"

STANDARD_USERS: dict[str, dict[str, Any]] = {
    "ana": {"password": "ana-secret-1", "groups": ["group:finance", "group:eng"], "email": "ana@quarry.test"},
    "bo": {"password": "bo-secret-2", "groups": ["group:eng"]},
    "cy": {"password": "cy-secret-3", "groups": ["group:hr"]},
    "di": {"password": "di-secret-4", "groups": []},
}
WEB_CLIENT = "quarry-web"  # confidential, authorization code + PKCE
APP_CLIENT = "quarry-app"  # client_credentials, in group:eng
BARE_APP_CLIENT = "bare-app"  # client_credentials, no groups
# Where the provider sends the browser back with the code. Nothing listens there: user_token
# reads the code from the redirect and never follows it.
REDIRECT_URI = "http://127.0.0.1/callback"


class ProviderRefused(Exception):
    """The provider answered with an error instead of a token (an OAuth error code, or
    `login_failed` when the login form turned the password down)."""

    def __init__(self, error: str, description: str = "", status: int | None = None) -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error, self.description, self.status = error, description, status


def require_node_provider() -> str:
    """The path of `node`; skips when there is none, and fails when the provider's npm
    packages are missing or stale, which `make test` fixes."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: the OpenID Connect provider (tests/idp) needs Node.js 20 or later")
    installed = IDP_DIR / "node_modules" / "oidc-provider" / "package.json"
    wanted = json.loads((IDP_DIR / "package.json").read_text())["dependencies"]["oidc-provider"]
    if not installed.is_file():
        pytest.fail(f"{installed.parent} is missing: run `make test` (it runs `npm ci` in tests/idp)", pytrace=False)
    if json.loads(installed.read_text())["version"] != wanted:
        pytest.fail(f"{installed.parent} is not oidc-provider {wanted}: run `make test`", pytrace=False)
    return node


def _b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class SigningKey:
    """An RSA key with its `kid`, as a private JWK for the provider and a public one for the
    service (which must never see the private half)."""

    def __init__(self) -> None:
        self.kid = "k-" + secrets.token_hex(6)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def public_jwk(self) -> dict[str, str]:
        pub = self.key.public_key().public_numbers()
        return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": _b64url_uint(pub.n), "e": _b64url_uint(pub.e)}

    def private_jwk(self) -> dict[str, str]:
        priv = self.key.private_numbers()
        return {**self.public_jwk(), "d": _b64url_uint(priv.d), "p": _b64url_uint(priv.p), "q": _b64url_uint(priv.q),
                "dp": _b64url_uint(priv.dmp1), "dq": _b64url_uint(priv.dmq1), "qi": _b64url_uint(priv.iqmp)}

    def private_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


class OidcProvider:
    """One oidc-provider process and its configuration. Restarts (`rotate_keys`, `add_resource`)
    keep the port and the issuer but lose what the provider held in memory: sessions, grants
    and dynamically registered clients."""

    def __init__(self, folder: Path, *, users: dict[str, dict[str, Any]], clients: list[dict[str, Any]],
                 resources: dict[str, str], access_token_ttl: int = 300) -> None:
        """`resources` maps each allowed resource indicator to the scopes it accepts."""
        self.folder = folder
        self.users, self.resources, self.access_token_ttl = users, dict(resources), access_token_ttl
        self.clients = {c["client_id"]: c for c in clients}
        self.registered: dict[str, dict[str, Any]] = {}  # dynamically, since the last start
        self.keys = [SigningKey()]
        self.port = free_port()
        self.metadata: dict[str, Any] = {}
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def discovery_url(self) -> str:
        return self.issuer + "/.well-known/openid-configuration"

    @property
    def jwks_uri(self) -> str:
        return self.metadata["jwks_uri"]

    @property
    def kids(self) -> list[str]:
        """The key ids the provider lists, the signing one first."""
        return [k.kid for k in self.keys]

    def public_jwks(self) -> dict[str, list[dict[str, str]]]:
        return {"keys": [k.public_jwk() for k in self.keys]}

    def private_key_pem(self, kid: str) -> bytes:
        """The PEM of a key the provider signs or signed with, for tests that forge tokens."""
        return next(k.private_pem() for k in self.keys if k.kid == kid)

    def _write_config(self) -> Path:
        path = self.folder / "idp-config.json"
        config = {"issuer": self.issuer, "port": self.port, "jwks": {"keys": [k.private_jwk() for k in self.keys]},
                  "users": self.users, "clients": list(self.clients.values()),
                  "resources": [{"indicator": r, "scope": s} for r, s in self.resources.items()],
                  "access_token_ttl": self.access_token_ttl}
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    def _log_tail(self) -> str:
        return "\n".join((self.folder / name).read_text(errors="replace")[-2000:] for name in ("idp.out", "idp.err"))

    def start(self) -> OidcProvider:
        """Starts the process and returns once it listens and serves its discovery document."""
        assert self._process is None, "the provider is running already"
        node = require_node_provider()
        self.registered = {}
        config = self._write_config()
        out, err = self.folder / "idp.out", self.folder / "idp.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            # stdin stays open while this process lives: the provider stops when it closes, so no
            # provider outlives a test run that was killed.
            self._process = process = subprocess.Popen([node, str(SCRIPT), str(config)], stdout=stdout, stderr=stderr,
                                                       stdin=subprocess.PIPE)
        ready = f"READY {self.issuer}"
        try:
            wait_until(lambda: ready in out.read_text(errors="replace").splitlines(), "the OpenID Connect provider",
                       alive=lambda: process.poll() is None)
        except AssertionError as e:
            self.stop()
            raise AssertionError(f"{e}\n{self._log_tail()}") from None
        response = httpx.get(self.discovery_url, timeout=PATIENCE_S)
        assert response.status_code == 200, response.text
        self.metadata = response.json()
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=PATIENCE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def rotate_keys(self, keep_old: bool) -> str:
        """Restarts with a new signing key first; the old ones stay listed (tokens they signed
        still verify) only with `keep_old`. Returns the new kid."""
        key = SigningKey()
        self.keys = [key, *self.keys] if keep_old else [key]
        self.restart()
        return key.kid

    def add_resource(self, indicator: str, scope: str = RESOURCE_SCOPE) -> None:
        """Allows one more resource (e.g. a server's URL, known only once it listens); restarts."""
        self.resources[indicator] = scope
        self.restart()

    def __enter__(self) -> OidcProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _client(self, client_id: str) -> dict[str, Any]:
        return self.clients.get(client_id) or self.registered[client_id]

    def _client_auth(self, client_id: str) -> tuple[httpx.BasicAuth | None, dict[str, str]]:
        """Basic auth for a confidential client; a public one names itself in the form."""
        secret = self._client(client_id).get("client_secret")
        return (httpx.BasicAuth(client_id, secret), {}) if secret else (None, {"client_id": client_id})

    def _token(self, http: httpx.Client, client_id: str, form: dict[str, str]) -> str:
        auth, extra = self._client_auth(client_id)
        r = http.post(self.metadata["token_endpoint"], data={**form, **extra}, auth=auth or httpx.USE_CLIENT_DEFAULT)
        body = r.json()
        if r.status_code != 200:
            raise ProviderRefused(body.get("error", "?"), body.get("error_description", ""), r.status_code)
        return body["access_token"]

    def authorize(self, authorization_url: str, user: str, password: str) -> dict[str, str]:
        """What a browser sent to `authorization_url` (an authorization request, built by anyone)
        ends with once `user` signs in on the login form and consent is given (at once): the
        query of the redirect to the request's `redirect_uri` (`code`, `state`, `iss`), read
        from the Location header and never followed. Raises ProviderRefused when the provider
        turns the login or the request down."""
        redirect_uri = parse_qs(urlsplit(authorization_url).query)["redirect_uri"][0]
        with httpx.Client(timeout=PATIENCE_S) as browser:

            def follow(r: httpx.Response) -> httpx.Response | dict[str, str]:
                """Redirects up to the client's redirect URI, whose query it returns, or the page they end on."""
                for _ in range(10):
                    if not r.is_redirect:
                        return r
                    location = urljoin(str(r.url), r.headers["location"])
                    if location.startswith(redirect_uri):
                        return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
                    r = browser.get(location)
                raise AssertionError(f"more than 10 redirects, the last to {r.url}")

            reached = follow(browser.get(authorization_url))
            if isinstance(reached, httpx.Response):  # the login form
                assert reached.status_code == 200 and "<form" in reached.text, (reached.status_code, reached.text)
                reached = follow(browser.post(str(reached.url), data={"login": user, "password": password}))
        if isinstance(reached, httpx.Response):
            if reached.status_code == 401:
                raise ProviderRefused("login_failed", "the login form turned the login or password down", 401)
            raise ProviderRefused("interaction_failed", reached.text[-500:], reached.status_code)
        if "error" in reached:
            raise ProviderRefused(reached["error"], reached.get("error_description", ""))
        return reached

    def user_token(self, user: str, password: str, resource: str, scope: str = "openid query",
                   client_id: str = WEB_CLIENT) -> str:
        """The JWT access token `user` gets for `resource` through the authorization code flow
        with PKCE, as a browser would: the authorization request, the login form, consent
        (given at once) and the code exchange. Raises ProviderRefused when there is no token."""
        redirect_uri = self._client(client_id)["redirect_uris"][0]
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state = secrets.token_urlsafe(16)
        request = httpx.URL(self.metadata["authorization_endpoint"], params={
            "client_id": client_id, "response_type": "code", "redirect_uri": redirect_uri, "scope": scope,
            "resource": resource, "state": state, "code_challenge": challenge, "code_challenge_method": "S256"})
        reached = self.authorize(str(request), user, password)
        assert reached.get("state") == state, reached
        with httpx.Client(timeout=PATIENCE_S) as http:
            return self._token(http, client_id, {"grant_type": "authorization_code", "code": reached["code"],
                                                 "redirect_uri": redirect_uri, "code_verifier": verifier, "resource": resource})

    def app_token(self, client_id: str, resource: str, scope: str = "query") -> str:
        """The JWT access token an app (a client_credentials client) gets for `resource`."""
        with httpx.Client(timeout=PATIENCE_S) as http:
            return self._token(http, client_id, {"grant_type": "client_credentials", "resource": resource, "scope": scope})

    def register_client(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Dynamic client registration (RFC 7591), as an MCP client does it: the provider's answer,
        whose client_id user_token then takes (until the provider restarts and forgets it)."""
        r = httpx.post(self.metadata["registration_endpoint"], json=metadata, timeout=PATIENCE_S)
        body = r.json()
        if r.status_code != 201:
            raise ProviderRefused(body.get("error", "?"), body.get("error_description", ""), r.status_code)
        self.registered[body["client_id"]] = body
        return body


def standard_provider(folder: Path, access_token_ttl: int = 300,
                      users: dict[str, dict[str, Any]] = STANDARD_USERS) -> OidcProvider:
    """A provider, not yet started, with `users` (STANDARD_USERS unless given), the web client
    and two apps (one in group:eng, one in no group), and RESOURCE and OTHER_RESOURCE as
    audiences."""
    clients = [
        {"client_id": WEB_CLIENT, "client_secret": secrets.token_urlsafe(24), "redirect_uris": [REDIRECT_URI],
         "grant_types": ["authorization_code"], "response_types": ["code"], "token_endpoint_auth_method": "client_secret_basic"},
        {"client_id": APP_CLIENT, "client_secret": secrets.token_urlsafe(24), "grant_types": ["client_credentials"],
         "response_types": [], "redirect_uris": [], "groups": ["group:eng"]},
        {"client_id": BARE_APP_CLIENT, "client_secret": secrets.token_urlsafe(24), "grant_types": ["client_credentials"],
         "response_types": [], "redirect_uris": []},
    ]
    return OidcProvider(folder, users=users, clients=clients,
                        resources={RESOURCE: RESOURCE_SCOPE, OTHER_RESOURCE: RESOURCE_SCOPE}, access_token_ttl=access_token_ttl)
