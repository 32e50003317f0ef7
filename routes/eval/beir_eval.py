"""A BEIR folder (corpus.jsonl, queries.jsonl, qrels/) as an evaluation target: its split's
queries as labels, and a cached index of its corpus as public documents."""

from __future__ import annotations

import hashlib
from pathlib import Path

from indexes.beir import load_corpus_ids, load_qrels, load_queries
from indexes.embedder import Embedder
from indexes.snapshot_build import BuildOptions, Progress, build_snapshot
from indexes.snapshot_load import current_snapshot_path
from retrieval.errors import SnapshotError
from retrieval.evaluate import Label
from retrieval.types import Principal

READER = Principal("eval-reader")  # who asks BEIR questions: every BEIR document is public


def beir_labels(root: Path, split: str) -> list[Label]:
    """The split's queries as labels; a query whose id is also a corpus id (ArguAna: the
    argument itself) names that document as its own, for `ndcg@10_self_removed`."""
    queries, qrels, corpus_ids = load_queries(root), load_qrels(root, split), load_corpus_ids(root)
    return [Label(id=qid, question=queries[qid], principal=READER.id, relevant=tuple(sorted(rel)), answerable=True,
                  split=split, own_doc=qid if qid in corpus_ids else None) for qid, rel in qrels.items() if qid in queries]


def beir_index(root: Path, embedder: Embedder, cache: Path, progress: Progress | None = None) -> Path:
    """A cached index of a BEIR corpus (public documents), rebuilt when the corpus changes."""
    corpus = root / "corpus.jsonl"
    stat = corpus.stat()
    tag = hashlib.sha1(f"{corpus.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    return ensure_beir_index(root, embedder, cache / f"{root.name}-{tag}", progress)


def ensure_beir_index(root: Path, embedder: Embedder, index: Path, progress: Progress | None = None) -> Path:
    """`index`, built from the BEIR corpus (public documents) when it holds no loadable snapshot."""
    try:
        current_snapshot_path(index)
    except SnapshotError:  # missing or broken: build it
        index.mkdir(parents=True, exist_ok=True)
        build_snapshot([root / "corpus.jsonl"], index, embedder, BuildOptions(default_acl=("public",)), progress=progress)
    return index
