"""End-user and app access tokens (JWT) checked against the configured issuers, and their
claims mapped to a principal.

PyJWT does the cryptography: it is maintained, already a dependency of the MCP SDK the server
runs, requires the accepted algorithms on every decode, and binds a JWK to one algorithm, so a
token's header cannot pick HMAC over a public key. What is checked here, in order, before any
signature work: the token's size, that it parses, that its `iss` is configured, that its
`alg` is one the issuer allows. Then the signature with the issuer's key for its `kid`, and
`exp` (required), `nbf`, `iat`, `iss` and `aud` with the issuer's clock skew.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import jwt

from auth.config import IdentityConfig, IssuerConfig
from auth.jwks import Fetch, KeySource, fetch_json, token_refused
from retrieval.types import Principal

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")
MAX_GROUPS = 256


@dataclass(frozen=True)
class VerifiedToken:
    """A token whose signature and times held, and the principal its claims map to."""

    issuer: str  # the issuer's configured name
    subject: str  # the mapped principal id
    principal: Principal
    claims: Mapping[str, Any]

    @property
    def credential(self) -> str:
        """Its id in audit rows and rate limits; never the token itself."""
        return f"jwt:{self.issuer}:{self.subject}"


def _string_list(value: Any) -> list[str]:
    """A claim holding names: a JSON list of strings, or one space-separated string."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def principal_from_claims(cfg: IssuerConfig, claims: Mapping[str, Any]) -> Principal:
    """The principal a verified token stands for. Groups and scopes the configuration does
    not accept are dropped (which narrows, never widens); a principal claim that is missing
    or not a valid id refuses the token."""
    pid = claims.get(cfg.principal_claim)
    if not isinstance(pid, str) or not _NAME.fullmatch(pid) or pid == "public" or pid.startswith("group:"):
        raise token_refused("claim_invalid", f"claim {cfg.principal_claim!r} is not a usable principal id")
    groups: list[str] = []
    if cfg.groups_claim is not None:
        for g in _string_list(claims.get(cfg.groups_claim))[:MAX_GROUPS]:
            if g.startswith(cfg.group_prefix):
                name = g[len(cfg.group_prefix):]
                if _NAME.fullmatch(name):
                    groups.append(name)
    granted = _string_list(claims.get("scope")) or _string_list(claims.get("scp"))
    scopes = {s[len(cfg.scope_prefix):] for s in granted if s.startswith(cfg.scope_prefix)} & set(cfg.allowed_scopes)
    return Principal(pid, tuple(dict.fromkeys(groups)), frozenset(scopes),
                     cfg.write_prefixes if "write" in scopes or "admin" in scopes else None)


class TokenVerifier:
    """Verifies tokens of the issuers of one identity configuration."""

    def __init__(self, config: IdentityConfig, fetch: Fetch = fetch_json, clock: Callable[[], float] = time.monotonic,
                 on_read: Callable[[str, bool], None] | None = None) -> None:
        self.config = config
        self.sources = {i.issuer: KeySource(i, fetch, clock, on_read) for i in config.issuers}
        self._max_bytes = max((i.max_token_bytes for i in config.issuers), default=0)

    @staticmethod
    def looks_like_jwt(credential: str) -> bool:
        """Three base64url parts: a token, not one of the server's keys."""
        return credential.count(".") == 2 and not credential.startswith("qk_")

    def prime(self) -> None:
        """Fetch every issuer's keys once at start (a failure is logged; requests retry)."""
        for source in self.sources.values():
            source.refresh()

    def verify(self, token: str, may_fetch: bool = True) -> VerifiedToken:
        """The verified token, or a refused token (401) / `IdentityUnavailable` (503). Without
        `may_fetch`, a check that would read an issuer's keys raises `NeedsFetch`."""
        if len(token) > self._max_bytes:
            raise token_refused("too_large", f"tokens are at most {self._max_bytes} bytes")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise token_refused("malformed", "not a signed JWT") from None
        iss = unverified.get("iss")
        source = self.sources.get(iss) if isinstance(iss, str) else None
        if source is None:
            raise token_refused("unknown_issuer", "its iss is not an issuer this server trusts")
        cfg = source.cfg
        if len(token) > cfg.max_token_bytes:
            raise token_refused("too_large", f"tokens of this issuer are at most {cfg.max_token_bytes} bytes")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in cfg.algorithms:
            raise token_refused("algorithm_not_allowed", f"the issuer's tokens are signed with {list(cfg.algorithms)}")
        kid = header.get("kid")
        key = source.key_for(kid if isinstance(kid, str) else None, alg, may_fetch)
        try:
            claims = jwt.decode(token, key=key, algorithms=[alg], audience=list(cfg.audience), issuer=cfg.issuer,
                                leeway=cfg.clock_skew_s, options={"require": ["exp", "iss", "aud"]})
        except jwt.ExpiredSignatureError:
            raise token_refused("expired", "its exp is past") from None
        except jwt.ImmatureSignatureError:
            raise token_refused("not_yet_valid", "its nbf or iat is in the future") from None
        except jwt.InvalidAudienceError:
            raise token_refused("wrong_audience", "it was not issued for this server") from None
        except jwt.InvalidIssuerError:
            raise token_refused("unknown_issuer", "its iss is not an issuer this server trusts") from None
        except jwt.MissingRequiredClaimError as e:
            raise token_refused("claim_missing", f"it has no {e.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise token_refused("bad_signature", "its signature does not verify") from None
        except jwt.PyJWTError as e:
            raise token_refused("invalid", type(e).__name__) from None
        principal = principal_from_claims(cfg, claims)
        return VerifiedToken(cfg.name, principal.id, principal, claims)
