"""End-user and app access tokens (JWT) checked against the configured issuers, and their
claims mapped to a principal.

PyJWT does the cryptography: it is maintained, already a dependency of the MCP SDK the server
runs, parses JWKs into `cryptography` keys and binds each to one algorithm (`PyJWK`), whose
own `verify` checks a signature, so a token's header cannot pick HMAC over a public key. What
is checked here, in order, before any signature work: the token's size, that it parses, that
its `iss` is configured, that its `alg` is one the issuer allows and fits the key's type. Then
the signature with the issuer's key for its `kid`, and `exp` (required), `nbf`, `iat`, `iss`
and `aud` with the issuer's clock skew (`check_claims`: PyJWT's whole-token decode parses the
token three times, which made a first check cost 180 us against 40 us of signature).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

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
    sub: str | None = None  # the token's own `sub`: what an app is known by (never a claim its user may edit)

    @property
    def credential(self) -> str:
        """Its id in audit rows and rate limits; never the token itself."""
        return f"jwt:{self.issuer}:{self.subject}"


def _string_list(value: Any, spaced: bool) -> list[str]:
    """A claim holding names: a JSON list of strings; a single string is one name, or, for
    `spaced` claims (`scope`, RFC 8693), names separated by spaces."""
    if isinstance(value, str):
        return value.split() if spaced else [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def principal_from_claims(cfg: IssuerConfig, claims: Mapping[str, Any]) -> Principal:
    """The principal a verified token stands for. Groups and scopes the configuration does
    not accept are dropped (which narrows, never widens); a principal claim that is missing
    or not a valid id refuses the token."""
    claimed = claims.get(cfg.principal_claim)
    pid = cfg.principal_prefix + claimed if isinstance(claimed, str) else None
    if pid is None or not _NAME.fullmatch(pid) or pid == "public" or pid.startswith("group:"):
        raise token_refused("claim_invalid", f"claim {cfg.principal_claim!r} is not a usable principal id")
    groups: list[str] = []
    if cfg.groups_claim is not None:
        for g in _string_list(claims.get(cfg.groups_claim), spaced=False)[:MAX_GROUPS]:
            if g.startswith(cfg.group_prefix):
                name = g[len(cfg.group_prefix):]
                if _NAME.fullmatch(name):
                    groups.append(name)
    granted = _string_list(claims.get("scope"), spaced=True) or _string_list(claims.get("scp"), spaced=True)
    scopes = {s[len(cfg.scope_prefix):] for s in granted if s.startswith(cfg.scope_prefix)} & set(cfg.allowed_scopes)
    return Principal(pid, tuple(dict.fromkeys(groups)), frozenset(scopes),
                     cfg.write_prefixes if "write" in scopes or "admin" in scopes else None)


_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
MEMO_SIZE = 4096


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.nan
    if not math.isfinite(number):
        raise token_refused("invalid", f"its {name!r} is not a finite number")
    return number


def check_claims(claims: Mapping[str, Any], cfg: IssuerConfig, now: float) -> None:
    """RFC 7519's registered claims against the issuer's settings (the signature already
    holds): `iss` exactly, `aud` one of ours (a string or a list), `exp` required and not past,
    `nbf` and `iat` not in the future, all with `clock_skew_s` of leeway."""
    if claims.get("iss") != cfg.issuer:
        raise token_refused("unknown_issuer", "its iss is not an issuer this server trusts")
    aud = claims.get("aud")
    if aud is None:
        raise token_refused("claim_missing", "it has no 'aud' claim")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if not any(isinstance(a, str) and a in cfg.audience for a in audiences):
        raise token_refused("wrong_audience", "it was not issued for this server")
    exp = _number(claims, "exp")
    if exp is None:
        raise token_refused("claim_missing", "it has no 'exp' claim")
    skew = cfg.clock_skew_s
    if exp <= now - skew:
        raise token_refused("expired", "its exp is past")
    for name in ("nbf", "iat"):
        moment = _number(claims, name)
        if moment is not None and moment > now + skew:
            raise token_refused("not_yet_valid", "its nbf or iat is in the future")


def _unverified(token: str) -> tuple[dict, dict]:
    """Header and claims of a compact JWS, parsed once to pick the issuer and key (nothing in
    them is trusted until the signature holds); anything else is `malformed`."""
    parts = token.split(".")
    # an empty signature is let through to be refused by its `alg` ("none"), which says more
    if len(parts) != 3 or not all(_SEGMENT.fullmatch(p) for p in parts[:2]) or not _SEGMENT.fullmatch(parts[2] or "x"):
        raise token_refused("malformed", "not a signed JWT")
    try:
        header, claims = (json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2])
    except (ValueError, RecursionError):  # RecursionError: JSON nested past the parser's depth
        raise token_refused("malformed", "not a signed JWT") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise token_refused("malformed", "not a signed JWT")
    return header, claims


@dataclass(frozen=True)
class _Memo:
    """A verification to reuse: valid while the issuer's key set is the same generation and
    the token's own times hold (checked again on every use)."""

    token: VerifiedToken
    source: KeySource
    generation: int
    not_before: float
    expires: float


class TokenVerifier:
    """Verifies tokens of the issuers of one identity configuration.

    A token is verified once and its result remembered (by the token's SHA-256, at most
    `MEMO_SIZE` of them): an app sends the same token for minutes, and a signature check is most
    of a request's cost. A remembered result is used only while its issuer's key set is
    unchanged and fresh (`KeySource.check_fresh`, so an outage still ends in 503 at the keys'
    age limit) and its `exp`/`nbf` still hold by the clock with the issuer's skew."""

    def __init__(self, config: IdentityConfig, fetch: Fetch = fetch_json, clock: Callable[[], float] = time.monotonic,
                 on_read: Callable[[str, bool], None] | None = None, wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.sources = {i.issuer: KeySource(i, fetch, clock, on_read) for i in config.issuers}
        self._max_bytes = max((i.max_token_bytes for i in config.issuers), default=0)
        self._wall = wall
        self._memo: OrderedDict[bytes, _Memo] = OrderedDict()
        self._memo_lock = threading.Lock()

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
        if not self.sources:
            raise token_refused("unknown_issuer", "this server trusts no issuer")
        if len(token) > self._max_bytes:
            raise token_refused("too_large", f"tokens are at most {self._max_bytes} bytes")
        digest = hashlib.sha256(token.encode()).digest()
        with self._memo_lock:
            memo = self._memo.get(digest)
            if memo is not None:
                self._memo.move_to_end(digest)
        if memo is not None:
            generation = memo.source.check_fresh(may_fetch)
            now, skew = self._wall(), memo.source.cfg.clock_skew_s
            if now > memo.expires + skew:
                raise token_refused("expired", "its exp is past")
            if now < memo.not_before - skew:
                raise token_refused("not_yet_valid", "its nbf or iat is in the future")
            if generation == memo.generation:
                return memo.token
        verified, source, generation, claims = self._verify(token, may_fetch)
        not_before = max(_number(claims, "nbf") or 0.0, _number(claims, "iat") or 0.0)
        with self._memo_lock:
            self._memo[digest] = _Memo(verified, source, generation, not_before, _number(claims, "exp") or 0.0)
            if len(self._memo) > MEMO_SIZE:
                self._memo.popitem(last=False)
        return verified

    def _verify(self, token: str, may_fetch: bool) -> tuple[VerifiedToken, KeySource, int, Mapping[str, Any]]:
        header, unverified = _unverified(token)
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
        key, generation = source.key_for(kid if isinstance(kid, str) else None, alg, may_fetch)
        signing_input, _, signature = token.rpartition(".")
        try:
            raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
            valid = key.Algorithm.verify(signing_input.encode(), key.key, raw)
        except (ValueError, TypeError):
            valid = False
        if not valid:
            raise token_refused("bad_signature", "its signature does not verify")
        check_claims(unverified, cfg, self._wall())
        principal = principal_from_claims(cfg, unverified)
        sub = unverified.get("sub")
        return (VerifiedToken(cfg.name, principal.id, principal, sub if isinstance(sub, str) else None), source, generation,
                unverified)
