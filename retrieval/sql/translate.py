"""Deterministic question-to-SQL by schema linking; it declines rather than guess.

Every content word of the question must be explained by something linked to the schema:
the table (its name, or the noun of its key column: `release_id` -> "release"), a column
(its name's words), a categorical value present in the rows the caller may read, an
identifier found in a column, a number with a comparison, a date or range, or a cue word
for an aggregate, grouping, ordering or limit; failing a name, a word may link to the column
it means (`meaning`: "spending" for `amount_usd`, by embedding similarity). A question with an unexplained word is
declined with the words it could not link, so the loop can route elsewhere; when the
question is about a readable table (it names the table, a row's key or its columns), the
decline names that table and every word its schema left unexplained (`about`), so the answer
can say why the table was not used. The SQL it writes still goes through the guard like any
caller's statement.

Three steps, one module each: `schema_linking` finds the table and the filters the question
names, `shape` reads the cue words into a typed `QueryPlan` (`plan`), and `render` writes
the plan as SQL with sqlglot's builders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date
from typing import Mapping, Sequence

from retrieval.constraints import identifiers
from retrieval.sql.about import about_table
from retrieval.sql.meaning import ColumnMeaning
from retrieval.sql.plan import Decline, QueryPlan
from retrieval.sql.render import render_sql
from retrieval.sql.schema import ColumnProfile, TableInfo
from retrieval.sql.schema_linking import Link, SchemaLinker
from retrieval.sql.shape import shape_select
from retrieval.sql.words import FILLER, matches, normalise_question

__all__ = ["Decline", "Translation", "Translator"]


@dataclass(frozen=True)
class Translation:
    sql: str
    table: str
    explanation: str
    ordered: bool = False


class Translator:
    """Links questions to the tables one access scope may read (built per question, over that
    scope's readable tables and their profiles)."""

    def __init__(self, tables: Sequence[TableInfo], profiles: Mapping[tuple[str, str], ColumnProfile], today: date,
                 meaning: ColumnMeaning | None = None) -> None:
        self.tables = {t.name: t for t in tables}
        self.profiles = profiles
        self.today = today
        self._linker = SchemaLinker(tables, profiles, meaning)

    def translate(self, question: str) -> Translation | Decline:
        text, idents = normalise_question(question), identifiers(question)
        t = self._linker.pick_table(text, idents)
        if t is None:
            return Decline("no readable table matches the question")
        link, decline = self._linker.link_table(t, text, idents, self.today)
        plan = shape_select(self._linker, link)  # after a decline too: the cue words it reads are explained
        self._linker.explain_record_nouns(link)
        if decline is None:
            if isinstance(plan, Decline):
                decline = plan
            else:
                left = unlinked_words(link, plan)
                if not left:
                    return Translation(render_sql(plan), plan.table, plan.kind, ordered=plan.ordered)
                decline = Decline("could not link every word of the question to the schema", tuple(left))
        about = about_table(self._linker, decline, link, idents)
        return replace(about, aggregate=asks_a_figure(plan)) if about.table is not None else about


def asks_a_figure(plan: QueryPlan | Decline) -> bool:
    """Whether the shape the question's cue words ask for is a figure over the records (a
    count, sum, average, extreme, grouping or ranking), also when the shape itself declined
    for want of a column to add up."""
    if isinstance(plan, Decline):
        return plan.reason.startswith("could not tell which number column")
    return plan.aggregate is not None or plan.kind in ("superlative", "grouped top")


def unlinked_words(link: Link, plan: QueryPlan) -> list[str]:
    """Content words nothing explained, sorted. A word naming a column is explained only when
    the plan uses that column; otherwise the question asks something about it that the
    translation would silently drop."""
    t, used = link.table, plan.columns_used()
    columns = [c for c in t.visible_columns() if c.name in used]
    left = sorted(w for w in link.words - link.consumed - FILLER
                  if not w.isdigit() and not any(matches(w, c) for c in columns))
    return [w for w in left if not re.fullmatch(r"[\d.:-]+", w)]

