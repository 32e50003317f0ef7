"""Ablation: hide the relevant documents of some labeled questions from everyone who asks,
so that those questions should end in an evidence gap; used to fit and check the grader on
BEIR folders, whose labels are all answerable."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Sequence

from indexes.embedder import Embedder
from indexes.snapshot_build import BuildOptions, Progress, build_snapshot
from retrieval.evaluate import Label
from retrieval.metrics import mean
from routes.service.service import Service


def ablate(labels: Sequence[Label], seed: int) -> tuple[set[str], set[str]]:
    """Hide the relevant documents of a random half of the labels: (hidden label ids, hidden docs)."""
    order = sorted(lb.id for lb in labels if lb.relevant)
    random.Random(seed).shuffle(order)
    hidden_ids = set(order[: len(order) // 2])
    hidden_docs = {d for lb in labels if lb.id in hidden_ids for d in lb.relevant}
    return hidden_ids, hidden_docs


def unambiguous(labels: Sequence[Label], hidden_ids: set[str], hidden_docs: set[str]) -> list[Label]:
    """Labels whose status is clear after an ablation: hidden ones, and kept ones none of whose
    relevant documents was hidden by another label's ablation."""
    return [lb for lb in labels if lb.id in hidden_ids or not set(lb.relevant) & hidden_docs]


def ablated_index(root: Path, hidden_docs: set[str], embedder: Embedder, work: Path, reuse_from: Path,
                  progress: Progress | None = None) -> Path:
    """A copy of a BEIR corpus whose hidden documents are readable by nobody who asks."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    with (root / "corpus.jsonl").open() as src, corpus.open("w") as dst:
        for line in src:
            d = json.loads(line)
            d["acl"] = ["group:ablated"] if d["_id"] in hidden_docs else ["public"]
            dst.write(json.dumps(d) + "\n")
    index = work / "index"
    build_snapshot([corpus], index, embedder, BuildOptions(reuse_from=reuse_from), progress=progress)
    return index


def gap_outcomes(service: Service, labels: Sequence[Label], hidden_ids: set[str], k: int = 8,
                 max_attempts: int | None = None) -> list[tuple[bool, bool]]:
    """(answerable, ended as a gap) per label, in order: a hidden-gold label is unanswerable."""
    ask = lambda lb: service.query(lb.principal_obj(), lb.question, k=k, max_attempts=max_attempts,  # noqa: E731
                                   today=lb.today, wait_for_tables=True).status
    return [(lb.id not in hidden_ids, ask(lb) == "evidence_gap") for lb in labels]


def gap_accuracy(service: Service, labels: Sequence[Label], hidden_ids: set[str], k: int = 8,
                 max_attempts: int | None = None, outcomes: list[tuple[bool, bool]] | None = None) -> dict[str, float]:
    """Share of evidence gaps on hidden-gold questions and of answers on the others (pass
    unambiguous() labels); `outcomes`, when given, receives each label's gap_outcomes()."""
    got = gap_outcomes(service, labels, hidden_ids, k, max_attempts)
    if outcomes is not None:
        outcomes.extend(got)
    gap_hidden = mean(gap for answerable, gap in got if not answerable)
    ans_kept = mean(not gap for answerable, gap in got if answerable)
    return {"gap_on_ablated": round(gap_hidden, 4), "answer_on_rest": round(ans_kept, 4),
            "balanced_accuracy": round((gap_hidden + ans_kept) / 2, 4), "ablated": len(got) - sum(a for a, _ in got),
            "rest": sum(a for a, _ in got)}
