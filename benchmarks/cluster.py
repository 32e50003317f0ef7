"""Serving from shards on Ray Serve against one node, on this machine, in one run.

    .venv/bin/python benchmarks/cluster.py [--shards 2,4] [--queries 300] [--clients 8] [--seconds 20]

BEIR SciFact (5,183 abstracts, the test claims). The single-node index is the one
benchmarks/retrievers.py builds; the same corpus is ingested again at each shard count with
its vectors reused (`quarry ingest --shards N`). The run re-executes itself inside a private
network and pid namespace (benchmarks/netns.py: Ray must never start on the host's network)
and starts a head and two worker nodes there; every shard is a Serve application of one
replica. For the single node and each shard count, over the same questions:

- quality: nDCG@10 of bm25, dense and hybrid (must be identical: the cluster returns what one
  node returns), and how many questions' top 10 differ at all;
- per-question latency of the hybrid route (p50, p95; the query embedding is cleared first,
  so both encode every question once), and the ratio to the single node's;
- throughput: hybrid questions per second from `--clients` concurrent clients for `--seconds`;
- the whole loop (route, grade, rewrite; k = 10), one question at a time, through a front's
  view over the shards (`open_sharded`) against one node's (`open_view`), with limits
  generous enough that no deadline decides an outcome: nDCG@10 of the answer context's
  documents, the share answered with context, mean attempts, latency p50 and p95 (query
  embedding cleared first) and the ratio to the single node's, how many questions' outcome
  differs from the single node's (status, gap reason, stop reason, chosen route, context
  chunk ids in order) and the largest score difference of a context chunk both return.

The front here is the benchmark process itself (the RemoteShard handles a front deployment
would hold), calling the shards concurrently. Writes benchmarks/results/cluster.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

from benchmarks.common import CACHE, DATASETS, build_or_reuse, machine, make_embedder, timed, write_json
from benchmarks.netns import INSIDE, inside_command, lo_up, ray_cluster
from indexes.beir import load_qrels, load_queries
from indexes.shards import CLUSTER, build_shards, read_cluster
from indexes.snapshot_build import BuildOptions
from indexes.snapshot_load import load_snapshot
from retrieval.limits import Limits
from retrieval.loop import LoopResult
from retrieval.metrics import doc_ranking, mean, ndcg_at_k, percentile
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.hybrid import HybridRetriever
from retrieval.types import NO_FILTERS, Principal

READER = Principal("bench")
ROUTES = ("bm25", "dense", "hybrid")
LOOP_LIMITS = Limits(call_timeout_ms=60000, max_deadline_ms=120000)  # no deadline decides an outcome on a busy machine
TODAY = date(2025, 11, 1)  # both sides read relative dates against the same day
PER_QUESTION = ("tops", "outcomes", "context_scores")  # compared with the single node's, not written


def _routes(bm25, dense, hybrid) -> dict:
    """The three measured routes, hybrid fusing the other two (`HybridRetriever` or `ShardedHybrid`)."""
    return {"bm25": bm25, "dense": dense, "hybrid": hybrid(bm25, dense)}


def measure(routes: dict, embedder, questions: list[tuple[str, str]], qrels: dict, clients: int, seconds: float) -> dict:
    access = READER.access_scope()
    out: dict = {"tops": {}}
    for name in ROUTES:
        embedder.clear_cache()
        lat, ndcg, tops = [], [], []
        for qid, text in questions:
            hits, ms = timed(lambda: routes[name].search(text, access, 10, NO_FILTERS))  # noqa: B023 - called at once
            lat.append(ms)
            ndcg.append(ndcg_at_k(doc_ranking(hits), qrels[qid], 10))
            tops.append([h.chunk_id for h in hits])
        out[name] = {"ndcg@10": round(mean(ndcg), 4), "p50_ms": round(percentile(lat, 50), 2),
                     "p95_ms": round(percentile(lat, 95), 2)}
        out["tops"][name] = tops
    done, stop = [0], threading.Event()
    lock = threading.Lock()

    def client(c: int) -> None:
        i = c
        while not stop.is_set():
            routes["hybrid"].search(questions[i % len(questions)][1], access, 10, NO_FILTERS)
            with lock:
                done[0] += 1
            i += clients

    embedder.clear_cache()
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, c) for c in range(clients)]
        time.sleep(seconds)
        stop.set()
        for f in futures:
            f.result()
    out["hybrid"]["qps_at_clients"] = round(done[0] / seconds, 1)
    return out


def outcome(result: LoopResult) -> tuple:
    """What a question's loop must answer as one node does: status, gap reason, stop reason,
    chosen route and the context's chunk ids in order."""
    return (result.status, result.gap.reason if result.gap else None, result.stop_reason, result.decision.chosen,
            tuple(h.chunk_id for h in result.context))


def measure_loop(view, embedder, questions: list[tuple[str, str]], qrels: dict) -> dict:
    """The whole loop per question, one at a time, over `view` (one node's or a front's over the
    shards); warmed on a few questions first, then the query embedding cleared, so both sides
    encode every question (and rewrite) once."""
    for _, text in questions[:5]:
        view.query(text, READER, k=10, deadline_ms=LOOP_LIMITS.max_deadline_ms)
    embedder.clear_cache()
    lat, ndcg, attempts, answered, outcomes, scores = [], [], [], 0, [], []
    for qid, text in questions:
        # k=10 (the limits' default is 8), so nDCG@10 ranks ten documents, as benchmarks/loop.py does
        result, ms = timed(lambda: view.query(text, READER, k=10, deadline_ms=LOOP_LIMITS.max_deadline_ms))  # noqa: B023
        lat.append(ms)
        ndcg.append(ndcg_at_k(doc_ranking(result.context), qrels[qid], 10))
        attempts.append(len(result.attempts))
        answered += result.status == "answer_context"
        outcomes.append(outcome(result))
        scores.append({h.chunk_id: h.score for h in result.context})
    return {"loop": {"ndcg@10": round(mean(ndcg), 4), "answer_context_share": round(answered / len(questions), 4),
                     "mean_attempts": round(mean(attempts), 3), "p50_ms": round(percentile(lat, 50), 2),
                     "p95_ms": round(percentile(lat, 95), 2)},
            "outcomes": outcomes, "context_scores": scores}


def loop_differences(r: dict, base: dict) -> tuple[int, float]:
    """(questions whose loop outcome differs from the single node's, the largest score
    difference of a context chunk both returned for the same question)."""
    differ = sum(a != b for a, b in zip(r["outcomes"], base["outcomes"], strict=True))
    largest = max((abs(mine[c] - theirs[c]) for mine, theirs in zip(r["context_scores"], base["context_scores"], strict=True)
                   for c in mine.keys() & theirs.keys()), default=0.0)
    return differ, largest


def single_loop(index: Path, embedder, questions: list[tuple[str, str]], qrels: dict) -> dict:
    """The loop over one node's view of the single-node index, closed before the cluster starts."""
    from routes.service.view import open_view

    view = open_view(index, embedder, limits=LOOP_LIMITS, today=TODAY)
    try:
        return measure_loop(view, embedder, questions, qrels)
    finally:
        view.close()


def sharded_loop(index_dir: Path, shards, embedder, fan_out: ThreadPoolExecutor, questions: list[tuple[str, str]],
                 qrels: dict) -> dict:
    """The loop over the view a front serves (`quarry cluster serve`) over the deployed shards."""
    from routes.service.resources import Resources
    from routes.service.settings import Settings
    from routes.service.sharded import open_sharded

    settings = Settings()
    resources = Resources.open(settings)
    try:
        view = open_sharded(index_dir, shards, embedder, resources, settings, fan_out, LOOP_LIMITS, TODAY)
        try:
            return measure_loop(view, embedder, questions, qrels)
        finally:
            view.close()
    finally:
        resources.shutdown()


def inside(args: argparse.Namespace) -> None:
    from routes.cluster.app import deploy_shards

    root = DATASETS / "scifact"
    queries, qrels = load_queries(root), load_qrels(root, "test")
    questions = [(qid, queries[qid]) for qid in list(qrels)[: args.queries]]
    embedder = make_embedder().load()
    index, manifest = build_or_reuse("scifact", [root / "corpus.jsonl"], embedder, default_acl=("public",))
    shard_counts = [int(n) for n in args.shards.split(",")]
    sharded = {}
    for n in shard_counts:
        sharded[n] = CACHE / f"scifact-shards-{n}"
        cached = sharded[n] / CLUSTER
        if not cached.is_file() or read_cluster(sharded[n])["content_hash"] != manifest["content_hash"]:  # same corpus
            t0 = time.perf_counter()
            build_shards([root / "corpus.jsonl"], sharded[n], embedder, n,
                         BuildOptions(reuse_from=index, default_acl=("public",)))
            print(f"ingested {n} shards (vectors reused) in {time.perf_counter() - t0:.1f} s", flush=True)

    snap = load_snapshot(index, embedder)
    single = _routes(Bm25Retriever(snap.bm25, snap.chunks), DenseRetriever(snap.dense, embedder.encode_query, snap.chunks),
                     HybridRetriever)
    results = {"single": measure(single, embedder, questions, qrels, args.clients, args.seconds)}
    results["single"] |= single_loop(index, embedder, questions, qrels)
    lo_up()
    t0 = time.perf_counter()
    with ray_cluster(workers=2):
        started = time.perf_counter() - t0
        from retrieval.scatter import ShardedBm25, ShardedDense, ShardedHybrid

        fan_out = ThreadPoolExecutor(4 * args.clients)  # the front's calls to the shards, concurrently
        for n in shard_counts:
            shards = deploy_shards(sharded[n], replicas=1, model_id=embedder.model_id)
            routes = _routes(ShardedBm25(shards, fan_out), ShardedDense(shards, embedder.encode_query, fan_out),
                             ShardedHybrid)
            for q in questions[:5]:  # warm the handles
                routes["hybrid"].search(q[1], READER.access_scope(), 10, NO_FILTERS)
            results[f"{n}_shards"] = measure(routes, embedder, questions, qrels, args.clients, args.seconds)
            results[f"{n}_shards"] |= sharded_loop(sharded[n], shards, embedder, fan_out, questions, qrels)
        fan_out.shutdown()
    snap.close()

    base = results["single"]
    print(f"\nSciFact test, {len(questions)} claims, {manifest['counts']['chunks']} chunks; Ray head + 2 workers "
          f"started in {started:.0f} s; {args.clients} clients for {args.seconds:g} s")
    print(f"{'serving':<10}{'bm25':>8}{'dense':>8}{'hybrid':>8}{'differ':>8}{'p50 ms':>9}{'p95 ms':>9}{'x single':>10}{'q/s':>8}")
    payload = {"dataset": "scifact/test", "questions": len(questions), "machine": machine(), "clients": args.clients,
               "cluster_start_s": round(started, 1), "results": {}}
    for name, r in results.items():
        differ = sum(a != b for route in ROUTES for a, b in zip(r["tops"][route], base["tops"][route], strict=True))
        ratio = r["hybrid"]["p50_ms"] / base["hybrid"]["p50_ms"]
        print(f"{name:<10}{r['bm25']['ndcg@10']:>8.4f}{r['dense']['ndcg@10']:>8.4f}{r['hybrid']['ndcg@10']:>8.4f}{differ:>8}"
              f"{r['hybrid']['p50_ms']:>9.2f}{r['hybrid']['p95_ms']:>9.2f}{ratio:>10.2f}{r['hybrid']['qps_at_clients']:>8.1f}")
        payload["results"][name] = {**{k: v for k, v in r.items() if k not in PER_QUESTION}, "top10_lists_differing": differ,
                                    "hybrid_p50_ratio_to_single": round(ratio, 2)}
    print(f"\nthe loop (route, grade, rewrite), one question at a time, deadline {LOOP_LIMITS.max_deadline_ms} ms")
    print(f"{'serving':<10}{'nDCG@10':>9}{'answered':>10}{'attempts':>10}{'p50 ms':>9}{'p95 ms':>9}{'x single':>10}"
          f"{'differ':>8}{'max dscore':>12}")
    for name, r in results.items():
        loop, (differ, largest) = r["loop"], loop_differences(r, base)
        ratio = loop["p50_ms"] / base["loop"]["p50_ms"]
        print(f"{name:<10}{loop['ndcg@10']:>9.4f}{loop['answer_context_share']:>10.3f}{loop['mean_attempts']:>10.3f}"
              f"{loop['p50_ms']:>9.2f}{loop['p95_ms']:>9.2f}{ratio:>10.2f}{differ:>8}{largest:>12.2e}")
        payload["results"][name]["loop"] = {**loop, "p50_ratio_to_single": round(ratio, 2), "outcomes_differing": differ,
                                            "max_context_score_diff": float(largest)}
    write_json("cluster", payload)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default="2,4", help="shard counts, comma-separated")
    ap.add_argument("--queries", type=int, default=300, help="test claims measured (SciFact has 300)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each throughput run")
    args = ap.parse_args()
    if os.environ.get(INSIDE) == "1":
        inside(args)
        return
    with tempfile.TemporaryDirectory(prefix="qr", dir="/tmp") as tmp:  # short: Ray's socket paths
        command, env = inside_command([str(Path(__file__).resolve()), *sys.argv[1:]], Path(tmp))
        sys.exit(subprocess.run(command, env=env).returncode)


if __name__ == "__main__":
    main()
