"""A sharded ingest in one process against the same ingest on a Ray cluster, on this machine, in one run.

    .venv/bin/python benchmarks/cluster_ingest.py [--docs 1000] [--shards 2] [--actors 2] [--batch 256]

The first `--docs` abstracts of BEIR SciFact (public), written to a temporary JSONL, are
ingested at `--shards` shards twice, every vector computed (no reuse):

- **one process**: `quarry ingest --shards N` (indexes/shards.py `build_shards`);
- **the cluster**: `quarry ingest --shards N --cluster ADDR` (routes/cluster/ingest.py) on a
  head and two worker nodes of one CPU each, started inside a private network and pid
  namespace (benchmarks/netns.py), with `--actors` embedding actors.

Printed and written to benchmarks/results/cluster_ingest.json: wall time and chunks per
second of each, the cluster's stages (validation, planning, embedding, publishing) and
chunks per second per node, whether the two indexes hold the same chunks and vectors, and the
scaling model for N machines derived from these figures. On one 2-core machine the cluster's
nodes share the same two cores, so no speed-up is possible here: the figure says what the
distribution costs, the model says what it buys across machines.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np

from benchmarks.common import DATASETS, machine, make_embedder, write_json
from benchmarks.netns import INSIDE, inside_command, lo_up, ray_cluster
from indexes.shards import build_shards, load_cluster
from indexes.snapshot_build import BuildOptions


def write_corpus(folder: Path, docs: int) -> Path:
    path = folder / "scifact.jsonl"
    with (DATASETS / "scifact" / "corpus.jsonl").open(encoding="utf-8") as src, path.open("w") as out:
        for n, line in enumerate(src):
            if n >= docs:
                break
            doc = json.loads(line)
            out.write(json.dumps({"id": doc["_id"], "title": doc["title"], "text": doc["text"], "acl": ["public"]}) + "\n")
    return path


def max_vector_difference(a: Path, b: Path, embedder) -> tuple[bool, float]:
    """(same chunk ids in every shard, the largest difference of a vector coordinate)."""
    _, left = load_cluster(a, embedder)
    _, right = load_cluster(b, embedder)
    try:
        same, worst = True, 0.0
        for x, y in zip(left, right, strict=True):
            same &= list(x.chunks.chunk_ids) == list(y.chunks.chunk_ids)
            rows = np.arange(len(x.chunks.chunk_ids), dtype=np.int64)
            worst = max(worst, float(np.abs(x.dense.vectors(rows) - y.dense.vectors(rows)).max()))
        return same, worst
    finally:
        for s in left + right:
            s.close()


def inside(args: argparse.Namespace) -> None:
    import ray

    from routes.cluster.ingest import BATCH, IngestStats, cluster_ingest

    options = BuildOptions(reuse_embeddings=False, default_acl=("public",))
    embedder = make_embedder().load()
    batch = args.batch or BATCH
    with tempfile.TemporaryDirectory(prefix="qi", dir="/tmp") as tmp:
        work = Path(tmp)
        source = write_corpus(work, args.docs)
        t0 = time.perf_counter()
        local = build_shards([source], work / "local", embedder, args.shards, options)
        local_s = time.perf_counter() - t0
        chunks = local["counts"]["chunks"]
        print(f"one process: {chunks} chunks in {local_s:.1f} s, {chunks / local_s:.1f} chunks/s", flush=True)

        lo_up()
        t0 = time.perf_counter()
        with ray_cluster(workers=2):
            started = time.perf_counter() - t0
            stats = IngestStats()
            t0 = time.perf_counter()
            cluster_ingest([source], work / "cluster", args.shards, options, actors=args.actors, batch=batch,
                           report=lambda line: print(line, flush=True), stats=stats)
            cluster_s = time.perf_counter() - t0
            nodes = len(ray.nodes())
        same, worst = max_vector_difference(work / "local", work / "cluster", embedder)

    embed_s = stats.seconds["embed"]
    serial_s = cluster_s - embed_s
    per_node = {k[:8]: round(v / embed_s, 2) for k, v in stats.per_node.items()}
    per_actor = stats.finished_on_actors / max(stats.encode_s, 1e-9)  # one actor, per second of its own time
    print(f"\nSciFact, first {args.docs} abstracts, {chunks} chunks, {args.shards} shards; Ray head + 2 workers of 1 CPU "
          f"({nodes} nodes) started in {started:.0f} s, {args.actors} embedding actors")
    print(f"{'ingest':<14}{'seconds':>9}{'chunks/s':>10}{'x one process':>15}")
    print(f"{'one process':<14}{local_s:>9.1f}{chunks / local_s:>10.1f}{1.0:>15.2f}")
    print(f"{'cluster':<14}{cluster_s:>9.1f}{chunks / cluster_s:>10.1f}{local_s / cluster_s:>15.2f}")
    print(f"cluster stages (s): {stats.seconds}; chunks/s per node while embedding: {per_node}")
    print(f"same chunk ids: {same}; largest vector difference: {worst:.2e}")
    idle_s = embed_s - stats.load_s - stats.encode_s / max(1, stats.actors_used)
    print(f"embedding stage: {stats.load_s:.1f} s for an actor to load the model, {stats.encode_s:.1f} actor-seconds "
          f"embedding ({per_actor:.1f} chunks/s per actor), {idle_s:.1f} s of the stage beyond load + an even share "
          f"(Ray Data's start, the last batches' imbalance)")
    print(f"model: T(N machines, a actors each) = {serial_s:.1f} s (validation, planning, publishing) + "
          f"{stats.load_s:.1f} s (model load) + {chunks} chunks / (N x a x {per_actor:.1f} chunks/s per actor) "
          f"+ one batch of {batch} at the end")
    write_json("cluster_ingest" if batch == BATCH else f"cluster_ingest_batch{batch}", {
        "dataset": f"scifact corpus, first {args.docs} abstracts", "chunks": chunks, "shards": args.shards,
        "machine": machine(), "cluster": {"nodes": nodes, "cpus_per_node": 1, "actors": args.actors,
                                          "start_s": round(started, 1)},
        "one_process": {"seconds": round(local_s, 2), "chunks_per_s": round(chunks / local_s, 2)},
        "cluster_ingest": {"seconds": round(cluster_s, 2), "chunks_per_s": round(chunks / cluster_s, 2),
                           "speedup_vs_one_process": round(local_s / cluster_s, 3), "stages_s": stats.seconds,
                           "chunks_per_s_per_node": per_node, "embedded": stats.embedded,
                           "computed_at_build": stats.computed_at_build},
        "same_chunk_ids": same, "max_vector_difference": worst,
        "model": {"serial_s": round(serial_s, 2), "embed_s": round(embed_s, 2),
                  "chunks_per_s_per_actor": round(per_actor, 2), "load_s": round(stats.load_s, 2),
                  "actor_encode_s": round(stats.encode_s, 2), "batch": batch,
                  "actors_used": stats.actors_used,
                  "formula": "T(N machines, a actors each) = serial_s + load_s + chunks / (N * a * chunks_per_s_per_actor)"
                             " + up to one batch / chunks_per_s_per_actor of imbalance at the end"},
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000, help="SciFact abstracts ingested (5,183 in all)")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--actors", type=int, default=2, help="embedding actors of the cluster ingest")
    ap.add_argument("--batch", type=int, default=None, help="texts per embedding batch (default: the command's, 256)")
    args = ap.parse_args()
    if os.environ.get(INSIDE) == "1":
        inside(args)
        return
    with tempfile.TemporaryDirectory(prefix="qr", dir="/tmp") as tmp:  # short: Ray's socket paths
        command, env = inside_command([str(Path(__file__).resolve()), *sys.argv[1:]], Path(tmp))
        sys.exit(subprocess.run(command, env=env).returncode)


if __name__ == "__main__":
    main()
