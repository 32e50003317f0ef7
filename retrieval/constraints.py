"""Hard constraints of a question: what any evidence must contain and no rewrite may drop.

Extracted by rules, never by a model, so the same question always yields the same
constraints: quoted phrases, identifiers (tokens mixing letters and digits or joined by
separators: `R1842`, `INC-2041`, `CVE-2024-3094`, `LEDGER_LOCK_TIMEOUT`, `2.4.1`, paths),
dates and date ranges, and entities the catalog knows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Sequence

from retrieval.dates import DateRange, find_dates
from retrieval.text import STOPWORDS, term_set

_QUOTED = re.compile(r'"([^"\n]{1,200})"|\u201c([^\u201d\n]{1,200})\u201d|`([^`\n]{1,200})`')
_IDENTIFIER = re.compile(
    r"""
    (?<![\w/.-])(?:
        (?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)+           # absolute or relative path with a leading slash
      | [\w-]+(?:/[\w-]+)*/[\w-]+\.[A-Za-z0-9]{1,8}   # relative path ending in a file name
      | (?=[\w.-]*\d)(?=[\w.-]*[A-Za-z])[A-Za-z0-9]+(?:[-_.:][A-Za-z0-9]+)*   # letters and digits mixed
      | \d+(?:\.\d+){2,3}                             # version number 2.4.1
      | [A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+        # snake_case / UPPER_SNAKE names
      | [a-z][a-z0-9]*(?:\.[a-z][a-z0-9_]*){2,}       # dotted config keys: a.b.c
      | [a-z][a-z0-9_]*\.[a-z0-9_]*_[a-z0-9_]*        # or a.b_c (a dotted key with an underscore)
    )(?![\w/-]|\.\w)
    """,
    re.VERBOSE,
)
# Words that look like identifiers but are ordinary language ("covid19" stays, "3rd" goes).
_ORDINAL = re.compile(r"\d+(st|nd|rd|th|s)$", re.IGNORECASE)
# A word run into a footnote or reference marker ("Protocol.2", "countries.14"): prose, not a name.
_FOOTNOTE = re.compile(r"[A-Za-z]{2,}\.\d{1,3}")
# Ordinary words written with a number, not codes: a count before hyphenated words ("12-year-old",
# "24-hour", "3-day"; an all-capitals part such as "10-K" or "4-PBA" stays a code), and a year
# run into a function word or hyphenated to a lower-case word ("in2014", "mid-2024", "pre-2020").
_COUNT_COMPOUND = re.compile(r"\d+(?:-[A-Za-z][a-z]+)+")
_WORD_YEAR = re.compile(r"([a-z]+)(-?)(?:19|20)\d{2}")
# Punctuation of the sentence that a quotation swallows ("Rebel Without a Cause," or a closing
# "Old and in the Way?"): not part of the quoted title.
_TRAILING_MARKS = ",.;:!?"


def quoted_phrases(text: str) -> list[str]:
    """Phrases in double quotes, curly quotes or backticks, in order, deduplicated. A mark of
    the sentence's own punctuation at the end inside the quotes (`"Rebel Without a Cause,"`,
    `... "Old and in the Way?"`) is left out: passages write the title without it."""
    found = [next(g for g in m.groups() if g is not None).strip().rstrip(_TRAILING_MARKS).strip()
             for m in _QUOTED.finditer(text)]
    return list(dict.fromkeys(p for p in found if p))


def _is_prose(token: str) -> bool:
    """A word written with a number ("12-year-old", "in2014", "mid-2024"), not an identifier."""
    if _COUNT_COMPOUND.fullmatch(token):
        return True
    m = _WORD_YEAR.fullmatch(token)
    return m is not None and (m.group(1) in STOPWORDS or (m.group(2) == "-" and len(m.group(1)) >= 3))


_DATE_TOKEN = re.compile(r"^(q[1-4]|\d{4}-\d{2}-\d{2}(t[\d:.]+z?)?|\d{1,2}(st|nd|rd|th))$", re.I)
# A half of a year ("H1", "1H") is a date token where a year follows it, or follows the half it
# runs to ("H1 2025", "between H1 and H2 2025"); alone, "H2" may name a thing.
_HALF_TOKEN = re.compile(r"(?:h[12]|[12]h)(?=\s*(?:of\s+)?(?:19|20)\d{2}\b|\s+(?:and|to|until|till|through)\s+"
                         r"(?:h[12]|[12]h)\s*(?:of\s+)?(?:19|20)\d{2}\b)", re.I)


def identifiers(text: str) -> list[str]:
    """Identifier-like tokens outside quotes, in order, deduplicated, original casing kept.
    Date tokens (`Q3`, `2025-03-14`, `H1` before a year) are dates, not identifiers; ordinal and plural numbers
    ("3rd", "1990s"), footnote markers and words written with a number ("12-year-old",
    "in2014") are prose. A token of that kind that the catalog knows (a short metadata value,
    an identifier in a title) is still found, as a catalog entity (retrieval/entities.py)."""
    unquoted = _QUOTED.sub(" ", text)
    found = [m.group(0) for m in _IDENTIFIER.finditer(unquoted) if not _DATE_TOKEN.match(m.group(0))
             and not (m.end() - m.start() == 2 and _HALF_TOKEN.match(unquoted, m.start()))]
    return list(dict.fromkeys(t for t in found if not _ORDINAL.fullmatch(t) and not re.fullmatch(r"\d{4}", t)
                              and not _FOOTNOTE.fullmatch(t) and not _is_prose(t)))


def is_strong_identifier(token: str) -> bool:
    """INC-2041, E4012, /etc/x.yaml, LEDGER_LOCK_TIMEOUT: specific enough to look up exactly.
    Short codes such as sev2, p1 or v2 are weak: they name categories, not things."""
    digits = sum(c.isdigit() for c in token)
    return digits >= 3 or any(c in token for c in "/_.:") or ("-" in token and digits >= 1)


def identifier_pattern(identifier: str) -> str:
    """An RE2 pattern matching the identifier as a whole token (case-insensitive at use)."""
    return r"(?:^|[^\w])" + re.escape(identifier) + r"(?:$|[^\w])"


@dataclass(frozen=True)
class ExactQuery:
    """What the exact retriever looks for: literal phrases and identifiers (each a whole
    token: `identifier_pattern`), or one RE2 pattern the caller wrote (`regex`)."""

    phrases: tuple[str, ...]
    patterns: tuple[str, ...]
    identifiers: tuple[str, ...] = ()

    @property
    def regex(self) -> bool:
        return bool(self.patterns)


def exact_query(query: str) -> ExactQuery:
    """`/regex/` is a regular expression; else quoted phrases and identifiers; else the whole text."""
    q = query.strip()
    if len(q) > 2 and q.startswith("/") and q.endswith("/") and q.count("/") >= 2 and not _IDENTIFIER.fullmatch(q):
        return ExactQuery((), (q[1:-1],))
    phrases = quoted_phrases(q)
    idents = identifiers(q)
    if not phrases and not idents:
        return ExactQuery((" ".join(q.split()),), ())
    return ExactQuery(tuple(phrases), (), tuple(idents))


@dataclass(frozen=True)
class Constraints:
    """What every answer must respect. Rewrites may add words, never remove one of these."""

    identifiers: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()
    dates: tuple[DateRange, ...] = ()
    entities: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return not (self.identifiers or self.phrases or self.dates or self.entities)

    def to_json(self) -> dict[str, Any]:
        return {
            "identifiers": list(self.identifiers),
            "phrases": list(self.phrases),
            "dates": [{"text": d.text, "from": d.start.isoformat() if d.start else None,
                       "to": d.end.isoformat() if d.end else None} for d in self.dates],
            "entities": list(self.entities),
        }

    def labels(self) -> list[str]:
        """One label per constraint, as the grader names what is missing."""
        return ([f"identifier:{i}" for i in self.identifiers] + [f"phrase:{p}" for p in self.phrases]
                + [f"date:{d.text}" for d in self.dates] + [f"entity:{e}" for e in self.entities])


def extract(question: str, today: date, entities: Sequence[str] = ()) -> Constraints:
    """Constraints of a question. `entities` are catalog entities already matched in it
    (by the caller, against names the principal may see)."""
    idents = identifiers(question)
    spans = [(m.start(), m.end()) for i in idents for m in re.finditer(re.escape(i), question)]
    spans += [(m.start(), m.end()) for m in _QUOTED.finditer(question)]
    return Constraints(
        identifiers=tuple(idents),
        phrases=tuple(quoted_phrases(question)),
        dates=tuple(find_dates(question, today, exclude=spans, strict=True)),
        entities=tuple(entities),
    )


def literal_share(question: str, constraints: Constraints) -> float:
    """The share of the question's content terms that sit in its identifiers and quoted phrases."""
    q_terms = term_set(question)
    if not q_terms:
        return 0.0
    literal = term_set(" ".join([*constraints.identifiers, *constraints.phrases]))
    return len(q_terms & literal) / len(q_terms)


def is_lookup(question: str, constraints: Constraints) -> bool:
    """Is the question a lookup of its literal items (a regex, or identifiers and phrases making
    up at least half of what it says)? "INC-2041", "Which release fixed INC-2041?" are; a
    paragraph of argument that quotes a phrase and cites "Annex.2" is not: the literal items
    found alone do not answer it."""
    q = question.strip()
    if len(q) > 2 and q.startswith("/") and q.endswith("/"):
        return True
    return bool(constraints.identifiers or constraints.phrases) and literal_share(question, constraints) >= 0.5


def missing_from_queries(constraints: Constraints, queries: Sequence[str], date_filtered: bool = False) -> list[str]:
    """Constraints a dispatched query set would drop: each identifier, phrase and entity must
    appear in some query (case-insensitive), and each date phrase too unless a date filter
    carries it. A single-query plan must therefore keep every constraint itself."""
    text = " \n ".join(_squash(q) for q in queries)
    missing = [f"identifier:{i}" for i in constraints.identifiers if _squash(i) not in text]
    missing += [f"phrase:{p}" for p in constraints.phrases if _squash(p) not in text]
    missing += [f"entity:{e}" for e in constraints.entities if _squash(e) not in text]
    if not date_filtered:
        missing += [f"date:{d.text}" for d in constraints.dates if _squash(d.text) not in text]
    return missing


def _squash(text: str) -> str:
    """Lower case with single spaces: a constraint kept with other spacing is still kept."""
    return " ".join(text.lower().split())
