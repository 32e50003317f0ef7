"""List, table and every other labeled question of a domain, before and after a change.

    .venv/bin/python benchmarks/lists.py [--domains demo,waterworks] [--tag NAME]

Every labeled question of each eval_data domain runs through the served loop (untuned
grader, 30 s deadline so a busy machine does not turn a slow question into a gap). Per domain:

- false gaps: answerable questions that ended as an evidence gap;
- missed gaps: unanswerable (and forbidden-only) questions that ended as an answer context;
- list questions: labels tagged `list`, or text questions that list the documents of a
  period (the loop's own reading, `retrieval.listing.lists_a_period`), and how many are right
  (answerable: an answer context holding every relevant document; unanswerable: a gap); and
  which questions were answered by a `listing` plan (graded by construction);
- table questions (route `sql` or labeled rows): right when the answer's rows match the
  labeled rows (`compare_rows`, extra columns allowed); those answered without rows, and of
  them how many carry the `declined` field (a decline must never be silent);
- sure and wrong: answerable questions answered (graded sufficient) with passages that hold
  none of the answer (no relevant document; for a table question, no rows at all);
- near-topic: unanswerable questions tagged `near-topic` that were answered;
- per question, the status, gap reason and documents, so two runs can be compared.

Then the list questions of the generated incident notes of
tests/routes/service/test_listing_domains.py (Markdown and saved HTML pages, some dated only by
their heading, some only a security group reads): right when the answer context holds exactly
the readable documents dated in the period, or, for a period with none, when it is a gap.

Writes benchmarks/results/lists-<tag>.json (tag: "run" unless given).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
from datetime import date
from typing import Any

from benchmarks.common import ROOT, build_or_reuse, machine, make_embedder, write_json
from benchmarks.domains import sources_of
from retrieval.constraints import extract
from retrieval.limits import Limits
from retrieval.listing import lists_a_period
from retrieval.retrievers.sql import compare_rows
from routes.eval.evaluation import load_label_file
from routes.service.view import open_view

TODAY = date(2025, 11, 1)
LIMITS = Limits(default_deadline_ms=30000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", default="demo,waterworks")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--no-generated", action="store_true", help="skip the generated incident notes")
    ap.add_argument("--markdown-sections", action="store_true", help="ingest with Markdown headings as sections")
    args = ap.parse_args()
    embedder = make_embedder()
    out: dict[str, Any] = {"machine": machine(), "domains": {}}
    for name in [d for d in args.domains.split(",") if d]:
        folder = ROOT / "eval_data" / name
        index = (build_or_reuse(f"{name}-sections", sources_of(folder), embedder, markdown_sections=True)[0]
                 if args.markdown_sections else build_or_reuse(name, sources_of(folder), embedder)[0])
        labels = load_label_file(folder / "questions.jsonl")
        engine = open_view(index, embedder, LIMITS, TODAY)
        per: dict[str, Any] = {}
        try:
            for label in labels:
                principal = label.principal_obj()
                engine.tables_ready(principal)
                result = engine.query(label.question, principal, today=label.today)
                listing = "list" in label.tags or (lists_a_period(label.question, extract(label.question, label.today or TODAY))
                                                   and label.route != "sql")
                docs = [h.doc_id for h in result.context]
                table = label.route == "sql" or label.answer_rows is not None
                rows_right = bool(table and result.rows is not None and label.answer_rows is not None
                                  and compare_rows(label.answer_rows, result.rows.rows))
                if table:
                    right = rows_right if label.answerable else result.status == "evidence_gap"
                else:
                    right = (result.status == "answer_context" and set(label.relevant) <= set(docs)) if label.answerable \
                        else result.status == "evidence_gap"
                # answered, graded sufficient, with passages that hold none of the answer
                sure_wrong = label.answerable and result.status == "answer_context" and (
                    result.rows is None if table else not set(label.relevant) & set(docs))
                per[label.id] = {"status": result.status, "gap": result.gap.reason if result.gap else None,
                                 "docs": docs, "answerable": label.answerable, "list": listing, "right": right,
                                 "table": table, "rows": result.rows is not None, "sure_wrong": sure_wrong,
                                 "declined": result.declined is not None, "near_topic": "near-topic" in label.tags,
                                 "construction": any(a.plan.strategy == "listing" for a in result.attempts),
                                 "trail": [f"{a.plan.strategy}:{a.plan.route}" for a in result.attempts]}
        finally:
            engine.close()
        false_gaps = sorted(i for i, r in per.items() if r["answerable"] and r["status"] == "evidence_gap")
        missed = sorted(i for i, r in per.items() if not r["answerable"] and r["status"] != "evidence_gap")
        lists = sorted(i for i, r in per.items() if r["list"])
        tables = sorted(i for i, r in per.items() if r["table"])
        summary = {"questions": len(per), "answerable": sum(r["answerable"] for r in per.values()),
                   "false_gaps": false_gaps, "missed_gaps": missed, "list_questions": lists,
                   "list_right": sorted(i for i in lists if per[i]["right"]),
                   "table_questions": tables, "table_right": sorted(i for i in tables if per[i]["right"]),
                   # a table question answered without the table's rows: the decline must be in the answer
                   "table_without_rows": sorted(i for i in tables if not per[i]["rows"]),
                   "table_without_rows_declined": sorted(i for i in tables if not per[i]["rows"] and per[i]["declined"]),
                   "sure_wrong": sorted(i for i, r in per.items() if r["sure_wrong"]),
                   "near_topic": sorted(i for i, r in per.items() if r["near_topic"]),
                   "near_topic_missed": sorted(i for i in missed if per[i]["near_topic"])}
        out["domains"][name] = {"summary": summary, "questions": per}
        print(f"{name}: {len(per)} questions; false gaps {len(false_gaps)}/{summary['answerable']}, missed gaps "
              f"{len(missed)}/{len(per) - summary['answerable']} (near-topic {len(summary['near_topic_missed'])}/"
              f"{len(summary['near_topic'])}), list questions right {len(summary['list_right'])}/{len(lists)}, "
              f"table questions right {len(summary['table_right'])}/{len(tables)} (without rows "
              f"{len(summary['table_without_rows'])}, of which the answer names the decline "
              f"{len(summary['table_without_rows_declined'])}), answered sure with passages that hold none of the "
              f"answer {len(summary['sure_wrong'])}/{summary['answerable']}", flush=True)
    if not args.no_generated:
        out["generated"] = generated(embedder)
    write_json(f"lists-{args.tag}", out)


def generated(embedder: Any) -> dict[str, Any]:
    """The generated incident notes' list questions (module docstring)."""
    import tempfile

    from indexes.snapshot_build import BuildOptions, build_snapshot
    from tests.routes.service import test_listing_domains as gen

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_snapshot([gen._incident_files(root, True)], root / "index", embedder, BuildOptions(default_acl=("public",)))
        engine = open_view(root / "index", embedder, today=gen.TODAY, plugins=False)
        march = gen._ids(gen.INCIDENTS, "2025-03")
        q1 = {d for m in ("01", "02", "03") for d in gen._ids(gen.INCIDENTS, f"2025-{m}")}
        cases = [("List the incidents reported in March 2025", gen.READER, 8, march),
                 ("Which incidents happened in March 2025?", gen.SECURITY, 8, march | {"inc-90", "inc-91"}),
                 ("Which incidents happened in Q1 2025?", gen.READER, 20, q1),
                 ("List the incidents reported in April 2025", gen.READER, 8, {"inc-11", "inc-20"}),
                 ("Which incidents happened in July 2025?", gen.READER, 8, set())]
        rows = []
        try:
            for question, principal, k, want in cases:
                result = engine.query(question, principal, k=k)
                got = {h.doc_id for h in result.context}
                right = result.status == ("answer_context" if want else "evidence_gap") and (not want or got == want)
                rows.append({"question": question, "principal": principal.id, "k": k, "status": result.status,
                             "found": len(got & want), "wanted": len(want), "others": len(got - want), "right": right})
                print(f"  {'right' if right else 'WRONG'}: {question} ({principal.id}, k={k}): {result.status}, "
                      f"{len(got & want)}/{len(want)} wanted, {len(got - want)} others", flush=True)
        finally:
            engine.close()
    print(f"generated incident notes: list questions right {sum(r['right'] for r in rows)}/{len(rows)}")
    return {"cases": rows, "right": sum(r["right"] for r in rows)}


if __name__ == "__main__":
    main()
