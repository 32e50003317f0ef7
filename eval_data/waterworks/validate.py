"""Consistency check of the waterworks labels against the documents' ACLs.

    .venv/bin/python eval_data/waterworks/validate.py

Reads the documents with Quarry's own loader and the labels with its own parser; runs no
retriever, grader or query. Checks: ids unique; schema; every question in split test; routes
among those the demo uses (no sql), answer_rows null; principal/groups as in WORLD.md;
answerable questions have relevant documents, each existing and readable by the asker;
unanswerable and bait questions have none; every bait names forbidden:<doc> documents that
exist and that the asker may NOT read. Exits 1 on any problem.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from indexes.corpus import load_documents  # noqa: E402
from retrieval.evaluate import parse_labels  # noqa: E402
from retrieval.types import Principal  # noqa: E402

PRINCIPALS = {"tom": ("operations",), "anjali": ("quality", "operations"), "owen": ("quality",),
              "gareth": ("finance",), "sian": ("hr",), "leah": ()}
ROUTES = {"exact", "bm25", "dense", "hybrid"}


def main() -> int:
    docs = {d.doc.id: d.doc for d in load_documents([HERE / "docs"])}
    text = (HERE / "questions.jsonl").read_text(encoding="utf-8")
    labels = parse_labels(text, "questions.jsonl")
    raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    problems: list[str] = []
    kinds: Counter[str] = Counter()
    routes: Counter[str] = Counter()
    askers: Counter[str] = Counter()
    known = {"public", *PRINCIPALS, *(f"group:{g}" for gs in PRINCIPALS.values() for g in gs)}
    for doc in docs.values():
        if set(doc.acl) - known:
            problems.append(f"{doc.id}: ACL entries outside the world: {sorted(set(doc.acl) - known)}")
    ids = Counter(r["id"] for r in raw)
    problems += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    for r, lb in zip(raw, labels, strict=True):
        where = lb.id
        if set(r) != {"id", "question", "principal", "groups", "route", "relevant", "answerable", "answer_rows",
                      "tags", "split"}:
            problems.append(f"{where}: fields differ from the demo schema: {sorted(r)}")
        if lb.split != "test":
            problems.append(f"{where}: split {lb.split!r}, expected test")
        if lb.route not in ROUTES:
            problems.append(f"{where}: route {lb.route!r}")
        if r["answer_rows"] is not None:
            problems.append(f"{where}: answer_rows must be null")
        if PRINCIPALS.get(lb.principal) != tuple(lb.groups):
            problems.append(f"{where}: principal {lb.principal} with groups {list(lb.groups)} not as in WORLD.md")
        who = Principal(lb.principal, tuple(lb.groups))
        bait = "bait" in lb.tags
        forbidden = [t.split(":", 1)[1] for t in lb.tags if t.startswith("forbidden:")]
        kind = "bait" if bait else "unanswerable" if "unanswerable" in lb.tags else "answerable"
        kinds[kind] += 1
        routes[lb.route or "?"] += 1
        askers[lb.principal] += 1
        if kind == "answerable":
            if not lb.answerable or not lb.relevant:
                problems.append(f"{where}: answerable question needs answerable=true and relevant documents")
            for d in lb.relevant:
                if d not in docs:
                    problems.append(f"{where}: relevant {d} does not exist")
                elif not who.can_read(docs[d].acl):
                    problems.append(f"{where}: relevant {d} (acl {list(docs[d].acl)}) not readable by {lb.principal}")
        else:
            if lb.answerable or lb.relevant:
                problems.append(f"{where}: {kind} question must have answerable=false and relevant=[]")
        if bait:
            if not forbidden:
                problems.append(f"{where}: bait without a forbidden:<doc> tag")
            for d in forbidden:
                if d not in docs:
                    problems.append(f"{where}: forbidden {d} does not exist")
                elif who.can_read(docs[d].acl):
                    problems.append(f"{where}: forbidden {d} IS readable by {lb.principal}")
        elif forbidden:
            problems.append(f"{where}: forbidden tag on a non-bait question")
    acl_kinds = Counter("public" if "public" in d.acl else "restricted" for d in docs.values())
    print(f"documents: {len(docs)} ({acl_kinds['public']} public, {acl_kinds['restricted']} restricted)")
    print(f"by source: {dict(sorted(Counter(d.source for d in docs.values()).items()))}")
    print(f"questions: {len(labels)}  by kind: {dict(kinds)}")
    print(f"by route: {dict(routes)}")
    print(f"by principal: {dict(askers)}")
    for p in problems:
        print("PROBLEM:", p)
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
