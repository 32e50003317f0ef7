"""Hot reload over a real uvicorn server: `serve` follows CURRENT while clients query it, never
fails a request across the switch, and never loses the snapshot it serves."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from indexes.snapshot_build import build_snapshot
from indexes.snapshot_lease import is_served
from indexes.snapshot_load import current_snapshot_path
from routes.server.app import create_app
from routes.service.settings import Settings
from tests.conftest import MINI, PATIENCE_S, LiveServer, counter, wait_until

INTERVAL = 0.2  # seconds between reads of CURRENT: short, so a switch takes a fraction of a second here


HOT = ("n-hot", "zephyr manifold")  # a document, and a phrase only it holds
HOT2 = ("n-hot2", "quasar ledger")


def new_corpus(tmp_path: Path, *docs: tuple[str, str]) -> list[Path]:
    """The mini corpus plus public documents (id, phrase) that the mini index does not hold."""
    extra = tmp_path / f"{'-'.join(d for d, _ in docs)}.jsonl"
    extra.write_text("".join(json.dumps({"id": doc_id, "title": f"{phrase.capitalize()} runbook", "acl": ["public"],
                                         "text": f"To service the {phrase}, drain the queue and restart the {phrase} "
                                                 "daemon."}) + "\n" for doc_id, phrase in docs))
    return [MINI, extra]


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Served:
    server: LiveServer
    index: Path
    keys: dict

    def get(self, path: str, who: str = "erin") -> httpx.Response:
        return httpx.get(self.server.url + path, headers=auth(self.keys[who]), timeout=30)

    def exact(self, phrase: str) -> list[str]:
        r = httpx.post(self.server.url + "/v1/search", json={"query": f'"{phrase}"', "retriever": "exact"},
                       headers=auth(self.keys["erin"]), timeout=30)
        assert r.status_code == 200, r.text
        return [h["doc_id"] for h in r.json()["hits"]]

    def ready(self) -> dict:
        r = self.get("/readyz", who="ops")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_for(self, doc: tuple[str, str]) -> float:
        """Seconds until an exact search for the phrase of `doc` finds it."""
        doc_id, phrase = doc
        return wait_until(lambda: doc_id in self.exact(phrase), f"{doc_id} becoming findable", poll=0.02)

    @property
    def generations(self):
        return self.server.app.state.quarry.service.runtime.generations


@pytest.fixture
def serve(mini_index, http_keys, tmp_path):
    """Start a real server over a fresh copy of the mini index; the app loads the engine itself,
    as `quarry serve` does."""
    store, keys = http_keys
    started = []

    def start(**overrides) -> Served:
        index = tmp_path / f"index-{len(started)}"
        shutil.copytree(mini_index, index)
        values = dict(index_dir=index, reload_interval_s=INTERVAL, rate_per_second=10_000.0, burst=10_000,
                      max_concurrent_per_key=64) | overrides
        app = create_app(Settings(**values), keys=store)
        server = LiveServer(app).__enter__()
        server.app, server.keys = app, keys
        started.append(server)
        return Served(server, index, keys)

    yield start
    for server in started:
        server.__exit__(None, None, None)


@dataclass
class Clients:
    """Client threads that query the server in a loop and record every failure. Seven speak
    HTTP (/v1/query, /v1/search on every retriever, /v1/documents, /v1/tools/call, /readyz);
    one speaks MCP through the SDK's client. Each remembers when it first saw `watch` found."""

    served: Served
    watch: list[tuple[str, str]]  # the (doc id, phrase) documents whose appearance the clients note
    threads: int = 8
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    first_seen: dict[str, float] = field(default_factory=dict)  # doc id -> time a client first got it
    flipped_back: list[str] = field(default_factory=list)  # a client saw new content, then old again
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> "Clients":
        self._pool = [threading.Thread(target=self._mcp if n == 0 else self._http, args=(n,), daemon=True)
                      for n in range(self.threads)]
        for t in self._pool:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._pool:
            t.join(timeout=PATIENCE_S)
        assert not any(t.is_alive() for t in self._pool), "a client thread hung"

    def wait_requests(self, n: int) -> None:
        wait_until(lambda: self.requests >= n, f"{n} client requests", poll=0.02)

    def _note(self, ok: bool, what: str, probe: str | None = None, found: bool = False,
              seen: set[str] | None = None) -> None:
        """One answer; for a probe of `probe` (a doc id), whether it was found. Each corpus
        holds every document of the one before, so a document a client has seen must stay
        findable for it: anything else is an older generation answering after a newer one."""
        with self._lock:
            self.requests += 1
            if not ok:
                self.errors.append(what)
            if probe is not None and seen is not None:
                if found:
                    self.first_seen.setdefault(probe, time.monotonic())
                    seen.add(probe)
                elif probe in seen:
                    self.flipped_back.append(what)

    def _http(self, n: int) -> None:
        url, key = self.served.server.url, self.served.keys["erin" if n % 2 else "alice"]
        calls = [
            ("POST", "/v1/query", {"question": "How do I handle carrier webhook retries?"}),
            ("POST", "/v1/search", {"query": "ledger lock timeouts", "retriever": "bm25"}),
            ("POST", "/v1/search", {"query": "rotate the token signing secret", "retriever": "dense"}),
            ("POST", "/v1/search", {"query": "tracking gateway outage", "retriever": "hybrid"}),
            ("GET", "/v1/documents/m15", None),
            ("POST", "/v1/tools/call", {"call_id": "c1", "name": "retrieve_context",
                                        "arguments": {"question": "What is the expense policy?"}}),
            ("GET", "/readyz", None),
        ]
        seen: set[str] = set()
        with httpx.Client(base_url=url, headers=auth(key), timeout=60) as http:
            i = n
            while not self._stop.is_set():
                for doc_id, phrase in self.watch:  # the probes of new content, between every other call
                    what = f"client {n} exact {phrase!r}"
                    try:
                        r = http.post("/v1/search", json={"query": f'"{phrase}"', "retriever": "exact"})
                        ok = r.status_code == 200
                        found = ok and doc_id in {h["doc_id"] for h in r.json()["hits"]}
                        self._note(ok, f"{what}: {r.status_code} {r.text[:200]}", doc_id, found, seen)
                    except Exception as e:  # noqa: BLE001 - a transport failure is an error too
                        self._note(False, f"{what}: {type(e).__name__}: {e}")
                method, path, body = calls[i % len(calls)]
                i += 1
                try:
                    r = http.request(method, path, json=body)
                    ok = r.status_code == 200 and (path != "/v1/tools/call" or "result" in r.json())
                    self._note(ok, f"client {n} {method} {path}: {r.status_code} {r.text[:200]}")
                except Exception as e:  # noqa: BLE001
                    self._note(False, f"client {n} {method} {path}: {type(e).__name__}: {e}")

    def _mcp(self, n: int) -> None:
        async def run() -> None:
            async with httpx2.AsyncClient(headers=auth(self.served.keys["erin"]), timeout=60) as http:
                async with Client(streamable_http_client(self.served.server.url + "/mcp", http_client=http)) as client:
                    seen: set[str] = set()
                    while not self._stop.is_set():
                        for doc_id, phrase in self.watch:
                            try:
                                result = await client.call_tool("search", {"query": f'"{phrase}"', "retriever": "exact"})
                                body = result.structured_content or {}
                                found = doc_id in {h["doc_id"] for h in body.get("hits", [])}
                                self._note(not result.is_error, f"mcp search: {body}", doc_id, found, seen)
                            except Exception as e:  # noqa: BLE001
                                self._note(False, f"mcp search: {type(e).__name__}: {e}")
                        try:
                            result = await client.call_tool("retrieve_context", {"question": "carrier webhook retries"})
                            self._note(not result.is_error, f"mcp retrieve_context: {result.structured_content}")
                        except Exception as e:  # noqa: BLE001
                            self._note(False, f"mcp retrieve_context: {type(e).__name__}: {e}")

        try:
            anyio.run(run)
        except Exception as e:  # noqa: BLE001 - a session that cannot open is an error
            self._note(False, f"mcp session: {type(e).__name__}: {e}")


def test_eight_clients_see_no_error_while_two_ingests_switch_the_server_to_new_content(serve, embedder, tmp_path):
    served = serve()
    first = current_snapshot_path(served.index)
    assert served.exact("zephyr manifold") == []
    watch = [HOT, HOT2]
    with Clients(served, watch) as clients:
        clients.wait_requests(40)
        before = clients.requests
        build_snapshot(new_corpus(tmp_path, HOT), served.index, embedder)
        switched_at = time.monotonic()
        second = current_snapshot_path(served.index)
        served.wait_for(HOT)
        wait_until(lambda: "n-hot" in clients.first_seen, "the clients getting the new answer", poll=0.02)
        first_switch_s = clients.first_seen["n-hot"] - switched_at
        during_first = clients.requests - before

        ready = served.ready()
        assert (ready["status"], ready["snapshot"], ready["generation"]) == ("ready", second.name, 2)
        assert ready["built_at"] and ready["counts"]["documents"] == 24 and ready["reload"]["failed"] is None
        assert served.get("/readyz").json() == {"status": "ready"}  # a key without admin sees no details
        assert httpx.get(served.server.url + "/readyz").json() == {"status": "ready"}

        # The replaced engine closes once the requests that held it are answered, and so lets go
        # of its snapshot: only then may an ingest prune it.
        wait_until(lambda: not is_served(first), "the replaced generation closing", poll=0.02)
        assert served.generations.retired == []

        build_snapshot(new_corpus(tmp_path, HOT, HOT2), served.index, embedder)
        switched_again = time.monotonic()
        third = current_snapshot_path(served.index)
        served.wait_for(HOT2)
        wait_until(lambda: "n-hot2" in clients.first_seen, "the clients getting the newer answer", poll=0.02)
        second_switch_s = clients.first_seen["n-hot2"] - switched_again
        clients.wait_requests(clients.requests + 40)  # keep querying the newest generation for a while
    ready = served.ready()
    assert (ready["snapshot"], ready["generation"]) == (third.name, 3)
    assert (served.index / "snapshots" / ready["snapshot"]).is_dir()  # the snapshot served is on disk
    assert sorted(p.name for p in (served.index / "snapshots").iterdir()) == sorted([second.name, third.name])
    assert served.exact("zephyr manifold") == ["n-hot"] and served.exact("quasar ledger") == ["n-hot2"]
    assert clients.errors == [], clients.errors[:5]
    assert clients.flipped_back == [], clients.flipped_back[:5]  # once new, never old again
    assert clients.requests > 200 and during_first > 0
    assert counter(served.server, "quarry_reloads", "outcome") == {"switched": 2.0}
    print(f"\nhot reload: {clients.requests} requests by {clients.threads} clients, {len(clients.errors)} errors; "
          f"new content reached a client {first_switch_s:.2f} s and {second_switch_s:.2f} s after CURRENT switched "
          f"(reload interval {INTERVAL} s); {during_first} requests during the first switch")


def test_a_snapshot_the_server_still_serves_survives_later_ingests(serve, embedder, tmp_path):
    served = serve(reload_interval_s=0)  # this server never switches: its snapshot must stay
    first = current_snapshot_path(served.index)
    build_snapshot(new_corpus(tmp_path, HOT), served.index, embedder)
    build_snapshot(new_corpus(tmp_path, HOT, HOT2), served.index, embedder)
    third = current_snapshot_path(served.index)
    assert first.is_dir() and is_served(first)  # neither "new" nor "previous", yet kept: it is leased
    assert served.exact("carrier webhook") and served.exact("zephyr manifold") == []
    assert served.get("/v1/documents/m15").status_code == 200  # its catalog is still there to read
    ready = served.ready()
    assert (ready["snapshot"], ready["generation"]) == (first.name, 1) and "reload" not in ready
    served.server.__exit__(None, None, None)  # the server stops and closes its engine...
    assert not is_served(first)
    build_snapshot([MINI], served.index, embedder)  # ...so the next ingest may prune its snapshot
    assert not first.exists()
    assert sorted(p.name for p in (served.index / "snapshots").iterdir()) == sorted(
        [third.name, current_snapshot_path(served.index).name])


class Held:
    """The real BM25 retriever, held at the start of each search until the test releases it."""

    def __init__(self, inner) -> None:
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    def search(self, *args):
        self.entered.set()
        assert self.release.wait(timeout=PATIENCE_S), "the test never released the search"
        return self.inner.search(*args)


def test_a_request_in_flight_keeps_its_engine_until_it_is_answered(serve, embedder, tmp_path):
    served = serve()
    old = served.generations.current
    held = Held(old.engine.retrievers["bm25"])
    old.engine.retrievers["bm25"] = held
    answer: dict = {}

    def slow_request() -> None:
        answer["r"] = httpx.post(served.server.url + "/v1/search", json={"query": "ledger lock", "retriever": "bm25"},
                                 headers=auth(served.keys["erin"]), timeout=60)

    t = threading.Thread(target=slow_request)
    t.start()
    try:
        assert held.entered.wait(timeout=PATIENCE_S)
        build_snapshot(new_corpus(tmp_path, HOT), served.index, embedder)
        served.wait_for(HOT)  # new requests are answered by the new generation...
        assert served.generations.current is not old and old.retired
        assert not old.closed.is_set() and is_served(old.engine.snapshot.path)  # ...the held one stays open
        assert "r" not in answer
    finally:
        held.release.set()
        t.join(timeout=PATIENCE_S)
    assert answer["r"].status_code == 200, answer["r"].text
    assert [h["doc_id"] for h in answer["r"].json()["hits"]][:1] == ["m01"]
    assert old.closed.wait(timeout=PATIENCE_S)  # closed once its last request was answered
    assert not is_served(old.engine.snapshot.path)


def _broken_copy(index: Path, how: str) -> str:
    """A snapshot beside the serving one that loading must refuse, made current atomically."""
    serving = current_snapshot_path(index)
    name = "29990101T000000-broken00-" + how[:6]
    broken = serving.with_name(name)
    shutil.copytree(serving, broken)
    if how == "wrong_model":
        manifest = json.loads((broken / "manifest.json").read_text())
        manifest["model"] = {"id": "other/model", "dim": 768}
        (broken / "manifest.json").write_text(json.dumps(manifest))
    else:
        with (broken / "dense.faiss").open("ab") as f:
            f.write(b"junk")
    (index / "CURRENT.tmp").write_text(name + "\n")
    os.replace(index / "CURRENT.tmp", index / "CURRENT")
    return name


@pytest.mark.parametrize("how", ["wrong_model", "corrupted_file"])
def test_a_new_snapshot_that_cannot_load_is_logged_and_the_old_one_keeps_serving(serve, embedder, tmp_path, caplog, how):
    served = serve()
    first = current_snapshot_path(served.index)
    with caplog.at_level(logging.ERROR, logger="quarry.reload"), Clients(served, [HOT], threads=2) as clients:
        clients.wait_requests(10)
        broken = _broken_copy(served.index, how)
        wait_until(lambda: counter(served.server, "quarry_reloads", "outcome").get("failed") == 1.0,
                   "the broken snapshot being tried")
        time.sleep(5 * INTERVAL)  # several more polls: the refused snapshot is not tried again
        ready = served.ready()
        assert (ready["status"], ready["snapshot"], ready["generation"]) == ("ready", first.name, 1)
        assert ready["reload"]["failed"]["snapshot"] == broken
        assert ("other/model" if how == "wrong_model" else "differs from its manifest") in ready["reload"]["failed"]["error"]
        assert httpx.get(served.server.url + "/readyz").json() == {"status": "ready"}
        assert served.exact("carrier webhook")
        assert counter(served.server, "quarry_reloads", "outcome") == {"failed": 1.0}
        assert any(broken in r.getMessage() and first.name in r.getMessage() for r in caplog.records)

        build_snapshot(new_corpus(tmp_path, HOT), served.index, embedder)  # a good one
        served.wait_for(HOT)
    ready = served.ready()
    assert ready["generation"] == 2 and ready["reload"]["failed"] is None
    assert clients.errors == [], clients.errors[:5]


def test_a_switch_keeps_the_models_already_loaded_and_their_caches(serve, embedder, tmp_path):
    served = serve(grader="answer")  # a plug-in policy over the shipped answer model
    old = served.generations.current
    build_snapshot(new_corpus(tmp_path, HOT), served.index, embedder)
    served.wait_for(HOT)
    new = served.generations.current
    assert new.number == old.number + 1
    assert new.engine.embedder is old.engine.embedder and new.engine.answer is old.engine.answer
    assert new.engine.policy.grader is not old.engine.policy.grader  # the policies are built over the new engine
    r = httpx.post(served.server.url + "/v1/query", json={"question": "How do I service the zephyr manifold?"},
                   headers=auth(served.keys["erin"]), timeout=60)
    assert r.status_code == 200 and "n-hot" in [c["doc_id"] for c in r.json()["context"]]
