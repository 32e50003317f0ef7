"""Read BEIR-format datasets (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from retrieval.errors import IngestError


def is_beir_dir(path: Path) -> bool:
    return (path / "corpus.jsonl").is_file() and (path / "queries.jsonl").is_file() and (path / "qrels").is_dir()


def load_queries(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    q = json.loads(line)
                    out[str(q["_id"])] = q["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise IngestError("malformed BEIR query line", str(root / "queries.jsonl"), n) from None
    return out


def load_qrels(root: Path, split: str = "test") -> dict[str, dict[str, float]]:
    """query id -> {doc id: relevance grade}; grades of 0 are dropped (not relevant)."""
    path = root / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise IngestError(f"no qrels for split {split!r}", str(path))
    qrels: dict[str, dict[str, float]] = {}
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            grade = float(row["score"])
            if grade > 0:
                qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = grade
    return qrels


def load_corpus_ids(root: Path) -> set[str]:
    """The `_id` of every corpus document (to spot queries that are themselves documents)."""
    out: set[str] = set()
    with (root / "corpus.jsonl").open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    out.add(str(json.loads(line)["_id"]))
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise IngestError("malformed BEIR corpus line", str(root / "corpus.jsonl"), n) from None
    return out
