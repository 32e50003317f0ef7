"""Quarry at scale: ingest, memory and latency on the synthetic corpus of benchmarks/scale_corpus.py.

    .venv/bin/python benchmarks/scale.py --chunks 200000 [--queries 100] [--rebuild] [--out FILE]

Builds (or reuses) the N-chunk corpus and its index with the real build path, vectors from
the stand-in encoder (`StandInEncoder`: index behaviour, not retrieval quality; the output
says so) or, with `--encoder model`, from the real embedding model (the `real` corpus kind
is real text for it), then measures, in-process and one call at a time:

- p50/p95 of bm25, dense, hybrid (k=10) and the one-attempt loop (each question's vector
  computed beforehand and reported apart, `query_embedding_p50_ms`), for principals who may read
  about 100%, 10% and 0.1% of the corpus, and that every call returns min(k, authorized) hits
  where the route has them;
- dense recall@10 against an exact float scan of the same principal's authorized rows, and
  baselines in the same run: the exact scan's latency (graph indexes), and BM25 scoring every
  allowed row before ranking (no pruning), with how often both return the same rows;
- the first question of a new user who shares groups with an existing one over the same
  question warm (`new_user_first_query_ratio`), and the first question of a brand-new scope;
- resident memory, overall and per structure (RSS growth while each one loads, in a separate
  pass: catalog with chunk table, BM25, vectors, entity index, access masks);
- ingest throughput, with and without the embedding stage.

Writes benchmarks/results/scale[-<kind>][-model]-<N>.json (or --out).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import gc
import json
import shutil
import time
from typing import Any

import numpy as np

from benchmarks.common import CACHE, RESULTS, machine, make_embedder, peak_rss_mb, timed
from benchmarks.scale_corpus import GROUPS, KINDS, StandInEncoder, StaticEncoder, documents, real_questions, write
from retrieval.access import top_k
from retrieval.errors import RetrievalError
from retrieval.metrics import percentile
from retrieval.types import Filters, Principal

ROUTES = ("bm25", "dense", "hybrid")
ENCODERS = ("standin", "static", "model")
PRINCIPALS = {
    "100%": Principal("reader-all", tuple(f"g{g:02d}" for g in range(GROUPS))),
    "10%": Principal("reader-g00", ("g00",)),
    "0.1%": Principal("reader-g01", ("g01",)),
}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Recorder:
    """An encoder that keeps what it computed, by text hash: the exact reference vectors of a
    real-model build, which the 8-bit index cannot give back and would cost a second pass."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.model_id = inner, inner.model_id
        self.seen: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, texts: Any, progress: Any = None) -> np.ndarray:
        from indexes.snapshot_build import embed_key

        out = self.inner.encode(texts, progress)
        self.seen.update((embed_key(t), v) for t, v in zip(texts, out, strict=True))
        return out


def make_encoder(name: str) -> Any:
    """The encoder a scale run names: a stand-in (random word projections, or the model's
    static token vectors) or the real embedding model."""
    if name == "standin" or name == StandInEncoder.model_id:
        return StandInEncoder()
    if name == "static" or name == StaticEncoder.model_id:
        return StaticEncoder().load()
    return make_embedder().load()


def root_of(n: int, kind: str, encoder: str) -> Path:
    name = "scale" + ("" if kind == "zipf" else f"-{kind}") + ("" if encoder == "standin" else f"-{encoder}")
    return CACHE / f"{name}-{n}"


def reference_vectors(root: Path, index: Path, encoder: Any, n: int, kind: str) -> np.ndarray:
    """Exact float vectors of the index's rows, in row order, for recall: the stand-in encodes
    again (cheap); a real-model build's are the ones its Recorder kept, saved beside it."""
    from indexes.catalog import Catalog
    from indexes.snapshot_load import current_snapshot_path

    saved = root / "reference.npy"
    if saved.exists():
        return np.load(saved)
    if isinstance(encoder, (StandInEncoder, StaticEncoder)):  # encode the index's chunk texts again
        from indexes.snapshot_build import titled

        catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
        try:
            table = catalog.chunk_table()
            vectors = encoder.encode([titled(t, x) for t, x in zip(table.titles, table.texts, strict=True)])
        finally:
            catalog.close()
        np.save(saved, vectors)
        return vectors
    if not isinstance(encoder, Recorder):
        raise SystemExit(f"{root}: no saved reference vectors; run benchmarks/scale.py on it first")
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        keys = catalog.embed_keys()
    finally:
        catalog.close()
    if not all(k in encoder.seen for k in keys):
        raise SystemExit(f"{root}: no reference vectors were kept for this build; run again with --rebuild")
    vectors = np.stack([encoder.seen[k] for k in keys]).astype(np.float32)
    np.save(saved, vectors)
    return vectors


def build(n: int, rebuild: bool, encoder: Any, kind: str = "zipf",
          graph_from: int | None = None, encoder_name: str = "standin") -> tuple[Path, dict]:
    from indexes.snapshot_build import BuildOptions, build_snapshot
    from indexes.snapshot_load import current_snapshot_path, read_manifest

    root = root_of(n, kind, encoder_name)
    corpus, index = root / "docs.jsonl", root / "index"
    if rebuild:
        shutil.rmtree(root, ignore_errors=True)
    if not corpus.exists():
        t0 = time.perf_counter()
        write(n, corpus, kind)
        print(f"corpus of {n:,} chunks written in {time.perf_counter() - t0:.0f} s", flush=True)
    try:
        return index, read_manifest(current_snapshot_path(index))
    except Exception:  # noqa: BLE001 - no usable index yet: build it
        pass
    peak_rss_mb(reset=True)
    t0 = time.perf_counter()
    if graph_from is None:  # what an ingest with the default settings builds
        from routes.service.settings import Settings

        graph_from = int(Settings.model_fields["dense_graph_from"].default)
    manifest = build_snapshot([corpus], index, encoder, BuildOptions(reuse_embeddings=False, dense_graph_from=graph_from),
                              progress=lambda stage, done, total: None)
    manifest["timings_s"]["wall_total"] = round(time.perf_counter() - t0, 2)
    manifest["timings_s"]["peak_rss_mb"] = round(peak_rss_mb(), 1)  # the build's own peak (this process's, reset before)
    (index / "scale_build.json").write_text(json.dumps(manifest["timings_s"]))
    return index, manifest


def memory_by_structure(index: Path, principals: dict[str, Principal]) -> dict[str, float]:
    """RSS growth (MB) while each structure loads, in order, in this process."""
    from indexes.bm25_index import Bm25Index
    from indexes.catalog import Catalog
    from indexes.dense_index import DenseIndex
    from indexes.snapshot_load import current_snapshot_path
    from retrieval.entities import EntityIndex

    path = current_snapshot_path(index)
    gc.collect()
    out, before = {}, rss_mb()
    catalog = Catalog(path / "catalog.duckdb")
    chunks = catalog.chunk_table()
    out["catalog_and_chunk_table"], before = rss_mb() - before, rss_mb()
    bm25 = Bm25Index.load(path / "bm25")
    out["bm25"], before = rss_mb() - before, rss_mb()
    dense = DenseIndex.load(path / "dense.faiss")
    out["vectors"], before = rss_mb() - before, rss_mb()
    titles, title_ids, values = catalog.entity_names()
    entities = (EntityIndex.build(titles, title_ids, chunks.doc_ids), EntityIndex.build(values))
    out["entity_index"], before = rss_mb() - before, rss_mb()
    masks = [chunks.mask(p.access_scope(), Filters()) for p in principals.values()]
    out[f"access_masks_x{len(masks)}"] = rss_mb() - before
    out["dense_kind"] = dense.kind  # type: ignore[assignment]
    del entities, masks, bm25, dense, chunks
    catalog.close()
    gc.collect()
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items()}


def queries(n: int, count: int, kind: str = "zipf") -> list[str]:
    """Questions of 3-6 words drawn from documents of the corpus kind, deterministic; the
    `real` kind's are the datasets' own questions."""
    if kind in ("real", "remix"):
        return real_questions(count)
    rng = np.random.default_rng(count)
    texts = []
    for i, doc in enumerate(documents(min(n, 20_000), kind)):
        if i % max(1, min(n, 20_000) // count) == 0:
            words = doc["text"].rstrip(".").split()
            texts.append(" ".join(rng.choice(words, size=int(rng.integers(3, 7)), replace=False)))
    return texts[:count]


def unpruned_top(bm25: Any, query: str, allowed: np.ndarray, order: np.ndarray) -> np.ndarray:
    """BM25's baseline: every allowed row scored (scoped statistics), then ranked."""
    return top_k(bm25.scores(query, allowed), allowed, 10, floor=0.0, order=order)


def exact_top(vectors: np.ndarray, query: np.ndarray, allowed: np.ndarray, k: int) -> set[int]:
    rows = np.flatnonzero(allowed)
    scores = vectors[rows] @ query.reshape(-1)
    best = np.argpartition(-scores, min(k, len(rows)) - 1)[:k] if len(rows) > k else np.arange(len(rows))
    return set(rows[best].tolist())


def serving_process(index: Path, qs: list[str]) -> dict[str, float]:
    """What a server holds: a fresh process that opens the engine as `quarry serve` does and
    answers every route and the loop for each scope, then reports its resident memory (now
    and peak). The benchmark's own process also holds the reference vectors and the
    per-structure pass, so its RSS is not the server's."""
    import subprocess

    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from benchmarks.scale import _serve_and_measure; print(json.dumps(_serve_and_measure(sys.argv[2], sys.argv[3:])))")
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parents[1]), str(index), *qs],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _serve_and_measure(index: str, qs: list[str]) -> dict[str, float]:
    from retrieval.search import search
    from routes.service.view import open_view
    from routes.service.settings import Settings

    encoder = make_encoder(Path(index, "..", "encoder").resolve().read_text())
    engine = open_view(Path(index), embedder=encoder, settings=Settings(index_dir=Path(index)))
    for principal in PRINCIPALS.values():
        for q in qs:
            for route in ROUTES:
                search(engine.retrievers, route, q, principal, 10, Filters(), engine.limits)
            engine.query(q, principal, max_attempts=1, deadline_ms=30_000)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    mb = {key: round(int(status[key].split()[0]) / 1024, 1) for key in ("VmRSS", "VmHWM")}
    return {"rss_mb": mb["VmRSS"], "peak_mb": mb["VmHWM"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--corpus", choices=KINDS, default="zipf", help="benchmarks/scale_corpus.py's kinds")
    ap.add_argument("--graph-from", type=int, default=None,
                    help="dense_graph_from of the build (default: the setting's own default, as `quarry ingest` builds)")
    ap.add_argument("--encoder", choices=ENCODERS, default="standin",
                    help="a stand-in encoder (random word projections, or the model's static token vectors), "
                         "or the real embedding model (with --corpus real)")
    args = ap.parse_args()
    from retrieval.search import search
    from routes.service.view import open_view
    from routes.service.settings import Settings

    encoder: Any = Recorder(make_embedder().load()) if args.encoder == "model" else make_encoder(args.encoder)
    rss_start = rss_mb()
    index, manifest = build(args.chunks, args.rebuild, encoder, args.corpus, args.graph_from, args.encoder)
    (index.parent / "encoder").write_text(encoder.model_id)
    saved = index / "scale_build.json"
    timings = json.loads(saved.read_text()) if saved.exists() else manifest["timings_s"]
    chunks = manifest["counts"]["chunks"]
    total = timings.get("wall_total") or sum(v for v in timings.values() if isinstance(v, (int, float)))
    embed = timings.get("embed", 0.0)
    memory = memory_by_structure(index, PRINCIPALS)
    rss_before = rss_mb()
    t0 = time.perf_counter()
    engine = open_view(index, embedder=encoder, settings=Settings(index_dir=index), warm=False)
    load_s = time.perf_counter() - t0
    qs = queries(args.chunks, args.queries, args.corpus)
    # Each question's vector is computed (and cached) before anything is timed: embedding a
    # question costs the same at any corpus size, so it is reported on its own.
    embed_ms = [timed(lambda: engine.embedder.encode_query(q))[1] for q in qs]  # noqa: B023
    described = {"standin": "stand-in (bag-of-words random projection, 384-d): index behaviour, not retrieval quality",
                 "static": "stand-in (all-MiniLM-L6-v2's static token vectors, SIF-weighted, 384-d; neighbourhoods "
                           "measured like the model's on real text): index behaviour, not retrieval quality",
                 }.get(args.encoder, f"the embedding model ({encoder.model_id})")
    out: dict = {"chunks": chunks, "corpus": args.corpus, "encoder": described, "machine": machine(), "queries": len(qs),
                 "dense_index": engine.snapshot.dense.kind, "query_embedding_p50_ms": round(percentile(embed_ms, 50), 2),
                 "build_s": timings, "load_s": round(load_s, 1),
                 "ingest_chunks_per_s": round(chunks / total, 1),
                 "ingest_chunks_per_s_without_embedding": round(chunks / max(total - embed, 1e-9), 1),
                 "memory_mb_by_structure": memory}
    vectors = reference_vectors(index.parent, index, encoder, args.chunks, args.corpus)
    per_scope = {}
    for scope, principal in PRINCIPALS.items():
        allowed = engine.snapshot.chunks.mask(principal.access_scope(), Filters())
        readable = int(allowed.sum())
        figures: dict = {"readable_chunks": readable}
        short = 0
        for route in ROUTES:
            lat = []
            for q in qs:
                hits, ms = timed(lambda: search(engine.retrievers, route, q, principal, 10, Filters(), engine.limits))  # noqa: B023
                lat.append(ms)
                if route == "dense" and len(hits) != min(10, readable):
                    short += 1
            figures[f"{route}_p50_ms"], figures[f"{route}_p95_ms"] = round(percentile(lat, 50), 2), round(percentile(lat, 95), 2)
        recall = []
        for q in qs:
            got = {engine.snapshot.chunks.row_of(h.chunk_id) for h in
                   search(engine.retrievers, "dense", q, principal, 10, Filters(), engine.limits)}
            want = exact_top(vectors, encoder.encode_query(q), allowed, 10)
            recall.append(len(got & want) / max(1, len(want)))
        figures["dense_recall@10"] = round(float(np.mean(recall)), 4)
        bm25 = engine.snapshot.bm25  # the baseline: every allowed row scored, then ranked (no pruning)
        order = engine.snapshot.chunks.tiebreak
        unpruned, same = [], 0
        for q in qs:
            rows, ms = timed(lambda: unpruned_top(bm25, q, allowed, order))  # noqa: B023
            unpruned.append(ms)
            same += rows.tolist() == bm25.top_k(q, allowed, 10, order)[0].tolist()
        figures["bm25_unpruned_p50_ms"] = round(percentile(unpruned, 50), 2)
        figures["bm25_pruned_same_rows"] = f"{same}/{len(qs)}"
        dense = engine.snapshot.dense
        if dense.kind.endswith("+hnsw"):  # the baseline: an exact scan of the same codes, same filter
            rows = np.flatnonzero(allowed)
            exact = [timed(lambda: dense._exact(encoder.encode_query(q), rows, 10))[1] for q in qs]  # noqa: B023
            figures["dense_exact_scan_p50_ms"] = round(percentile(exact, 50), 2)
        figures["dense_calls_short_of_min_k_authorized"] = short
        try:  # first use of the loop's parts (models, backgrounds), untimed, on a question not timed
            engine.query("What does this cover?", principal, max_attempts=1, deadline_ms=30_000)
        except RetrievalError:
            pass
        lat, failed = [], 0
        for q in qs:  # a failed question (a retrieval call past its timeout) is counted, and its time kept
            t0 = time.perf_counter()
            try:
                engine.query(q, principal, max_attempts=1, deadline_ms=30_000)
            except RetrievalError:
                failed += 1
            lat.append((time.perf_counter() - t0) * 1000)
        figures["loop_p50_ms"], figures["loop_p95_ms"] = round(percentile(lat, 50), 2), round(percentile(lat, 95), 2)
        figures["loop_failed"] = failed
        per_scope[scope] = figures
        print(f"{scope:>5} ({readable:,} readable): " + "  ".join(f"{k} {v}" for k, v in figures.items() if k.endswith("p50_ms")
                                                                 or k.startswith("dense_recall")), flush=True)
    out["per_scope"] = per_scope
    for key in ("bm25_p50_ms", "dense_p50_ms", "hybrid_p50_ms", "loop_p50_ms", "dense_recall@10"):
        out[key] = per_scope["100%"][key]
    # A new user sharing groups with an existing one, and a brand-new scope, on their first question.
    q = qs[0]
    warm = percentile([timed(lambda: engine.query(q, PRINCIPALS["10%"], max_attempts=1, deadline_ms=30_000))[1]
                       for _ in range(5)], 50)
    newcomer = Principal("newcomer", PRINCIPALS["10%"].groups)
    first = timed(lambda: engine.query(q, newcomer, max_attempts=1, deadline_ms=30_000))[1]
    brand_new = timed(lambda: engine.query(q, Principal("fresh", ("g02", "g07", "g13")), max_attempts=1,
                                           deadline_ms=30_000))[1]
    out["new_user_first_query_ratio"] = round(first / warm, 2)
    out["new_user_first_query_ms"], out["warm_query_ms"] = round(first, 2), round(warm, 2)
    out["brand_new_scope_first_query_ms"] = round(brand_new, 2)
    out["rss_mb"] = round(rss_mb(), 1)
    out["rss_mb_engine"] = round(rss_mb() - rss_before, 1)
    out["rss_mb_at_start"] = round(rss_start, 1)
    engine.close()
    del vectors
    gc.collect()
    out["serving_process"] = serving_process(index, qs[:20])
    print(f"serving process: {out['serving_process']}", flush=True)
    path = args.out or RESULTS / f"{index.parent.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k not in ("per_scope", "machine")}, indent=1))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
