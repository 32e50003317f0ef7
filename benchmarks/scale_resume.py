"""A large ingest killed while it embeds, then started again: does it resume, and lose nothing?

    .venv/bin/python benchmarks/scale_resume.py --chunks 100000 [--kill-after 8]

The N-chunk corpus of benchmarks/scale_corpus.py is ingested in a child process (the real
`build_snapshot`, stand-in vectors, journal batches of 4,096); once `--kill-after` batches are
journaled the child gets SIGKILL. The same ingest then runs again in this process, and a
third, uninterrupted one into a fresh directory is the baseline. Reported: batches and
vectors journaled before the kill, vectors the resumed run took from the journal and
computed, both runs' wall time and embedding time, and whether the resumed snapshot equals
the baseline (content hash, BM25 files byte for byte, the catalog's chunks and their text keys,
every vector; DuckDB files themselves are not byte-reproducible).

Writes benchmarks/results/scale_resume-<N>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import shutil
import signal
import subprocess
import time

import numpy as np

from benchmarks.common import CACHE, machine, peak_rss_mb, write_json
from benchmarks.scale_corpus import StandInEncoder, write

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from benchmarks.scale_corpus import StandInEncoder
from indexes.snapshot_build import BuildOptions, build_snapshot
build_snapshot([Path(sys.argv[2])], Path(sys.argv[3]), StandInEncoder(), BuildOptions(embed_batch=4096))
"""


def ingest(corpus: Path, index: Path) -> tuple[dict, float]:
    from indexes.snapshot_build import BuildOptions, build_snapshot

    peak_rss_mb(reset=True)
    t0 = time.perf_counter()
    manifest = build_snapshot([corpus], index, StandInEncoder(), BuildOptions(embed_batch=4096))
    manifest["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return manifest, time.perf_counter() - t0


def main() -> None:
    from indexes.catalog import Catalog
    from indexes.dense_index import DenseIndex
    from indexes.embed_journal import JOURNAL_DIR
    from indexes.snapshot_load import current_snapshot_path

    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--kill-after", type=int, default=8, help="journaled batches before the SIGKILL")
    args = ap.parse_args()
    root = CACHE / f"scale-resume-{args.chunks}"
    shutil.rmtree(root, ignore_errors=True)
    corpus = write(args.chunks, root / "docs.jsonl")
    index, baseline = root / "index", root / "baseline"
    journal = index / JOURNAL_DIR

    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(Path(__file__).resolve().parents[1]), str(corpus), str(index)])
    while len(list(journal.glob("batch-*.npz"))) < args.kill_after:
        if child.poll() is not None:
            raise SystemExit(f"the ingest ended (rc {child.returncode}) before {args.kill_after} batches were journaled")
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed_s = time.perf_counter() - t0
    batches = len(list(journal.glob("batch-*.npz")))
    print(f"killed after {killed_s:.1f} s with {batches} batches journaled", flush=True)

    resumed, resumed_s = ingest(corpus, index)
    print(f"resumed run: {resumed['embeddings']} in {resumed_s:.1f} s", flush=True)
    fresh, fresh_s = ingest(corpus, baseline)
    print(f"uninterrupted run: {fresh['embeddings']} in {fresh_s:.1f} s", flush=True)

    a, b = current_snapshot_path(index), current_snapshot_path(baseline)
    same_bm25 = all(meta["sha256"] == fresh["files"][rel]["sha256"] for rel, meta in resumed["files"].items()
                    if rel.startswith("bm25"))
    catalogs = [Catalog(p / "catalog.duckdb") for p in (a, b)]
    same_catalog = (catalogs[0].counts() == catalogs[1].counts() and catalogs[0].embed_keys() == catalogs[1].embed_keys()
                    and list(catalogs[0].chunk_table().doc_ids) == list(catalogs[1].chunk_table().doc_ids))
    for c in catalogs:
        c.close()
    va, vb = (DenseIndex.load(p / "dense.faiss") for p in (a, b))
    rows = np.arange(va.size, dtype=np.int64)
    out = {
        "chunks": args.chunks, "machine": machine(), "encoder": "stand-in (index behaviour, not retrieval quality)",
        "journal_batch": 4096, "killed_after_s": round(killed_s, 1), "batches_journaled_at_kill": batches,
        "resumed": {"embeddings": resumed["embeddings"], "wall_s": round(resumed_s, 1),
                    "embed_s": resumed["timings_s"]["embed"], "peak_rss_mb": resumed["peak_rss_mb"]},
        "uninterrupted": {"embeddings": fresh["embeddings"], "wall_s": round(fresh_s, 1), "timings_s": fresh["timings_s"],
                          "embed_s": fresh["timings_s"]["embed"], "peak_rss_mb": fresh["peak_rss_mb"]},
        "journal_removed": not journal.exists(),
        "same_content_hash": resumed["content_hash"] == fresh["content_hash"],
        "same_bm25_files": same_bm25,
        "same_catalog_chunks_and_keys": same_catalog,
        "max_vector_difference": float(np.abs(va.vectors(rows) - vb.vectors(rows)).max()),
    }
    print(out)
    write_json(f"scale_resume-{args.chunks}", out)


if __name__ == "__main__":
    main()
