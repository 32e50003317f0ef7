"""Who may write what, over real HTTP: a key writes only ids within its write prefixes (outside
them every write is one identical 403, decided before the id is looked up), a write keeps its
writer among the readers, an admin can clean up anything, and ids that read alike are one id."""

from __future__ import annotations

import json

import httpx
import pytest

from routes.service.write_access import OUTSIDE_PREFIXES
from tests.conftest import MINI, LiveServer, StatementLog

HIDDEN = [f"vault-{i:02d}" for i in range(35)]  # exist, readable by group:vault only
MISSING = [f"vault-{i:02d}" for i in range(35, 70)]  # never existed
PAGE = b"<html><body><main><p>Quarterly vault inventory: 14 crates of Pellmarch seed stock.</p></main></body></html>"


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    root = tmp_path_factory.mktemp("prefixes")
    vault = root / "vault"
    vault.mkdir()
    (vault / "vault.jsonl").write_text("".join(
        json.dumps({"id": i, "text": f"Vault ledger entry {i}: sealed.", "acl": ["group:vault"]}) + "\n" for i in HIDDEN))
    index = root / "index"
    build_snapshot([MINI, vault], index, embedder)
    store = KeyStore(root / "keys.json")
    keys = {
        "team-a": store.add("cms", ["content"], ["query", "write"], ["team-a-"])[0],  # prefixes exclude vault-*
        "vaulter": store.add("intruder", ["content"], ["query", "write"], ["vault-"])[0],  # prefixes include them
        "wendy": store.add("wendy", ["content"], ["query", "write"])[0],  # no prefixes: every id, as before
        "vera": store.add("vera", ["vault"], ["query"])[0],
        "ops": store.add("ops", [], ["query", "admin"])[0],
    }
    settings = Settings(index_dir=index, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64,
                        reload_interval_s=0)
    app = create_app(settings, keys=store)
    with LiveServer(app) as live:
        live.keys, live.app = keys, app
        yield live


def _h(server, who: str, **extra: str) -> dict:
    return {"Authorization": f"Bearer {server.keys[who]}", **extra}


def _generation(server) -> int:
    return httpx.get(server.url + "/readyz", headers=_h(server, "ops"), timeout=30).json()["index_generation"]


def _attempts(server, who: str, doc_id: str) -> dict[str, tuple[int, str]]:
    """Every write path's answer (status, body) for `doc_id`, by `who`."""
    url, h = server.url + "/v1/documents/" + doc_id, _h(server, who)
    body = {"text": "Replaced.", "acl": ["group:content"]}
    answers = {
        "put": httpx.put(url, json=body, headers=h, timeout=30),
        "put_file": httpx.put(url, params={"acl": "group:content"}, content=PAGE,
                              headers={**h, "Content-Type": "text/html"}, timeout=30),
        "delete": httpx.delete(url, headers=h, timeout=30),
        "patch": httpx.patch(url + "/acl", json={"acl": ["group:content"]}, headers=h, timeout=30),
        "batch": httpx.post(server.url + "/v1/documents:batch", headers=h, timeout=30,
                            json={"operations": [{"op": "delete", "id": doc_id}]}),
    }
    out = {name: (r.status_code, r.text) for name, r in answers.items()}
    for name, arguments in (("upsert_document", {"doc_id": doc_id, "text": "x", "acl": ["group:content"]}),
                            ("delete_document", {"doc_id": doc_id}),
                            ("set_document_acl", {"doc_id": doc_id, "acl": ["group:content"]})):
        r = httpx.post(server.url + "/v1/tools/call", headers=h, timeout=30,
                       json={"call_id": "c", "name": name, "arguments": arguments})
        out[name] = (r.status_code, json.dumps(r.json()["error"], sort_keys=True))
    return out


def _base_catalog(server):
    with server.app.state.quarry.service.runtime.generations.lease() as served:
        return (served.engine.base or served.engine.snapshot).catalog


def test_outside_its_prefixes_a_key_gets_one_answer_for_every_id_and_no_lookup_is_made(server, monkeypatch):
    from routes.service.service import Service

    parsed: list[str] = []
    real_change = Service.change
    monkeypatch.setattr(Service, "change", lambda self, w, *rest: parsed.append(w.doc_id) or real_change(self, w, *rest))
    before = _generation(server)
    with StatementLog(_base_catalog(server)) as statements:
        answers = {doc_id: _attempts(server, "team-a", doc_id) for doc_id in HIDDEN + MISSING}
    first = answers[HIDDEN[0]]
    assert all(a == first for a in answers.values())  # status and body, byte for byte, per path
    for name, (status, body) in first.items():
        error = json.loads(body)["error"] if status != 200 else None
        if name in ("upsert_document", "delete_document", "set_document_acl"):
            assert status == 200 and json.loads(body) == {"code": "access_denied", "message": OUTSIDE_PREFIXES,
                                                          "retryable": False}, (name, body)
        else:
            assert status == 403 and error == {"code": "forbidden", "message": OUTSIDE_PREFIXES, "retryable": False}
    assert not [s for s in statements.statements if any(str(p).startswith("vault-") for p in s[1])]  # never looked up
    assert parsed == []  # no body was parsed or extracted
    assert _generation(server) == before

    # The same log sees the lookups of a key whose prefixes hold the ids: the rule inside them is
    # the read rule (an unreadable existing id is 404, a new id is created).
    with StatementLog(_base_catalog(server)) as statements:
        hidden = httpx.put(server.url + "/v1/documents/vault-00", json={"text": "x", "acl": ["group:content"]},
                           headers=_h(server, "vaulter"), timeout=30)
        gone = httpx.delete(server.url + "/v1/documents/vault-01", headers=_h(server, "vaulter"), timeout=30)
    assert hidden.status_code == gone.status_code == 404 and statements.with_param("vault-00")
    created = httpx.put(server.url + "/v1/documents/vault-69", json={"text": "x", "acl": ["group:content"]},
                        headers=_h(server, "vaulter"), timeout=60)
    assert created.status_code == 200 and created.json()["generation"] == before + 1
    assert httpx.delete(server.url + "/v1/documents/vault-69", headers=_h(server, "vaulter"), timeout=60).status_code == 200


def test_a_write_key_cannot_squat_an_id_or_plant_content_it_cannot_read_and_an_admin_can_clean_up(server):
    url = server.url + "/v1/documents/"
    before = _generation(server)
    squat = httpx.put(url + "squat-1", json={"text": "Mine now.", "acl": ["nobody-xyz"]}, headers=_h(server, "wendy"),
                      timeout=30)
    assert squat.status_code == 403 and squat.json()["error"]["code"] == "forbidden"
    assert "leaves out its writer" in squat.json()["error"]["message"] and "'group:content'" in squat.json()["error"]["message"]
    plant = httpx.put(url + "team-a-memo", json={"text": "Vault code is 0000.", "acl": ["group:vault"]},
                      headers=_h(server, "team-a"), timeout=30)
    no_acl = httpx.put(url + "squat-2", json={"text": "The index default keeps it to admins."}, headers=_h(server, "wendy"),
                       timeout=30)
    batch = httpx.post(server.url + "/v1/documents:batch", headers=_h(server, "wendy"), timeout=30, json={"operations": [
        {"op": "put", "id": "squat-3", "document": {"text": "x", "acl": ["group:content"]}},
        {"op": "put", "id": "squat-4", "document": {"text": "y", "acl": ["group:finance"]}}]})
    assert plant.status_code == no_acl.status_code == batch.status_code == 403
    assert _generation(server) == before

    # Publishing for readers the writer lacks is fine while the writer stays among them.
    shared = httpx.put(url + "team-a-memo", json={"text": "Vault audit notes.", "acl": ["group:vault", "group:content"]},
                       headers=_h(server, "team-a"), timeout=60)
    assert shared.status_code == 200
    drop_self = httpx.patch(url + "team-a-memo/acl", json={"acl": ["group:vault"]}, headers=_h(server, "team-a"), timeout=30)
    assert drop_self.status_code == 403 and "leaves out its writer" in drop_self.json()["error"]["message"]
    assert httpx.get(url + "team-a-memo", headers=_h(server, "vera"), timeout=30).status_code == 200

    # An admin may write any ACL, and delete or fix what it cannot read.
    orphan = httpx.put(url + "orphan", json={"text": "Nobody reads this.", "acl": ["nobody-xyz"]},
                       headers=_h(server, "ops"), timeout=60)
    assert orphan.status_code == 200
    assert httpx.get(url + "orphan", headers=_h(server, "ops"), timeout=30).status_code == 404  # ops cannot read it
    assert httpx.delete(url + "orphan", headers=_h(server, "wendy"), timeout=30).status_code == 404
    assert httpx.delete(url + "orphan", headers=_h(server, "ops"), timeout=60).status_code == 200
    fixed = httpx.patch(url + "vault-02/acl", json={"acl": ["group:vault", "group:archive"]}, headers=_h(server, "ops"),
                        timeout=60)
    assert fixed.status_code == 200
    assert httpx.delete(url + "team-a-memo", headers=_h(server, "ops"), timeout=60).status_code == 200


def test_look_alike_ids_are_refused_and_nfkc_equivalent_ids_name_one_document(server):
    url = server.url + "/v1/documents/"
    wendy = _h(server, "wendy")
    before = _generation(server)
    # fullwidth solidus, division slash, fraction slash, set minus, big solidus, a percent-encoded
    # dot segment and slash (sent encoded once more, so the server sees '%2e%2e' and '%2F')
    for raw in ("a%EF%BC%8Fb", "a%E2%88%95b", "a%E2%81%84b", "a%E2%88%96b", "a%E2%A7%B8b", "%252e%252e", "a%252Fb",
                "%EF%BC%8E%EF%BC%8E"):
        for r in (httpx.put(url + raw, json={"text": "x", "acl": ["public"]}, headers=wendy, timeout=30),
                  httpx.delete(url + raw, headers=wendy, timeout=30),
                  httpx.patch(url + raw + "/acl", json={"acl": ["public"]}, headers=wendy, timeout=30)):
            assert r.status_code == 400, (raw, r.text)
            assert r.json()["error"]["code"] == "invalid_request" and "invalid document id" in r.json()["error"]["message"]
    tool = httpx.post(server.url + "/v1/tools/call", headers=wendy, timeout=30, json={
        "call_id": "c", "name": "upsert_document", "arguments": {"doc_id": "a\u2215b", "text": "x", "acl": ["public"]}})
    assert tool.json()["error"]["code"] == "invalid_arguments"
    assert _generation(server) == before

    fullwidth = "\uff29\uff2e\uff23-\uff17\uff17"  # 'ＩＮＣ-７７'
    put = httpx.put(url + fullwidth, json={"text": "Fullwidth Quarnell incident.", "acl": ["group:content"]},
                    headers=wendy, timeout=60)
    assert put.status_code == 200 and put.json()["documents"] == [{"op": "put", "doc_id": "INC-77"}]
    for spelling in ("INC-77", fullwidth):
        doc = httpx.get(url + spelling, headers=wendy, timeout=30)
        assert doc.status_code == 200 and doc.json()["doc_id"] == "INC-77"
    again = httpx.put(url + "INC-77", json={"text": "Replaced Quarnell incident.", "acl": ["group:content"]},
                      headers=wendy, timeout=60)
    assert again.json()["documents"] == [{"op": "put", "doc_id": "INC-77"}]
    hits = httpx.post(server.url + "/v1/search", json={"retriever": "exact", "query": "Quarnell", "k": 5}, headers=wendy,
                      timeout=60).json()["hits"]
    assert [h["doc_id"] for h in hits] == ["INC-77"]
    assert httpx.delete(url + fullwidth, headers=wendy, timeout=60).status_code == 200
    assert httpx.get(url + "INC-77", headers=wendy, timeout=30).status_code == 404
    # The prefix rule reads the normal form too.
    spelled = httpx.put(url + "\uff54\uff45\uff41\uff4d-\uff41-1", json={"text": "x", "acl": ["group:content"]},
                        headers=_h(server, "team-a"), timeout=60)
    assert spelled.status_code == 200 and spelled.json()["documents"][0]["doc_id"] == "team-a-1"
