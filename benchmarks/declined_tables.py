"""Questions about a table whose SQL translation is declined: what the loop's check changes.

    .venv/bin/python benchmarks/declined_tables.py [--domains demo,contracts,product,retail,waterworks]

Every labeled question of each eval_data domain runs through the loop twice in this process:
as served, and with the check that passages must hold the words a declined table could not
link switched off (the baseline: `retrieval.loop.checked` replaced by the identity here only;
no setting can switch it off). Per domain: questions whose outcome (status, gap reason,
returned documents, rows) differs, split by the label's route (text or sql), and how many
answers carry `declined`. A text question whose outcome changes is a cost of the check; a
table question that goes from passages graded sufficient to a gap naming its table is what it
is for. Writes benchmarks/results/declined_tables.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
from datetime import date
from typing import Any

import retrieval.loop as loop_module
from benchmarks.common import ROOT, build_or_reuse, machine, make_embedder, write_json
from benchmarks.domains import sources_of
from retrieval.limits import Limits
from routes.eval.evaluation import load_label_file
from routes.service.view import open_view

DOMAINS = ("demo", "contracts", "product", "retail", "waterworks")
TODAY = date(2025, 11, 1)
LIMITS = Limits(default_deadline_ms=30000)  # a busy machine does not turn a slow question into a gap


def outcome(result: Any) -> tuple:
    return (result.status, result.gap.reason if result.gap else None, [h.doc_id for h in result.context],
            result.rows.rows if result.rows is not None else None)


def run(engine: Any, labels: list, checked: bool) -> dict[str, Any]:
    original = loop_module.checked
    if not checked:
        loop_module.checked = lambda grade, decline, hits: grade  # the baseline: passages graded as any text
    try:
        out = {}
        for label in labels:
            principal = label.principal_obj()
            engine.tables_ready(principal)
            out[label.id] = engine.query(label.question, principal, today=label.today)
        return out
    finally:
        loop_module.checked = original


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", default=",".join(DOMAINS))
    args = ap.parse_args()
    embedder = make_embedder()
    result: dict[str, Any] = {"machine": machine(), "domains": {}}
    for name in [d for d in args.domains.split(",") if d]:
        folder = ROOT / "eval_data" / name
        index = build_or_reuse(name, sources_of(folder), embedder)[0]
        labels = load_label_file(folder / "questions.jsonl")
        engine = open_view(index, embedder, LIMITS, TODAY)
        try:
            served, baseline = run(engine, labels, True), run(engine, labels, False)
        finally:
            engine.close()
        changed = [lb for lb in labels if outcome(served[lb.id]) != outcome(baseline[lb.id])]
        text = [lb for lb in changed if lb.route != "sql"]
        sql = [lb for lb in changed if lb.route == "sql"]
        result["domains"][name] = {
            "questions": len(labels), "declined_shown": sum(1 for r in served.values() if r.declined is not None),
            "changed_text": [{"id": lb.id, "question": lb.question, "answerable": lb.answerable,
                              "baseline": baseline[lb.id].status, "served": served[lb.id].status} for lb in text],
            "changed_sql": [{"id": lb.id, "question": lb.question, "answerable": lb.answerable,
                             "baseline": baseline[lb.id].status, "served": served[lb.id].status} for lb in sql],
        }
        print(f"{name}: {len(labels)} questions, {result['domains'][name]['declined_shown']} answers carry `declined`; "
              f"outcome changed for {len(text)} text and {len(sql)} table questions", flush=True)
        for lb in changed:
            print(f"   {lb.id} ({lb.route}) {baseline[lb.id].status} -> {served[lb.id].status}: {lb.question}")
    write_json("declined_tables", result)


if __name__ == "__main__":
    main()
