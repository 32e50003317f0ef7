"""`make run`: build the demo index when missing or stale, create two demo keys, serve."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from indexes.embedder import Embedder
from indexes.snapshot import BuildOptions, build_snapshot, corpus_digest, current_snapshot_path, read_manifest
from retrieval.errors import SnapshotError
from routes.keys import KeyStore
from routes.settings import Settings

DEMO = Path(__file__).resolve().parents[1] / "eval_data" / "demo"
DEMO_SOURCES = [DEMO / "docs", DEMO / "tables"]
DEMO_TODAY = "2025-11-01"  # the demo corpus ends in October 2025: "last quarter" means Q3 2025


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


def demo_keys(path: Path) -> dict[str, str]:
    """Fresh keys for two principals in different groups (old demo keys are replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    store = KeyStore(path)
    alice, _ = store.add("alice", ["sre"], ["query", "sql"])
    bob, _ = store.add("bob", ["finance"], ["query"])
    return {"alice": alice, "bob": bob}


def run_demo(settings: Settings) -> None:
    from datetime import date

    from routes.server import serve

    keys_file = settings.keys_file or settings.index_dir.parent / "demo-keys.json"
    manifest = ensure_demo_index(settings.index_dir, settings.embedder())
    keys = demo_keys(keys_file)
    base = f"http://{settings.host}:{settings.port}"
    question = '{"question": "What is the Q3 2025 budget for the payments platform?"}'
    print(f"\nQuarry demo: {manifest['counts']['documents']} documents, {manifest['counts']['chunks']} chunks, "
          f"{manifest['counts'].get('tables', 0)} tables. Keys in {keys_file}.\n")
    print("bob (group finance) gets the budget; alice (group sre) gets an evidence gap for the same question:\n")
    for who in ("bob", "alice"):
        print(f"  curl -s {base}/v1/query -H 'Authorization: Bearer {keys[who]}' \\\n"
              f"       -H 'Content-Type: application/json' -d '{question}'\n")
    print(f"  curl -s {base}/v1/sql -H 'Authorization: Bearer {keys['alice']}' -H 'Content-Type: application/json' \\\n"
          f"       -d '{{\"question\": \"How many sev1 incidents were there in 2025?\"}}'\n")
    print(f"API docs: {base}/docs\n", flush=True)
    today = settings.today or date.fromisoformat(DEMO_TODAY)
    serve(replace(settings, keys_file=keys_file, today=today))
