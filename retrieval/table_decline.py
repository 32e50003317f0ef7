"""A question about a table that the SQL translator declined: what its answer must say.

The translator declines rather than guess (retrieval/sql/translate.py). When the question is
about a readable table (retrieval/sql/about.py: the decline then names the table), the rows
that would answer it are not there, and passages that share the table's words ("repairs",
"press", "cost") can look relevant without answering what the table could not link ("fault
log", "in euros", "logged between 1 January and 30 June"). So:

- the answer carries the decline (`declined`: the table, the translator's reason, the words
  it could not link, and their `missing` labels), whatever its status, and the route's reason
  says why the table was not queried;
- an evidence gap names the table and those words in `missing` (`table:repairs`,
  `unlinked:fault`) and says why in its detail;
- when the question is mostly about the table's records (`about.mostly_about`), passages
  answer it only if they hold the words the table could not link, and never when it asks
  for a figure over the records (a count, sum, average or ranking: passages sharing its
  words do not add up the rows); a set that does not is `constraint_unmet`, whatever the
  grader said. A question mostly about something else that
  mentions the table ("Who was incident commander for the stalled Friday payout batch?") is
  graded as any other, and its answer still reports the decline.

The check is the loop's, after any grader, as the constraint check before dispatch is: a
plugged-in grader cannot turn it off. Pure functions over the decline and the hits.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Sequence

from retrieval.grader import Grade
from retrieval.sql.about import mostly_about
from retrieval.sql.plan import Decline
from retrieval.sql.words import root
from retrieval.text import STOPWORDS, normalize, stem, words
from retrieval.types import Hit

_PLAIN = re.compile(r"[^\W_]+")


def labels(decline: Decline) -> tuple[str, ...]:
    """The `missing` labels of a decline: its table, then each word it could not link."""
    return (f"table:{decline.table}", *(f"unlinked:{w}" for w in decline.unlinked))


def required(decline: Decline) -> tuple[str, ...]:
    """The words text evidence must hold to answer the question without the table: the
    content words the table left unlinked, when the question is mostly about the table's
    records (`retrieval.sql.about.mostly_about`); none otherwise, and the grade decides as for
    any question."""
    if decline.table is None or not mostly_about(decline.explained, decline.unlinked):
        return ()
    return tuple(w for w in decline.unlinked if w.lower() not in STOPWORDS)


def unheld(decline: Decline, hits: Sequence[Hit]) -> tuple[str, ...]:
    """The required words no hit holds (in its title, metadata or text), each compared by its
    stem and root ("concerns" holds "concern", "logged" holds "logged"); an identifier such as
    `H1` as a whole token."""
    need = required(decline)
    if not need:
        return ()
    texts = [normalize(f"{h.title or ''}\n{h.meta or ''}\n{h.text}") for h in hits]
    terms = {t for text in texts for t in words(text)}
    forms = {stem(t) for t in terms} | {root(t) for t in terms if len(t) >= 4}
    return tuple(w for w in need if not _held(w.lower(), forms, texts))


def _held(word: str, forms: set[str], texts: Sequence[str]) -> bool:
    if not _PLAIN.fullmatch(word):  # an identifier or a hyphenated word: as a whole token
        return any(re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", t) for t in texts)
    return stem(word) in forms or (len(word) >= 4 and root(word) in forms)


def checked(grade: Grade, decline: Decline | None, hits: Sequence[Hit]) -> Grade:
    """A sufficient grade of passages for a question about a declined table stays sufficient
    only if the passages hold the words the table could not link (`required`), and never
    when it asks the table for a figure over its records (`Decline.aggregate`: "how many",
    "how much", "on average", "which ... the most") and is mostly about them: passages that
    share its words do not count or add up the rows. Otherwise it becomes `constraint_unmet`,
    missing the table and those words."""
    if decline is None or decline.table is None or not grade.sufficient:
        return grade
    left = [w for w in decline.unlinked if w.lower() not in STOPWORDS]  # "not closed yet": all the table's but a "not"
    figure = decline.aggregate and (not left or mostly_about(decline.explained, decline.unlinked))
    if not figure and not unheld(decline, hits):
        return grade
    return replace(grade, sufficient=False, reason="constraint_unmet", missing=labels(decline), p_sufficient=0.0)


def sentence(decline: Decline) -> str:
    """One readable sentence on why the table is not evidence, for a gap's detail."""
    words_left = ", ".join(decline.unlinked) or "none"
    return f"the question is about table {decline.table}, which SQL translation declined ({decline.reason}; " \
           f"words it could not link: {words_left})"


def decline_json(decline: Decline) -> dict[str, Any]:
    """The answer's `declined` field (and `/v1/sql`'s): why the table was not queried."""
    out: dict[str, Any] = {"table": decline.table, "reason": decline.reason, "unlinked": list(decline.unlinked)}
    if decline.table is not None:
        out["missing"] = list(labels(decline))
    return out
