"""The same question on the same index gives the same result in every process: nothing in
routing, retrieval, grading or rewriting may follow Python's per-process string hashing
(the order of a set of words, ties broken by insertion order into a Counter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conftest import DEMO, PATIENCE_S, ROOT

# Runs every demo question through the loop and prints one line per question with all a
# caller could see change: status, gap, context (ids and scores), every attempt's plan and grade.
# The deadline is generous so that a busy machine cannot cut one process's loop short.
PROGRAM = r"""
import json, sys
from datetime import date
from pathlib import Path
from retrieval.answer import gap_json
from routes.service.view import open_view
from routes.eval.evaluation import load_label_file
engine = open_view(Path(sys.argv[1]), today=date(2025, 11, 1))
try:
    for label in load_label_file(Path(sys.argv[2])):
        r = engine.query(label.question, label.principal_obj(), deadline_ms=30000)
        print(json.dumps({
            "id": label.id, "status": r.status, "stop": r.stop_reason, "gap": gap_json(r.gap),
            "route": r.decision.chosen,
            "context": [[h.chunk_id, round(h.score, 6)] for h in r.context],
            "rows": None if r.rows is None else [r.rows.sql, [list(map(str, row)) for row in r.rows.rows]],
            "attempts": [[a.plan.route, a.plan.query_text(), len(a.hits), None if a.grade is None else
                          [a.grade.sufficient, a.grade.reason, list(a.grade.missing), round(a.grade.score, 6)]]
                         for a in r.attempts],
        }, sort_keys=True, default=str), flush=True)
finally:
    engine.close()
"""


def _run(seed: str, index: Path) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(index), str(DEMO / "questions.jsonl")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_demo_questions_give_identical_results_under_three_hash_seeds(demo_index):
    with ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda seed: _run(seed, demo_index), ("0", "1", "4242")))
    questions = len((DEMO / "questions.jsonl").read_text().splitlines())
    assert all(len(run) == questions for run in runs)
    for line_a, line_b, line_c in zip(*runs, strict=True):
        assert line_a == line_b == line_c, json.loads(line_a)["id"]
