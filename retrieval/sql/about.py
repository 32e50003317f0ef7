"""Is a question the translator declined about a readable table, and how much of it does the
table explain?

A question is about a table when it names the table (its noun), one of its rows (a key),
or its columns, by name or by meaning (`SchemaLinker.mentions`); sharing a categorical value
with it ("the kiln room") is not enough. Its words then split in two: those the table's
schema explains (the table, its columns, values, identifiers, dates, cue words) and those it
left unlinked. The question is mostly about the table's records when the table explains at
least as many of its content words as it left, or when what it left is one short term
("fault log", "in euros", "raised a concern"; a date the translator could not place, such as
"between 1 January and 30 June", counts as one): then passages answer it only if they hold
what the table could not link (retrieval/table_decline.py). A question that leaves more is
mostly about something the table does not hold.

Measured on the 576 labeled questions of the eval_data domains (benchmarks/declined_tables.py,
BENCHMARKS.md): with these two rules no text question's outcome changed, and the four table
questions whose translation was declined and whose passages had been graded sufficient became
evidence gaps; with a share of one explained word per two left instead, four text questions
also became gaps.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Sequence

from retrieval.dates import MONTHS
from retrieval.sql.plan import Decline
from retrieval.sql.schema_linking import Link, SchemaLinker
from retrieval.sql.words import FILLER, matches
from retrieval.text import STOPWORDS

SHORT_TERM = 2  # words: with at most this many left, the question is the table's records qualified by one term
_JOINERS = frozenset({"between", "until", "till", "through"})  # words joining the two ends of a date range
_NUMBER = re.compile(r"[\d.:-]+")


def about_table(linker: SchemaLinker, decline: Decline, link: Link, idents: Sequence[str]) -> Decline:
    """The decline, naming the table when the question is about it: then `unlinked` is every
    content word the table's schema left unexplained (the translator's own words first) and
    `explained` the rest. Otherwise the decline as it was."""
    t = link.table
    content = {w for w in link.words - FILLER - STOPWORDS if len(w) > 1 and not _NUMBER.fullmatch(w)}
    left = {w for w in content - link.consumed if not any(matches(w, c) for c in t.visible_columns())}
    unlinked: dict[str, str] = {}  # lower case -> the first spelling (an identifier as written)
    for w in (*decline.unlinked, *sorted(left)):
        unlinked.setdefault(w.lower(), w)
    explained = tuple(sorted(content - set(unlinked)))
    # a word's meaning costs an embedding: asked only where the answer could turn on it
    if not linker.mentions(link, idents, left, by_meaning=mostly_about(explained, tuple(unlinked.values()))):
        return decline
    return replace(decline, unlinked=tuple(unlinked.values()), table=t.name, explained=explained)


def mostly_about(explained: Sequence[str], unlinked: Sequence[str]) -> bool:
    """Is a question whose content words split so mostly about the table's records (module
    docstring)? False when nothing but stopwords is left."""
    left = [w for w in unlinked if w.lower() not in STOPWORDS]
    if not left:
        return False
    terms = terms_of(left)
    return len(explained) >= terms or terms <= SHORT_TERM


def terms_of(words: Sequence[str]) -> int:
    """How many things `words` name: the words of a date the translator could not place
    ("between 1 January and 30 June": its month names and the word joining them) are one."""
    months = [w for w in words if w.lower() in MONTHS]
    rest = [w for w in words if w.lower() not in MONTHS and not (months and w.lower() in _JOINERS)]
    return len(rest) + (1 if months else 0)
