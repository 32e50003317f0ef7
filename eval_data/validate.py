"""Consistency check of a labeled domain's questions against its documents, tables and ACLs.

    .venv/bin/python eval_data/validate.py eval_data/waterworks [eval_data/OTHER ...]

A domain folder holds `docs/` (documents), optionally `tables/` (CSV with `.acl.json`
sidecars), `principals.json` (`{"id": [groups]}`: who asks) and `questions.jsonl`. Reads the
documents with Quarry's own loader and the labels with its own parser; runs no retriever,
grader or query. Checks: ids unique; the demo's schema; every question in split test;
principal and groups as in principals.json; answerable text questions have relevant
documents, each existing and readable by the asker; table questions (route sql) have
answer_rows and name no documents, and the domain has tables; unanswerable and bait
questions have none; every bait names forbidden:<doc> documents that exist and that the
asker may NOT read. Exits 1 on any problem.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexes.corpus import load_documents  # noqa: E402
from retrieval.evaluate import parse_labels  # noqa: E402
from retrieval.types import Principal  # noqa: E402

FIELDS = {"id", "question", "principal", "groups", "route", "relevant", "answerable", "answer_rows", "tags", "split"}
ROUTES = {"exact", "bm25", "dense", "hybrid", "sql"}


def check(folder: Path) -> list[str]:
    """Every problem found in one domain folder (empty: consistent); prints a summary."""
    principals = {p: tuple(g) for p, g in json.loads((folder / "principals.json").read_text(encoding="utf-8")).items()}
    docs = {d.doc.id: d.doc for d in load_documents([folder / "docs"])}
    tables = sorted(p.stem for p in (folder / "tables").glob("*.csv")) if (folder / "tables").is_dir() else []
    text = (folder / "questions.jsonl").read_text(encoding="utf-8")
    labels = parse_labels(text, "questions.jsonl")
    raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    problems: list[str] = []
    kinds: Counter[str] = Counter()
    routes: Counter[str] = Counter()
    known = {"public", *principals, *(f"group:{g}" for gs in principals.values() for g in gs)}
    for doc in docs.values():
        if set(doc.acl) - known:
            problems.append(f"{doc.id}: ACL entries outside the world: {sorted(set(doc.acl) - known)}")
    problems += [f"duplicate id {i}" for i, n in Counter(r["id"] for r in raw).items() if n > 1]
    for r, lb in zip(raw, labels, strict=True):
        where = lb.id
        if set(r) != FIELDS:
            problems.append(f"{where}: fields differ from the demo schema: {sorted(r)}")
        if lb.split != "test":
            problems.append(f"{where}: split {lb.split!r}, expected test")
        if lb.route not in ROUTES:
            problems.append(f"{where}: route {lb.route!r}")
        if principals.get(lb.principal) != tuple(lb.groups):
            problems.append(f"{where}: principal {lb.principal} with groups {list(lb.groups)} not as in principals.json")
        who = Principal(lb.principal, tuple(lb.groups))
        bait = "bait" in lb.tags
        forbidden = [t.split(":", 1)[1] for t in lb.tags if t.startswith("forbidden:")]
        kind = "bait" if bait else "unanswerable" if "unanswerable" in lb.tags else "table" if lb.route == "sql" \
            else "answerable"
        kinds[kind] += 1
        routes[lb.route or "?"] += 1
        if lb.route == "sql":
            if not tables:
                problems.append(f"{where}: a table question in a domain without tables/")
            if lb.relevant:
                problems.append(f"{where}: a table question names documents")
            if lb.answerable and r["answer_rows"] is None:
                problems.append(f"{where}: an answerable table question needs answer_rows")
        elif r["answer_rows"] is not None:
            problems.append(f"{where}: answer_rows on a text question")
        if kind == "answerable":
            if not lb.answerable or not lb.relevant:
                problems.append(f"{where}: answerable question needs answerable=true and relevant documents")
            for d in lb.relevant:
                if d not in docs:
                    problems.append(f"{where}: relevant {d} does not exist")
                elif not who.can_read(docs[d].acl):
                    problems.append(f"{where}: relevant {d} (acl {list(docs[d].acl)}) not readable by {lb.principal}")
        elif kind in ("bait", "unanswerable") and (lb.answerable or lb.relevant):
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
    print(f"{folder.name}: documents {len(docs)} ({acl_kinds['public']} public, {acl_kinds['restricted']} restricted), "
          f"tables {tables}")
    print(f"  by source: {dict(sorted(Counter(d.source for d in docs.values()).items()))}")
    print(f"  questions: {len(labels)}  by kind: {dict(kinds)}")
    print(f"  by route: {dict(routes)}")
    print(f"  by principal: {dict(Counter(lb.principal for lb in labels))}")
    print(f"  tags: {dict(Counter(t for lb in labels for t in lb.tags if ':' not in t).most_common())}")
    return problems


def main(argv: list[str]) -> int:
    problems = [f"{folder}: {p}" for folder in (Path(a) for a in argv or [str(Path(__file__).parent / "waterworks")])
                for p in check(folder)]
    for p in problems:
        print("PROBLEM:", p)
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
