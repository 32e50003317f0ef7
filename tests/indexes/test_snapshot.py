from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from indexes.snapshot_build import build_snapshot
from indexes.snapshot_load import current_snapshot_path, load_snapshot
from retrieval.errors import IngestError, SnapshotError
from routes.service.view import open_view
from retrieval.search import search
from retrieval.types import Filters, Principal
from tests.conftest import MINI, PATIENCE_S, ROOT


@pytest.fixture
def index_copy(mini_index, tmp_path) -> Path:
    dst = tmp_path / "index"
    shutil.copytree(mini_index, dst)
    return dst


def edit_manifest(index: Path, **changes) -> None:
    path = current_snapshot_path(index) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


def test_manifest_records_model_counts_hash_and_files(mini_index):
    manifest = json.loads((current_snapshot_path(mini_index) / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert manifest["model"] == {"id": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384}
    assert manifest["counts"]["documents"] == 23 and manifest["counts"]["chunks"] >= 23
    assert len(manifest["content_hash"]) == 64
    assert {"catalog.duckdb", "dense.faiss"} <= set(manifest["files"])


def test_snapshot_built_with_another_model_is_refused(index_copy, embedder):
    edit_manifest(index_copy, model={"id": "other/model", "dim": 768})
    with pytest.raises(SnapshotError, match="built with model 'other/model' \\(768-d\\) but the service loads"):
        load_snapshot(index_copy, embedder)


def test_snapshot_of_another_format_version_is_refused(index_copy, embedder):
    edit_manifest(index_copy, format_version=99)
    with pytest.raises(SnapshotError, match="format version 99 is not supported"):
        load_snapshot(index_copy, embedder)


def test_corrupted_snapshot_file_is_refused(index_copy, embedder):
    with (current_snapshot_path(index_copy) / "dense.faiss").open("ab") as f:
        f.write(b"junk")
    with pytest.raises(SnapshotError, match="differs from its manifest"):
        load_snapshot(index_copy, embedder)


def test_empty_index_directory_says_how_to_build_one(tmp_path, embedder):
    with pytest.raises(SnapshotError, match="holds no index snapshot; run `quarry ingest"):
        load_snapshot(tmp_path, embedder)


def test_failed_ingest_keeps_the_previous_snapshot_current(index_copy, embedder, tmp_path):
    before = current_snapshot_path(index_copy)
    bad = tmp_path / "bad"
    shutil.copytree(MINI, bad)
    (bad / "broken.jsonl").write_text('{"id": "z1", "text": "fine"}\n{"id": "z2", "date": "yesterday", "text": "x"}\n')
    with pytest.raises(IngestError, match=r"broken.jsonl:2: date of 'z2' is not an ISO 8601 date"):
        build_snapshot([bad], index_copy, embedder)
    assert current_snapshot_path(index_copy) == before
    assert sorted(p.name for p in (index_copy / "snapshots").iterdir()) == [before.name]


def test_rebuild_switches_to_the_new_snapshot_and_keeps_one_previous(index_copy, embedder, tmp_path):
    first = current_snapshot_path(index_copy)
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"id": "n1", "text": "A brand new runbook about quantum freight.", "acl": ["public"]}\n')
    build_snapshot([MINI, extra], index_copy, embedder)
    second = current_snapshot_path(index_copy)
    build_snapshot([MINI], index_copy, embedder)
    third = current_snapshot_path(index_copy)
    assert len({first, second, third}) == 3
    assert sorted(p.name for p in (index_copy / "snapshots").iterdir()) == sorted([second.name, third.name])


def test_an_ingest_that_died_before_switching_current_does_not_cost_the_serving_snapshot(index_copy, embedder):
    serving = current_snapshot_path(index_copy)
    # The crash state: a finished build renamed into place (its name sorts after the serving
    # one), CURRENT never switched to it.
    orphan = serving.with_name("99991231T235959-deadbeef-000000")
    shutil.copytree(serving, orphan)
    assert current_snapshot_path(index_copy) == serving
    build_snapshot([MINI], index_copy, embedder)
    new = current_snapshot_path(index_copy)
    assert sorted(p.name for p in (index_copy / "snapshots").iterdir()) == sorted([serving.name, new.name])
    load_snapshot(index_copy, embedder).close()


def test_a_second_concurrent_build_fails_fast(index_copy, embedder):
    with open(index_copy / ".build.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(IngestError, match="another ingest is building this index"):
            build_snapshot([MINI], index_copy, embedder)


def kill_ingest_when(source: Path, index: Path, ready: Callable[[], bool], timeout: float = PATIENCE_S, **env: str) -> None:
    """Run `quarry ingest source --index index` and SIGKILL it as soon as `ready()` holds."""
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "ingest", str(source), "--index", str(index)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, "ingest ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_killed_ingest_leaves_the_previous_snapshot_loadable_and_answering(index_copy, embedder, tmp_path):
    before = current_snapshot_path(index_copy)
    big = tmp_path / "big.jsonl"
    with big.open("w") as f:
        for i in range(4000):
            text = f"Synthetic passage {i} about pallets, ports and customs forms number {i * 7}."
            f.write(json.dumps({"id": f"b{i}", "text": text, "acl": ["public"]}) + "\n")
    # killed once catalog and BM25 are written, before the embedding stage
    kill_ingest_when(big, index_copy, lambda: bool(list((index_copy / "snapshots").glob(".building-*/bm25"))))
    assert list((index_copy / "snapshots").glob(".building-*"))  # the half-written build is there...
    assert current_snapshot_path(index_copy) == before  # ...but not current
    engine = open_view(index_copy, embedder)
    try:
        hits = search(engine.retrievers, "hybrid", "carrier webhook retries", Principal("erin"), 3, Filters(), engine.limits)
        assert hits and hits[0].doc_id == "m15"
    finally:
        engine.close()
    build_snapshot([MINI], index_copy, embedder)  # the next build clears the leftovers
    assert not list((index_copy / "snapshots").glob(".building-*"))


def test_an_ingest_killed_while_embedding_resumes_after_its_last_finished_batch(index_copy, embedder, tmp_path):
    """`kill -9` during the embedding stage, then the same ingest again: the vectors of the
    journaled batches are taken, only the rest is embedded, every vector equals what the
    model gives for its text, and publishing removes the journal."""
    from indexes.embed_journal import JOURNAL_DIR
    from indexes.snapshot_build import BuildOptions

    big = tmp_path / "big.jsonl"
    texts = [f"Resumable passage {i} on berths, cranes and tide tables, gate {i * 13}." for i in range(1500)]
    big.write_text("".join(json.dumps({"id": f"r{i}", "text": t, "acl": ["public"]}) + "\n" for i, t in enumerate(texts)))
    journal = index_copy / JOURNAL_DIR
    kill_ingest_when(big, index_copy, lambda: len(list(journal.glob("batch-*.npz"))) >= 2, QUARRY_INGEST_JOURNAL_BATCH="200")
    finished = len(list(journal.glob("batch-*.npz"))) * 200
    assert finished < 1500
    manifest = build_snapshot([big], index_copy, embedder, BuildOptions(default_acl=("public",), embed_batch=200))
    assert manifest["embeddings"]["resumed"] >= finished
    assert manifest["embeddings"]["computed"] == 1500 - manifest["embeddings"]["resumed"]
    assert not journal.exists()
    snapshot = load_snapshot(index_copy, embedder)
    try:
        rows = [0, 1, 199, 200, 399, 400, 800, 1499]  # journaled batches and embedded ones
        got = snapshot.dense.vectors(np.asarray(rows, dtype=np.int64))
        want = embedder.encode([texts[int(snapshot.chunks.doc_ids[r][1:])] for r in rows])  # ids are r<i>
        np.testing.assert_allclose(got, want, atol=1e-5)
    finally:
        snapshot.close()


def _garbage_vectors(index: Path) -> None:
    """Overwrite the current snapshot's vectors with large garbage ones (same file size)."""
    import numpy as np

    from indexes.dense_index import DenseIndex

    path = current_snapshot_path(index) / "dense.faiss"
    old = DenseIndex.load(path)
    junk = np.random.default_rng(0).normal(0, 50, size=(old.size, old.dim)).astype(np.float32)
    DenseIndex.build(junk).save(path)


def _assert_vectors_are_the_models(index: Path, embedder) -> None:
    import numpy as np

    snap = load_snapshot(index, embedder)
    try:
        t = snap.chunks
        rows = np.arange(len(t), dtype=np.int64)
        stored = snap.dense.vectors(rows)
        fresh = embedder.encode([f"{title}\n{text}" if title else text for title, text in zip(t.titles, t.texts, strict=True)])
        assert np.abs(np.linalg.norm(stored, axis=1) - 1).max() < 1e-4
        assert np.abs(stored - fresh).max() < 1e-4
    finally:
        snap.close()


def test_an_ingest_never_reuses_vectors_of_a_corrupted_snapshot(index_copy, embedder):
    _garbage_vectors(index_copy)
    with pytest.raises(SnapshotError):
        load_snapshot(index_copy, embedder)
    build_snapshot([MINI], index_copy, embedder)
    _assert_vectors_are_the_models(index_copy, embedder)


def test_reused_vectors_must_be_finite_and_unit_length_even_when_the_manifest_agrees(index_copy, embedder):
    from indexes.tables import file_digest

    _garbage_vectors(index_copy)
    f = current_snapshot_path(index_copy) / "dense.faiss"
    manifest = json.loads((f.parent / "manifest.json").read_text())
    manifest["files"]["dense.faiss"] = {"bytes": f.stat().st_size, "sha256": file_digest(f)}
    (f.parent / "manifest.json").write_text(json.dumps(manifest))
    build_snapshot([MINI], index_copy, embedder)
    _assert_vectors_are_the_models(index_copy, embedder)


def _snapshot_content(index: Path) -> tuple:
    from indexes.catalog import Catalog
    from indexes.dense_index import DenseIndex

    path = current_snapshot_path(index)
    manifest = json.loads((path / "manifest.json").read_text())
    catalog = Catalog(path / "catalog.duckdb")
    try:
        cur = catalog.cursor()
        rows = cur.execute('SELECT "row", chunk_id, doc_id, text, embed_key FROM quarry.chunks ORDER BY "row"').fetchall()
        docs = cur.execute("SELECT doc_id, title, text, acl, origin FROM quarry.documents ORDER BY doc_id").fetchall()
    finally:
        catalog.close()
    bm25 = {rel: meta["sha256"] for rel, meta in manifest["files"].items() if rel.startswith("bm25")}
    dense = DenseIndex.load(path / "dense.faiss")
    return manifest["content_hash"], manifest["counts"], rows, docs, bm25, dense.vectors(np.arange(dense.size, dtype=np.int64))


def test_an_ingest_read_a_few_documents_at_a_time_builds_the_same_snapshot(embedder, tmp_path):
    """The corpus is read in passes of `document_batch` documents and embedded in batches of
    `embed_batch`: batch sizes that split the corpus anywhere give the same snapshot as one
    batch (catalog rows, BM25 files byte for byte, vectors to float precision)."""
    from indexes.snapshot_build import BuildOptions

    whole = _snapshot_content(tmp_path / "whole") if build_snapshot(
        [MINI], tmp_path / "whole", embedder, BuildOptions(reuse_embeddings=False)) else None
    build_snapshot([MINI], tmp_path / "small", embedder, BuildOptions(reuse_embeddings=False, document_batch=3, embed_batch=5))
    small = _snapshot_content(tmp_path / "small")
    assert whole is not None and whole[:5] == small[:5]
    assert whole[1]["documents"] == 23 and len(whole[2]) == whole[1]["chunks"]
    np.testing.assert_allclose(whole[5], small[5], atol=1e-5)


@pytest.mark.parametrize("stage", ["bm25", "embed"])
def test_a_source_changed_while_it_is_ingested_fails_the_ingest_and_publishes_nothing(index_copy, embedder, tmp_path, stage):
    """Sources are read more than once; a file edited between the reads would give a
    snapshot whose content hash and rows disagree, so the ingest fails instead (the files'
    sizes, times and inodes are compared with the first pass's before embedding and before
    publishing; edited after BM25 or after the last vector, the last check catches it)."""
    source = tmp_path / "docs"
    shutil.copytree(MINI, source)
    before = current_snapshot_path(index_copy)
    target = next(source.rglob("*.jsonl"))

    def edit_once(at: str, done: int, total: int) -> None:
        if at == stage and done == total:
            with target.open("a") as f:
                f.write(json.dumps({"id": "late", "text": "Added while the ingest ran.", "acl": ["public"]}) + "\n")

    with pytest.raises(IngestError, match="changed while they were ingested"):
        build_snapshot([source], index_copy, embedder, progress=edit_once)
    assert current_snapshot_path(index_copy) == before
    assert sorted(p.name for p in (index_copy / "snapshots").iterdir()) == [before.name]
    build_snapshot([source], index_copy, embedder)  # the same sources, unchanged now: it builds
    assert current_snapshot_path(index_copy) != before
