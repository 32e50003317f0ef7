"""What the question asks must be in the evidence: a qualifier the context does not carry.

A passage about the hub height of a turbine is near the topic of a question about its tip
height, March's figures near April's, a torque table for other bolts near one for these; a
relevance score cannot tell them apart, since every other word matches. The question's noun
phrases say what it asks for: in "the tip height", "tip" narrows "height" to one measure.

A qualifier is read from the question's structure, never from a list of any corpus's words:
a run of two or three content words (letters only, outside quotes) that a determiner,
possessive or preposition opens ("the", "its", "of", "for", "what", ...) and punctuation, the
end or such a function word closes is a noun phrase; its last word is the head and each word
before it a modifier, qualifying the rest of the phrase ("design population equivalent":
"design" qualifies "population equivalent", "population" qualifies "equivalent"). Quantifiers,
ordinals and other determiner-like words ("many", "other", "first", "next") open a phrase,
never qualify one. Numbers, identifiers and dates break a phrase: they are constraints of
their own (retrieval/constraints.py), checked by the grader.

A context misses a qualifier when some passage holds the head but none holds the modifier
(in its title, metadata or text, by stem or root: "fixes" holds "fixing"), and the phrase
from the modifier to the head is **attested** in a chunk the caller may read: the readable
corpus itself uses "tip height" as a term, so a context with "height" and never "tip" is
about another height. The attestation is the whole corpus statistic, over the caller's
readable chunks only (the loop asks the exact route with the caller's scope), so a phrase
only a forbidden document writes attests nothing and a forbidden document moves no verdict.
Without it the rule guesses: on the five eval_data domains, a modifier missing from the
context (however rare by idf) marked answerable questions about five times as often as
unanswerable ones, since a paraphrase ("firmware update" for "software update") loses a
modifier the same way.

The check is the loop's, after any grader (as a declined table's is, retrieval/table_decline.py):
a sufficient set that misses a qualifier becomes `constraint_unmet`, missing
`qualifier:<phrase>`, and the loop tries its next plan. Pure functions over the question, the
hits and the attestation it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from retrieval.grader import Grade
from retrieval.sql.words import root
from retrieval.text import STOPWORDS, stem, words
from retrieval.types import Hit

# Function words that open a noun phrase: articles, possessives, demonstratives, question
# determiners and prepositions. English grammar, not any corpus's vocabulary.
_OPENERS = frozenset(
    """the a an its their our your my his her this that these those what which whose of for in at on from to by
    with about into under over per between during""".split()
)
# Determiner-like words (quantifiers, ordinals, "other", "same"): they open a phrase and never
# qualify its head, so "how many days" or "the same payment" asks for no specific days.
_DETERMINERS = frozenset(
    """many much more most few fewer less least several some any all each every both either neither no other
    another same such own first second third last next previous""".split()
)
# Function words that close a noun phrase: prepositions, auxiliaries, conjunctions, relatives.
_CLOSERS = frozenset(
    """of for in at on to from with by about into under over per between during after before since until than as
    and or but is are was were be been being do does did has have had will would can could should may might must
    that which who whom whose when where why how""".split()
)
_TOKEN = re.compile(r"[\w'’-]+|[^\w\s]")
_WORD = re.compile(r"[^\W\d_]{2,}")
_PUNCT = re.compile(r"[^\w\s]")
_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”|`[^`\n]*`')
_MAX_PHRASE = 3


@dataclass(frozen=True)
class Qualifier:
    """A modifier of a noun phrase of the question, the head it qualifies, and the phrase from
    the modifier to the head as the question writes it (what the corpus must attest)."""

    modifier: str
    head: str
    phrase: str

    @property
    def label(self) -> str:
        return f"qualifier:{self.phrase}"


def _content(token: str) -> bool:
    low = token.lower()
    return _WORD.fullmatch(token) is not None and low not in STOPWORDS and low not in _DETERMINERS


def _closes(token: str) -> bool:
    """Punctuation or a closing function word: a number, identifier or possessive after a run
    leaves it open (no phrase)."""
    return _PUNCT.fullmatch(token) is not None or token.lower() in _CLOSERS


def noun_phrases(question: str) -> list[tuple[str, ...]]:
    """The question's noun phrases of two or three content words (see the module docstring),
    in order, as written."""
    tokens = _TOKEN.findall(_QUOTED.sub(" . ", question))
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(tokens):
        low = tokens[i].lower()
        if low not in _OPENERS and low not in _DETERMINERS:
            i += 1
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].lower() in _DETERMINERS:  # "the many", "the first"
            j += 1
        start = j
        while j < len(tokens) and _content(tokens[j]):
            j += 1
        if 2 <= j - start <= _MAX_PHRASE and (j == len(tokens) or _closes(tokens[j])):
            out.append(tuple(tokens[start:j]))
        i = max(j, i + 1)
    return out


def qualifiers(question: str) -> tuple[Qualifier, ...]:
    """Every (modifier, head) of the question's noun phrases, each once, in order."""
    out: dict[tuple[str, str], Qualifier] = {}
    for run in noun_phrases(question):
        head = run[-1]
        for at, modifier in enumerate(run[:-1]):
            if stem(modifier.lower()) != stem(head.lower()):
                out.setdefault((modifier.lower(), head.lower()), Qualifier(modifier, head, " ".join(run[at:])))
    return tuple(out.values())


def _forms(word: str) -> set[str]:
    """A word's plural-folded stem and, from four letters, its root: "tips" holds "tip",
    "fixes" holds "fixing" (as a declined table's words are held, retrieval/table_decline.py)."""
    return {stem(word)} | ({root(word)} if len(word) >= 4 else set())


def unmet_qualifiers(wanted: Sequence[Qualifier], hits: Sequence[Hit]) -> list[Qualifier]:
    """The qualifiers whose head some hit holds and whose modifier none does (by stem or root,
    in the hits' titles, metadata and text). A context without the head is off the phrase
    altogether: relevance, not this check, judges it."""
    if not wanted or not hits:
        return []
    forms = {f for h in hits for w in words(f"{h.title or ''}\n{h.meta or ''}\n{h.text}") for f in _forms(w)}

    def holds(word: str) -> bool:
        w = word.lower()
        return stem(w) in forms or (len(w) >= 4 and root(w) in forms)

    return [q for q in wanted if holds(q.head) and not holds(q.modifier)]


def held(grade: Grade, wanted: Sequence[Qualifier], hits: Sequence[Hit], attested: Callable[[str], bool]) -> Grade:
    """A sufficient grade stays sufficient unless the hits miss a qualifier whose phrase the
    readable corpus attests (`attested`, asked only of the missed ones); then it becomes
    `constraint_unmet`, missing `qualifier:<phrase>` for each."""
    if not grade.sufficient:
        return grade
    missed = [q for q in unmet_qualifiers(wanted, hits) if attested(q.phrase)]
    if not missed:
        return grade
    return replace(grade, sufficient=False, reason="constraint_unmet", missing=tuple(q.label for q in missed),
                   p_sufficient=0.0)
