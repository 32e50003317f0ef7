"""Token checks and key caching, with keys made here and an issuer's JWKS served from a dict
(the identity-provider tests in tests/system/test_identity.py use a real provider). The clock
is the test's, so ages and refresh intervals are exact without waiting."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from auth.caller import Authenticator
from auth.config import IdentityConfig, IssuerConfig
from auth.jwks import IdentityUnavailable, NeedsFetch
from auth.tokens import TokenVerifier, principal_from_claims
from retrieval.errors import Forbidden, InvalidRequest, Unauthenticated
from tests.auth.jwt_keys import AUD, ISS, Keys


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def issuer(**overrides: object) -> IssuerConfig:
    return IssuerConfig.model_validate({"name": "corp", "issuer": ISS, "audience": [AUD], "discovery": True} | overrides)


@pytest.fixture
def keys() -> Keys:
    k = Keys()
    k.add("k1")
    return k


@pytest.fixture
def clock() -> Clock:
    return Clock()


def verifier(keys: Keys, clock: Clock, **overrides: object) -> TokenVerifier:
    return TokenVerifier(IdentityConfig(issuers=(issuer(**overrides),)), fetch=keys.fetch, clock=clock)


def reason(exc: pytest.ExceptionInfo) -> str:
    assert isinstance(exc.value, Unauthenticated)
    return exc.value.context["reason"]


def test_a_valid_token_maps_to_its_principal_groups_and_scopes(keys, clock) -> None:
    v = verifier(keys, clock)
    token = v.verify(keys.sign("k1", groups=["eng", "finance"]))
    assert token.principal.id == "ana"
    assert token.principal.groups == ("eng", "finance")
    assert token.principal.scopes == frozenset({"query", "sql"})
    assert token.credential == "jwt:corp:ana"


@pytest.mark.parametrize("claims, expected", [
    ({"exp": int(time.time()) - 3600}, "expired"),
    ({"nbf": int(time.time()) + 3600}, "not_yet_valid"),
    ({"iat": int(time.time()) + 3600}, "not_yet_valid"),
    ({"aud": "https://other.test"}, "wrong_audience"),
    ({"iss": "https://elsewhere.test"}, "unknown_issuer"),
    ({"exp": None}, "claim_missing"),
    ({"sub": "group:admin"}, "claim_invalid"),
])
def test_tokens_outside_their_times_or_for_others_are_refused(keys, clock, claims, expected) -> None:
    with pytest.raises(Unauthenticated) as exc:
        verifier(keys, clock).verify(keys.sign("k1", **claims))
    assert reason(exc) == expected
    assert exc.value.http_status == 401


def test_clock_skew_is_bounded_by_the_issuer_setting(keys, clock) -> None:
    late = keys.sign("k1", exp=int(time.time()) - 30)
    assert verifier(keys, clock, clock_skew_s=60).verify(late).subject == "ana"
    with pytest.raises(Unauthenticated):
        verifier(keys, clock, clock_skew_s=5).verify(late)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_alg_none_and_hmac_over_the_public_key_are_refused(keys, clock) -> None:
    v = verifier(keys, clock)
    payload = jwt.decode(keys.sign("k1"), options={"verify_signature": False})
    unsigned = f"{_b64(json.dumps({'alg': 'none', 'kid': 'k1'}).encode())}.{_b64(json.dumps(payload).encode())}."
    with pytest.raises(Unauthenticated) as exc:
        v.verify(unsigned)
    assert reason(exc) == "algorithm_not_allowed"
    public_pem = keys.private["k1"].public_key().public_bytes(serialization.Encoding.PEM,
                                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    header = _b64(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    body = _b64(json.dumps(payload).encode())
    mac = hmac.new(public_pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
    with pytest.raises(Unauthenticated) as exc:
        v.verify(f"{header}.{body}.{_b64(mac)}")
    assert reason(exc) == "algorithm_not_allowed"


def test_a_tampered_payload_or_a_foreign_key_fails_the_signature(keys, clock) -> None:
    v = verifier(keys, clock)
    header, body, sig = keys.sign("k1").split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["groups"] = ["eng", "finance", "admin"]
    with pytest.raises(Unauthenticated) as exc:
        v.verify(f"{header}.{_b64(json.dumps(claims).encode())}.{sig}")
    assert reason(exc) == "bad_signature"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    forged = jwt.encode({"iss": ISS, "aud": AUD, "sub": "ana", "exp": now + 60}, stranger, algorithm="RS256",
                        headers={"kid": "k1"})
    with pytest.raises(Unauthenticated) as exc:
        v.verify(forged)
    assert reason(exc) == "bad_signature"


def test_a_key_of_another_type_than_the_algorithm_is_refused(keys, clock) -> None:
    v = verifier(keys, clock, algorithms=["RS256", "ES256"])
    now = int(time.time())
    ec_key = ec.generate_private_key(ec.SECP256R1())
    token = jwt.encode({"iss": ISS, "aud": AUD, "sub": "ana", "exp": now + 60}, ec_key, algorithm="ES256",
                       headers={"kid": "k1"})
    with pytest.raises(Unauthenticated) as exc:
        v.verify(token)
    assert reason(exc) == "algorithm_mismatch"


def test_oversized_and_malformed_tokens_are_refused_before_any_key_work(keys, clock) -> None:
    v = verifier(keys, clock, max_token_bytes=1024)
    with pytest.raises(Unauthenticated) as exc:
        v.verify(keys.sign("k1", pad="x" * 2000))
    assert reason(exc) == "too_large"
    with pytest.raises(Unauthenticated) as exc:
        v.verify("a.b.c")
    assert reason(exc) == "malformed"
    assert keys.fetches == 0


def test_an_unknown_kid_refreshes_at_most_once_per_interval(keys, clock) -> None:
    v = verifier(keys, clock, refresh_interval_s=30)
    v.verify(keys.sign("k1"))
    fetched = keys.fetches
    keys.add("k2")  # rotated at the provider: the new key is published first
    clock.now += 31
    assert v.verify(keys.sign("k2")).subject == "ana"  # unknown kid -> one refresh, then accepted
    assert keys.fetches == fetched + 1
    for _ in range(5):  # invented kids within the interval: refused without asking the provider
        with pytest.raises(Unauthenticated) as exc:
            v.verify(_with_kid(keys, "nope"))
        assert reason(exc) == "unknown_key"
    assert keys.fetches == fetched + 1


def _with_kid(keys: Keys, kid: str) -> str:
    now = int(time.time())
    return jwt.encode({"iss": ISS, "aud": AUD, "sub": "ana", "exp": now + 60}, keys.private["k1"], algorithm="RS256",
                      headers={"kid": kid})


def test_cached_keys_serve_while_the_provider_is_down_until_their_age_limit(keys, clock) -> None:
    v = verifier(keys, clock, keys_max_age_s=600, refresh_interval_s=30)
    token = keys.sign("k1")
    v.verify(token)
    keys.down = True
    clock.now += 400  # past half the age: a refresh is tried, fails, the cached keys still serve
    assert v.verify(token).subject == "ana"
    clock.now += 250  # past the whole age: no answer on keys that old
    with pytest.raises(IdentityUnavailable) as exc:
        v.verify(token)
    assert exc.value.http_status == 503 and exc.value.retryable
    keys.down = False
    clock.now += 31
    assert v.verify(token).subject == "ana"


def test_a_check_that_must_fetch_says_so_instead_of_blocking(keys, clock) -> None:
    v = verifier(keys, clock)
    with pytest.raises(NeedsFetch):
        v.verify(keys.sign("k1"), may_fetch=False)
    v.verify(keys.sign("k1"))
    assert v.verify(keys.sign("k1"), may_fetch=False).subject == "ana"


def test_groups_and_scopes_are_narrowed_by_prefix_and_allowlist() -> None:
    cfg = issuer(group_prefix="quarry-", scope_prefix="quarry:", allowed_scopes=["query"])
    p = principal_from_claims(cfg, {"sub": "bo", "groups": ["quarry-eng", "other", "quarry-bad name"],
                                    "scope": "quarry:query quarry:admin openid"})
    assert p.groups == ("eng",)
    assert p.scopes == frozenset({"query"})


def test_the_identity_file_refuses_hmac_algorithms_and_dangling_references() -> None:
    with pytest.raises(ValueError, match="HS256"):
        issuer(algorithms=["HS256"])
    with pytest.raises(ValueError, match="invalid document id"):
        issuer(write_prefixes=["notes/"])
    with pytest.raises(ValueError, match="exactly one"):
        IssuerConfig.model_validate({"name": "x", "issuer": ISS, "audience": [AUD]})
    with pytest.raises(ValueError, match="not configured"):
        IdentityConfig.model_validate({"issuers": [issuer().model_dump()], "apps": [{"key_id": "abc", "act_as": True,
                                                                                     "user_issuers": ["nope"]}]})


def _app_identity(**app: object) -> IdentityConfig:
    return IdentityConfig.model_validate({"issuers": [issuer().model_dump()],
                                          "apps": [{"issuer": "corp", "subject": "rag-app", "act_as": True,
                                                    "groups": ["eng", "finance"]} | app]})


def test_an_app_acts_for_its_user_never_wider_than_its_allowlist(keys, clock) -> None:
    identity = _app_identity()
    auth = Authenticator(None, identity, TokenVerifier(identity, fetch=keys.fetch, clock=clock))
    app_token = keys.sign("k1", sub="rag-app", groups=[], scope="query")
    caller = auth.caller(f"Bearer {app_token}", keys.sign("k1", sub="bo", groups=["eng"], scope="query sql"))
    assert caller.principal.id == "bo" and caller.principal.groups == ("eng",)
    assert caller.principal.scopes == frozenset({"query"})  # the app's own scopes bound the user's
    assert caller.app == "rag-app" and caller.key_id == "jwt:corp:rag-app"
    with pytest.raises(Forbidden, match="outside"):
        auth.caller(f"Bearer {app_token}", keys.sign("k1", sub="cy", groups=["eng", "hr"]))
    narrow = _app_identity(wider_user="narrow")
    auth = Authenticator(None, narrow, TokenVerifier(narrow, fetch=keys.fetch, clock=clock))
    assert auth.caller(f"Bearer {app_token}", keys.sign("k1", sub="cy", groups=["eng", "hr"])).principal.groups == ("eng",)


def test_a_credential_without_act_as_cannot_present_a_user(keys, clock) -> None:
    identity = _app_identity(act_as=False)
    auth = Authenticator(None, identity, TokenVerifier(identity, fetch=keys.fetch, clock=clock))
    user = keys.sign("k1", sub="bo")
    with pytest.raises(Forbidden, match="act_as"):
        auth.caller(f"Bearer {keys.sign('k1', sub='rag-app')}", user)
    with pytest.raises(Forbidden, match="act_as"):  # a user's own token cannot present another user either
        auth.caller(f"Bearer {keys.sign('k1', sub='ana')}", user)
    with pytest.raises(ValueError, match="either key_id"):
        IdentityConfig.model_validate({"issuers": [], "apps": [{"key_id": "a", "issuer": "corp", "subject": "x"}]})


def test_a_remembered_verification_still_expires_and_ends_with_its_key(keys, clock) -> None:
    wall = [time.time()]
    v = TokenVerifier(IdentityConfig(issuers=(issuer(clock_skew_s=0, refresh_interval_s=0),)), fetch=keys.fetch, clock=clock,
                      wall=lambda: wall[0])
    token = keys.sign("k1", exp=int(wall[0]) + 60)
    assert v.verify(token).subject == "ana"
    fetched = keys.fetches
    assert v.verify(token).subject == "ana" and keys.fetches == fetched  # remembered: no key work
    wall[0] += 61
    with pytest.raises(Unauthenticated) as exc:
        v.verify(token)
    assert reason(exc) == "expired"
    wall[0] -= 61
    keys.add("k2")
    keys.published.remove("k1")  # the provider dropped the key that signed it
    clock.now += 10_000  # past the keys' half age: the next check reads them again
    with pytest.raises(Unauthenticated) as exc:
        v.verify(token)
    assert reason(exc) == "unknown_key"


def test_an_identity_file_reads_its_keys_file_beside_it(keys, tmp_path, monkeypatch) -> None:
    from auth.config import load_identity

    folder = tmp_path / "conf"
    folder.mkdir()
    keys.write_jwks(folder / "jwks.json")
    (folder / "identity.json").write_text(json.dumps({"issuers": [{"name": "corp", "issuer": ISS, "audience": [AUD],
                                                                   "jwks_file": "jwks.json"}]}))
    monkeypatch.chdir(tmp_path)  # not the identity file's folder
    verifier = TokenVerifier(load_identity(folder / "identity.json"))
    assert verifier.verify(keys.sign("k1")).subject == "ana"
    (folder / "bad.json").write_text(json.dumps({"issuers": [{"name": "corp", "issuer": ISS, "audience": [AUD]}],
                                                 "extra": 1}))
    with pytest.raises(InvalidRequest, match="extra"):
        load_identity(folder / "bad.json")


def test_a_check_on_the_event_loop_never_waits_for_a_fetch_in_another_thread(keys, clock) -> None:
    import threading

    release, fetching = threading.Event(), threading.Event()

    def slow(url: str, timeout: float) -> dict:
        fetching.set()
        release.wait(30)
        return keys.fetch(url, timeout)

    v = TokenVerifier(IdentityConfig(issuers=(issuer(),)), fetch=slow, clock=clock)
    token = keys.sign("k1")
    worker = threading.Thread(target=v.verify, args=(token,))
    worker.start()
    assert fetching.wait(30)
    with pytest.raises(NeedsFetch):  # the loop hands the check to a thread instead of blocking on the lock
        v.verify(keys.sign("k1", sub="bo"), may_fetch=False)
    release.set()
    worker.join(30)
    assert v.verify(keys.sign("k1", sub="bo"), may_fetch=False).subject == "bo"


def test_a_key_document_served_a_byte_at_a_time_is_cut_off_at_the_fetch_timeout() -> None:
    import socket
    import threading

    from auth.jwks import fetch_json

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    done = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        while not done.is_set():
            try:
                conn.sendall(b" ")
            except OSError:
                break
            done.wait(0.05)
        conn.close()

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        with pytest.raises(OSError, match="took longer"):
            fetch_json(f"http://127.0.0.1:{listener.getsockname()[1]}/jwks", timeout=2.0)  # 40x the drip interval
    finally:
        done.set()
        listener.close()


@pytest.mark.parametrize("exp", ["NaN", "Infinity", "1e400", '"soon"', "true"])
def test_a_time_claim_that_is_not_a_finite_number_is_refused(keys, clock, exp) -> None:
    v = verifier(keys, clock)
    header, body, _ = keys.sign("k1").split(".")
    text = json.dumps(json.loads(base64.urlsafe_b64decode(body + "==")) | {"exp": "EXP"}).replace('"EXP"', exp)
    signing_input = f"{header}.{_b64(text.encode())}"
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    sig = keys.private["k1"].sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    with pytest.raises(Unauthenticated) as exc:
        v.verify(f"{signing_input}.{_b64(sig)}")
    assert reason(exc) == "invalid"


def test_json_nested_past_the_parser_is_malformed_not_a_crash(keys, clock) -> None:
    with pytest.raises(Unauthenticated) as exc:
        verifier(keys, clock).verify(f"{_b64(b'[' * 3000)}.e30.x")
    assert reason(exc) == "malformed"


def test_a_groups_string_is_one_group_and_a_principal_prefix_keeps_issuers_apart() -> None:
    p = principal_from_claims(issuer(principal_prefix="partner."), {"sub": "alice", "groups": "Finance Admins"})
    assert p.id == "partner.alice" and p.groups == ()  # "Finance Admins" is one name, and not a valid one
    assert principal_from_claims(issuer(), {"sub": "alice", "groups": "finance"}).groups == ("finance",)


def test_discovery_that_names_keys_over_plain_http_is_not_used(keys, clock) -> None:
    def fetch(url: str, timeout: float) -> dict:
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISS, "jwks_uri": "http://idp.test/jwks"}
        return keys.jwks()

    v = TokenVerifier(IdentityConfig(issuers=(issuer(),)), fetch=fetch, clock=clock)
    with pytest.raises(IdentityUnavailable):
        v.verify(keys.sign("k1"))


def test_an_app_is_known_by_its_tokens_sub_and_acts_within_its_own_write_prefixes(keys, clock, tmp_path) -> None:
    from auth.caller import narrowest
    from auth.keys import KeyStore

    identity = IdentityConfig.model_validate({
        "issuers": [issuer(principal_claim="email", allowed_scopes=["query", "write"]).model_dump()],
        "apps": [{"issuer": "corp", "subject": "rag-app", "act_as": True, "groups": ["eng"]}]})
    store = KeyStore(tmp_path / "keys.json")
    app_key, rec = store.add("pipeline", [], ["query", "write"], write_prefixes=["pipeline-"])
    identity = identity.model_copy(update={"apps": (*identity.apps, *IdentityConfig.model_validate(
        {"issuers": [issuer().model_dump()], "apps": [{"key_id": rec.key_id, "act_as": True, "groups": ["eng"]}]}).apps)})
    auth = Authenticator(store, identity, TokenVerifier(identity, fetch=keys.fetch, clock=clock))
    user = keys.sign("k1", sub="u1", email="bo@corp.test", scope="query write")
    # a user whose editable email equals the app's subject is not the app
    with pytest.raises(Forbidden, match="act_as"):
        auth.caller(f"Bearer {keys.sign('k1', sub='u2', email='rag-app')}", user)
    acting = auth.caller(f"Bearer {app_key}", user)
    assert acting.principal.id == "bo@corp.test" and acting.principal.write_prefixes == ("pipeline-",)
    assert narrowest(("a-", "b-x"), ("a-1", "b-")) == ("a-1", "b-x") and narrowest(("a-",), ("b-",)) == ()
