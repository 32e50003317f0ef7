"""A cluster ingest's checks before any Ray call: a malformed line stops it with file:line and
publishes nothing (the embedding and publishing on a real cluster are tested in
tests/system/cluster_in_netns.py)."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("ray.data", reason="the cluster extra is not installed")

from indexes.shards import CLUSTER  # noqa: E402
from retrieval.errors import IngestError  # noqa: E402
from routes.cluster.ingest import WORK_DIR, cluster_ingest  # noqa: E402
from tests.conftest import MINI  # noqa: E402


def test_a_malformed_line_stops_a_cluster_ingest_with_its_place_and_publishes_nothing(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(MINI, corpus)
    lines = (corpus / "docs.jsonl").read_text().splitlines()
    lines.insert(2, '{"id": "broken", "text": ')
    (corpus / "docs.jsonl").write_text("\n".join(lines) + "\n")
    index = tmp_path / "idx"
    with pytest.raises(IngestError) as e:
        cluster_ingest([corpus], index, 2)  # never reaches Ray: no cluster is running here
    assert "docs.jsonl:3" in str(e.value)
    assert not (index / CLUSTER).exists() and not (index / WORK_DIR).exists() and not (index / "shards").exists()


def test_a_cluster_ingest_needs_two_shards_or_more(tmp_path):
    with pytest.raises(IngestError, match="between 2 and"):
        cluster_ingest([MINI], tmp_path / "idx", 1)
