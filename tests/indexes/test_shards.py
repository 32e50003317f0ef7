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
    assert {k: v for k, v in manifest.items() if k != "skipped_files"} == on_disk
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
