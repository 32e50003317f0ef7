"""`POST /v1/admin/sync` over real HTTP: a running server keeps its index in step with the
folders its `sync_sources` setting names (the same sync as `quarry sync`, inside the process
that holds the write-ahead log): plan, apply, nothing left to read after; only admins; never a
path outside the setting; one sync at a time."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import LiveServer
from tests.system.test_sync import _backdate, folder


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    from auth.keys import KeyStore
    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from routes.service.settings import Settings

    root = tmp_path_factory.mktemp("sync-http")
    docs = folder(root)
    _backdate(*docs.iterdir())
    index = root / "index"
    build_snapshot([docs], index, embedder)
    store = KeyStore(root / "keys.json")
    keys = {"ops": store.add("ops", [], ["admin"])[0], "wendy": store.add("wendy", [], ["query", "write"])[0],
            "erin": store.add("erin", [], ["query"])[0]}
    settings = Settings(index_dir=index, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=16,
                        reload_interval_s=0.2, sync_sources=(str(docs),), write_batch_max=2)
    with LiveServer(create_app(settings, keys=store)) as live:
        live.keys, live.docs, live.index = keys, docs, index
        yield live


def _sync(server, who: str = "ops", **body) -> httpx.Response:
    return httpx.post(server.url + "/v1/admin/sync", json=body, headers={"Authorization": f"Bearer {server.keys[who]}"},
                      timeout=120)


def _found(server, text: str) -> list[str]:
    r = httpx.post(server.url + "/v1/search", json={"retriever": "exact", "query": f'"{text}"', "k": 5},
                   headers={"Authorization": f"Bearer {server.keys['erin']}"}, timeout=60)
    assert r.status_code == 200, r.text
    return sorted(h["doc_id"] for h in r.json()["hits"])


def test_the_server_plans_applies_and_then_reads_nothing(server):
    docs = server.docs
    (docs / "pump.md").write_text("# Pump 4\nThe Larkspur pump seal was replaced on Tuesday.\n")
    (docs / "gone.md").unlink()
    (docs / "new.md").write_text("# Pump 7\nThe Ormsby pump runs hot.\n")
    _backdate(docs / "pump.md", docs / "new.md")
    dry = _sync(server, dry_run=True)
    assert dry.status_code == 200, dry.text
    assert dry.json()["sync"] == {"put": ["new", "pump"], "acl": [], "delete": ["gone"], "unchanged": 1}
    assert dry.json()["files"] == {"read": 2, "unchanged_by_stamp": 1} and not dry.json()["applied"]
    assert _found(server, "Tessaly filter") == ["gone"]  # a dry run writes nothing

    applied = _sync(server).json()
    assert applied["applied"] and applied["sync"] == dry.json()["sync"]
    assert len(applied["batches"]) == 2 and all(b["status"] == "applied" for b in applied["batches"])  # 3 changes, 2 a batch
    assert _found(server, "Ormsby pump") == ["new"] and _found(server, "Tessaly filter") == []
    assert _found(server, "seal was replaced") == ["pump"]

    again = _sync(server, sources=[str(docs)]).json()
    assert again["sync"] == {"put": [], "acl": [], "delete": [], "unchanged": 3}
    assert again["files"] == {"read": 0, "unchanged_by_stamp": 3}


def test_only_admins_sync_and_never_a_path_the_setting_does_not_name(server, tmp_path):
    for who in ("wendy", "erin"):
        assert _sync(server, who).status_code == 403
    elsewhere = tmp_path / "secrets"
    elsewhere.mkdir()
    (elsewhere / "key.md").write_text("# Key\nThe vault code is 4471.\n")
    r = _sync(server, sources=[str(elsewhere)])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text
    assert str(server.docs) in r.json()["error"]["message"]
    assert _sync(server, sources="not a list").status_code == 422
    assert _sync(server, dry_run=True, follow_links=True).status_code == 422  # an unknown field
    assert _found(server, "vault code") == []


def test_one_sync_at_a_time(server):
    from routes.service import folder_sync

    lock = folder_sync._lock(server.index)
    with lock:
        r = _sync(server, dry_run=True)
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict", r.text
    assert _sync(server, dry_run=True).status_code == 200


def test_a_server_without_sync_sources_says_so(tmp_path, embedder):
    from auth.keys import KeyStore
    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from routes.service.settings import Settings

    docs = folder(tmp_path)
    build_snapshot([docs], tmp_path / "index", embedder)
    store = KeyStore(tmp_path / "keys.json")
    key = store.add("ops", [], ["admin"])[0]
    with LiveServer(create_app(Settings(index_dir=tmp_path / "index"), keys=store)) as live:
        r = httpx.post(live.url + "/v1/admin/sync", json={}, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert r.status_code == 400 and "sync_sources" in r.json()["error"]["message"], r.text
    assert json.loads((tmp_path / "index" / "sync_state.json").read_text())["files"]  # the ingest's state, untouched
