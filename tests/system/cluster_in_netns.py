"""Run by tests/system/test_cluster.py inside a private network and pid namespace (never on
its own): a real Ray cluster (a head and two worker nodes), the demo corpus served from 2 and
3 shards as Ray Serve deployments, and the single-node index of the same corpus beside it.

- every route (exact, bm25, dense, hybrid by RRF and z-score) through the cluster equals the
  single node: 4 principals x 30 questions, the same ids in the same order, scores within 1e-4;
- the no-leak differential: each of 5 principals' bait questions through the cluster gives
  what an index holding only the documents that principal may read gives;
- Ray listens only in this namespace, whose only interface is loopback;
- faults: under 8 concurrent clients a killed replica, then a killed worker node, cost no
  failed and no wrong call with two replicas per shard; a shard with no live replica makes
  calls a typed, retryable RetrievalUnavailable.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from indexes.shards import build_shards
from indexes.snapshot_build import BuildOptions, build_snapshot
from indexes.snapshot_load import load_snapshot
from retrieval.errors import RetrievalUnavailable
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.exact import ExactRetriever
from retrieval.retrievers.hybrid import FusionParams, HybridRetriever
from retrieval.scatter import ShardedBm25, ShardedDense, ShardedExact, ShardedHybrid
from retrieval.types import NO_FILTERS, Hit, Principal
from tests.conftest import DEMO, write_readable_documents
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
        build_snapshot([docs], reduced[pid], embedder, BuildOptions(reuse_from=demo_index))
    return demo_index, sharded, reduced


@pytest.fixture(scope="module")
def cluster(indexes):
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


@pytest.mark.parametrize("n", [2, 3])
def test_every_route_through_the_cluster_equals_the_single_node(cluster, indexes, single, embedder, n):
    shards = deployed(indexes[1][n])
    assert [s.describe()["shard"] for s in shards] == list(range(n))
    routes = sharded_routes(shards, embedder)
    compared = 0
    for name, route in routes.items():
        for principal in PRINCIPALS:
            access = principal.access_scope()
            for question in QUESTIONS:
                expected = single[name].search(question, access, K, NO_FILTERS)
                same(expected, route.search(question, access, K, NO_FILTERS), f"{n} shards, {name}, {principal.id}: {question}")
                compared += len(expected)
    assert compared > 4 * 4 * 30 * K // 2
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


def _hammer(routes, expected, stop: threading.Event, calls: list[int], clients: int = 8) -> list[str]:
    """8 clients asking in a loop until `stop`, counting their calls in `calls[0]`: the problems."""
    problems, lock = [], threading.Lock()

    def client(c: int) -> None:
        i = c
        while not stop.is_set():
            question, principal = QUESTIONS[i % len(QUESTIONS)], PRINCIPALS[i % len(PRINCIPALS)]
            try:
                got = [h.chunk_id for h in routes["hybrid-rrf"].search(question, principal.access_scope(), K, NO_FILTERS)]
                if got != expected[(question, principal.id)]:
                    with lock:
                        problems.append(f"wrong answer: {principal.id}: {question}")
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


def test_a_killed_replica_then_a_killed_worker_node_cost_no_call(cluster, indexes, single, embedder):
    import ray
    from routes.cluster.app import shard_app_name

    shards = deployed(indexes[1][2])
    routes = sharded_routes(shards, embedder)
    expected = {(q, p.id): [h.chunk_id for h in single["hybrid-rrf"].search(q, p.access_scope(), K, NO_FILTERS)]
                for q in QUESTIONS for p in PRINCIPALS}
    apps = [shard_app_name(i) for i in range(2)]
    stop, calls = threading.Event(), [0]
    with ThreadPoolExecutor(1) as runner:
        outcome = runner.submit(_hammer, routes, expected, stop, calls)
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
    print(f"8 clients: {calls[0]} calls ({calls[0] - before_loss} after the node loss), {len(problems)} failed or wrong, "
          f"{sum(s.retried for s in shards)} sent again; 2 replicas per shard running again {recovered:.1f} s after it")
    assert problems == [] and before_loss > 0 and calls[0] > before_loss  # answered right, before and after the loss
    assert all(_running_replicas(app) == 2 for app in apps)
    cluster.add_node(num_cpus=1, resources={"node-3": 1})


def test_a_shard_whose_application_is_gone_is_a_typed_retryable_unavailable(cluster, indexes, embedder):
    from ray import serve
    from routes.cluster.app import shard_app_name

    shards = deployed(indexes[1][2], replicas=1, retry_s=3.0)
    routes = sharded_routes(shards, embedder)
    serve.delete(shard_app_name(1))
    for name in ("bm25", "dense", "exact", "hybrid-rrf"):
        with pytest.raises(RetrievalUnavailable, match="shard 01 has no live replica") as err:
            routes[name].search(QUESTIONS[0], PRINCIPALS[0].access_scope(), K, NO_FILTERS)
        assert err.value.retryable
