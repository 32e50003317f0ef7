"""Questions that ask for a list, and evidence that is complete by construction.

"Which incidents happened in March 2025?", "List the outages reported in Q2 2025", "Show every
change logged in March": the answer is every readable document dated in the period, which
passage relevance cannot judge (a set of twelve notes scores like twelve weak matches). Such a
question is read from its structure alone, never from a list of any corpus's nouns or fields:

- it asks for things: a question word (which, what, list, show, name, give me, find,
  enumerate), then a plural noun among its next two words (or further on, after nouns joined
  by "and": "audit and inspection notes"), or a singular one after every, each or all
  (`lists_a_period` adds a bounded date range of the question);
- nothing but its head noun and its period narrows it (`only_lists`): no identifier, quoted
  phrase or catalog entity, and at most two more content words, side by side, such as a verb
  ("happened", "took place", "were logged"). "Which releases changed the VAT rounding in Q3
  2025?" is narrowed by its topic and stays a question graded by relevance;
- it has a period (a bounded date range, a range from a date to today, or a month named
  without its year, `bare_month`) or the caller's own filters narrow it.

Its plan (retrieval/rewrite.py `first_plan`, strategy `listing`) asks a route that returns
every readable passage within the filters when asked for enough of them (the registry's
`enumerates`) for up to `list_bound` passages. When fewer come back, they are every readable
passage within the filters, so their documents are the complete list: `gather` keeps one
passage per document (its best, in the route's order) and `construction_grade` grades the set
by that construction (grade source `construction`), not by relevance. Where the head noun names
a collection (a source: "incidents", "audits"), the list is that collection's documents of the
period; when none of them is dated there but the caller reads that collection elsewhere, the
list is empty, not the period's other documents (`of_kind`). More than k documents, or a bound
reached, is said (`Listing.complete` false, and a `listing:` label in `missing`); nothing dated
in the period is an evidence gap. Every count is over the caller's readable
scope: a forbidden document is never in the mask the route searches.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Sequence

from retrieval.constraints import Constraints
from retrieval.dates import DateRange, bare_month
from retrieval.grader import Grade
from retrieval.text import STOPWORDS, stem
from retrieval.types import Hit, Listing

SOURCE = "construction"  # the grade source of a set graded by how it was gathered

# "Which incidents ...", "What changes were ...", "List the outages ...", "Show me every ticket":
# a question word, quantifiers, then at most two words where the head noun is looked for.
_LISTING = re.compile(r"^\s*(which|what|list|show(?:\s+me)?|name|give\s+me|find|enumerate)\s+"
                      r"((?:(?:all|the|of|every|each|any)\s+)*)(.*)", re.I)
_AND = frozenset({"and", "or"})
_EVERY = frozenset({"every", "each", "all"})
# "Which dates ..." or "what hours ..." ask about times, not for the documents of a period.
_TIME_NOUNS = frozenset("dates days times hours minutes weeks months quarters years periods".split())
_ASKING = frozenset("which what list show me name give find enumerate all the of every each any".split())
MAX_NARROWING_WORDS = 2  # "took place": a verb phrase, not a topic


def _noun(word: str) -> bool:
    w = word.lower()
    return len(w) > 3 and w.isalpha() and w not in STOPWORDS and w not in _TIME_NOUNS


def _plural_noun(word: str) -> bool:
    w = word.lower()
    return _noun(w) and w.endswith("s") and not w.endswith(("ss", "us", "is"))


def head_noun(question: str) -> tuple[str, ...] | None:
    """The words naming what a list question asks for ("incidents", "sev1 incidents", "audit
    and inspection notes", "inspections and audits", "change" after every), or None when the
    question asks for no list of things."""
    m = _LISTING.match(question)
    if m is None:
        return None
    quantifiers = set(m.group(2).lower().split())
    words = [w.lower() for w in re.findall(r"[\w-]+", m.group(3))][:6]
    for i, w in enumerate(words[:4]):
        if i >= 2 and not _AND & set(words[1:i]):
            break  # a plural further on is the head only of nouns joined by "and" ("audit and inspection notes")
        if _plural_noun(w):
            end = i + 3 if len(words) > i + 2 and words[i + 1] in _AND and _plural_noun(words[i + 2]) else i + 1
            return tuple(x for x in words[:end] if x not in _AND)
    if words and quantifiers & _EVERY and _noun(words[0]):
        return (words[0],)
    return None


def lists_a_period(question: str, constraints: Constraints) -> bool:
    """Does the question ask for the documents of a period: a head noun (`head_noun`) and a
    bounded date range? Such a question wants every readable document dated in the range,
    which similarity alone ranks no higher than the same kind of document dated elsewhere."""
    return any(d.start and d.end for d in constraints.dates) and head_noun(question) is not None


def listing_period(question: str, constraints: Constraints, today: date | None) -> DateRange | None:
    """The period a list question names: its bounded date range, a range open at its end
    ("since 1 September", up to `today`), or else a month named without its year ("in
    March", read against `today`; None when `today` is not known)."""
    bounded = [d for d in constraints.dates if d.start and d.end]
    if bounded:
        return bounded[0]
    since = [d for d in constraints.dates if d.start and not d.end and today is not None and d.start <= today]
    if since:  # "reported since 1 September": from then to today
        return DateRange(since[0].start, today, since[0].text)
    return bare_month(question, today) if today is not None and not constraints.dates else None


def only_lists(question: str, constraints: Constraints, period: DateRange | None) -> bool:
    """Does nothing but its head noun and its period narrow the list (module docstring)?"""
    head = head_noun(question)
    if head is None or constraints.identifiers or constraints.phrases or constraints.entities:
        return False
    dated = " ".join(d.text for d in (*constraints.dates, *((period,) if period else ())))
    skip = set(head) | _ASKING | {w.lower() for w in re.findall(r"[\w-]+", dated)}
    tokens = [w.lower() for w in re.findall(r"[\w-]+", question)]
    rest = [i for i, w in enumerate(tokens) if w not in skip and w not in STOPWORDS and not w.isdigit()]
    return len(rest) <= MAX_NARROWING_WORDS and (len(rest) < 2 or rest[-1] - rest[0] == len(rest) - 1)


def _stems(text: str | None) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-z]+", (text or "").lower())}


def of_kind(hit: Hit, head: Sequence[str]) -> bool:
    """Does the hit's source, the collection its document came from ("incidents", "audits",
    "incident-reports"), name the thing listed (`head`: "incidents", "audit notes")? A
    collection is how a corpus says what kind of document each one is; a title may name a
    kind in passing ("Incident collision reporting procedure") and is only an order."""
    return bool({stem(w) for w in head} & _stems(hit.source))


def gather(hits: Sequence[Hit], k: int, bound: int, head: Sequence[str] = ()) -> tuple[list[Hit], Listing]:
    """One passage per document, its best in the route's order, for the first k documents;
    `hits` are what the route returned when asked for `bound` passages. Where some documents
    come from a collection that names the thing listed (`of_kind`), the list is those alone:
    "the incidents from Q2" are the incident reports dated in Q2, not a procedure or a memo
    dated there too. Where there are more than k, documents whose title names the thing
    listed ("incidents" for "Incident report IR-25-031") come first, in the route's order."""
    best: dict[str, Hit] = {}
    for h in hits:
        best.setdefault(h.doc_id, h)
    docs = list(best.values())
    kind = [h for h in docs if of_kind(h, head)]
    docs = kind or docs
    stems = {stem(w) for w in head}
    ordered = sorted(docs, key=lambda h: not stems & _stems(h.title))
    shown = ordered[:k] if stems and len(docs) > k else docs[:k]
    return shown, Listing(len(docs), len(shown), bound_reached=len(hits) >= bound)


def construction_grade(listing: Listing, period: str) -> Grade:
    """The grade of a list gathered by construction: sufficient when it holds a document
    (complete or not, which `listing` and `missing` say); nothing gathered is a gap naming the
    period (`period`, its phrase; empty when the caller's filters alone bound the list)."""
    if listing.documents == 0:
        return Grade(False, "no_authorized_evidence", (f"date:{period}",) if period else ("listing:no_documents",),
                     source=SOURCE, p_sufficient=0.0, listing=listing)
    missing: tuple[str, ...] = ()
    if listing.bound_reached:
        missing = ("listing:bound_reached",)
    elif not listing.complete:
        missing = (f"listing:{listing.documents - listing.shown}_more_documents",)
    return Grade(True, None, missing, 1.0, source=SOURCE, p_sufficient=1.0, listing=listing)
