"""Who is calling: the one place every edge (HTTP, MCP, tools, console, writes) turns request
headers into a principal.

`Authorization: Bearer <credential>` holds one of the server's keys (`qk_...`) or an access
token of a configured issuer. An app credential with the `act_as` right may add its end user's
token in `X-Quarry-User-Token`; the request then runs as that user, never wider than the app's
group allowlist and scopes, and the audit row names both. A second identity from any other
credential is refused: identity never comes from a body, and never from a header the server
cannot verify.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio.to_thread

from auth.config import AppConfig, IdentityConfig
from auth.jwks import NeedsFetch
from auth.keys import KeyStore
from auth.tokens import TokenVerifier, VerifiedToken
from retrieval.errors import Forbidden, Unauthenticated
from retrieval.types import Principal

USER_TOKEN_HEADER = "x-quarry-user-token"


@dataclass(frozen=True)
class Caller:
    principal: Principal
    key_id: str  # the credential that authenticated: a key's id, or `jwt:<issuer>:<subject>`
    app: str | None = None  # acting for a user: the app's principal id (the principal is the user's)

    @property
    def gate_id(self) -> str:
        """Whose rate and concurrency budget a request spends: an app acting for users spends
        one per user, so one busy user cannot starve the app's others."""
        return self.key_id if self.app is None else f"{self.key_id}/{self.principal.id}"


def require_scope(caller: Caller, scope: str) -> None:
    if scope not in caller.principal.scopes:
        raise Forbidden(f"this credential lacks the '{scope}' scope")


class Authenticator:
    """Keys and, when configured, tokens: both checked per request, nothing kept from a body."""

    def __init__(self, keys: KeyStore | None, identity: IdentityConfig | None = None,
                 verifier: TokenVerifier | None = None) -> None:
        self.keys = keys
        self.identity = identity
        self.verifier = verifier if verifier is not None else (TokenVerifier(identity) if identity else None)
        self._apps = {a.credential: a for a in identity.apps} if identity else {}

    @property
    def configured(self) -> bool:
        return self.keys is not None or self.verifier is not None

    def caller(self, authorization: str | None, user_token: str | None = None, may_fetch: bool = True) -> Caller:
        """The caller these headers prove, or a typed error: 401 for a credential that does not
        verify, 403 for an identity it may not present, 503 when an issuer's keys cannot be had.
        Without `may_fetch`, a check that would read an issuer's keys raises `NeedsFetch`."""
        if not self.configured:
            raise Unauthenticated("this server has no keys file; start it with --keys")
        if not authorization or authorization[:7].lower() != "bearer ":
            raise Unauthenticated("missing Authorization: Bearer <key or token> header")
        credential = authorization[7:].strip()
        if self.verifier is not None and TokenVerifier.looks_like_jwt(credential):
            token = self.verifier.verify(credential, may_fetch)
            own, cred_id, app_id = token.principal, token.credential, f"jwt:{token.issuer}:{token.sub}"
        else:
            if self.keys is None:
                raise Unauthenticated("missing or malformed API key")
            rec = self.keys.authenticate_key(credential)
            own, cred_id, app_id = rec.to_principal(), rec.key_id, f"key:{rec.key_id}"
        if user_token is None:
            return Caller(own, cred_id)
        app = self._apps.get(app_id)
        if app is None or not app.act_as:
            raise Forbidden("this credential may not act for a user: it has no act_as right")
        if self.verifier is None:  # an app entry exists only in an identity file, so a verifier does too
            raise Forbidden("this server verifies no user tokens")
        user = self.verifier.verify(user_token.strip(), may_fetch)
        return Caller(self._acting(app, own, user), cred_id, own.id)

    @staticmethod
    def _acting(app: AppConfig, own: Principal, user: VerifiedToken) -> Principal:
        """The user as `app` may present them: groups within its allowlist, scopes within its own."""
        if app.user_issuers is not None and user.issuer not in app.user_issuers:
            raise Forbidden("this app may not act for users of that issuer")
        allowed = set(app.groups)
        wider = [g for g in user.principal.groups if g not in allowed]
        if wider and app.wider_user == "refuse":
            raise Forbidden(f"the user holds {len(wider)} group(s) outside what this app may act for")
        p = user.principal
        scopes = p.scopes & own.scopes
        writes = {"write", "admin"} & scopes
        return Principal(p.id, tuple(g for g in p.groups if g in allowed), scopes,
                         narrowest(p.write_prefixes, own.write_prefixes) if writes else None)


def narrowest(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The ids both prefix sets allow (None: every id): of each pair where one prefix starts
    with the other, the longer one."""
    if a is None or b is None:
        return b if a is None else a
    both = [x if x.startswith(y) else y for x in a for y in b if x.startswith(y) or y.startswith(x)]
    return tuple(dict.fromkeys(both))


async def authenticated(auth: Authenticator, authorization: str | None, user_token: str | None = None) -> Caller:
    """`Authenticator.caller` from async code: checked on the event loop (keys and cached token
    keys cost microseconds), and in a worker thread only when an issuer's keys must be read."""
    try:
        return auth.caller(authorization, user_token, may_fetch=False)
    except NeedsFetch:
        return await anyio.to_thread.run_sync(auth.caller, authorization, user_token)
