"""What verifying an end user's token costs next to an API key, in the same run.

    .venv/bin/python benchmarks/auth_cost.py [--requests 100] [--port 8766]

Two measurements, each interleaving the credentials call by call so drift of the machine
cancels out:
- in-process: `Authenticator.caller` for a key; a user token sent again and again (verified
  once, then remembered); a new token every call (verified in full each time: RS256, 2048-bit
  key, cached JWKS); an app token acting for a user token; 2000 calls each;
- over HTTP: a real `quarry serve` on the demo index with `--keys` and `--identity` (the
  issuer's keys from a `jwks_file`), `--requests` sequential requests per credential on one
  keep-alive connection, for `GET /v1/documents/{id}` (the cheapest authenticated call, where
  auth is the largest share) and `POST /v1/search` (bm25): p50 per credential, the p50 of the
  per-pair differences, and the ratio.
Writes benchmarks/results/auth_cost.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import http.client
import json
import secrets
import signal
import time
from typing import Callable

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from auth.caller import Authenticator
from auth.config import IdentityConfig, load_identity
from auth.keys import KeyStore
from benchmarks.common import CACHE, machine, make_embedder, write_json
from benchmarks.http_load import start_server
from retrieval.metrics import percentile
from routes.cli.demo import ensure_demo_index

ISSUER, AUDIENCE = "https://idp.bench.test", "https://quarry.bench.test"


def write_identity(folder: Path) -> tuple[Path, rsa.RSAPrivateKey]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())) | {"kid": "bench-1", "use": "sig", "alg": "RS256"}
    (folder / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    identity = {"issuers": [{"name": "bench", "issuer": ISSUER, "audience": [AUDIENCE], "jwks_file": str(folder / "jwks.json"),
                             "allowed_scopes": ["query"]}],
                "apps": [{"issuer": "bench", "subject": "rag-app", "act_as": True, "groups": ["finance", "sre"]}]}
    (folder / "identity.json").write_text(json.dumps(identity))
    return folder / "identity.json", key


def token(key: rsa.RSAPrivateKey, sub: str, groups: list[str]) -> str:
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 3600, "groups": groups,
                       "scope": "query", "jti": secrets.token_hex(8)}, key, algorithm="RS256", headers={"kid": "bench-1"})


Credentials = dict[str, Callable[[], tuple[str, str | None]]]


def credentials_of(key: str, signer: rsa.RSAPrivateKey) -> Credentials:
    """What each request sends: a key; one user token, sent again and again (an app's usual
    case: verified once, then remembered); a new user token every request (each verified in
    full); an app token acting for a user token."""
    user, app = token(signer, "bob", ["finance"]), token(signer, "rag-app", [])
    fresh = [token(signer, "bob", ["finance"]) for _ in range(2500)]
    return {"key": lambda: (key, None), "token": lambda: (user, None), "token_first_sight": lambda: (fresh.pop(), None),
            "app_for_user": lambda: (app, user)}


def in_process(auth: Authenticator, credentials: Credentials, n: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in credentials}
    for i in range(n + 50):
        for name, send in credentials.items():
            bearer, user = send()
            t0 = time.perf_counter()
            auth.caller(f"Bearer {bearer}", user, may_fetch=False)
            if i >= 50:
                times[name].append((time.perf_counter() - t0) * 1e6)
    return {name: round(percentile(v, 50), 1) for name, v in times.items()}


def over_http(port: int, method: str, path: str, body: dict | None, credentials: Credentials, n: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times: dict[str, list[float]] = {name: [] for name in credentials}
    data = json.dumps(body) if body is not None else None
    try:
        for i in range(n + 20):
            for name, send in credentials.items():
                bearer, user = send()
                headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
                if user is not None:
                    headers["X-Quarry-User-Token"] = user
                t0 = time.perf_counter()
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{name} {path}: {response.status}")
                if i >= 20:  # the first calls warm both sides
                    times[name].append((time.perf_counter() - t0) * 1000)
    finally:
        conn.close()
    key = times["key"]
    out: dict = {"p50_ms": {name: round(percentile(v, 50), 3) for name, v in times.items()}}
    out["p50_added_ms"] = {name: round(percentile([a - b for a, b in zip(v, key, strict=True)], 50), 3)
                           for name, v in times.items() if name != "key"}
    out["ratio_to_key"] = {name: round(percentile(v, 50) / percentile(key, 50), 3) for name, v in times.items() if name != "key"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--port", type=int, default=8766)
    args = ap.parse_args()

    folder = CACHE / "auth-cost"
    folder.mkdir(parents=True, exist_ok=True)
    identity_path, signer = write_identity(folder)
    keys_path = folder / "keys.json"
    keys_path.unlink(missing_ok=True)
    store = KeyStore(keys_path)
    key = store.add("bob", ["finance"], ["query"])[0]
    credentials = credentials_of(key, signer)

    identity: IdentityConfig = load_identity(identity_path)
    auth = Authenticator(store, identity)
    assert auth.verifier is not None
    auth.verifier.prime()  # as the server does at start
    local = in_process(auth, credentials, 2000)
    credentials = credentials_of(key, signer)
    print("in-process Authenticator.caller p50 (microseconds):", local)

    index = CACHE / "demo"
    ensure_demo_index(index, make_embedder())
    proc = start_server(index, keys_path, args.port, ("--identity", str(identity_path)))
    try:
        doc = over_http(args.port, "GET", "/v1/documents/faq-002", None, credentials, args.requests)
        credentials = credentials_of(key, signer)
        search = over_http(args.port, "POST", "/v1/search", {"query": "ledger lock timeout", "retriever": "bm25", "k": 8},
                           credentials, args.requests)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    print(f"GET /v1/documents/{{id}}, {args.requests} requests each:", doc)
    print(f"POST /v1/search (bm25), {args.requests} requests each:", search)
    write_json("auth_cost", {"machine": machine(), "requests": args.requests, "in_process_p50_us": local,
                             "get_document": doc, "search_bm25": search})


if __name__ == "__main__":
    main()
