"""The parts of a multi-part question: what a set of passages must answer piece by piece.

A question such as "Alice led a sev1 on 13 June 2024. In the release that fixed it, at what
queue depth does the dashboard warn?" is answered by two passages, each holding one part and
neither holding most of the question. Two readers use the split:

- the rewriter's decompose strategy runs the parts of a comparison or conjunction as
  concurrent sub-queries (`split_question`);
- the grader judges each part of a question against the whole set (`question_parts`), so a set
  whose passages answer one part each is not called a gap for lacking one passage that
  answers everything.

Pure text rules on the question alone (sentences, a leading context clause before a
wh-question, comparisons and conjunctions); retrieved text never shapes the parts.
"""

from __future__ import annotations

import re

from retrieval.text import content_terms

MIN_PART_TERMS = 3  # a part shorter than this is not a question of its own: it stays with its neighbour
_LAST_ALTERNATIVE = re.compile(r"^(?P<head>.+)\s+(?:or|and|vs\.?|versus)\s+(?P<b>[^,?]+?)\s*\??$", re.I)
_COMPARE = re.compile(r"\b(compare|compared|difference between|which|who|whose|both|either)\b", re.I)
_ITEM_START = re.compile(r".*(?:[,:;]\s*|\bbetween\s+)", re.I | re.S)  # what precedes the first item, when marked
_FILLER = {"which", "who", "whose", "compare", "between"}


def _sized(text: str) -> bool:
    return len(content_terms(text)) >= MIN_PART_TERMS


def split_question(question: str) -> tuple[str, ...]:
    """Sub-queries of a comparison or conjunction; () when the question is not multi-part."""
    q = question.strip()
    halves = re.split(r"\s+and\s+", q, maxsplit=1, flags=re.I)
    if len(halves) == 2 and q.count("?") <= 1:
        left, right = halves
        if (_sized(left) and _sized(right)
                and re.match(r"(who|what|which|when|where|why|how|is|are|was|did|does)\b", right, re.I)):
            return (left.rstrip(" ,"), right)
    if not _COMPARE.search(q):
        return ()
    m = _LAST_ALTERNATIVE.match(q)
    if not m:
        return ()
    head, b = m.group("head").strip(), m.group("b").strip()
    marked = _ITEM_START.match(head)
    if marked:  # "..., X or Y", "...: X or Y", "... between X and Y": the first item starts after the mark
        base, a = head[: marked.end()], head[marked.end():]
    else:  # unmarked: the first item is as long as the second ("compare the night shift and the day shift")
        words = head.split()
        base, a = " ".join(words[: -len(b.split())]), " ".join(words[-len(b.split()):])
    a = a.strip()
    if not a or not b or len(a.split()) > 8 or len(b.split()) > 8:
        return ()
    # the shared part word by word as written (an identifier such as 3.1.2 stays whole), without filler
    shared = [w.strip(",:;?") for w in base.split()]
    base_terms = " ".join(w for w in shared if w and w.lower() not in _FILLER)
    return (f"{a} {base_terms}".strip(), f"{b} {base_terms}".strip())


MAX_PARTS = 6  # more than this is a pasted passage, not a question: judged whole (each part costs an embedding)
_SENTENCE_END = re.compile(r"(?<=[.?!;])\s+(?=[\"'(\[]?[A-Z0-9])")
# a wh-word within the first three words: "how long ...", "at what ...", "and above how many ..."
_WH_START = re.compile(r"^(?:[\w'-]+\s+){0,2}?(?:who|whom|whose|what|which|when|where|why|how)\b", re.I)


def _sentences(question: str) -> list[str]:
    """The question's sentences, a short one (an abbreviation's tail, "Why?") kept with its
    neighbour."""
    out: list[str] = []
    for piece in _SENTENCE_END.split(question.strip()):
        if out and (not _sized(piece) or not _sized(out[-1])):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return [s for s in out if s]


def _context_clause(sentence: str) -> tuple[str, ...]:
    """"After the May 2024 throttling incident, how long ...?" -> the context and the question
    it leads into; the sentence itself when no comma is followed by a wh-question."""
    for m in re.finditer(r",\s+", sentence):
        head, rest = sentence[: m.start()], sentence[m.end():]
        if _WH_START.match(rest) and _sized(head) and _sized(rest):
            return (head, rest)
    return (sentence,)


def question_parts(question: str) -> tuple[str, ...]:
    """The parts a sufficient set must answer one by one: its sentences, a leading context
    clause apart from the wh-question it leads into, and the items of a comparison or
    conjunction. () for a question of one part (the usual case) or of more than MAX_PARTS,
    which is judged whole."""
    parts: list[str] = []
    for sentence in _sentences(question):
        for piece in _context_clause(sentence):
            # the comparison rules read one sentence (a merged short one is not: "..., which release and version?")
            items = split_question(piece) if not _SENTENCE_END.search(piece) else ()
            parts.extend(items if items and all(_sized(i) for i in items) else (piece,))
    return tuple(parts) if 2 <= len(parts) <= MAX_PARTS else ()
