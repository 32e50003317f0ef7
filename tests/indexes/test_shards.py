"""Sharded snapshots: documents by a stable hash of their id, one normal snapshot per shard,
a cluster manifest written last; one shard is today's single-node layout; a bad line stops
everything with nothing written."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from indexes.corpus import iter_documents
from indexes.shards import CLUSTER, build_shards, load_cluster, read_cluster, shard_dir, shard_of
from indexes.snapshot_load import CURRENT, current_snapshot_path, read_manifest
from retrieval.errors import IngestError, SnapshotError
from tests.conftest import MINI


def test_shard_of_is_sha256_of_the_id_and_never_pythons_hash():
    # Pinned values: a change of the rule would move documents between the shards of a running cluster.
    assert [shard_of(i, 3) for i in ("faq-003", "inc-2041", "q")] == [2, 2, 0]
    assert [shard_of(i, 2) for i in ("faq-003", "inc-2041", "q")] == [1, 0, 1]
    digest = int.from_bytes(hashlib.sha256("m01".encode()).digest()[:8], "big")
    assert shard_of("m01", 5) == digest % 5


def test_sharded_ingest_writes_normal_shard_snapshots_and_a_cluster_manifest(tmp_path, embedder, mini_index):
    index = tmp_path / "idx"
    manifest = build_shards([MINI], index, embedder, 3)
    on_disk = read_cluster(index)
    assert {k: v for k, v in manifest.items() if k not in ("skipped_files", "date_warnings")} == on_disk
    assert on_disk["shards"] == 3 and on_disk["tables_shard"] == 0
    assert not (index / CURRENT).exists()  # no single-node snapshot beside the cluster
    single = read_manifest(current_snapshot_path(mini_index))
    assert on_disk["content_hash"] == single["content_hash"]  # the cluster names the same corpus
    assert on_disk["counts"] == single["counts"]
    docs = [ld.doc.id for ld in iter_documents([MINI])]
    assert len({shard_of(d, 3) for d in docs}) == 3  # every shard holds documents
    _, snapshots = load_cluster(index, embedder)
    try:
        for member, snap in zip(on_disk["members"], snapshots, strict=True):
            i = member["shard"]
            assert current_snapshot_path(shard_dir(index, i)).name == member["snapshot"] == snap.path.name
            assert snap.manifest["content_hash"] == member["content_hash"]
            held = set(snap.chunks.doc_ids)
            assert held == {d for d in docs if shard_of(d, 3) == i}
    finally:
        for snap in snapshots:
            snap.close()


def test_one_shard_keeps_todays_single_node_layout(tmp_path, embedder):
    index = tmp_path / "idx"
    manifest = build_shards([MINI], index, embedder, 1)
    assert current_snapshot_path(index).name == manifest["snapshot"]
    assert not (index / CLUSTER).exists() and not (index / "shards").exists()


def test_a_bad_line_stops_a_sharded_ingest_before_anything_is_written(tmp_path, embedder):
    corpus = tmp_path / "corpus"
    shutil.copytree(MINI, corpus)
    with (corpus / "docs.jsonl").open("a") as f:
        f.write('{"id": "broken", "text": \n')
    index = tmp_path / "idx"
    with pytest.raises(IngestError):
        build_shards([corpus], index, embedder, 2)
    assert not (index / CLUSTER).exists() and not (index / "shards").exists()
    with pytest.raises(SnapshotError):
        read_cluster(index)


def test_a_cluster_manifest_naming_an_altered_shard_is_refused(tmp_path, embedder):
    index = tmp_path / "idx"
    build_shards([MINI], index, embedder, 2)
    data = json.loads((index / CLUSTER).read_text())
    data["members"][1]["content_hash"] = "0" * 64
    (index / CLUSTER).write_text(json.dumps(data))
    with pytest.raises(SnapshotError, match="shard 01"):
        load_cluster(index, embedder)


def test_what_an_ingest_elsewhere_embeds_is_what_no_snapshot_or_journal_holds_and_a_full_journal_embeds_nothing(
        tmp_path, embedder):
    """The pieces a cluster ingest is made of (routes/cluster/ingest.py), in one process: the
    texts left to embed per shard, the shard built from its journal alone, the manifest."""
    import numpy as np

    from indexes.chunking import chunk_documents
    from indexes.shards import build_member, plan_shards, publish_shards, unembedded
    from indexes.snapshot_build import BuildOptions, embed_key, index_text

    index, options = tmp_path / "idx", BuildOptions()
    plan = plan_shards([MINI], 2, options)
    docs = [ld.doc for ld in iter_documents([MINI])]
    by_shard = {i: {embed_key(index_text(d, c)): index_text(d, c) for d in docs if shard_of(d.id, 2) == i
                    for c in chunk_documents([d], options.max_chars)} for i in range(2)}
    embedded = {}
    for i in range(2):
        journal, texts = unembedded(plan, i, index, embedder.model_id)
        pending = list(texts)
        assert dict(pending) == by_shard[i] and len(pending) == len(by_shard[i])  # each text once
        half = pending[: len(pending) // 2]
        journal.append([k for k, _ in half], embedder.encode([t for _, t in half]))
        _, texts = unembedded(plan, i, index, embedder.model_id)
        rest = list(texts)
        assert rest == pending[len(half):]  # a resumed run embeds only what no journaled batch holds
        journal.append([k for k, _ in rest], embedder.encode([t for _, t in rest]))
        embedded[i] = dict(zip([k for k, _ in pending], embedder.encode([t for _, t in pending]), strict=True))

    def from_journals(plan, protect):
        return [build_member(plan, i, index, embedder, None, protect.get(i, frozenset())) for i in range(2)]

    manifest = publish_shards(plan, index, embedder, from_journals)
    _, snapshots = load_cluster(index, embedder)
    try:
        for member, snap in zip(manifest["members"], snapshots, strict=True):
            assert snap.manifest["embeddings"]["computed"] == 0  # the journal held every vector
            keys = snap.catalog.embed_keys()
            got = snap.dense.vectors(np.arange(len(keys), dtype=np.int64))
            want = np.stack([embedded[member["shard"]][k] for k in keys])
            assert np.abs(got - want).max() <= 1e-5
            assert not (shard_dir(index, member["shard"]) / ".embed-journal").exists()  # gone once published
            _, texts = unembedded(plan, member["shard"], index, embedder.model_id)
            assert list(texts) == []  # the published snapshot holds them all now
    finally:
        for snap in snapshots:
            snap.close()
    assert read_cluster(index)["content_hash"] == build_shards([MINI], tmp_path / "local", embedder, 2)["content_hash"]
