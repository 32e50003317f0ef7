"""`make run`: build the demo index when missing or stale, create two demo keys once, serve.

The keys file stores hashes only, so the demo keeps the plain text of its own two keys in a
file of its own beside it (`<keys>.tokens.json`, mode 0600) to print the same curl lines on
every run. Nothing else reads that file; keys added or revoked with `quarry keys` stay as
they are: a revoked demo key stays revoked and is not printed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from indexes.embedder import Embedder
from indexes.snapshot_build import BuildOptions, build_snapshot, corpus_digest
from indexes.snapshot_load import current_snapshot_path, read_manifest
from retrieval.errors import ServerFault, SnapshotError
from auth.keys import KeyStore
from routes.service.settings import Settings

DEMO = Path(__file__).resolve().parents[2] / "eval_data" / "demo"
DEMO_SOURCES = [DEMO / "docs", DEMO / "tables"]
DEMO_TODAY = "2025-11-01"  # the demo corpus ends in October 2025: "last quarter" means Q3 2025


def ensure_demo_index(index: Path, embedder: Embedder, options: BuildOptions | None = None, progress: bool = True) -> dict:
    """Reuse the demo snapshot when its content hash matches the corpus; rebuild otherwise
    (with `options`, the settings' build options, when given), with ingest's progress bars
    on stderr unless `progress` is off: embedding the corpus takes minutes on a small machine."""
    digest = corpus_digest(DEMO_SOURCES)
    try:
        manifest = read_manifest(current_snapshot_path(index))
        if manifest.get("content_hash") == digest and manifest.get("model", {}).get("id") == embedder.model_id:
            print(f"demo index {index} is up to date ({manifest['counts']})", file=sys.stderr)
            return manifest
    except SnapshotError:
        pass
    print(f"building the demo index in {index} (a few minutes: the stages' progress follows) ...", file=sys.stderr,
          flush=True)
    from routes.cli.common import progress_bar

    return build_snapshot(DEMO_SOURCES, index, embedder, options or BuildOptions(), progress=progress_bar(progress))


DEMO_PRINCIPALS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # principal -> (groups, scopes)
    "alice": (("sre",), ("query", "sql")),
    "bob": (("finance",), ("query",)),
}


def demo_tokens_path(keys_file: Path) -> Path:
    """Where the demo keeps the plain text of its own keys: beside the keys file."""
    return keys_file.with_name(f"{keys_file.stem}.tokens.json")


def demo_keys(path: Path) -> dict[str, str | None]:
    """The demo principals' keys, created once and then kept. A key missing from the keys
    file (a new or replaced file) is created; a revoked one stays revoked and maps to None."""
    store = KeyStore(path)
    tokens_file = demo_tokens_path(path)
    try:
        saved: dict[str, str] = json.loads(tokens_file.read_text()) if tokens_file.is_file() else {}
    except (OSError, ValueError) as e:
        raise ServerFault(f"demo keys file {tokens_file} is unreadable ({e}); remove it to create new demo keys") from None
    keys: dict[str, str | None] = {}
    for who, (groups, scopes) in DEMO_PRINCIPALS.items():
        rec = store.record_of(saved.get(who))
        if rec is not None:
            keys[who] = None if rec.revoked_at else saved[who]
            continue
        saved[who] = keys[who] = store.add(who, groups, scopes)[0]
        _write_private(tokens_file, json.dumps(saved, indent=2))
    return keys


def _write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, readable by its owner only."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_demo(settings: Settings, progress: bool = True) -> None:
    from datetime import date

    from routes.cli.common import default_acl
    from routes.server.serve import serve

    keys_file = settings.keys_file or settings.index_dir.parent / "demo-keys.json"
    options = settings.build_options(default_acl(settings.default_acl))
    manifest = ensure_demo_index(settings.index_dir, settings.embedder(), options, progress)
    keys = demo_keys(keys_file)
    base = f"http://{settings.host}:{settings.port}"
    question = '{"question": "What is the Q3 2025 budget for the payments platform?"}'
    print(f"\nQuarry demo: {manifest['counts']['documents']} documents, {manifest['counts']['chunks']} chunks, "
          f"{manifest['counts'].get('tables', 0)} tables. Keys in {keys_file} (demo keys in plain text: "
          f"{demo_tokens_path(keys_file)}).\n")
    print("bob (group finance) gets the budget; alice (group sre) gets an evidence gap for the same question:\n")
    for who in ("bob", "alice"):
        if keys[who] is None:
            groups, scopes = DEMO_PRINCIPALS[who]
            print(f"  ({who}'s demo key is revoked; `quarry keys add --principal {who} --groups {' '.join(groups)} "
                  f"--scopes {' '.join(scopes)} --keys {keys_file}` makes a new one)\n")
            continue
        print(f"  curl -s {base}/v1/query -H 'Authorization: Bearer {keys[who]}' \\\n"
              f"       -H 'Content-Type: application/json' -d '{question}'\n")
    if keys["alice"] is not None:
        print(f"  curl -s {base}/v1/sql -H 'Authorization: Bearer {keys['alice']}' -H 'Content-Type: application/json' \\\n"
              f"       -d '{{\"question\": \"How many sev1 incidents were there in 2025?\"}}'\n")
    print(f"API docs: {base}/docs    console (paste a key above): {base}/console\n", flush=True)
    today = settings.today or date.fromisoformat(DEMO_TODAY)
    serve(settings.updated(keys_file=keys_file, today=today))
