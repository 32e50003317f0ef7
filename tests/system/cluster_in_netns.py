"""Run by tests/system/test_cluster.py inside a private network and pid namespace (never on
its own): a real Ray cluster (a head and two worker nodes), the demo corpus served from 2 and
3 shards as Ray Serve deployments, and the single-node index of the same corpus beside it.

- every route (exact, bm25, dense, hybrid by RRF and z-score) through the cluster equals the
  single node, on the demo at 3 shards and on a SciFact sample with ACLs at 2: 4 principals x
  30 questions, the same ids in the same order, scores within 1e-4;
- the whole loop through the cluster (a front's `ShardedView` over the Serve handles, tables
  from shard 00's catalog) equals the single node on the demo at 3 shards and on a SciFact
  sample with ACLs at 2: 4 principals x 30 questions, the same status, gap reason, stop
  reason, route, attempts, context ids and order (scores within 1e-4) and rows (in process,
  tests/routes/service/test_sharded.py compares the loop for both corpora at 2 and 3 shards and
  tests/retrieval/test_scatter.py the routes at both; here the Serve transport is compared,
  and the demo at 2 shards by the tests below);
- the no-leak differential: each of 5 principals' bait questions through the cluster (routes
  and the loop) gives what an index holding only the documents that principal may read gives;
- Ray listens only in this namespace, whose only interface is loopback;
- live writes over HTTP through two fronts: a revocation through one is in effect on the next
  request through the other, a retried write is applied once, a batch over shards is refused;
- an ingest on the cluster (Ray Data embedding, shards published on the nodes) equals the
  local one, one that loses a worker node mid-ingest completes and equals it too, and a
  killed `quarry ingest --cluster` run again embeds only what no journaled batch holds;
- faults: under 8 concurrent clients a killed replica, then a killed worker node, cost no
  failed and no wrong call with two replicas per shard; a shard with no live replica makes
  calls a typed, retryable RetrievalUnavailable.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest

from indexes.shards import build_shards
from indexes.snapshot_build import BuildOptions, build_snapshot
from indexes.snapshot_load import load_snapshot
from retrieval.errors import RetrievalUnavailable
from retrieval.limits import Limits
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.exact import ExactRetriever
from retrieval.retrievers.hybrid import FusionParams, HybridRetriever
from retrieval.scatter import ShardedBm25, ShardedDense, ShardedExact, ShardedHybrid
from retrieval.types import NO_FILTERS, Hit, Principal
from tests.conftest import DEMO, assert_alike, stable_answer, write_readable_documents, write_scifact_sample
from benchmarks.netns import INSIDE, interfaces, listeners, lo_up, ray_cluster

if os.environ.get(INSIDE) != "1":
    pytest.skip("runs only inside the namespace tests/system/test_cluster.py makes", allow_module_level=True)

PRINCIPALS = (Principal("alice", ("sre",)), Principal("bob", ("finance",)), Principal("erin"),
              Principal("root", ("admin",)))
GROUPS = {"alice": ("sre",), "bob": ("finance",), "carol": ("security", "sre"), "dave": ("hr",), "erin": ()}
QUESTIONS = [json.loads(line)["question"] for line in (DEMO / "questions.jsonl").read_text().splitlines()[:30]]
BAIT = [q for q in map(json.loads, (DEMO / "questions.jsonl").read_text().splitlines()) if "bait" in q["tags"]]
K = 10


def routes_over(bm25, dense, exact, hybrid) -> dict:
    routes = {"bm25": bm25, "dense": dense, "exact": exact}
    for method in ("rrf", "zscore"):
        routes[f"hybrid-{method}"] = hybrid(routes["bm25"], routes["dense"], FusionParams(method=method))
    return routes


def single_routes(snap, embedder) -> dict:
    return routes_over(Bm25Retriever(snap.bm25, snap.chunks), DenseRetriever(snap.dense, embedder.encode_query, snap.chunks),
                       ExactRetriever(snap.catalog, snap.chunks), HybridRetriever)


def sharded_routes(shards, embedder) -> dict:
    return routes_over(ShardedBm25(shards), ShardedDense(shards, embedder.encode_query), ShardedExact(shards), ShardedHybrid)


def same(expected: list[Hit], got: list[Hit], what: str) -> None:
    assert [h.chunk_id for h in got] == [h.chunk_id for h in expected], what
    for e, g in zip(expected, got, strict=True):
        assert abs(e.score - g.score) <= 1e-4, (what, e.chunk_id, e.score, g.score)
        assert (g.doc_id, g.text, g.title) == (e.doc_id, e.text, e.title), what


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, demo_index, embedder):
    """The demo as one node, at 2 and 3 shards, and one reduced index per principal (only
    the documents that principal may read), built before Ray starts."""
    sharded = {}
    for n in (2, 3):
        sharded[n] = tmp_path_factory.mktemp(f"demo-{n}-shards")
        build_shards([DEMO / "docs", DEMO / "tables"], sharded[n], embedder, n)
    reduced = {}
    for pid, groups in GROUPS.items():
        docs = write_readable_documents(Principal(pid, groups), tmp_path_factory.mktemp(f"only-{pid}"))
        reduced[pid] = tmp_path_factory.mktemp(f"index-{pid}")
        build_snapshot([docs, DEMO / "tables"], reduced[pid], embedder, BuildOptions(reuse_from=demo_index))
    return demo_index, sharded, reduced


@pytest.fixture(scope="module")
def scifact(tmp_path_factory, embedder):
    """A SciFact sample with ACLs (tests/conftest.py) as one node and at 2 shards."""
    source, claims = write_scifact_sample(tmp_path_factory.mktemp("scifact-sample"))
    single = tmp_path_factory.mktemp("scifact-single")
    build_snapshot([source], single, embedder)
    sharded = {2: tmp_path_factory.mktemp("scifact-2-shards")}
    build_shards([source], sharded[2], embedder, 2, BuildOptions(reuse_from=single))
    return single, sharded, claims, source


@pytest.fixture(scope="module")
def cluster(indexes, scifact):
    lo_up()
    with ray_cluster(workers=2) as running:
        yield running


@pytest.fixture(scope="module")
def single(demo_index, embedder):
    snap = load_snapshot(demo_index, embedder)
    yield single_routes(snap, embedder)
    snap.close()


def deployed(index_dir, replicas: int = 2, retry_s: float = 30.0):
    from indexes.embedder import Embedder
    from routes.cluster.app import deploy_shards

    return deploy_shards(index_dir, replicas=replicas, retry_s=retry_s, model_id=Embedder().model_id)


def test_ray_listens_only_inside_this_loopback_only_namespace(cluster):
    assert interfaces() == ["lo"]
    found = listeners()
    assert found, "the cluster listens somewhere"
    hosts = {address.rsplit(":", 1)[0] for address in found}
    # A wildcard listener here reaches loopback only: lo is this namespace's one interface.
    assert hosts <= {"127.0.0.1", "[::ffff:127.0.0.1]", "*", "0.0.0.0", "[::]", "[::1]"}, hosts


SHARDINGS = [("demo", 3), ("scifact", 2)]  # each shard count once; the demo at 2 shards serves the tests below


@pytest.mark.parametrize(("corpus", "n"), SHARDINGS)
def test_every_route_through_the_cluster_equals_the_single_node(cluster, indexes, scifact, single, embedder, corpus, n):
    if corpus == "demo":
        sharded_dir, questions, oracle, own = indexes[1][n], QUESTIONS, single, None
    else:
        sharded_dir, questions, own = scifact[1][n], scifact[2], load_snapshot(scifact[0], embedder)
        oracle = single_routes(own, embedder)
    shards = deployed(sharded_dir)
    assert [s.describe()["shard"] for s in shards] == list(range(n))
    routes = sharded_routes(shards, embedder)
    compared = 0
    try:
        for name, route in routes.items():
            for principal in PRINCIPALS:
                access = principal.access_scope()
                for question in questions:
                    expected = oracle[name].search(question, access, K, NO_FILTERS)
                    same(expected, route.search(question, access, K, NO_FILTERS),
                         f"{corpus} at {n} shards, {name}, {principal.id}: {question}")
                    compared += len(expected)
    finally:
        if own is not None:
            own.close()
    assert compared > 4 * 4 * len(questions) * K // 2
    assert sum(s.retried for s in shards) == 0


def test_the_cluster_leaks_nothing_a_reduced_index_would_not_show(cluster, indexes, embedder):
    _, sharded, reduced = indexes
    routes = sharded_routes(deployed(sharded[2]), embedder)
    checked = 0
    for pid, index in reduced.items():
        snap = load_snapshot(index, embedder)
        try:
            own = single_routes(snap, embedder)
            access = Principal(pid, GROUPS[pid]).access_scope()
            for q in BAIT:
                for name in ("bm25", "dense", "hybrid-rrf"):
                    expected = own[name].search(q["question"], access, K, NO_FILTERS)
                    same(expected, routes[name].search(q["question"], access, K, NO_FILTERS), f"{pid}, {name}: {q['id']}")
                    checked += len(expected)
        finally:
            snap.close()
    assert len(BAIT) >= 20 and checked > len(GROUPS) * len(BAIT) * 3 * K // 2  # not a comparison of empty lists


LOOP_LIMITS = Limits(call_timeout_ms=60000, max_deadline_ms=120000)  # no deadline decides an outcome on a busy machine
TODAY = date(2025, 11, 1)
LABELED = [json.loads(line) for line in (DEMO / "questions.jsonl").read_text().splitlines()]
LOOP_QUESTIONS = [q["question"] for route in ("exact", "bm25", "dense", "hybrid", "sql")
                  for q in [x for x in LABELED if x["route"] == route][:6]]  # 6 of each labeled route


def loop_outcome(result) -> dict:
    return {"status": result.status, "gap": result.gap.reason if result.gap else None, "stop": result.stop_reason,
            "route": result.decision.chosen, "context": [h.chunk_id for h in result.context],
            "rows": result.rows.rows if result.rows is not None else None,
            "attempts": [(a.plan.route, a.plan.query_text(), len(a.hits), a.error) for a in result.attempts]}


def front_over(index_dir, shards, embedder):
    """The front's view over the cluster's shards (what `quarry cluster serve` serves)."""
    from routes.service.resources import Resources
    from routes.service.settings import Settings
    from routes.service.sharded import open_sharded

    settings = Settings()
    resources = Resources.open(settings)
    fan_out = ThreadPoolExecutor(len(shards))
    view = open_sharded(index_dir, shards, embedder, resources, settings, fan_out, LOOP_LIMITS, TODAY)
    return view, lambda: (view.close(), fan_out.shutdown(), resources.shutdown())


@pytest.mark.parametrize(("corpus", "n"), SHARDINGS)
def test_the_loop_through_the_cluster_answers_what_the_single_node_answers(cluster, indexes, scifact, embedder, corpus, n):
    from routes.service.view import open_view

    single_dir, sharded_dir, questions = ((indexes[0], indexes[1][n], LOOP_QUESTIONS) if corpus == "demo"
                                          else (scifact[0], scifact[1][n], scifact[2]))
    shards = deployed(sharded_dir)
    single = open_view(single_dir, embedder, limits=LOOP_LIMITS, today=TODAY)
    view, close = front_over(sharded_dir, shards, embedder)
    statuses = set()
    try:
        for principal in PRINCIPALS:
            for question in questions:
                e = single.query(question, principal, deadline_ms=LOOP_LIMITS.max_deadline_ms, wait_for_tables=True)
                g = view.query(question, principal, deadline_ms=LOOP_LIMITS.max_deadline_ms, wait_for_tables=True)
                what = f"{corpus} at {n} shards, {principal.id}: {question}"
                assert loop_outcome(g) == loop_outcome(e), what
                assert all(abs(a.score - b.score) <= 1e-4 for a, b in zip(e.context, g.context, strict=True)), what
                statuses.add(e.status)
    finally:
        close()
        single.close()
    assert statuses == {"answer_context", "evidence_gap"}
    assert sum(s.retried for s in shards) == 0


def test_the_loop_through_the_cluster_leaks_nothing_a_reduced_index_would_not_show(cluster, indexes, embedder):
    from routes.service.view import open_view

    _, sharded, reduced = indexes
    view, close = front_over(sharded[2], deployed(sharded[2]), embedder)
    compared = 0
    try:
        for pid, index in reduced.items():
            own = open_view(index, embedder, limits=LOOP_LIMITS, today=TODAY)
            try:
                principal = Principal(pid, GROUPS[pid])
                for q in BAIT:
                    e = own.query(q["question"], principal, deadline_ms=LOOP_LIMITS.max_deadline_ms, wait_for_tables=True)
                    g = view.query(q["question"], principal, deadline_ms=LOOP_LIMITS.max_deadline_ms, wait_for_tables=True)
                    assert (g.status, g.gap.reason if g.gap else None, [h.doc_id for h in g.context],
                            g.rows.rows if g.rows is not None else None) == \
                        (e.status, e.gap.reason if e.gap else None, [h.doc_id for h in e.context],
                         e.rows.rows if e.rows is not None else None), f"{pid}: {q['id']}"
                    compared += len(e.context)
            finally:
                own.close()
    finally:
        close()
    assert compared > len(GROUPS) * len(BAIT)  # not a comparison of empty contexts


def _hammer(ask, expected, stop: threading.Event, calls: list[int], clients: int = 8) -> list[str]:
    """8 clients asking `ask(question, principal)` in a loop until `stop`, counting their calls
    in `calls[0]`: the problems (a failed call, or an answer other than `expected`'s)."""
    problems, lock = [], threading.Lock()
    asked = sorted(expected)

    def client(c: int) -> None:
        i = c
        while not stop.is_set():
            question, pid = asked[i % len(asked)]
            try:
                if ask(question, next(p for p in PRINCIPALS if p.id == pid)) != expected[(question, pid)]:
                    with lock:
                        problems.append(f"wrong answer: {pid}: {question}")
            except Exception as e:  # noqa: BLE001 - the test counts every failure
                with lock:
                    problems.append(f"{type(e).__name__}: {e}")
            with lock:
                calls[0] += 1
            i += clients

    with ThreadPoolExecutor(clients) as pool:
        for c in range(clients):
            pool.submit(client, c)
        stop.wait()
    return problems


def _replica_actors(app: str) -> list[str]:
    import ray.util

    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("SERVE_REPLICA::") and f"{app}#" in a["name"]]


def _running_replicas(app: str) -> int:
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None:
        return 0
    return sum(n for d in status.deployments.values() for state, n in d.replica_states.items() if str(state).endswith("RUNNING"))


def _node_of(actor_name: str) -> str:
    import ray

    actor = ray.get_actor(actor_name, namespace="serve")
    return ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))


def _answer(result) -> tuple:
    return result.status, result.gap.reason if result.gap else None, tuple(h.chunk_id for h in result.context)


def test_a_killed_replica_then_a_killed_worker_node_cost_no_question(cluster, indexes, embedder):
    """8 clients asking whole questions through a front's loop while a replica, then a worker
    node, is killed: every answer is the single node's, none fails."""
    import ray
    from routes.cluster.app import shard_app_name
    from routes.service.view import open_view

    shards = deployed(indexes[1][2])
    single = open_view(indexes[0], embedder, limits=LOOP_LIMITS, today=TODAY)
    try:
        expected = {(q, p.id): _answer(single.query(q, p, deadline_ms=LOOP_LIMITS.max_deadline_ms, wait_for_tables=True))
                    for q in LOOP_QUESTIONS[::3] for p in PRINCIPALS}
    finally:
        single.close()
    view, close = front_over(indexes[1][2], shards, embedder)
    for p in PRINCIPALS:
        view.tables_ready(p)

    def ask(question, principal):
        return _answer(view.query(question, principal, deadline_ms=LOOP_LIMITS.max_deadline_ms))

    apps = [shard_app_name(i) for i in range(2)]
    stop, calls = threading.Event(), [0]
    with ThreadPoolExecutor(1) as runner:
        outcome = runner.submit(_hammer, ask, expected, stop, calls)
        time.sleep(2)  # let the clients run first
        ray.kill(ray.get_actor(_replica_actors(apps[0])[0], namespace="serve"), no_restart=True)
        time.sleep(5)
        hosts = {name: _node_of(name) for app in apps for name in _replica_actors(app)}
        node = next(n for n in cluster.worker_nodes if n.node_id in hosts.values())  # a node serving a replica
        gone = {name for name, host in hosts.items() if host == node.node_id}
        cluster.remove_node(node, allow_graceful=False)
        lost, before_loss = time.monotonic(), calls[0]

        def recovered() -> bool:  # the lost replicas replaced: 2 running per shard, none of them the lost ones
            names = [_replica_actors(app) for app in apps]
            return all(len(n) == 2 and not gone & set(n) for n in names) and all(_running_replicas(a) == 2 for a in apps)

        while not recovered() and time.monotonic() - lost < 300:
            time.sleep(0.5)
        recovered = time.monotonic() - lost
        time.sleep(3)  # and the clients go on over the recovered replicas
        stop.set()
        problems = outcome.result()
    close()
    print(f"8 clients: {calls[0]} questions ({calls[0] - before_loss} after the node loss), {len(problems)} failed or wrong, "
          f"{sum(s.retried for s in shards)} sent again; 2 replicas per shard running again {recovered:.1f} s after it")
    assert problems == [] and before_loss > 0 and calls[0] > before_loss  # answered right, before and after the loss
    assert all(_running_replicas(app) == 2 for app in apps)
    cluster.add_node(num_cpus=1, resources={"node-3": 1})


def test_a_shard_whose_application_is_gone_is_a_typed_retryable_unavailable(cluster, indexes, embedder):
    from ray import serve
    from routes.cluster.app import shard_app_name

    shards = deployed(indexes[1][2], replicas=1, retry_s=3.0)
    routes = sharded_routes(shards, embedder)
    view, close = front_over(indexes[1][2], shards, embedder)
    serve.delete(shard_app_name(1))
    try:
        for name in ("bm25", "dense", "exact", "hybrid-rrf"):
            with pytest.raises(RetrievalUnavailable, match="shard 01 has no live replica") as err:
                routes[name].search(QUESTIONS[0], PRINCIPALS[0].access_scope(), K, NO_FILTERS)
            assert err.value.retryable
        for question in LOOP_QUESTIONS[::6]:  # the loop: a typed, retryable error, never a gap or a partial context
            with pytest.raises(RetrievalUnavailable) as err:
                view.query(question, PRINCIPALS[0], deadline_ms=LOOP_LIMITS.max_deadline_ms)
            assert err.value.retryable
        # a question's deadline shorter than the shard's own window (3 s) bounds the wait on it
        started = time.monotonic()
        with pytest.raises(RetrievalUnavailable, match=r"within ([0-9.e-]+) s") as err:
            view.query(LOOP_QUESTIONS[0], PRINCIPALS[0], deadline_ms=1000)
        print(f"a 1 s question with shard 01 gone: 503 after {time.monotonic() - started:.2f} s (shard window 3 s)")
        assert float(re.search(r"within ([0-9.e-]+) s", str(err.value)).group(1)) <= 1.0, str(err.value)
    finally:
        close()


FRONT_QUESTIONS = LOOP_QUESTIONS[::3]  # 10, of every labeled route
def _serve_settings(index_dir, audit):
    from routes.service.settings import Settings

    return Settings(index_dir=index_dir, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64, audit_path=audit,
                    call_timeout_ms=60000, max_deadline_ms=60000)


async def _mcp_context(url: str, key: str, question: str):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            return (await client.call_tool("retrieve_context", {"question": question, "deadline_ms": 60000})).structured_content


def test_two_fronts_serve_the_api_mcp_and_auth_of_one_node_and_name_a_lost_shard(cluster, indexes, embedder, http_keys,
                                                                                   tmp_path):
    """Two fronts (one deploys the shards, one attaches) behind real uvicorn servers answer
    HTTP and MCP exactly as a single node's server does, with the same keys; with a shard's
    only replica gone a question is a retryable 503 and /readyz names the shard."""
    import anyio
    import httpx
    from prometheus_client.parser import text_string_to_metric_families
    from ray import serve

    from routes.cluster.app import shard_app_name
    from routes.cluster.front import open_front
    from routes.server.app import create_app
    from routes.service.view import open_view
    from tests.conftest import LiveServer

    store, keys = http_keys
    single_dir, sharded = indexes[0], indexes[1][2]
    single = open_view(single_dir, embedder, limits=_serve_settings(single_dir, None).limits, today=TODAY)
    one = create_app(_serve_settings(single_dir, tmp_path / "one.duckdb").model_copy(update={"today": TODAY}),
                     engine=single, keys=store)
    settings = {name: _serve_settings(sharded, tmp_path / f"{name}.duckdb").model_copy(update={"today": TODAY})
                for name in ("a", "b")}
    front_a = create_app(settings["a"], keys=store, runtime=open_front(settings["a"], replicas=1, retry_s=5.0))
    front_b = create_app(settings["b"], keys=store, runtime=open_front(settings["b"], retry_s=5.0, attach=True))
    try:
        with LiveServer(one) as s1, LiveServer(front_a) as fa, LiveServer(front_b) as fb:
            def post(server, path, who, body):
                return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {keys[who]}"}, timeout=120)

            compared = 0
            for who in ("alice", "bob", "erin"):
                for question in FRONT_QUESTIONS:
                    body = {"question": question, "deadline_ms": 60000}
                    want = post(s1, "/v1/query", who, body)
                    assert want.status_code == 200, want.text
                    for front in (fa, fb):
                        got = post(front, "/v1/query", who, body)
                        assert got.status_code == 200, got.text
                        assert_alike(stable_answer(got.json()), stable_answer(want.json()), f"{who}: {question}")
                        compared += len(want.json()["context"])
                search = {"query": "token signing secret rotation", "retriever": "hybrid", "k": 5}
                assert_alike(stable_answer(post(fa, "/v1/search", who, search).json()),
                             stable_answer(post(s1, "/v1/search", who, search).json()), f"{who}: search")
                for doc in ("faq-001", "note-finance-q3-2025-budget", "no-such-document"):  # readable, forbidden, missing
                    got = httpx.get(fb.url + f"/v1/documents/{doc}", headers={"Authorization": f"Bearer {keys[who]}"})
                    want = httpx.get(s1.url + f"/v1/documents/{doc}", headers={"Authorization": f"Bearer {keys[who]}"})
                    assert got.status_code == want.status_code, (who, doc)
                    assert_alike(stable_answer(got.json()), stable_answer(want.json()), f"{who}: {doc}")
            assert compared > 0
            sql = {"sql": "SELECT count(*) AS n FROM incidents"}
            assert post(fa, "/v1/sql", "alice", sql).json()["rows"] == post(s1, "/v1/sql", "alice", sql).json()["rows"]
            assert httpx.post(fa.url + "/v1/query", json={"question": "x"}).status_code == 401  # auth is the node's
            mcp = anyio.run(_mcp_context, fb.url, keys["alice"], FRONT_QUESTIONS[0])
            want_mcp = anyio.run(_mcp_context, s1.url, keys["alice"], FRONT_QUESTIONS[0])
            assert_alike(stable_answer(mcp), stable_answer(want_mcp), "mcp")
            assert httpx.get(fa.url + "/readyz").status_code == 200
            metrics = httpx.get(fa.url + "/metrics", headers={"Authorization": f"Bearer {keys['ops']}"}).text
            sent = {x.labels["shard"]: x.value for f in text_string_to_metric_families(metrics) for x in f.samples
                    if x.name == "quarry_shard_calls_total" and x.labels["outcome"] == "sent"}
            assert set(sent) == {"00", "01"} and min(sent.values()) > 0, sent

            serve.delete(shard_app_name(1))  # shard 01's only replica is gone
            lost = post(fb, "/v1/query", "alice", {"question": FRONT_QUESTIONS[0], "deadline_ms": 60000})
            assert lost.status_code == 503, lost.text
            assert lost.json()["error"]["code"] == "retrieval_unavailable" and lost.json()["error"]["retryable"]
            ready = httpx.get(fa.url + "/readyz", timeout=120)
            assert ready.status_code == 503 and "shard 01" in ready.json()["error"]["message"], ready.text
    finally:
        single.close()


def test_quarry_cluster_serve_attaches_to_the_shards_and_answers_as_one_node(cluster, indexes, embedder, http_keys, tmp_path):
    """The command line's front, as an operator starts it: a process of its own joining the
    cluster, attached to deployed shards, answering over HTTP as a single node does."""
    import socket
    import subprocess
    import sys

    import httpx

    from routes.service.view import open_view
    from tests.conftest import wait_until

    store, keys = http_keys
    deployed(indexes[1][2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "QUARRY_TODAY": TODAY.isoformat(), "QUARRY_CALL_TIMEOUT_MS": "60000",
           "QUARRY_MAX_DEADLINE_MS": "60000"}
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "cluster", "serve", "--address", cluster.address,
                             "--index", str(indexes[1][2]), "--keys", str(store.path), "--attach", "--port", str(port),
                             "--set", f"audit_path={tmp_path / 'cli.duckdb'}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/readyz", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    single = open_view(indexes[0], embedder, limits=LOOP_LIMITS, today=TODAY)
    try:
        wait_until(ready, "quarry cluster serve", alive=lambda: proc.poll() is None, poll=0.5)
        for question in FRONT_QUESTIONS[:4]:
            got = httpx.post(url + "/v1/query", json={"question": question, "deadline_ms": 60000},
                             headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=120)
            assert got.status_code == 200, got.text
            want = single.query(question, Principal("alice", ("sre",)), deadline_ms=60000, wait_for_tables=True)
            assert ([c["chunk_id"] for c in got.json()["context"]], got.json()["status"]) == \
                ([h.chunk_id for h in want.context], want.status), question
    finally:
        single.close()
        proc.terminate()
        out, _ = proc.communicate(timeout=120)
        print(out[-3000:])


def test_a_write_through_one_front_is_in_effect_on_the_next_request_through_another(cluster, indexes, http_keys,
                                                                                      tmp_path):
    """Live writes over HTTP on a copy of the demo at 2 shards, two replicas per shard on two
    worker nodes, two fronts: a revocation through front A holds on the very next request
    through front B (its document, search and loop), a put through B is read through A, a
    retried write is applied once, and a batch over both shards is refused whole."""
    import shutil

    import httpx

    from indexes.shards import shard_of
    from routes.cluster.front import open_front
    from routes.server.app import create_app
    from tests.conftest import LiveServer

    store, keys = http_keys
    wendy = store.add("wendy", ["sre"], ["query", "write"])[0]
    index = tmp_path / "writable"
    shutil.copytree(indexes[1][2], index)  # the shared index stays as the other tests read it
    settings = {name: _serve_settings(index, tmp_path / f"{name}.duckdb").model_copy(update={"today": TODAY})
                for name in ("a", "b")}
    runtime_a = open_front(settings["a"], replicas=2, retry_s=30.0)
    front_a = create_app(settings["a"], keys=store, runtime=runtime_a)
    front_b = create_app(settings["b"], keys=store, runtime=open_front(settings["b"], retry_s=30.0, attach=True))
    question = "What caused the token validation failures with the JWKS endpoint?"
    with LiveServer(front_a) as fa, LiveServer(front_b) as fb:
        def call(server, method, path, key, **kw):
            return httpx.request(method, server.url + path, headers={"Authorization": f"Bearer {key}", **kw.pop("headers", {})},
                                 timeout=120, **kw)

        def context_ids(server) -> list[str]:
            got = call(server, "POST", "/v1/query", keys["alice"], json={"question": question, "deadline_ms": 60000})
            assert got.status_code == 200, got.text
            return [c["doc_id"] for c in got.json()["context"]]

        def search_ids(server) -> list[str]:
            got = call(server, "POST", "/v1/search", keys["alice"], json={"query": question, "retriever": "hybrid", "k": 10})
            assert got.status_code == 200, got.text
            return [h["doc_id"] for h in got.json()["hits"]]

        assert "inc-2013" in context_ids(fb) and "inc-2013" in search_ids(fb)
        # A write keeps its writer among the readers: refused by the front, before any shard is asked.
        assert call(fa, "PATCH", "/v1/documents/inc-2013/acl", wendy, json={"acl": ["group:admin"]}).status_code == 403
        revoked = call(fa, "PATCH", "/v1/documents/inc-2013/acl", wendy, json={"acl": ["wendy", "group:admin"]})
        assert revoked.status_code == 200, revoked.text
        assert revoked.json()["shard"] == shard_of("inc-2013", 2) and revoked.json()["generation"] == 1
        assert call(fb, "GET", "/v1/documents/inc-2013", keys["alice"]).status_code == 404  # the next request through B
        assert "inc-2013" not in search_ids(fb) and "inc-2013" not in context_ids(fb)
        # The shard's read rule: wendy cannot read faq-017 (group:finance), so changing it is a 404.
        assert call(fb, "PATCH", "/v1/documents/faq-017/acl", wendy, json={"acl": ["group:sre"]}).status_code == 404

        body = {"title": "INC-2999: JWKS cache expired during the key rotation",
                "text": "Token validation failed because the JWKS endpoint was unreachable and the cached keys expired.",
                "acl": ["group:sre"]}
        put = call(fb, "PUT", "/v1/documents/inc-2999", wendy, json=body, headers={"Idempotency-Key": "put-2999"})
        assert put.status_code == 200, put.text
        got = call(fa, "GET", "/v1/documents/inc-2999", keys["alice"])
        assert got.status_code == 200 and got.json()["title"] == body["title"]
        assert "inc-2999" in context_ids(fa) + search_ids(fa)
        again = call(fa, "PUT", "/v1/documents/inc-2999", wendy, json=body, headers={"Idempotency-Key": "put-2999"})
        assert again.status_code == 200 and again.json() == put.json()
        seqs = [s.describe()["seq"] for s in runtime_a.generations.current.engine.shards]
        assert sum(seqs) == 2, seqs  # two writes in all: the retry applied nothing

        ids = {}
        for i in range(20):
            ids.setdefault(shard_of(f"pair-{i}", 2), f"pair-{i}")
        batch = {"operations": [{"op": "put", "id": d, "document": {"text": "x", "acl": ["public"]}} for d in ids.values()]}
        refused = call(fa, "POST", "/v1/documents:batch", wendy, json=batch)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request", refused.text
        assert all(call(fb, "GET", f"/v1/documents/{d}", keys["alice"]).status_code == 404 for d in ids.values())



def _same_index(got_dir, want_dir, embedder) -> int:
    """Two sharded indexes of one corpus hold the same chunks, vectors (within 1e-5) and BM25
    statistics, shard by shard; returns the chunks compared."""
    import numpy as np

    from indexes.shards import load_cluster

    got_manifest, got = load_cluster(got_dir, embedder)
    want_manifest, want = load_cluster(want_dir, embedder)
    try:
        assert got_manifest["content_hash"] == want_manifest["content_hash"]
        assert got_manifest["counts"] == want_manifest["counts"]
        compared = 0
        for g, w in zip(got, want, strict=True):
            assert list(g.chunks.chunk_ids) == list(w.chunks.chunk_ids)
            rows = np.arange(len(g.chunks.chunk_ids), dtype=np.int64)
            assert np.abs(g.dense.vectors(rows) - w.dense.vectors(rows)).max() <= 1e-5
            every = np.ones(len(rows), dtype=bool)
            for query in ("vitamin d deficiency", "cancer cell proliferation in mice", "gene expression"):
                assert g.bm25.collection_stats(query, every) == w.bm25.collection_stats(query, every)
                assert np.allclose(g.bm25.scores(query, every), w.bm25.scores(query, every), atol=1e-6)
            compared += len(rows)
        return compared
    finally:
        for snap in got + want:
            snap.close()


def test_an_ingest_on_the_cluster_equals_the_local_one_and_answers_alike(cluster, scifact, embedder, tmp_path):
    """The SciFact sample ingested at 2 shards by Ray Data over two embedding actors, each
    shard published by a task on a node: the same chunks, vectors, statistics and manifest
    as the local ingest, and the loop through the cluster answers as the single node does
    (4 principals x the sample's 30 claims)."""
    from routes.cluster.ingest import IngestStats, cluster_ingest
    from routes.service.view import open_view

    index, lines, stats = tmp_path / "cluster-built", [], IngestStats()
    manifest, _ = cluster_ingest([scifact[3]], index, 2, actors=2, report=lines.append, stats=stats)
    print(f"cluster ingest: {stats.pending} texts, per node {dict(stats.per_node)}, seconds {stats.seconds}")
    assert stats.embedded == stats.pending == stats.finished_on_actors > 0  # every text embedded once, all journaled
    assert stats.computed_at_build == 0 and set(stats.built_on) == {0, 1}
    assert any("/s" in line for line in lines) and any("published on node" in line for line in lines)
    assert _same_index(index, scifact[1][2], embedder) == manifest["counts"]["chunks"]
    again = IngestStats()
    cluster_ingest([scifact[3]], index, 2, actors=2, stats=again)  # a rebuild of the same corpus
    assert again.pending == again.embedded == again.computed_at_build == 0  # every vector reused

    shards = deployed(index)
    single = open_view(scifact[0], embedder, limits=LOOP_LIMITS, today=TODAY)
    view, close = front_over(index, shards, embedder)
    try:
        for principal in PRINCIPALS:
            for question in scifact[2]:
                e = single.query(question, principal, deadline_ms=LOOP_LIMITS.max_deadline_ms)
                g = view.query(question, principal, deadline_ms=LOOP_LIMITS.max_deadline_ms)
                assert loop_outcome(g) == loop_outcome(e), f"{principal.id}: {question}"
    finally:
        close()
        single.close()


def test_an_ingest_that_loses_a_worker_node_completes_and_equals_an_uninterrupted_one(cluster, scifact, embedder,
                                                                                       tmp_path):
    """A worker node embedding for the ingest is killed once some batches are journaled. The
    ingest completes (by Ray Data's retries, or run again if the run failed), journals every
    text exactly once, embeds again at most the batches that were in flight, and equals the
    local ingest."""
    from routes.cluster.ingest import IngestStats, cluster_ingest

    index, batch, actors = tmp_path / "interrupted", 16, 2
    first, failed = IngestStats(), []

    def run() -> None:
        try:
            cluster_ingest([scifact[3]], index, 2, actors=actors, batch=batch, stats=first)
        except Exception as e:  # noqa: BLE001 - a failed run is resumed below
            failed.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    while runner.is_alive() and first.embedded < 4 * batch:
        time.sleep(0.05)
    assert runner.is_alive(), "the ingest ended before a node could be killed"
    victim = next(n for n in cluster.worker_nodes if n.node_id in first.per_node)  # a node embedding now
    journaled_at_kill = first.embedded
    cluster.remove_node(victim, allow_graceful=False)
    cluster.add_node(num_cpus=1, resources={"node-5": 1})  # the operator's replacement
    runner.join(900)
    assert not runner.is_alive()
    second = IngestStats()
    if failed:
        print(f"the first run failed after the loss ({type(failed[0]).__name__}: {failed[0]}); running it again")
        cluster_ingest([scifact[3]], index, 2, actors=actors, batch=batch, stats=second)
        assert second.pending == first.pending - first.embedded  # only what no journaled batch holds
    again = first.finished_on_actors + second.finished_on_actors - first.pending
    print(f"node lost after {journaled_at_kill} of {first.pending} texts were journaled; "
          f"{again} texts embedded twice (batches of {batch}, {actors} actors)")
    assert first.embedded + second.embedded == first.pending  # each text journaled exactly once
    assert 0 <= again <= 4 * actors * batch  # the batches in flight on the lost node, not the run
    _same_index(index, scifact[1][2], embedder)


def _journaled(index) -> int:
    """Texts in the finished batch files of the shards' embedding journals of `index`, read
    without touching them (a batch file appears whole, by rename)."""
    import numpy as np

    from indexes.embed_journal import JOURNAL_DIR
    from indexes.shards import shard_dir

    keys: set[str] = set()
    for i in range(2):
        for path in (shard_dir(index, i) / JOURNAL_DIR).glob("batch-*.npz"):
            with np.load(path) as batch:
                keys.update(k.decode("ascii") for k in batch["keys"].tolist())
    return len(keys)


def test_a_killed_ingest_command_resumes_embedding_only_what_no_journaled_batch_holds(cluster, scifact, embedder,
                                                                                      tmp_path):
    """`quarry ingest --shards 2 --cluster ADDR` killed (SIGKILL) once batches are journaled
    publishes nothing; the same ingest run again embeds only the texts no journaled batch
    holds, and equals the local ingest."""
    import signal
    import subprocess
    import sys

    from routes.cluster.ingest import IngestStats, cluster_ingest
    from tests.conftest import wait_until

    index, batch = tmp_path / "killed", 16
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "ingest", str(scifact[3]), "--index", str(index),
                             "--shards", "2", "--cluster", cluster.address, "--batch", str(batch), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _journaled(index) >= 4 * batch, "journaled batches", alive=lambda: proc.poll() is None,
                   poll=0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    journaled = _journaled(index)
    assert not (index / "cluster.json").exists()  # nothing published
    resumed = IngestStats()
    cluster_ingest([scifact[3]], index, 2, actors=2, batch=batch, stats=resumed)
    total = resumed.pending + journaled
    print(f"ingest killed with {journaled} texts journaled; the rerun embedded {resumed.embedded} of {total}")
    assert 0 < resumed.pending == resumed.embedded == total - journaled < total
    assert resumed.computed_at_build == 0
    assert _same_index(index, scifact[1][2], embedder) == total
