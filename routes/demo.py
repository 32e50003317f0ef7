"""`make run`: build the demo index when it is missing or stale, create demo keys, serve."""

from __future__ import annotations

import sys
from pathlib import Path

from indexes.embedder import Embedder
from indexes.snapshot import BuildOptions, build_snapshot, corpus_digest, current_snapshot_path, read_manifest
from retrieval.errors import SnapshotError

DEMO = Path(__file__).resolve().parents[1] / "eval_data" / "demo"
DEMO_SOURCES = [DEMO / "docs", DEMO / "tables"]


def ensure_demo_index(index: Path, embedder: Embedder) -> dict:
    """Reuse the demo snapshot when its content hash matches the corpus; rebuild otherwise."""
    digest = corpus_digest(DEMO_SOURCES)
    try:
        manifest = read_manifest(current_snapshot_path(index))
        if manifest.get("content_hash") == digest and manifest.get("model", {}).get("id") == embedder.model_id:
            print(f"demo index {index} is up to date ({manifest['counts']})", file=sys.stderr)
            return manifest
    except SnapshotError:
        pass
    print(f"building the demo index in {index} ...", file=sys.stderr)
    from routes.cli import _progress_bar

    return build_snapshot(DEMO_SOURCES, index, embedder, BuildOptions(), progress=_progress_bar())


def run_demo(index: Path, keys: Path, host: str, port: int) -> None:
    from routes.server import serve

    embedder = Embedder()
    manifest = ensure_demo_index(index, embedder)
    base = f"http://{host}:{port}"
    print(f"\nQuarry demo: {manifest['counts']['documents']} documents, {manifest['counts']['chunks']} chunks.")
    print(f"  curl -s {base}/healthz\n", flush=True)
    serve(index, host=host, port=port, keys_file=keys, embedder=embedder)
