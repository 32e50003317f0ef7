"""An issuer's public keys: fetched from its JWKS (found through discovery or named), or read
from a file, and cached with a bounded age.

Three rules keep a token check from ever answering on keys it should not trust:

- Keys are used at most `keys_max_age_s` after the last successful fetch. Past half that age a
  request tries a refresh and carries on with the cached keys if it fails; past the whole age
  the keys are dropped and a request that needs them is a retryable 503 (`IdentityUnavailable`).
- An unknown `kid` triggers a refresh, at most once per `refresh_interval_s`, so a token
  stream of invented kids cannot make the server hammer the provider. An unknown kid after
  that is a 401.
- Only public signature keys are kept: `kty` oct (a shared secret) and keys marked for
  encryption are dropped when the set is read.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import httpx
import jwt

from auth.config import IssuerConfig
from retrieval.errors import RetrievalUnavailable, Unauthenticated

log = logging.getLogger("quarry.auth")

MAX_DOCUMENT_BYTES = 512 * 1024  # a discovery document or JWKS larger than this is refused
MAX_KEYS = 100

# Which key type (and curve) each algorithm needs; anything else is refused before verifying.
_KEY_TYPE = {"RS256": ("RSA", None), "RS384": ("RSA", None), "RS512": ("RSA", None), "PS256": ("RSA", None),
             "PS384": ("RSA", None), "PS512": ("RSA", None), "ES256": ("EC", "P-256"), "ES384": ("EC", "P-384"),
             "ES512": ("EC", "P-521"), "EdDSA": ("OKP", None)}


class IdentityUnavailable(RetrievalUnavailable):
    """An issuer's keys cannot be had (its JWKS unreachable past the keys' age limit): the
    request is not answered, since any answer could hold more or fewer documents than the
    caller may read. Retryable."""


def token_refused(reason: str, detail: str) -> Unauthenticated:
    """The 401 of a token that does not verify: the reason class (`expired`, `wrong_audience`,
    `unknown_key`...) first in its message and in its context, nothing secret."""
    return Unauthenticated(f"token refused: {reason} ({detail})", reason=reason)


class NeedsFetch(Exception):
    """Raised instead of fetching when the caller asked not to block (an event loop): the
    caller runs the same check again in a worker thread."""


Fetch = Callable[[str, float], Mapping[str, Any]]


def fetch_json(url: str, timeout: float) -> Mapping[str, Any]:
    """GET `url` as a JSON object, at most `MAX_DOCUMENT_BYTES` within `timeout` in all (not
    per read: a server dripping a byte at a time is cut off); any failure raises OSError."""
    deadline = time.monotonic() + timeout
    try:
        with httpx.stream("GET", url, timeout=timeout, follow_redirects=False,
                          headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise OSError(f"{url} answered {response.status_code}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise OSError(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise OSError(f"{url} took longer than {timeout:g} s")
    except httpx.HTTPError as e:
        raise OSError(f"{url}: {type(e).__name__}") from None
    try:
        doc = json.loads(bytes(body))
    except ValueError:
        raise OSError(f"{url} is not JSON") from None
    if not isinstance(doc, dict):
        raise OSError(f"{url} is not a JSON object")
    return doc


def public_signing_keys(jwks: Mapping[str, Any]) -> dict[str | None, dict]:
    """The usable keys of a JWK set by `kid`: public signature keys only."""
    keys = jwks.get("keys")
    if not isinstance(keys, list):
        raise OSError("the JWKS has no `keys` list")
    out: dict[str | None, dict] = {}
    for k in keys[:MAX_KEYS]:
        if not isinstance(k, dict) or k.get("kty") not in {"RSA", "EC", "OKP"} or k.get("use", "sig") != "sig":
            continue
        if any(private in k for private in ("d", "p", "q")):
            continue  # a private key published by mistake is not used (and not logged)
        out[k.get("kid") if isinstance(k.get("kid"), str) else None] = k
    return out


@dataclass
class _State:
    keys: dict[str | None, dict]
    fetched_at: float | None = None  # monotonic time of the last successful read
    attempted_at: float | None = None  # of the last try, successful or not
    jwks_uri: str | None = None


class KeySource:
    """The public keys of one issuer, safe to share between threads."""

    def __init__(self, cfg: IssuerConfig, fetch: Fetch = fetch_json, clock: Callable[[], float] = time.monotonic,
                 on_read: Callable[[str, bool], None] | None = None) -> None:
        """`on_read(issuer name, ok)` is told of every attempt to read the keys (a metric)."""
        self.cfg = cfg
        self._fetch = fetch
        self._clock = clock
        self._on_read = on_read
        self._state = _State({}, jwks_uri=cfg.jwks_uri)
        self._lock = threading.Lock()
        self._verifiers: dict[tuple[str | None, str], jwt.PyJWK] = {}
        self.generation = 0  # grows whenever the key set changes: verifications of an older one are redone

    # -- reading the keys ----------------------------------------------------------------------
    def _read(self) -> dict[str | None, dict]:
        if self.cfg.jwks_file is not None:
            try:
                return public_signing_keys(json.loads(Path(self.cfg.jwks_file).read_text()))
            except ValueError as e:
                raise OSError(f"{self.cfg.jwks_file} is not a JWK set: {e}") from None
        if self._state.jwks_uri is None:
            url = self.cfg.issuer.rstrip("/") + "/.well-known/openid-configuration"
            doc = self._fetch(url, self.cfg.fetch_timeout_s)
            if doc.get("issuer") != self.cfg.issuer:
                raise OSError(f"{url} names issuer {doc.get('issuer')!r}, not {self.cfg.issuer!r}")
            uri = doc.get("jwks_uri")
            # keys over plain HTTP only from an issuer that is itself plain HTTP (a test or a loopback provider)
            schemes = ("https://", "http://") if self.cfg.issuer.startswith("http://") else ("https://",)
            if not isinstance(uri, str) or not uri.startswith(schemes):
                raise OSError(f"{url} names no usable jwks_uri")
            self._state.jwks_uri = uri
        return public_signing_keys(self._fetch(self._state.jwks_uri, self.cfg.fetch_timeout_s))

    def refresh(self, now: float | None = None) -> bool:
        """Read the keys now (the caller holds no lock); False, logged, when they cannot be had."""
        with self._lock:
            return self._refresh_locked(self._clock() if now is None else now)

    def _refresh_locked(self, now: float) -> bool:
        self._state.attempted_at = now
        try:
            keys = self._read()
        except OSError as e:
            log.warning("keys of issuer %s cannot be read: %s", self.cfg.name, e)
            if self._on_read is not None:
                self._on_read(self.cfg.name, False)
            return False
        if self._on_read is not None:
            self._on_read(self.cfg.name, True)
        if keys != self._state.keys:
            self._verifiers.clear()
            self.generation += 1
        self._state.keys, self._state.fetched_at = keys, now
        return True

    @contextmanager
    def _locked(self, may_fetch: bool) -> Iterator[None]:
        """The lock; without `may_fetch` (an event loop) never waited for: a fetch in another
        thread holds it, so the check moves to a worker thread rather than stall the loop."""
        if not self._lock.acquire(blocking=may_fetch):
            raise NeedsFetch
        try:
            yield
        finally:
            self._lock.release()

    def _may_try(self, now: float) -> bool:
        last = self._state.attempted_at
        return last is None or now - last >= self.cfg.refresh_interval_s

    # -- the key for one token -----------------------------------------------------------------
    def check_fresh(self, may_fetch: bool = True) -> int:
        """Keys young enough to trust (refreshed first when past half their age), else
        `IdentityUnavailable`; returns the key set's generation. Every token check passes here,
        a remembered verification included."""
        with self._locked(may_fetch):
            self._fresh_locked(self._clock(), may_fetch)
            return self.generation

    def _fresh_locked(self, now: float, may_fetch: bool) -> None:
        st = self._state
        age = None if st.fetched_at is None else now - st.fetched_at
        if (age is None or age >= self.cfg.keys_max_age_s / 2) and self._may_try(now):
            if not may_fetch:
                raise NeedsFetch
            self._refresh_locked(now)
            age = None if st.fetched_at is None else now - st.fetched_at
        if age is None or age >= self.cfg.keys_max_age_s:
            if st.keys:
                st.keys = {}
                self.generation += 1
            raise IdentityUnavailable(f"the keys of issuer {self.cfg.name!r} cannot be had; retry later")

    def key_for(self, kid: str | None, alg: str, may_fetch: bool = True) -> tuple[jwt.PyJWK, int]:
        """The key that must have signed a token with header `kid` and `alg`, and the key set's
        generation it came from. Without `may_fetch`, a check that would read the keys raises
        `NeedsFetch` instead."""
        now = self._clock()
        with self._locked(may_fetch):
            self._fresh_locked(now, may_fetch)
            jwk = self._pick(kid)
            if jwk is None and self._may_try(now):
                if not may_fetch:
                    raise NeedsFetch
                if not self._refresh_locked(now):
                    raise IdentityUnavailable(f"the keys of issuer {self.cfg.name!r} cannot be had; retry later")
                jwk = self._pick(kid)
            if jwk is None:
                raise token_refused("unknown_key", "no key of the issuer has this kid")
            return self._verifier(kid, alg, jwk), self.generation

    def _pick(self, kid: str | None) -> dict | None:
        keys = self._state.keys
        if kid is not None:
            return keys.get(kid)
        return next(iter(keys.values())) if len(keys) == 1 else None

    def _verifier(self, kid: str | None, alg: str, jwk: dict) -> jwt.PyJWK:
        kty, crv = _KEY_TYPE[alg]
        if jwk.get("kty") != kty or (crv is not None and jwk.get("crv") != crv) or jwk.get("alg", alg) != alg:
            raise token_refused("algorithm_mismatch", "the token's algorithm does not match the key's")
        cached = self._verifiers.get((kid, alg))
        if cached is None:
            try:
                cached = self._verifiers[(kid, alg)] = jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError:
                raise token_refused("unknown_key", "the issuer's key cannot be used") from None
        return cached
