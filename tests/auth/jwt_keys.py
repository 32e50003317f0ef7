"""RSA keys and the tokens they sign, for tests that need an identity provider without one:
its JWKS served from a dict (`fetch`) or written to a file (`write_jwks`, for an issuer's
`jwks_file`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISS = "https://idp.test"
AUD = "https://quarry.test"


class Keys:
    """RSA keys with kids, their public JWKS, and a fetch that serves it (or fails) and counts."""

    def __init__(self, issuer: str = ISS, audience: str = AUD) -> None:
        self.issuer, self.audience = issuer, audience
        self.private: dict[str, rsa.RSAPrivateKey] = {}
        self.published: list[str] = []
        self.fetches = 0
        self.down = False

    def add(self, kid: str) -> None:
        self.private[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.published.insert(0, kid)

    def jwks(self) -> dict:
        keys = []
        for kid in self.published:
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private[kid].public_key()))
            keys.append(jwk | {"kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def fetch(self, url: str, timeout: float) -> dict:
        self.fetches += 1
        if self.down:
            raise OSError("connection refused")
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": self.issuer, "jwks_uri": self.issuer + "/jwks"}
        return self.jwks()

    def sign(self, kid: str, **claims: object) -> str:
        """A token of `kid` for subject ana in group eng (claims given override; None drops one)."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": self.audience, "sub": "ana", "iat": now, "exp": now + 300, "groups": ["eng"],
                "scope": "query sql"} | claims
        return jwt.encode({k: v for k, v in body.items() if v is not None}, self.private[kid], algorithm="RS256",
                          headers={"kid": kid})
