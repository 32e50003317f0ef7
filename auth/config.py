"""The identity file: which token issuers the server trusts, how their claims map to a
principal, and which apps may act for their users.

It is one JSON file (`--identity FILE`), read at start and checked whole: an unknown field, an
HMAC or `none` algorithm, an issuer without a source of keys, or an app naming an issuer that
is not configured stops the server with the field's name, since a half-understood identity
setup is the one place where "carry on" means "let the wrong people in".

    {"issuers": [{"name": "corp", "issuer": "https://idp.example.com",
                  "audience": ["https://quarry.example.com"], "discovery": true,
                  "groups_claim": "groups", "allowed_scopes": ["query", "sql"]}],
     "apps": [{"key_id": "3f9a0c1d2e", "act_as": true, "groups": ["eng", "finance"]}],
     "resource": "https://quarry.example.com"}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from retrieval.errors import InvalidRequest
from retrieval.types import SCOPES, check_write_prefix

# Public-key algorithms only: an issuer's JWKS holds public keys, and an HMAC algorithm over a
# public key is the classic forgery (anyone holding the public key can sign).
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IssuerConfig(_Strict):
    """One identity provider whose access tokens the server accepts."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$", description="Short name, used in audit rows and metrics.")
    issuer: str = Field(min_length=1, max_length=512, description="The exact `iss` its tokens carry.")
    audience: tuple[str, ...] = Field(min_length=1, description="Accepted `aud` values: this server's own identifiers.")
    discovery: bool = Field(False, description="Find `jwks_uri` in <issuer>/.well-known/openid-configuration.")
    jwks_uri: str | None = Field(None, max_length=2048, description="Where its public keys are served.")
    jwks_file: Path | None = Field(None, description="Its public keys in a file (relative to the identity file), for "
                                   "hosts that reach no network.")
    algorithms: tuple[str, ...] = Field(("RS256",), min_length=1, description="Signature algorithms accepted.")
    principal_claim: str = Field("sub", min_length=1, description="The claim that is the principal id.")
    principal_prefix: str = Field("", max_length=32, pattern=r"^([A-Za-z0-9][A-Za-z0-9_.@-]*)?$",
                                  description="Put before every principal id of this issuer (e.g. `partner.`), so the "
                                  "users of two issuers cannot name each other.")
    groups_claim: str | None = Field("groups", description="The claim listing groups or roles (None: no groups).")
    group_prefix: str = Field("", description="Keep only groups starting with this, and strip it.")
    scope_prefix: str = Field("", description="Keep only scopes starting with this, and strip it.")
    allowed_scopes: tuple[str, ...] = Field(("query", "sql"), description="The most a token of this issuer may hold.")
    write_prefixes: tuple[str, ...] | None = Field(None, description="Ids its tokens may write (None: every id they "
                                                   "can read).")
    clock_skew_s: float = Field(60.0, ge=0, le=600, description="Leeway on exp, nbf and iat.")
    max_token_bytes: int = Field(8192, ge=256, le=65536, description="Longer tokens are refused before parsing.")
    keys_max_age_s: float = Field(3600.0, gt=0, description="Fetched keys are used at most this long without a "
                                  "successful refresh; past it, requests needing them get a retryable 503.")
    refresh_interval_s: float = Field(30.0, ge=0, description="Least time between two fetches of the keys "
                                      "(an unknown `kid` triggers one).")
    fetch_timeout_s: float = Field(5.0, gt=0, le=60, description="Time one fetch of the keys may take.")

    @field_validator("algorithms")
    @classmethod
    def _public_key_algorithms(cls, algs: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in algs if a not in ASYMMETRIC_ALGORITHMS]
        if bad:
            raise ValueError(f"algorithms {bad} are not accepted; use some of {list(ASYMMETRIC_ALGORITHMS)}")
        return algs

    @field_validator("allowed_scopes")
    @classmethod
    def _known_scopes(cls, scopes: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in scopes if s not in SCOPES]
        if bad:
            raise ValueError(f"unknown scopes {bad}; expected some of {list(SCOPES)}")
        return scopes

    @field_validator("write_prefixes")
    @classmethod
    def _valid_prefixes(cls, prefixes: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for prefix in prefixes or ():
            try:
                check_write_prefix(prefix)
            except InvalidRequest as e:
                raise ValueError(e.message) from None
        return prefixes

    @model_validator(mode="after")
    def _one_key_source(self) -> "IssuerConfig":
        sources = [s for s in (self.discovery, self.jwks_uri, self.jwks_file) if s]
        if len(sources) != 1:
            raise ValueError(f"issuer {self.name!r} needs exactly one of discovery, jwks_uri, jwks_file")
        return self


class AppConfig(_Strict):
    """An app credential (one of the server's keys, or an issuer's token for a client) and what
    it may do for its end users."""

    key_id: str | None = Field(None, description="The app's API key (its id, as `quarry keys list` shows).")
    issuer: str | None = Field(None, description="Or: the issuer name of the app's own token ...")
    subject: str | None = Field(None, description="... and that token's `sub` (a client id).")
    act_as: bool = Field(False, description="May send an end user's token in X-Quarry-User-Token.")
    user_issuers: tuple[str, ...] | None = Field(None, description="Issuers whose user tokens it may pass (None: all).")
    groups: tuple[str, ...] = Field((), description="The groups it may act for: the allowlist.")
    wider_user: Literal["refuse", "narrow"] = Field("refuse", description="A user with groups outside the allowlist: "
                                                    "refuse the request (403), or run it with the allowed ones only.")

    @model_validator(mode="after")
    def _one_credential(self) -> "AppConfig":
        if (self.key_id is None) == (self.issuer is None) or (self.issuer is None) != (self.subject is None):
            raise ValueError("an app is either key_id, or issuer with subject")
        return self

    @property
    def credential(self) -> str:
        """The id its credential has in a Caller (`key:<id>` or `jwt:<issuer>:<subject>`)."""
        return f"key:{self.key_id}" if self.key_id is not None else f"jwt:{self.issuer}:{self.subject}"


class IdentityConfig(_Strict):
    issuers: tuple[IssuerConfig, ...] = ()
    apps: tuple[AppConfig, ...] = ()
    resource: str | None = Field(None, max_length=2048, description="This server's own URL: the audience MCP clients "
                                 "ask tokens for, published in /.well-known/oauth-protected-resource.")
    scopes_supported: tuple[str, ...] = Field(("query", "sql"), description="Scopes named in the resource metadata.")

    @model_validator(mode="after")
    def _references(self) -> "IdentityConfig":
        names = [i.name for i in self.issuers]
        if len(set(names)) != len(names):
            raise ValueError("issuer names must be unique")
        if len({i.issuer for i in self.issuers}) != len(names):
            raise ValueError("two issuers share one `issuer` value")
        for app in self.apps:
            for ref in (app.issuer, *(app.user_issuers or ())):
                if ref is not None and ref not in names:
                    raise ValueError(f"app {app.credential!r} names issuer {ref!r}, which is not configured")
        creds = [a.credential for a in self.apps]
        if len(set(creds)) != len(creds):
            raise ValueError("two apps share one credential")
        return self

    def issuer_named(self, name: str) -> IssuerConfig:
        return next(i for i in self.issuers if i.name == name)


def load_identity(path: Path) -> IdentityConfig:
    """The identity file at `path`, checked whole; any problem is an `invalid_request` naming it."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InvalidRequest(f"identity file {path} is unreadable: {type(e).__name__}: {e}") from None
    for issuer in raw.get("issuers", []) if isinstance(raw, dict) and isinstance(raw.get("issuers"), list) else []:
        keys = issuer.get("jwks_file") if isinstance(issuer, dict) else None
        if isinstance(keys, str) and not Path(keys).is_absolute():  # relative to the identity file, not the cwd
            issuer["jwks_file"] = str(Path(path).resolve().parent / keys)
    try:
        return IdentityConfig.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}" for err in e.errors())
        raise InvalidRequest(f"identity file {path}: {problems}") from None
