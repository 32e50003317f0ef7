"""The app's feedback on answers as labeled questions, for `quarry tune --feedback`.

Each feedback row (routes/service/feedback.py) becomes one label, asked again by the principal
who gave it, with the groups its key had then:

- `answered`: answerable; relevant are the documents the feedback named, else those of the
  answer's context (as the audit log kept them);
- `wrong_context`: not answerable, unless the feedback named the documents that do answer it
  (then answerable, with those);
- `wrong_gap`: answerable, with the documents the feedback named (none: a question the grader
  cannot be fitted on, only judged by).

The question text comes from the audit row of the answer, which holds it only with the
`audit_questions` setting; a row without it is counted and left out. Feedback carries no route
(the route the loop chose is not a label of the right one) and no date, so relative dates are
read against the index's. Labels are split by their trace id, about half to train the fit and
half held out beside the labels file's own test split, so the keep rule also judges the fit on
the questions the app asked.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

from retrieval.errors import InvalidRequest
from retrieval.evaluate import Label
from routes.service.feedback import FeedbackRow, read_feedback

FEEDBACK_TAG = "feedback"


def feedback_split(trace_id: str) -> str:
    """'train' or 'test', fixed by the trace id (so a run is deterministic and a row keeps its split)."""
    return "test" if hashlib.sha256(trace_id.encode()).digest()[0] & 1 else "train"


def feedback_label(row: FeedbackRow) -> Label | None:
    """One feedback row as a labeled question (see the module docstring); None without question text."""
    if row.question is None:
        return None
    named = row.doc_ids or ()
    if row.verdict == "answered":
        answerable, relevant = True, named or row.answer_docs or ()
    elif row.verdict == "wrong_context":
        answerable, relevant = bool(named), named
    else:
        answerable, relevant = True, named
    return Label(id=f"{FEEDBACK_TAG}-{row.trace_id}", question=row.question, principal=row.principal, groups=row.groups,
                 relevant=tuple(relevant), answerable=answerable, tags=(FEEDBACK_TAG, f"{FEEDBACK_TAG}:{row.verdict}"),
                 split=feedback_split(row.trace_id))


def feedback_labels(rows: Sequence[FeedbackRow]) -> tuple[list[Label], dict[str, Any]]:
    """The labels of `rows` and what became of them (rows read, labels made, rows without question text)."""
    labels = [lb for lb in map(feedback_label, rows) if lb is not None]
    verdicts: dict[str, int] = {}
    for row in rows:
        verdicts[row.verdict] = verdicts.get(row.verdict, 0) + 1
    return labels, {"rows": len(rows), "labels": len(labels), "without_question": len(rows) - len(labels),
                    "verdicts": verdicts, "train": sum(lb.split == "train" for lb in labels),
                    "test": sum(lb.split == "test" for lb in labels)}


def with_feedback(labels: Sequence[Label], audit_db: Path, split: str = "all") -> tuple[list[Label], dict[str, Any]]:
    """`labels` and the labels of the feedback in `audit_db` (of `split` only, unless 'all');
    an id both hold is refused."""
    extra, summary = feedback_labels(read_feedback(audit_db))
    extra = [lb for lb in extra if split == "all" or lb.split == split]
    clash = {lb.id for lb in labels} & {lb.id for lb in extra}
    if clash:
        raise InvalidRequest(f"the labels file already holds the feedback label id {sorted(clash)[0]!r}")
    return [*labels, *extra], summary | {"audit": str(audit_db)}
