"""Differential no-leak test: asking as a principal gives the same outcome (status, gap
reason, returned ids) as asking an index from which every document that principal may
not read was removed. Run over the demo questions whose answer is private to others."""

from __future__ import annotations

import json
from datetime import date

import pytest

from indexes.corpus import load_documents
from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.types import Principal
from routes.service.view import open_engine
from tests.conftest import DEMO

GROUPS = {"alice": ("sre",), "bob": ("finance",), "carol": ("security", "sre"), "dave": ("hr",), "erin": ()}
BAIT = [q for q in map(json.loads, (DEMO / "questions.jsonl").read_text().splitlines()) if "bait" in q["tags"]]


def outcome(result) -> tuple:
    return (result.status, (result.gap or {}).get("reason"), [h.doc_id for h in result.context],
            result.rows.rows if result.rows is not None else None)


@pytest.fixture(scope="module")
def reduced_engines(demo_index, embedder, tmp_path_factory):
    """One index per principal holding only the documents that principal may read."""
    docs = [ld for ld in load_documents([DEMO / "docs"])]
    engines = {}
    for pid, groups in GROUPS.items():
        principal = Principal(pid, groups)
        folder = tmp_path_factory.mktemp(f"only-{pid}")
        with (folder / "docs.jsonl").open("w") as f:
            for ld in docs:
                d = ld.doc
                if principal.can_read(d.acl):
                    f.write(json.dumps({"id": d.id, "text": d.text, "title": d.title, "source": d.source,
                                        "date": d.date.isoformat() if d.date else None,
                                        "metadata": dict(d.metadata), "acl": list(d.acl)}) + "\n")
        index = tmp_path_factory.mktemp(f"index-{pid}")
        build_snapshot([folder / "docs.jsonl", DEMO / "tables"], index, embedder, BuildOptions(reuse_from=demo_index))
        engines[pid] = open_engine(index, embedder, today=date(2025, 11, 1))
    yield engines
    for e in engines.values():
        e.close()


def test_there_are_enough_bait_questions():
    assert len(BAIT) >= 20


@pytest.mark.parametrize("q", BAIT, ids=[q["id"] for q in BAIT])
def test_private_evidence_of_others_is_undetectable(demo_engine, reduced_engines, q):
    principal = Principal(q["principal"], GROUPS[q["principal"]])
    full = demo_engine.query(q["question"], principal)
    alone = reduced_engines[q["principal"]].query(q["question"], principal)
    assert outcome(full) == outcome(alone), (
        [(a.plan.strategy, a.plan.route, a.grade and a.grade.to_json(), [h.doc_id for h in a.hits]) for a in full.attempts],
        [(a.plan.strategy, a.plan.route, a.grade and a.grade.to_json(), [h.doc_id for h in a.hits]) for a in alone.attempts],
    )
    forbidden = {t.split(":", 1)[1] for t in q["tags"] if t.startswith("forbidden:")}
    seen = {h.doc_id for a in full.attempts for h in a.hits}
    assert not forbidden & seen
