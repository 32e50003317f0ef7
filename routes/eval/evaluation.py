"""`quarry eval`: run labeled questions (or a BEIR folder's) through the service exactly as
`query` does and score them: route accuracy and confusion, ranking quality, gaps, leaks,
errors and the wrong questions.

The rest of `eval` and `tune` lives beside it: BEIR folders in `routes.eval.beir_eval`, reports
and plots in `routes.eval.reports`, fitting and saving policies in `routes.eval.tuning`, ablation in
`routes.eval.ablation`; their public names are importable from here too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from retrieval.evaluate import (TOP, Label, Record, breakdown, confusion, error_record, parse_labels, plot_grouping, record_for,
                                summarize, wrong_questions)
from retrieval.retrievers.sql import compare_rows
from routes.eval.ablation import ablate, ablated_index, gap_accuracy, gap_outcomes, unambiguous
from routes.eval.beir_eval import READER, beir_index, beir_labels, ensure_beir_index
from routes.service.service import Service
from routes.eval.reports import failure_lines, report_markdown, write_report
from routes.eval.tuning import (FUSION_GRID, MIN_TRAIN_QUESTIONS, TUNED_BACKUP, first_attempt_evidence, fit_policies,
                           question_features, save_policies, save_refused, split_labels)

__all__ = [
    "FUSION_GRID", "MIN_TRAIN_QUESTIONS", "READER", "TOP", "TUNED_BACKUP", "ablate", "ablated_index", "beir_index",
    "beir_labels", "ensure_beir_index", "evaluate", "failure_lines", "first_attempt_evidence", "fit_policies",
    "gap_accuracy", "gap_outcomes", "load_label_file", "plot_grouping", "question_features", "report_markdown",
    "run_labels", "save_policies", "save_refused", "score_records", "split_labels", "unambiguous", "write_report",
]


def run_labels(service: Service, labels: Sequence[Label], k: int, progress: Callable[[int], None] | None = None
               ) -> list[Record]:
    acl_cache: dict[str, tuple[str, ...] | None] = {}

    def acl_of(doc_id: str) -> tuple[str, ...] | None:
        if doc_id not in acl_cache:
            acl_cache[doc_id] = service.document_acl(doc_id)
        return acl_cache[doc_id]

    records = []
    for i, label in enumerate(labels):
        principal = label.principal_obj()
        service.tables_ready(principal)  # no latency budget offline: a new scope's profiles are waited for, untimed
        t0 = time.perf_counter()
        try:
            result = service.query(principal, label.question, k=k, today=label.today)
        except Exception as e:  # noqa: BLE001 - an error is a scored outcome (a failure), not a crash of the run
            records.append(error_record(label, e, (time.perf_counter() - t0) * 1000))
        else:
            ms = (time.perf_counter() - t0) * 1000
            records.append(record_for(label, result, ms, lambda d: principal.can_read(acl_of(d) or ()), compare_rows))  # noqa: B023 - record_for calls it before the loop moves on
        if progress:
            progress(i + 1)
    return records


def evaluate(service: Service, labels: Sequence[Label], k: int, progress: Callable[[int], None] | None = None
             ) -> dict[str, Any]:
    return score_records(service, run_labels(service, labels, k, progress), k)


def score_records(service: Service, records: Sequence[Record], k: int) -> dict[str, Any]:
    """evaluate()'s figures of records that `service` produced."""
    out = summarize(records, k)
    out["confusion"] = confusion(records)
    out.update(breakdown(records, k))
    policies = service.policies
    out["policies"] = {"router": policies.router.source, "grader": policies.grader.source}
    out["leaks"] = [{"id": r.label.id, "principal": r.label.principal, "docs": r.leaked} for r in records if r.leaked]
    out["error_kinds"] = _error_kinds(records)
    out["wrong"] = wrong_questions(records, k)
    out["wrong_questions"] = len(out["wrong"])
    return out


def _error_kinds(records: Sequence[Record]) -> dict[str, dict[str, Any]]:
    """Errors by class: how many, and the first message (say, the query limit that was hit)."""
    kinds: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.error:
            kinds.setdefault(r.error, {"count": 0, "example": r.error_message})["count"] += 1
    return kinds


def load_label_file(path: Path) -> list[Label]:
    return parse_labels(path.read_text(encoding="utf-8"), str(path))
